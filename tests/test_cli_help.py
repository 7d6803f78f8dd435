"""Every argument of every command has help text, and recover's FILE no longer shares the name
``--source`` with the session-source filter (issue 16 item 7).

The argparse trees are walked: ``hermes-state``, ``python -m chaos`` and ``python -m chaos
matrix`` (its own parser). A new argument without ``help=`` fails here.
"""

from __future__ import annotations

import argparse

import pytest

from chaos.__main__ import build_parser as chaos_parser
from chaos.matrix import build_parser as matrix_parser
from hermes_state import SessionDB
from hermes_state.cli import build_parser, main


def missing_help(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    """``"prog sub: --flag"`` for every argument or subcommand without help text."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            for name, sub in action.choices.items():
                if name not in helped:
                    out.append(f"{prog} {name}: the subcommand has no help")
                out += missing_help(sub, f"{prog} {name}")
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.help:
            out.append(f"{prog}: {'/'.join(action.option_strings) or action.dest}")
    return out


@pytest.mark.parametrize("prog, parser", [("hermes-state", build_parser),
                                          ("python -m chaos", chaos_parser),
                                          ("python -m chaos matrix", matrix_parser)])
def test_every_cli_argument_has_help_text(prog, parser):
    tree = parser()
    assert missing_help(tree, prog) == []
    # The walk sees the leaves (a walk that sees nothing would pass too).
    seen = sum(len(a.option_strings) or 1 for a in tree._actions)
    assert seen >= 3


def test_the_walk_finds_a_missing_help():
    p = argparse.ArgumentParser(prog="x")
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("go")
    s.add_argument("--fast", action="store_true")
    sub.add_parser("stop", help="stop it")
    assert missing_help(p, "x") == ["x go: the subcommand has no help", "x go: --fast"]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", "user", "hello")
    return path


def test_recover_takes_its_file_positionally_or_with_from(store, capsys):
    assert main(["sessions", "recover", str(store), "--inspect-only"]) == 0
    out = capsys.readouterr()
    assert '"recoverable": true' in out.out and "deprecated" not in out.err
    assert main(["sessions", "recover", "--from", str(store), "--inspect-only"]) == 0
    assert "deprecated" not in capsys.readouterr().err


def test_recover_source_still_works_and_warns_it_is_deprecated(store, capsys):
    assert main(["sessions", "recover", "--source", str(store), "--inspect-only"]) == 0
    err = capsys.readouterr().err
    assert "warning: `sessions recover --source FILE` is deprecated" in err
    assert "write `sessions recover FILE`" in err


def test_recover_refuses_no_file_or_two_files(store, tmp_path, capsys):
    assert main(["sessions", "recover", "--inspect-only"]) == 1
    err = capsys.readouterr().err
    assert "error: recover needs the FILE to work on" in err and "next: " in err
    assert main(["sessions", "recover", str(store), "--from", str(tmp_path / "x.db"),
                 "--inspect-only"]) == 1
    assert "recover got two files" in capsys.readouterr().err


def test_source_means_a_session_source_everywhere_it_remains():
    tree = build_parser()
    sessions = next(a for a in tree._actions if isinstance(a, argparse._SubParsersAction))
    sub = next(a for a in sessions.choices["sessions"]._actions
               if isinstance(a, argparse._SubParsersAction))
    for name in ("list", "search", "export", "prune"):
        source = next(a for a in sub.choices[name]._actions if "--source" in a.option_strings)
        assert "platform" in source.help, name
    rc = next(a for a in sub.choices["recover"]._actions if "--source" in a.option_strings)
    assert "deprecated" in rc.help
