"""The stack a training run will use: `--stack` as given, else the installed library versions.

Versions are read with `importlib.metadata` (the installed distributions' metadata): nothing is
imported, so reading the stack never imports torch. A library that is not installed takes memdoc's
latest known version (`memdoc.core.model.stack.LATEST_KNOWN`), and the stack says which did.
"""

from __future__ import annotations

from memdoc.core.model.stack import LATEST_KNOWN, Stack, parse_stack


def installed_version(package: str) -> str | None:
    """The installed version of distribution `package` ('liger-kernel'), None when not installed.

    (`importlib.metadata` is imported here, not with the module: only `--config`/`--stack` read the stack,
    and the import — `email`, `zipfile`, `csv` — cost every `bill` ~10 ms.)"""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def stack_in_use(spec: str | None = None) -> Stack:
    """The stack a plan is billed under: the `--stack SPEC` (source '--stack'), else the installed versions
    (source 'installed'). Every library of `LATEST_KNOWN` the stack lacks (left out of SPEC, not installed)
    is at memdoc's latest known version, named in `assumed` (what the defaults take for a library the stack
    does not know: `moe_experts_layout`, `trl_fused_lm_head` and `default_optimizer` read an unknown version
    as the newest). A malformed SPEC is a one-line PlanError (`parse_stack`).
    """
    if spec is not None:
        given = parse_stack(spec)
        missing = tuple(package for package in LATEST_KNOWN if package not in given.versions)
        versions = {**given.versions, **{package: LATEST_KNOWN[package].version for package in missing}}
        return Stack(versions=versions, source=given.source, assumed=missing)
    installed = {package: installed_version(package) for package in LATEST_KNOWN}
    versions = {package: version or LATEST_KNOWN[package].version for package, version in installed.items()}
    missing = tuple(package for package, version in installed.items() if version is None)
    if len(missing) == len(LATEST_KNOWN):
        return Stack(versions=versions)  # nothing installed: memdoc's latest known versions
    return Stack(versions=versions, source="installed", assumed=missing)


__all__ = ["installed_version", "stack_in_use"]
