"""The documentation a user finds (issue 26 item 5): a short README that links every reference,
generated references that match the code, links that resolve, numbered decision records with an
index."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("docs_tool", ROOT / "tools" / "docs.py")
docs_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_tool)

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_the_generated_references_match_the_code():
    """docs/CLI.md (from the parsers), docs/SCENARIO_REFERENCE.md (from the declarations),
    docs/BENCHMARKS.md's tables (from latest.json)."""
    assert docs_tool.stale() == [], "run: python tools/docs.py --write"


def test_the_readme_is_short_and_links_every_reference():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    assert text.startswith("# hermes-state\n\n```bash\npython3 -m venv .venv")
    linked = {m.group(1) for m in LINK.finditer(text)}
    for doc in sorted(DOCS.glob("*.md")):
        assert f"docs/{doc.name}" in linked, f"README does not link docs/{doc.name}"
    assert "docs/decisions/README.md" in linked
    # a newcomer meets the recovery guide before any reference table
    assert text.index("docs/RECOVERY.md") < text.index("## Where to go next")


def test_every_relative_link_resolves():
    broken = []
    for md in _markdown_files():
        for m in LINK.finditer(md.read_text(encoding="utf-8")):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_every_decision_record_named_anywhere_exists():
    names = set()
    for path in ROOT.rglob("*"):
        if path.suffix not in (".py", ".md", ".yaml", ".toml") or any(
                part in (".git", ".venv", ".venv-ci", "runs", "node_modules") for part in path.parts):
            continue
        names |= set(re.findall(r"decisions/([\w.-]+\.md)", path.read_text(errors="replace")))
    missing = sorted(n for n in names if not (DOCS / "decisions" / n).exists())
    assert not missing, missing


def test_decision_records_are_numbered_dated_and_indexed():
    index = (DOCS / "decisions" / "README.md").read_text(encoding="utf-8")
    numbers = []
    for rec in sorted((DOCS / "decisions").glob("*.md")):
        if rec.name == "README.md":
            continue
        m = re.match(r"(\d{4})-[a-z0-9-]+\.md$", rec.name)
        assert m, f"{rec.name}: records are named NNNN-short-name.md"
        numbers.append(int(m.group(1)))
        head = rec.read_text(encoding="utf-8").splitlines()[:4]
        assert head[0].startswith(f"# {m.group(1)} — "), rec.name
        assert re.match(r"Status: .+ · Date: \d{4}-\d\d-\d\d", head[2]), rec.name
        assert f"]({rec.name})" in index, f"{rec.name} is not in docs/decisions/README.md"
    assert numbers == list(range(1, len(numbers) + 1)), "numbers are consecutive and unique"


def test_the_audit_table_names_every_mutant_of_the_catalogue():
    table = (DOCS / "AUDIT.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([\w-]+)` \|", table, re.M))
    from chaos.audit import catalogue as mutants

    catalogue = {m.name for m in mutants.load_dir()}  # YAML rewrites and *.patch files
    assert named == catalogue, {"not in the table": catalogue - named,
                                "not in the catalogue": named - catalogue}


def test_the_sessions_help_names_every_sessions_command():
    from hermes_state.cli import build_parser

    parser = build_parser()
    top = docs_tool._subparsers(parser)
    sessions = dict(top)["sessions"]
    names = [name for name, _ in docs_tool._subparsers(sessions)]
    line = next(a.help for a in parser._subparsers._group_actions[0]._choices_actions
                if a.dest == "sessions")
    assert all(name in line for name in names), (line, names)
