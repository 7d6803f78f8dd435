"""Every CLI option and every API parameter gets hostile values (issue 22, generators).

* CLI: the options and positionals are enumerated from the argparse parser itself
  (``hermes_state.cli.build_parser``), every subcommand, so a new option is covered at once.
  Hypothesis gives one of them a hostile value (huge, negative, NaN, inf, surrogates, NUL,
  control characters, a leading dash, 300-byte text, ...) on a store where a foreign client
  planted BLOBs, text in counters and invalid UTF-8: the command ends with exit 0, 1 (a named
  error) or 2 (usage), never an exception out of ``main``.
* API: every public method of ``SessionDB`` (enumerated from the class), every parameter in
  turn, hostile values of any type (huge and negative ints, NaN, inf, surrogates, NUL, bytes,
  lists, dicts, objects): the call returns, or raises a named error -- a
  :class:`~hermes_state.errors.HermesStateError`, a ``ValueError``/``TypeError`` about the
  argument (Python's contract for a bad argument), or the documented ``IntegrityError`` of an
  unknown session -- never an ``OverflowError``, a binding error, a ``UnicodeError``, an
  ``AttributeError``, a ``KeyError`` or a raw SQLite error.

Paths among the values stay inside the test's directory (the cwd is a temporary directory;
absolute values are limited to harmless special files).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import os
import shutil
import sqlite3
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sweep import examples, tally

from hermes_state import SessionDB
from hermes_state.cli import build_parser, main
from hermes_state.errors import HermesStateError

SPECIAL = [2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, -1, 0, float("nan"), float("inf"),
           -float("inf"), 1e308, True, None, "", "\x00", "\ud800", "\udcff", "a\x00b",
           "x" * 5000, "-x", "--", "'; DROP TABLE sessions; --", "%", "_", "\\", "a\nb",
           "\x1b[2J", b"\xff\xfe", bytearray(b"x"), [], {}, [1, "a"], {"a": 1}, (1,),
           "nan", "1e309", "9" * 40, " "]
hostile_values = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=40),
    st.binary(max_size=16),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3),
    st.builds(object))
hostile_text = st.one_of(
    st.sampled_from(["", "-1", str(2 ** 63), "9" * 40, "nan", "inf", "-inf", "1e309", "0x10",
                     "\udcff", "\ud800", "a\x00b", "x" * 300, "-rf", "--", "..", ".", "/",
                     "\x1b[2J", "a\nb", "%", "*", "'", "\\", " ", "٣", "1.5", "-0"]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(str),
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=30))

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- the store
def planted_store(home: Path) -> Path:
    """A store with ordinary rows and a foreign client's: a BLOB title, text in counters and
    timestamps, BLOB and invalid UTF-8 content, a NULL role, a snapshot and an export file."""
    from hermes_state.operator.snapshots import create_snapshot

    path = home / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", "user", "hello world")
        db.append_message("s1", "assistant", "hi", tool_calls=[{"id": "c1"}])
        db.set_session_title("s1", "Title one")
        for i in range(4):
            db.create_session(f"p{i}", source="telegram", parent_session_id="s1")
            db.append_message(f"p{i}", "user", f"planted {i}")
        db.end_session("p0", "compression")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET title = ? WHERE id = 'p0'", (b"\xff\xfeblob",))
        conn.execute("UPDATE sessions SET message_count = 'many', started_at = 'yesterday', "
                     "model_config = '{bad json' WHERE id = 'p1'")
        conn.execute("UPDATE messages SET content = X'fffe00', timestamp = 'noon' "
                     "WHERE session_id = 'p2'")
        conn.execute("UPDATE messages SET content = CAST(X'68656c6c6fff' AS TEXT), "
                     "tool_calls = 'not json' WHERE session_id = 'p3'")
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('gateway_owner', "
                     "X'ff')")
    finally:
        conn.close()
    create_snapshot(path)
    (home / "export.json").write_text('[{"id": "imported", "messages": []}]')
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("hostile") / "home"
    planted_store(home)
    return home


# --------------------------------------------------------------------------- CLI
def leaf_parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every subcommand parser (``("sessions", "list")``, ``("doctor",)``, ...)."""
    out = []

    def walk(prefix, parser):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append((prefix, parser))
            return
        for name, sub in subs[0].choices.items():
            walk(prefix + (name,), sub)

    walk((), build_parser())
    return out


