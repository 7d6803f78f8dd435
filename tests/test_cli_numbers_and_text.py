"""Out-of-range CLI numbers are usage errors; every API text field is cleaned (issue 11.11).

Hypothesis feeds the numeric options of ``hermes-state`` any text (huge and negative integers,
NaN, inf, floats, garbage) and every public ``SessionDB`` method text with lone UTF-16
surrogates: the CLI exits 0 or 2 (usage) and never raises; no API call fails on a surrogate,
and what is stored is the text with U+FFFD in place of each lone surrogate (SPEC §2.2).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_state import SessionDB
from hermes_state.api.text import clean_text
from hermes_state.cli import main

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

numbers = st.one_of(
    st.integers(min_value=-(10 ** 40), max_value=10 ** 40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-0", "0x10", "1_000",
                     "", " ", "٣", "9" * 5000, "1e-400", "9223372036854775808",
                     "9223372036854775807", "1000000.0001"]),
    st.text(max_size=12))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("cli-numbers")
    with SessionDB(h / "state.db") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello numbers")
    return h


def run_cli(*args: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return main(list(args))
        except SystemExit as exc:  # argparse: usage errors exit 2
            return exc.code


@SETTINGS
@given(value=numbers, option=st.sampled_from([
    ("sessions", "list", "--limit"), ("sessions", "list", "--offset"),
    ("sessions", "search", "hello", "--limit"), ("sessions", "search", "hello", "--offset"),
    ("sessions", "prune", "--dry-run", "--older-than"),
    ("sessions", "archive", "--dry-run", "--older-than")]))
def test_numeric_options_never_raise(home, value, option):
    code = run_cli("--home", str(home), *option, value)
    assert code in (0, 2), (option, value, code)
    if code == 0:  # accepted: a number in range
        number = float(value)
        assert math.isfinite(number) and number >= 0


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400", str(2 ** 63), "1e7"])
def test_out_of_range_older_than_is_a_usage_error(home, value):
    assert run_cli("--home", str(home), "sessions", "prune", "--dry-run", "--older-than",
                   value) == 2


@pytest.mark.parametrize("value", ["-1", str(2 ** 63), "10" * 30, "1.5", "nan"])
def test_out_of_range_limit_is_a_usage_error(home, value):
    assert run_cli("--home", str(home), "sessions", "list", "--limit", value) == 2
    assert run_cli("--home", str(home), "sessions", "search", "x", "--offset", value) == 2


# --------------------------------------------------------------------------- text fields

surrogate_text = st.builds(lambda a, s, b: a + s + b, st.text(max_size=5),
                           st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
                           st.text(max_size=5))

SKIP = {"close", "checkpoint", "vacuum", "rebuild_fts", "optimize_fts",
        "maybe_auto_prune_and_vacuum", "divert_to_spool"}


def _arguments(fn, text: str) -> dict | None:
    """Keyword arguments for ``fn``: ``text`` for every text parameter, simple values for the
    required others; None when a required parameter has a type this test cannot make."""
    kwargs = {}
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        ann = str(p.annotation)
        if ann in ("str", "str | None", "Any"):
            kwargs[p.name] = text
        elif p.default is not inspect.Parameter.empty:
            continue
        elif "int" in ann:
            kwargs[p.name] = 1
        elif "float" in ann:
            kwargs[p.name] = 1.0
        elif "list" in ann:
            kwargs[p.name] = []
        elif "Iterable" in ann:
            kwargs[p.name] = [text]
        elif "Mapping" in ann:
            kwargs[p.name] = {text: text}
        else:
            return None
    return kwargs


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=surrogate_text)
def test_no_api_call_fails_on_a_lone_surrogate(tmp_path, text):
    """Every public method, every text parameter: a lone surrogate never reaches SQLite."""
    path = tmp_path / "api" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello")
        for name, fn in inspect.getmembers(SessionDB, inspect.isfunction):
            if name.startswith("_") or name in SKIP:
                continue
            kwargs = _arguments(fn, text)
            if kwargs is None:
                continue
            try:
                result = getattr(db, name)(**kwargs)
                if inspect.isgenerator(result):
                    list(result)
            except UnicodeEncodeError as exc:
                pytest.fail(f"{name}({kwargs!r}) bound a lone surrogate: {exc}")
            except Exception as exc:  # noqa: BLE001 - other refusals are the method's business
                assert "surrogate" not in str(exc), (name, kwargs, exc)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(role=surrogate_text, content=surrogate_text, sid=surrogate_text, title=surrogate_text)
def test_text_fields_are_stored_cleaned(tmp_path, role, content, sid, title):
    path = tmp_path / "clean" / "state.db"
    path.parent.mkdir(exist_ok=True)
    with SessionDB(path) as db:
        db.create_session(sid, source=title)
        db.set_session_title(sid, title)
        mid = db.append_message(sid, role, content, tool_name=title)
        row = [m for m in db.get_messages(clean_text(sid)) if m["id"] == mid][0]
        assert row["role"] == clean_text(role)
        assert row["content"] == clean_text(content)
        assert row["tool_name"] == clean_text(title)
        assert row["session_id"] == clean_text(sid)
        assert db.get_session(sid)["source"] == clean_text(title)
        db.delete_session(sid)
        assert db.get_session(sid) is None
