#!/usr/bin/env bash
# `make lock`: regenerate requirements/lock.txt, the one lock that `make run`, `make test` and .ci/run install
# (every package pinned with ==, transitive ones included, with hashes), at the newest releases the registry
# serves that satisfy pyproject.toml and requirements/*.in. Needs uv (in the lock itself; else on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-$( [ -x .venv/bin/uv ] && echo .venv/bin/uv || command -v uv )}
WHEELS=${WHEELS:-/opt/wheels}  # where the CPU torch wheel lies on the project machines
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DS_BUILD_OPS=0
common=(--python-version 3.11 --generate-hashes --no-header --quiet)
"$UV" pip compile pyproject.toml --extra test requirements/lock.in --find-links "$WHEELS" \
    "${common[@]}" -o "$tmp/deps.txt"
"$UV" pip compile requirements/nodeps.in --no-deps "${common[@]}" -o "$tmp/nodeps.txt"
{
    echo "# The locked stack of \`make run\`, \`make test\` and .ci/run: regenerate with \`make lock\` (scripts/lock.sh),"
    echo "# never by hand. Installed with \`pip install --no-deps --require-hashes\`: the lock is complete."
    echo "# Written by $("$UV" --version) on $(date -u +%F) from pyproject.toml [test], requirements/lock.in and"
    echo "# requirements/nodeps.in (the last resolved without dependencies)."
    cat "$tmp/deps.txt"
    echo "# ---- requirements/nodeps.in, locked without their dependencies ----"
    cat "$tmp/nodeps.txt"
} >requirements/lock.txt
echo "requirements/lock.txt: $(grep -c '^[a-z0-9]' requirements/lock.txt) packages"