PATH_DESTS = {"home", "output", "report", "file", "from_file", "source_file", "capture"}
#: SQLite's and Python's own words: an exit 1 that prints them is a raw error, not a named one.
RAW = ("Traceback", "Could not decode", "no such table", "no such column",
       "Error binding parameter", "is not supported", "too large to convert",
       "datatype mismatch", "object has no attribute", "unsupported format string")


def base_argv(prefix: tuple[str, ...], parser: argparse.ArgumentParser, home: Path,
              snapshot: str) -> list[str]:
    """A valid command line of ``prefix``: its required positionals filled."""
    argv = ["--home", str(home), *prefix]
    fill = {"id": "s1", "query": "hello", "file": str(home / "export.json"), "capture": None,
            "action": None}
    for action in parser._actions:
        if action.option_strings or action.dest in ("help",):
            continue
        if action.nargs in ("?", "*"):
            continue
        value = fill.get(action.dest, "x")
        if value is not None:
            argv.append(value)
    if prefix == ("sessions", "recover"):
        argv += [str(home / "state.db"), "--inspect-only"]
    if prefix == ("backup",) and False:
        argv.append(snapshot)
    return argv


def options_of(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
            and a.dest != "help" and type(a).__name__ != "_VersionAction"]


def confined(value: str) -> str:
    """A path value made relative (the cwd is the test's directory), or a harmless special."""
    if value in ("/dev/null", "/dev/zero", "/proc/self/status", "/"):
        return value
    return value.lstrip("/") or "."


def run_main(argv: list[str]) -> tuple[object, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException:  # noqa: BLE001 - the finding
            return "raised", traceback.format_exc()
    return code, out.getvalue()[-300:] + err.getvalue()[-600:]


LEAVES = leaf_parsers()


def leaf_id(leaf) -> str:
    return " ".join(leaf[0]) or "top"


@pytest.mark.parametrize("leaf", LEAVES, ids=leaf_id)
def test_every_cli_option_takes_hostile_values(template, tmp_path, leaf, request, monkeypatch):
    prefix, parser = leaf
    options = options_of(parser)
    found: list[str] = []
    ran = [0]
    monkeypatch.chdir(tmp_path)

    @settings(max_examples=examples(20, 150), **SETTINGS)
    @given(data=st.data())
    def check(data):
        home = tmp_path / f"h{ran[0]}"
        ran[0] += 1
        shutil.copytree(template, home)
        snapshot = next((home / "state-snapshots").iterdir()).name
        argv = base_argv(prefix, parser, home, snapshot)
        action = data.draw(st.sampled_from(options), label="option")
        value = data.draw(hostile_text, label="value")
        if action.dest in PATH_DESTS:
            value = confined(value)
        if action.option_strings:
            flag = action.option_strings[-1]
            if action.nargs == 0:
                argv.append(flag)
            else:
                argv += [flag, value]
        else:
            positional = [a for a in parser._actions if not a.option_strings
                          and a.dest != "help"]
            index = positional.index(action)
            fixed = len(argv) - len(positional)  # replace the filled positional, or append
            if fixed + index < len(argv) and argv[fixed + index] not in ("--inspect-only",):
                argv[fixed + index] = value
            else:
                argv.append(value)
        code, text = run_main(argv)
        if code == "raised" or code not in (0, 1, 2) or any(r in text for r in RAW):
            found.append(f"{' '.join(map(ascii, argv[2:]))[:150]} -> {code}: "
                         f"{text.strip().splitlines()[-1][:200] if text.strip() else ''}")
        shutil.rmtree(home, ignore_errors=True)

    check()
    tally(request, "hostile values x CLI options", ran[0], found)
    assert found == [], "\n".join(found[:20])


def test_the_cli_enumeration_sees_every_subcommand():
    names = {" ".join(p) for p, _ in LEAVES}
    for expected in ("doctor", "backup", "sessions list", "sessions search", "sessions import",
                     "sessions salvage", "sessions recover", "sessions archive"):
        assert expected in names
    assert sum(len(options_of(p)) for _, p in LEAVES) > 60


# --------------------------------------------------------------------------- API
NOT_CALLED = {"close", "checkpoint"}  # close ends the handle; checkpoint: below
PATHLIKE = {"sessions_dir", "db_path"}

GOOD = {"session_id": "s1", "role": "user", "content": "x", "source": "cli", "title": "t",
        "query": "hello", "key": "k", "value": "v", "end_reason": "done", "holder": "pid=1",
        "messages": [{"role": "user", "content": "m"}], "compacted_messages": [],
        "sessions": [], "session_ids": ["nope"], "id_or_prefix": "s", "platform": "telegram",
        "session_key": "k", "entry_json": "{}", "entries": {}, "session_keys": [],
        "cwd_to_root": {}, "text": "x", "model": "m", "cwd": "/tmp", "error": "e",
        "task": "t", "streak": 1, "cooldown_until": 1.0, "archived": True, "finalized": True,
        "around_message_id": 1, "since_message_id": 1, "target_message_id": 1,
        "platform_message_id": "p", "job_id": "j", "chat_id": "1", "thread_id": "1",
        "user_id": "1", "model_config_json": "{}", "system_prompt": "p",
        "provider": "p", "base_url": "u", "api_content": "a", "mode": "PASSIVE"}

ALLOWED_ERRORS = (HermesStateError, ValueError, TypeError)
REJECTED = (UnicodeError, OverflowError, AttributeError, KeyError, IndexError, RecursionError,
            ZeroDivisionError, sqlite3.InterfaceError, sqlite3.ProgrammingError)


def api_methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(SessionDB, inspect.isfunction)
                  if not n.startswith("_") and n not in NOT_CALLED)


