"""Operator commands at the scale users have (issue 18): what they do, not how fast.

Export streams (the same data as ``export_session``, one page of rows in memory), recover does
not read an unchanged source a third time but still sees a change, the progress display goes to
stderr only (never into ``--json`` output) and only when asked or on a terminal, and importing
the package does not pay for asyncio. Speed itself is measured in ``benchmarks/`` (bench_ops).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main as cli
from hermes_state.cli import progress as cli_progress
from hermes_state.operator import exporting, recover_source
from hermes_state.operator import recover as recover_mod
from hermes_state.operator.recover import SourceChangedError, recover


def _store(home, sessions=3, messages=7, size=40):
    path = home / "state.db"
    with SessionDB(path) as db:
        for k in range(sessions):
            sid = f"s{k}"
            db.create_session(sid, source="cli" if k % 2 else "telegram")
            db.set_session_title(sid, f"title {k} 标题")
            for i in range(messages):
                db.append_message(sid, "user" if i % 2 else "assistant",
                                  f"{k}.{i} 记忆 " + "x" * size,
                                  tool_calls=[{"id": f"c{i}", "type": "function"}] if i == 3
                                  else None)
            db.append_message(sid, "user", [{"type": "text", "text": "structured"}])
        db.end_session("s0", "user_exit")
    return path


@pytest.mark.parametrize("page", [exporting.PAGE, 3])
def test_export_of_one_session_is_export_session_whatever_the_page(tmp_path, monkeypatch,
                                                                   page):
    monkeypatch.setattr(exporting, "PAGE", page)
    path = _store(tmp_path, messages=10)
    with SessionDB(path, read_only=True) as db:
        want = db.export_session("s1")
        for fmt in ("json", "jsonl"):
            out = io.StringIO()
            assert exporting.export_session_to(db, "s1", out, fmt) is True
            text = out.getvalue()
            got = json.loads(text)[0] if fmt == "json" else json.loads(text.splitlines()[0])
            assert got == json.loads(json.dumps(want, default=str)), fmt
        md = io.StringIO()
        exporting.export_session_to(db, "s1", md, "md")
        assert md.getvalue().startswith("# title 1 标题") and "1.9 记忆" in md.getvalue()
        assert exporting.export_session_to(db, "nope", io.StringIO(), "json") is False


def test_export_all_is_iter_export_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(exporting, "PAGE", 4)
    path = _store(tmp_path, sessions=5)
    with SessionDB(path, read_only=True) as db:
        want = json.loads(json.dumps(list(db.iter_export()), default=str))
        out = io.StringIO()
        assert exporting.export_all_to(db, out, "json") == 5
        assert json.loads(out.getvalue()) == want
        out = io.StringIO()
        exporting.export_all_to(db, out, "jsonl", source="cli")
        assert [json.loads(x) for x in out.getvalue().splitlines()] == \
            [s for s in want if s["source"] == "cli"]
        empty = io.StringIO()
        exporting.export_all_to(db, empty, "json", source="nowhere")
        assert json.loads(empty.getvalue()) == []


def test_exporting_a_large_session_keeps_one_page_in_memory(tmp_path):
    path = _store(tmp_path, sessions=1, messages=2000, size=4000)
    session_bytes = 2000 * 4000 * 2  # CJK in every message: 2 bytes a character in memory
    with SessionDB(path, read_only=True) as db, open(os.devnull, "w") as out:
        tracemalloc.start()
        try:
            exporting.export_session_to(db, "s0", out, "json")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # a page of rows (and its JSON), not the session: an export that built the session's
    # dict and its JSON text in memory peaked at several times the session's size
    assert peak < session_bytes / 4, (peak, session_bytes)


def test_cli_export_json_file_and_unknown_session(tmp_path, capsys):
    _store(tmp_path)
    target = tmp_path / "out.json"
    assert cli(["--home", str(tmp_path), "sessions", "export", "s2", "-o", str(target)]) == 0
    data = json.loads(target.read_text())
    assert [d["id"] for d in data] == ["s2"] and len(data[0]["messages"]) == 8
    assert cli(["--home", str(tmp_path), "sessions", "export", "zz", "-o",
                str(tmp_path / "zz.json")]) == 1
    assert "no session 'zz'" in capsys.readouterr().err
    assert not (tmp_path / "zz.json").exists()


# --------------------------------------------------------------------------- recover

def test_recover_sees_a_change_made_after_the_copy(tmp_path, spawn, monkeypatch):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3)
    inspect = recover_mod.inspect_tables

    def inspect_then_write(*a, **kw):
        out = inspect(*a, **kw)
        child.ok("append", sid="s", n=1, prefix="after the copy")
        return out

    monkeypatch.setattr(recover_mod, "inspect_tables", inspect_then_write)
    with pytest.raises(SourceChangedError) as info:
        recover(path, inspect_only=True)
    assert info.value.report["source_unchanged"] is False
    assert "state.db-wal" in info.value.operator_detail


def test_recover_does_not_read_an_unchanged_old_source_again(tmp_path, monkeypatch):
    path = _store(tmp_path)
    old = 1_000_000_000  # 2001: long before the copy, so a write since would move ctime
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))  # mtime only; ctime moves now, so check the slack path too
    hashed: list[str] = []
    real = recover_source._hash_file

    def spy(p):
        hashed.append(str(p))
        return real(p)

    monkeypatch.setattr(recover_source, "_hash_file", spy)
    monkeypatch.setattr(recover_source, "CTIME_SLACK_NS", -10**18)  # every ctime counts as old
    rep = recover(path, inspect_only=True)
    assert rep["source_unchanged"] is True and rep["recoverable"] is True
    assert hashed == []
    monkeypatch.setattr(recover_source, "CTIME_SLACK_NS", 10**18)  # every ctime counts as recent
    rep = recover(path, inspect_only=True)
    assert rep["source_unchanged"] is True and str(path) in hashed


def test_recover_hashes_only_the_source_files_a_stat_cannot_prove_unchanged(tmp_path,
                                                                         monkeypatch):
    """The sha256 of the copy is what proves a file changed within its ctime tick unchanged;
    a file with an older ctime is proven by ``stat`` and is not hashed (its report says None)."""
    import hashlib

    path = _store(tmp_path)
    files = {name: p for name, p in recover_source.source_files(path).items() if p.exists()}
    monkeypatch.setattr(recover_source, "CTIME_SLACK_NS", -10**18)  # every ctime counts as old
    rep = recover(path, inspect_only=True)
    assert rep["source_unchanged"] is True and rep["recoverable"] is True
    for name, p in files.items():
        assert rep["source_files"][name] == {"path": str(p), "bytes": p.stat().st_size,
                                             "sha256": None}
    monkeypatch.setattr(recover_source, "CTIME_SLACK_NS", 10**18)  # every ctime counts as recent
    rep = recover(path, inspect_only=True)
    assert rep["source_unchanged"] is True
    for name, p in files.items():
        assert rep["source_files"][name]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()


def test_copy_source_hashes_every_file_unless_told_otherwise(tmp_path, monkeypatch):
    """salvage compares the WAL's sha256 with its manifest: the default still hashes all."""
    import hashlib

    home = tmp_path / "home"
    home.mkdir()
    path = _store(home)
    monkeypatch.setattr(recover_source, "CTIME_SLACK_NS", -10**18)  # every ctime counts as old
    for hash_all in (True, False):
        work = tmp_path / f"work-{hash_all}"
        work.mkdir()
        copied = recover_source.copy_source(path, work, hash_all=hash_all)
        assert copied["state.db"] is not None
        for name, info in copied.items():
            if info is None:
                continue
            data = (work / name).read_bytes()
            assert data == Path(info["path"]).read_bytes()
            assert info["sha256"] == (hashlib.sha256(data).hexdigest() if hash_all else None)


