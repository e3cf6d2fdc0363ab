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


__all__ = ["current_stack", "installed_version"]
