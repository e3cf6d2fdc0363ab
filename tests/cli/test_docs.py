"""Docs that cannot drift: the CLI reference is what the generator prints, every ```console example in the
README and docs/ prints what it shows, every command is documented, and every link resolves."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from conftest import ROOT
from typer.main import get_command

from memdoc.cli import app

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

COMMAND_PAGES = {
    "bill": "bill.md",
    "diagnose": "diagnose.md",
    "prescribe": "prescribe.md",
    "plan": "plan.md",
    "emit": "emit.md",
    "models": "catalog.md",
    "gpus": "catalog.md",
    "help": "cli.md",
}
"""The page of each command; a new command needs a page here (and in the README's command table)."""


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _without_fences(text: str) -> str:
    """The text outside ``` blocks (links and headings inside code are not links or headings)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def console_examples() -> list[tuple[str, str, str]]:
    """(page, command line, expected output) for every `$ memdoc …` line in a ```console block."""
    examples = []
    for page in PAGES:
        for block in re.findall(r"^```console\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M):
            for chunk in re.split(r"^(?=\$ )", block, flags=re.M):
                if chunk.strip():
                    line, _, output = chunk.partition("\n")
                    assert line.startswith("$ memdoc "), f"{page.name}: a console block holds memdoc commands only"
                    examples.append((str(page.relative_to(ROOT)), line[2:], output))
    return examples


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def test_cli_reference_is_generated_from_the_help():
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == GEN.render_reference(), (
        "docs/cli.md is stale: run `make docs`"
    )


def test_there_are_examples_to_check():
    assert len(console_examples()) >= 4


@pytest.mark.parametrize("page,line,expected", console_examples(), ids=lambda value: str(value)[:60])
def test_console_example_prints_what_it_shows(page, line, expected, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples name repository files (tests/fixtures/…) relative to the root
    printed = GEN.run_example(line)
    assert printed == _normalised(expected), (
        f"{page}: `{line}` prints otherwise (rerun: gen_cli_reference.py --examples)"
    )


@pytest.mark.parametrize("name", GEN.command_names())
def test_every_command_is_documented(name):
    group = get_command(app)
    command = group.commands[name]
    assert (command.help or "").strip(), f"memdoc {name} has no help text"
    assert name in COMMAND_PAGES, f"memdoc {name} has no page: add one to docs/ and COMMAND_PAGES"
    page = DOCS / COMMAND_PAGES[name]
    assert f"memdoc {name}" in page.read_text(encoding="utf-8"), f"{page.name} does not show memdoc {name}"
    assert f"## `memdoc {name}`" in (DOCS / "cli.md").read_text(encoding="utf-8")
    assert f"`memdoc {name}" in (ROOT / "README.md").read_text(encoding="utf-8"), f"README lacks memdoc {name}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", _without_fences(page.read_text(encoding="utf-8")), flags=re.M)
    return {_slug(heading) for heading in headings}


def _links() -> list[tuple[Path, str]]:
    links = []
    for page in PAGES:
        text = re.sub(r"`[^`\n]*`", "", _without_fences(page.read_text(encoding="utf-8")))
        links += [(page, target) for target in re.findall(r"\]\(([^)\s]+)\)", text)]
    return links


@pytest.mark.parametrize("page,target", _links(), ids=lambda value: str(value)[-50:])
def test_links_resolve(page, target):
    if re.match(r"[a-z]+:", target):  # https:, mailto:: not checked offline
        return
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{page.name}: {target} does not exist"
    if anchor:
        assert anchor in _anchors(resolved), f"{page.name}: no heading #{anchor} in {resolved.name}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150