def test_recover_reads_text_that_is_not_utf8_as_replacement_characters(tmp_path):
    path = _store(tmp_path, sessions=1, messages=2)
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("UPDATE messages SET content = CAST(X'66ff6f' AS TEXT) WHERE id = 1")
    conn.commit()
    conn.close()
    rep = recover(path, inspect_only=True)
    assert rep["tables"]["messages"]["rows"] == 3 and not rep["tables"]["messages"]["error"]
    out = tmp_path / "out.db"
    rep = recover(path, output=out)
    assert rep["failed"] is False
    with SessionDB(out, read_only=True) as db:
        assert db.get_messages("s0")[0]["content"] == "f\ufffdo"


# --------------------------------------------------------------------------- progress

def test_progress_display_shows_after_its_delay_on_its_stream_only_when_enabled():
    out = io.StringIO()
    with cli_progress.ProgressDisplay(True, "reading messages", delay=0, stream=out) as bar:
        bar.phase("reading messages", total=10)
        bar.update(5)
        bar("quick_check")
    assert bar.shown and "quick_check" in out.getvalue()
    quiet = io.StringIO()
    with cli_progress.ProgressDisplay(False, "x", delay=0, stream=quiet) as bar:
        bar.update(1, 2)
    assert not bar.shown and quiet.getvalue() == ""
    never = io.StringIO()
    with cli_progress.ProgressDisplay(True, "x", delay=3600, stream=never) as bar:
        bar.update(1, 2)  # a command shorter than the delay prints nothing
    assert not bar.shown and never.getvalue() == ""


def test_progress_goes_to_stderr_never_into_json_output(tmp_path, monkeypatch, capsys):
    _store(tmp_path)
    monkeypatch.setattr(cli_progress, "DELAY_S", 0)
    assert cli(["--home", str(tmp_path), "--progress", "sessions", "recover", "--source",
                str(tmp_path / "state.db"), "--inspect-only"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["recoverable"] is True  # stdout: the JSON report alone
    assert "quick_check" in got.err or "reading" in got.err or "copying" in got.err


def test_progress_is_off_without_a_terminal_or_with_json(tmp_path):
    class Args:
        progress = False
        json = False

    assert cli_progress.wanted(Args()) is sys.stderr.isatty()
    Args.json = True
    assert cli_progress.wanted(Args()) is False
    Args.progress = True
    assert cli_progress.wanted(Args()) is True


def test_importing_the_package_does_not_import_asyncio():
    code = "import sys, hermes_state; print('asyncio' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.strip() == "False", res.stderr
    code = "from hermes_state import AsyncSessionDB; print(AsyncSessionDB.__name__)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.strip() == "AsyncSessionDB", res.stderr