def judge(exc: BaseException) -> str | None:
    """None when ``exc`` is a named error (module docstring), else what is wrong with it."""
    if isinstance(exc, REJECTED) and not isinstance(exc, HermesStateError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, sqlite3.IntegrityError) and not isinstance(exc, HermesStateError):
        return None if "FOREIGN KEY" in str(exc) else f"IntegrityError: {exc}"
    if isinstance(exc, sqlite3.Error) and not isinstance(exc, HermesStateError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ALLOWED_ERRORS):
        return None
    return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("method", api_methods())
def test_every_api_parameter_takes_hostile_values(template, tmp_path, method, request,
                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    shutil.copytree(template, home)
    sig = inspect.signature(getattr(SessionDB, method))
    params = [p for p in list(sig.parameters.values())[1:]
              if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    found: list[str] = []
    ran = [0]
    db = SessionDB(home / "state.db")

    @settings(max_examples=examples(8, 60) if params else 1, **SETTINGS)
    @given(data=st.data())
    def check(data):
        ran[0] += 1
        kwargs = {p.name: GOOD.get(p.name, "x") for p in params if p.default is p.empty}
        name = None
        if params:
            name = data.draw(st.sampled_from([p.name for p in params]), label="parameter")
            value = data.draw(hostile_values, label="value")
            if name in PATHLIKE and isinstance(value, str):
                value = value.lstrip("/") or "."
            kwargs[name] = value
        try:
            result = getattr(db, method)(**kwargs)
            if inspect.isgenerator(result):
                list(result)
        except BaseException as exc:  # noqa: BLE001 - judged
            problem = judge(exc)
            if problem:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                found.append(f"{method}({name}={ascii(kwargs.get(name))[:40]}): "
                             f"{problem[:160]} [{Path(where.filename).name}:{where.lineno}]")

    try:
        check()
    finally:
        db.close()
    tally(request, "hostile values x API parameters", ran[0], found)
    assert found == [], "\n".join(found[:20])


def test_the_api_enumeration_sees_the_methods():
    names = api_methods()
    assert len(names) > 100 and "append_message" in names and "search_messages" in names
