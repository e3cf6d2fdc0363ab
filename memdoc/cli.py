"""The `memdoc` command line: `main()` and the explicit list of command modules.

Each command module registers itself on `memdoc.commands.app.app` when imported; commands only
parse flags, call the library and render.
"""

from __future__ import annotations

from memdoc.commands import bill, catalog, diagnose, emit, plan, prescribe  # noqa: F401  (importing registers them)
from memdoc.commands.app import app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
