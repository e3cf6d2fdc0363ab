"""The stack a training run will use: `--stack` as given, else the installed library versions.

Versions are read with `importlib.metadata` (the installed distributions' metadata): nothing is
imported, so reading the stack never imports torch. A library that is not installed takes memdoc's
latest known version (`memdoc.core.model.stack.LATEST_KNOWN`), and the stack says which did.
"""

from __future__ import annotations

from importlib import metadata

from memdoc.core.model.stack import LATEST_KNOWN, Stack, parse_stack


def installed_version(package: str) -> str | None:
    """The installed version of distribution `package` ('liger-kernel'), None when not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def current_stack(spec: str | None = None) -> Stack:
    """The stack of `--stack SPEC` (source '--stack'), else the installed versions (source 'installed')
    of every library of `LATEST_KNOWN`, each missing one at memdoc's latest known version (`assumed`).

    A malformed SPEC is a one-line PlanError (`parse_stack`).
    """
    if spec is not None:
        return parse_stack(spec)
    versions: dict[str, str] = {}
    assumed: list[str] = []
    for package, known in LATEST_KNOWN.items():
        version = installed_version(package)
        if version is None:
            version = known.version
            assumed.append(package)
        versions[package] = version
    if len(assumed) == len(LATEST_KNOWN):
        return Stack(versions=versions)  # nothing installed: memdoc's latest known versions
    return Stack(versions=versions, source="installed", assumed=tuple(assumed))


def stack_in_use(spec: str | None = None) -> Stack:
    """The stack a plan is billed under: `current_stack(spec)`, where a `--stack` SPEC that leaves libraries
    out has them at memdoc's latest known versions, named in `assumed` (what the defaults take for a library
    the stack does not know: `moe_experts_layout`, `trl_fused_lm_head` and `default_optimizer` read an
    unknown version as the newest)."""
    stack = current_stack(spec)
    if spec is None:
        return stack
    missing = tuple(package for package in LATEST_KNOWN if package not in stack.versions)
    versions = {**stack.versions, **{package: LATEST_KNOWN[package].version for package in missing}}
    return Stack(versions=versions, source=stack.source, assumed=missing)


__all__ = ["current_stack", "installed_version", "stack_in_use"]
