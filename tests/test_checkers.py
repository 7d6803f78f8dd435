"""The checkers of SPEC §16.3 on hand-made histories and tiny real stores.

Every checker must PASS a good history and FAIL each violation it looks for; a checker that
cannot fail is worse than none. Stores are real ``state.db`` files built with ``SessionDB`` in
``tmp_path``; captures are either hand-made (to vary the manifest) or produced by the real
retirement path (SPEC §10.1, §10.3) in this process. No process is started.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
from pathlib import Path

import pytest

from chaos.checkers import CHECKERS, run_checkers
from chaos.checkers.base import (
    FAIL,
    INCONCLUSIVE,
    MAX_EVIDENCE,
    PASS,
    CheckContext,
    Verdict,
)
from chaos.checkers.retry_jitter import ks_threshold, ks_uniform, largest_cluster
from chaos.checkers.store import find_captures, payload_ids_in_db
from chaos.history import HistoryWriter, complete, load, pair_ops, proc_name, role_of
from hermes_state import SessionDB, events
from hermes_state.errors import DeletedWalGenerationError

PIDS = {"gateway-0": 1001, "gateway-1": 1002, "cli-0": 2001, "cli-1": 2002, "lock-0": 3001,
        "runner": 900, "nemesis": 900}
REFUSAL = "DeletedWalGenerationError"
COMPLETION_ONLY = ("error", "message", "spooled", "value", "latency_s")


# ================================================================================== builders
class H:
    """A hand-made history: every record 10 ms after the previous one."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.records: list[dict] = []
        self.seq = 0

    def add(self, type_: str, process: str, **fields) -> dict:
        self.t += 0.01
        rec = {"t": round(self.t, 6), "wall": 1.7e9 + self.t, "process": process,
               "pid": fields.pop("pid", PIDS.get(process, 999)), "type": type_}
        rec.update(fields)
        self.records.append(rec)
        return rec

    def invoke(self, process: str, op: str, **fields) -> str:
        self.seq += 1
        op_id = f"{process}:{self.seq}"
        self.add("invoke", process, op=op, op_id=op_id, **fields)
        return op_id

    def complete(self, process: str, op_id: str, kind: str = "ok", **fields) -> dict:
        inv = next(r for r in self.records if r.get("op_id") == op_id and r["type"] == "invoke")
        base = {k: inv[k] for k in ("op", "payload_id", "session_id") if k in inv}
        base.update(fields)
        return self.add(kind, process, op_id=op_id, **base)

    def op(self, process: str, op: str, kind: str = "ok", **fields) -> dict:
        done = {k: fields.pop(k) for k in COMPLETION_ONLY if k in fields}
        op_id = self.invoke(process, op, **fields)
        return self.complete(process, op_id, kind, **done)

    def append(self, process: str, payload_id: str, kind: str = "ok", **fields) -> dict:
        return self.op(process, "append", kind, payload_id=payload_id, session_id="s1", **fields)

    def spawn(self, process: str) -> dict:
        role, index = process.rsplit("-", 1)
        return self.add("process", "runner", phase="spawn", role=role, kind=role,
                        index=int(index))

    def exit(self, process: str, code: int = 0) -> dict:
        role, index = process.rsplit("-", 1)
        return self.add("process", "runner", phase="exit", role=role, kind=role,
                        index=int(index), exitcode=code)

    def nemesis(self, fault: str, phase: str = "done", **fields) -> dict:
        return self.add("nemesis", "nemesis", fault=fault, phase=phase, step=0, **fields)

    def event(self, process: str, event: str, **fields) -> dict:
        return self.add("event", process, event=event, **fields)

    def history(self) -> list[dict]:
        return complete(self.records)


SCENARIO = {"roles": [{"name": "gateway", "kind": "gateway", "count": 1},
                      {"name": "cli", "kind": "cli", "count": 2},
                      {"name": "lock", "kind": "lock_holder", "count": 1}]}


def make_ctx(tmp_path: Path, history: list[dict], store: Path | None = None) -> CheckContext:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return CheckContext(history=history, store_path=store or home / "state.db", home=home,
                        run_dir=tmp_path, scenario=SCENARIO)


def make_store(db_path: Path, payloads=(), session: str = "s1", keep_open: bool = False):
    """A real store with one session and a message per payload id (every third a tool row)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db = SessionDB(db_path=db_path)
    db.create_session(session, source="cli")
    for i, pid in enumerate(payloads):
        role = ("user", "assistant", "tool")[i % 3]
        db.append_message(session, role, f"message {pid} about sqlite wal",
                          tool_name="terminal" if role == "tool" else None,
                          platform_message_id=pid)
    if keep_open:
        return db
    db.close()
    return None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_capture(home: Path, pid: int, payloads=(), *, version=1, sha: str | None = None,
                 wal_bytes: int | None = None, manifest_text: str | None = None,
                 stamp: str = "20250101T000000Z") -> Path:
    """A hand-made ``state.db.retired-wal-*`` directory holding ``payloads`` in its WAL copy."""
    scratch = home.parent / f"scratch-{pid}-{stamp}"
    db = make_store(scratch / "state.db", payloads, keep_open=True)
    cap = home / f"state.db.retired-wal-{stamp}-{pid}"
    cap.mkdir(parents=True)
    (cap / "state.db").write_bytes((scratch / "state.db").read_bytes())
    (cap / "state.db-wal").write_bytes((scratch / "state.db-wal").read_bytes())
    db.close()
    wal = cap / "state.db-wal"
    manifest = {"version": version, "database": str(home / "state.db"), "trigger": "halt",
                "pid": pid, "captured_at": "2025-01-01T00:00:00Z",
                "wal": {"identity": [1, 2], "bytes": wal.stat().st_size if wal_bytes is None
                        else wal_bytes, "sha256": sha or sha256(wal), "frames": 1}}
    (cap / "manifest.json").write_text(manifest_text if manifest_text is not None
                                       else json.dumps(manifest))
    return cap


def tree_state(root: Path) -> dict:
    """Every file under ``root`` with its bytes' digest (to prove checkers modify nothing)."""
    return {str(p.relative_to(root)): sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def real_retirement(home: Path, checkpointed=("p1", "p2"), in_wal=("p3", "p4")) -> Path:
    """Run the real §10.1 path in this process: write, delete the sidecars, get refused.

    ``checkpointed`` reach ``state.db``; ``in_wal`` stay only in the retired WAL. Returns the
    capture directory the refusal wrote.
    """
    db_path = home / "state.db"
    db = SessionDB(db_path=db_path)
    db.create_session("s1", source="gateway")
    for p in checkpointed:
        db.append_message("s1", "user", f"msg {p}", platform_message_id=p)
    db.checkpoint("PASSIVE")
    for p in in_wal:
        db.append_message("s1", "user", f"msg {p}", platform_message_id=p)
    os.unlink(f"{db_path}-wal")
    os.unlink(f"{db_path}-shm")
    with pytest.raises(DeletedWalGenerationError) as info:
        db.append_message("s1", "user", "refused", platform_message_id="p-refused")
    db.close()
    assert info.value.capture_dir, "the refusal must name its capture"
    return Path(info.value.capture_dir)


# ================================================================================== base, API
def test_role_and_process_names():
    assert role_of("gateway-0") == "gateway"
    assert role_of("long_reader-12") == "long_reader"
    assert role_of("cli") == "cli"
    assert proc_name({"type": "process", "process": "runner", "role": "cli", "index": 1}) == "cli-1"
    assert proc_name({"type": "process", "process": "cli-1", "phase": "exit"}) == "cli-1"
    assert proc_name({"type": "ok", "process": "gateway-0"}) == "gateway-0"


def test_pair_ops_matches_completions_and_completed_histories():
    h = H()
    h.append("gateway-0", "a")
    h.invoke("gateway-0", "append", payload_id="b")  # never completed: killed mid-call
    h.append("gateway-0", "c", "fail", error=REFUSAL)
    ops = {o.payload_id: o for o in pair_ops(h.history())}
    assert ops["a"].kind == "ok" and ops["c"].kind == "fail" and ops["c"].error == REFUSAL
    assert ops["b"].kind == "info" and ops["b"].done.get("synthesized") is True


def test_verdict_caps_evidence_and_serialises():
    v = Verdict("x", FAIL, "s", {"n": 1}, [{"i": i} for i in range(50)])
    assert len(v.evidence) == MAX_EVIDENCE
    assert v.figures["evidence_total"] == 50
    d = v.to_dict()
    assert json.loads(json.dumps(d)) == d and d["status"] == FAIL
    with pytest.raises(ValueError):
        Verdict("x", "GREEN", "s")


def test_run_checkers_keeps_order_and_turns_crashes_into_fail(tmp_path, monkeypatch):
    def boom(ctx, params):
        raise RuntimeError("checker bug")

    monkeypatch.setitem(CHECKERS, "boom", boom)
    make_store(tmp_path / "home" / "state.db", ["a"])
    h = H()
    h.append("cli-0", "a")
    ctx = make_ctx(tmp_path, h.history())
    out = run_checkers(ctx, {"boom": {}, "no_lost_writes": None, "no_such_checker": {}})
    assert [v.checker for v in out] == ["boom", "no_lost_writes", "no_such_checker"]
    assert out[0].status == FAIL and "RuntimeError" in out[0].figures["error"]
    assert "checker bug" in out[0].figures["error"] and "Traceback" in out[0].figures["error"]
    assert out[1].status == PASS
    assert out[2].status == FAIL


def test_run_checkers_missing_store_is_fail_not_crash(tmp_path):
    h = H()
    h.append("cli-0", "a")
    ctx = make_ctx(tmp_path, h.history(), store=tmp_path / "nowhere" / "state.db")
    names = ["no_lost_writes", "integrity", "recovery"]
    out = run_checkers(ctx, {n: {} for n in names})
    assert [v.status for v in out] == [FAIL, FAIL, FAIL]


def test_checkers_never_modify_the_run_files(tmp_path):
    """Every checker works on copies: the store (with a live WAL), captures and spool untouched."""
    home = tmp_path / "home"
    real_retirement(home)
    db = make_store(home / "state.db", [], session="s2", keep_open=True)  # WAL in use
    db.append_message("s2", "user", "live", platform_message_id="p5")
    (home / "sessions").mkdir()
    (home / "sessions" / "s1.jsonl").write_text(json.dumps(
        {"spool_id": "x", "session_id": "s1", "message": {"platform_message_id": "p-refused"}})
        + "\n")
    try:
        before = tree_state(home)
        h = H()
        for p in ("p1", "p2", "p3", "p4", "p5"):
            h.append("gateway-0", p)
        h.nemesis("delete_sidecars", files=["state.db-wal"])
        h.append("gateway-0", "p-refused", "fail", error=REFUSAL, spooled=True)
        ctx = make_ctx(tmp_path, h.history())
        expect = {n: {} for n in CHECKERS}
        expect["stale_wal_refusal"] = {"holder": "gateway"}
        expect["no_lost_writes"] = {"allow_in": ["capture", "spool"]}
        verdicts = run_checkers(ctx, expect)
        assert len(verdicts) == len(CHECKERS)
        assert not [v.to_dict() for v in verdicts if v.summary.startswith("checker crashed")]
        assert tree_state(home) == before
    finally:
        db.close()


# ================================================================================== store helpers
def test_store_copy_sees_rows_only_in_the_wal(tmp_path):
    db = make_store(tmp_path / "state.db", ["a", "b", "c"], keep_open=True)
    try:
        assert (tmp_path / "state.db-wal").stat().st_size > 0
        assert sorted(payload_ids_in_db(tmp_path / "state.db")) == ["a", "b", "c"]
    finally:
        db.close()


def test_find_captures_validates_a_real_capture(tmp_path):
    home = tmp_path / "home"
    cap = real_retirement(home)
    found = find_captures(home)
    assert [c.path for c in found] == [cap]
    assert found[0].valid, found[0].problems
    assert found[0].pid == os.getpid()
    assert sorted(payload_ids_in_db(cap / "state.db")) == ["p1", "p2", "p3", "p4"]
    assert sorted(payload_ids_in_db(home / "state.db")) == ["p1", "p2"]


@pytest.mark.parametrize("kwargs, problem", [
    ({"version": 2}, "version"),
    ({"sha": "0" * 64}, "sha256"),
    ({"wal_bytes": 0}, "bytes"),
    ({"manifest_text": "{not json"}, "JSON"),
])
def test_find_captures_reports_bad_manifests(tmp_path, kwargs, problem):
    home = tmp_path / "home"
    make_capture(home, 4242, ["x"], **kwargs)
    (cap,) = find_captures(home)
    assert not cap.valid
    assert any(problem in p for p in cap.problems), cap.problems


# ================================================================================== no_lost_writes
def lost_ctx(tmp_path, store_payloads, build, allow=None):
    make_store(tmp_path / "home" / "state.db", store_payloads)
    h = H()
    build(h)
    return CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()),
                                      {"allow_in": allow or []})


def test_no_lost_writes_passes_a_good_history(tmp_path):
    def build(h):
        for p in ("a", "b", "c"):
            h.append("gateway-0", p)
        h.append("gateway-0", "d", "fail", error="WriteContentionError")
        h.append("gateway-0", "e", "info", error="OperationalError")   # present
        h.append("gateway-0", "f", "info", error="OperationalError")   # absent
        h.invoke("gateway-0", "append", payload_id="g")                  # killed mid-call
    v = lost_ctx(tmp_path, ["a", "b", "c", "e", "g"], build)
    assert v.status == PASS, v.to_dict()
    f = v.figures
    assert (f["ok"], f["fail"], f["info"]) == (3, 1, 3)
    assert f["found_in_store"] == 3 and f["lost"] == 0 and f["phantom"] == 0
    assert f["info_in_store"] == 2 and f["unexpected"] == 0
    assert v.summary.startswith("3 ok appends: 3 in store") and "0 lost" in v.summary


def test_no_lost_writes_fails_a_lost_ok_append(tmp_path):
    def build(h):
        for p in ("a", "b", "c"):
            h.append("gateway-0", p)
    v = lost_ctx(tmp_path, ["a", "c"], build)
    assert v.status == FAIL
    assert v.figures["lost"] == 1 and v.figures["lost_payload_ids"] == ["b"]
    assert v.evidence[0]["payload_id"] == "b" and v.evidence[0]["record"]["type"] == "ok"


def test_no_lost_writes_is_inconclusive_on_a_final_store_it_cannot_read(tmp_path):
    """A garbled page of the messages b-tree (as corrupt_page leaves it) is no crash and no PASS."""
    db = tmp_path / "home" / "state.db"
    make_store(db, [f"p{i}" for i in range(400)])
    conn = sqlite3.connect(db)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:  # the messages b-tree's root: every row lookup passes through it
        fh.seek((root - 1) * page_size)
        fh.write(bytes([0xA5]) * page_size)
    h = H()
    for i in range(3):
        h.append("gateway-0", f"p{i}")
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {})
    assert v.status == INCONCLUSIVE, v.to_dict()
    assert "final store cannot be read" in v.summary and v.figures["ok"] == 3


def test_no_lost_writes_fails_a_phantom_fail_append(tmp_path):
    def build(h):
        h.append("gateway-0", "a")
        h.append("gateway-0", "b", "fail", error=REFUSAL)
    v = lost_ctx(tmp_path, ["a", "b"], build)
    assert v.status == FAIL and v.figures["phantom"] == 1
    assert v.evidence[0]["violation"] == "phantom" and v.evidence[0]["found_in"] == ["store"]


def test_no_lost_writes_fails_unexpected_and_duplicated_payloads(tmp_path):
    def build(h):
        h.append("gateway-0", "a")
    v = lost_ctx(tmp_path, ["a", "zz"], build)
    assert v.status == FAIL and v.figures["unexpected"] == 1
    assert "unexpected" in v.summary

    def build2(h):
        h.append("gateway-0", "a")
    v = lost_ctx(tmp_path / "dup", ["a", "a"], build2)
    assert v.status == FAIL and v.figures["duplicated"] == 1


def test_no_lost_writes_inconclusive_without_appends(tmp_path):
    v = lost_ctx(tmp_path, [], lambda h: h.op("cli-0", "open"))
    assert v.status == INCONCLUSIVE


def test_no_lost_writes_capture_counts_only_when_allowed(tmp_path):
    home = tmp_path / "home"
    real_retirement(home)  # p1,p2 in the store; p3,p4 only in the capture; p-refused nowhere
    h = H()
    for p in ("p1", "p2", "p3", "p4"):
        h.append("gateway-0", p)
    h.append("gateway-0", "p-refused", "fail", error=REFUSAL)
    ctx = make_ctx(tmp_path, h.history())
    strict = CHECKERS["no_lost_writes"](ctx, {})
    assert strict.status == FAIL and sorted(strict.figures["lost_payload_ids"]) == ["p3", "p4"]
    assert strict.evidence[0]["also_in_not_allowed"] == ["capture"]
    # The summary says where they are and how to get them back.
    assert ("2 lost (2 of them in a retired-WAL capture: `hermes-state sessions salvage "
            "CAPTURE_DIR --apply` brings them back)") in strict.summary, strict.summary
    allowed = CHECKERS["no_lost_writes"](ctx, {"allow_in": ["capture"]})
    assert allowed.status == PASS, allowed.to_dict()
    assert allowed.figures["found_only_in_capture"] == 2
    assert allowed.figures["found_in_store"] == 2


def test_no_lost_writes_fail_append_in_a_capture_is_phantom(tmp_path):
    home = tmp_path / "home"
    make_store(home / "state.db", ["a"])
    make_capture(home, 1001, ["a", "b"])
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "b", "fail", error=REFUSAL)
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {"allow_in": ["capture"]})
    assert v.status == FAIL and v.figures["phantom"] == 1
    assert v.evidence[0]["found_in"] == ["capture"]


def write_spool(home: Path, session: str, payloads) -> None:
    sdir = home / "sessions"
    sdir.mkdir(parents=True, exist_ok=True)
    with open(sdir / f"{session}.jsonl", "a") as fh:
        for p in payloads:
            fh.write(json.dumps({"spool_id": p, "session_id": session, "spooled_at": 1.0,
                                 "message": {"role": "user", "content": p,
                                             "platform_message_id": p}}) + "\n")
        fh.write('{"torn": ')  # a torn last line is skipped


def test_no_lost_writes_spool(tmp_path):
    home = tmp_path / "home"
    make_store(home / "state.db", ["a"])
    write_spool(home, "s1", ["b", "c"])
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "b")                                       # ok but only in the spool
    h.append("gateway-0", "c", "fail", error=REFUSAL, spooled=True)  # diverted: in spool
    ctx = make_ctx(tmp_path, h.history())
    assert CHECKERS["no_lost_writes"](ctx, {}).status == FAIL
    v = CHECKERS["no_lost_writes"](ctx, {"allow_in": ["spool"]})
    assert v.status == PASS, v.to_dict()
    assert v.figures["found_only_in_spool"] == 1 and v.figures["spooled_missing"] == 0


def test_no_lost_writes_spooled_fail_missing_from_spool(tmp_path):
    home = tmp_path / "home"
    make_store(home / "state.db", ["a"])
    write_spool(home, "s1", ["other"])
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "other", "fail", error=REFUSAL, spooled=True)
    h.append("gateway-0", "c", "fail", error=REFUSAL, spooled=True)
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {"allow_in": ["spool"]})
    assert v.status == FAIL and v.figures["spooled_missing"] == 1
    assert v.evidence[0]["payload_id"] == "c"


def test_no_lost_writes_rejects_unknown_allow_in(tmp_path):
    with pytest.raises(ValueError):
        lost_ctx(tmp_path, ["a"], lambda h: h.append("cli-0", "a"), allow=["backup"])


# ================================================================================== stale_wal_refusal
HOLDER_PID = PIDS["gateway-0"]


def stale_history(*, fire=True, ok_after_t=False, holder_writes_after=True,
                  refusal_error=REFUSAL, other_open="refused", late_write_event=False,
                  open_after_close=None, post_exit="ok", holder_exits=True,
                  holder_exit_before_t=False) -> list[dict]:
    """The stale-wal scenario: gateway-0 holds the store, its sidecars are deleted at T."""
    h = H()
    h.spawn("gateway-0")
    h.op("gateway-0", "open")
    h.event("gateway-0", "open", db="state.db")
    for i in range(3):
        h.append("gateway-0", f"g-{i}")
        h.event("gateway-0", "write", seq=i + 2, attempts=1, op="append_message")
    if holder_exit_before_t:
        h.op("gateway-0", "close")
        h.exit("gateway-0")
    concurrent = h.invoke("gateway-0", "append", payload_id="g-c", session_id="s1")
    if fire:
        h.nemesis("delete_sidecars", "start", files=["wal", "shm"])
        h.nemesis("delete_sidecars", "done", files=["state.db-wal", "state.db-shm"])
    h.complete("gateway-0", concurrent, "ok")          # invoked before T: concurrent, allowed
    if holder_exit_before_t:
        return h.history()
    if ok_after_t:
        h.append("gateway-0", "g-after")    # an acknowledged write on the retired generation
    if holder_writes_after:
        h.append("gateway-0", "g-r1", "fail", error=refusal_error, spooled=True)
        h.event("gateway-0", "refusal", reason="retired_wal")
        h.event("gateway-0", "capture", dir="state.db.retired-wal-x", trigger="halt")
    if late_write_event:
        h.event("gateway-0", "write", seq=9, attempts=1, op="append_message")
    h.spawn("cli-0")
    if other_open == "refused":
        h.op("cli-0", "open", "fail", error=REFUSAL)
    elif other_open == "ok":
        h.op("cli-0", "open")
    elif other_open == "other_error":
        h.op("cli-0", "open", "fail", error="StorePermissionError")
    h.exit("cli-0")
    if holder_writes_after:
        h.op("gateway-0", "create_session", "fail", error=refusal_error, session_id="s9")
    h.op("gateway-0", "close")
    if open_after_close is not None:          # the holder released its descriptors at close
        h.spawn("cli-1")
        h.op("cli-1", "open", open_after_close)
    if holder_exits:
        h.exit("gateway-0", 0)
    if post_exit in ("ok", "fail"):
        h.spawn("gateway-1")
        h.op("gateway-1", "open", post_exit, **({"error": "OperationalError"}
                                                if post_exit == "fail" else {}))
        h.exit("gateway-1")
    return h.history()


def stale_check(tmp_path, history, capture=True, store=True, **params):
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if store:
        make_store(home / "state.db", ["g-0"])
    if capture:
        make_capture(home, HOLDER_PID)
    ctx = make_ctx(tmp_path, history)
    return CHECKERS["stale_wal_refusal"](ctx, {"holder": "gateway", **params})


def test_stale_wal_refusal_passes_the_good_run(tmp_path):
    v = stale_check(tmp_path, stale_history())
    assert v.status == PASS, v.to_dict()
    f = v.figures
    assert f["holder_pids"] == [HOLDER_PID]
    assert f["writes_refused"] == 2 and f["concurrent_writes"] == 1
    assert f["opens_refused"] == 1 and f["opens_after_exit_ok"] == 1
    assert f["holders"]["gateway-0"]["capture"].endswith(f"-{HOLDER_PID}")
    assert f["T"] > 0 and "2 refused" in v.summary


def test_stale_wal_refusal_inconclusive_when_the_fault_never_fired(tmp_path):
    v = stale_check(tmp_path, stale_history(fire=False))
    assert v.status == INCONCLUSIVE and "never fired" in v.summary


def test_stale_wal_refusal_inconclusive_when_holder_never_wrote_after_t(tmp_path):
    v = stale_check(tmp_path, stale_history(holder_writes_after=False), capture=False)
    assert v.status == INCONCLUSIVE and "never attempted a write" in v.summary


def test_stale_wal_refusal_inconclusive_when_no_holder_alive(tmp_path):
    v = stale_check(tmp_path, stale_history(holder_exit_before_t=True))
    assert v.status == INCONCLUSIVE


def test_stale_wal_refusal_fails_an_ok_write_after_t(tmp_path):
    v = stale_check(tmp_path, stale_history(ok_after_t=True))
    assert v.status == FAIL and "ok write(s) invoked after T" in v.summary
    assert v.figures["holders"]["gateway-0"]["ok_after_T"] == 1
    assert any(e["violation"] == "ok write after T" and e["record"]["payload_id"] == "g-after"
               for e in v.evidence)


def test_stale_wal_refusal_fails_the_wrong_error(tmp_path):
    v = stale_check(tmp_path, stale_history(refusal_error="WriteContentionError"))
    assert v.status == FAIL and "never got DeletedWalGenerationError" in v.summary


def test_stale_wal_refusal_fails_a_write_event_after_the_refusal(tmp_path):
    v = stale_check(tmp_path, stale_history(late_write_event=True))
    assert v.status == FAIL and "after its refusal" in v.summary


@pytest.mark.parametrize("kwargs", [
    None, {"version": 2}, {"sha": "f" * 64}, {"wal_bytes": 0}, {"manifest_text": "nope"},
    {"pid": 77},
])
def test_stale_wal_refusal_fails_without_a_valid_capture(tmp_path, kwargs):
    home = tmp_path / "home"
    home.mkdir(parents=True)
    if kwargs is not None:
        kwargs = dict(kwargs)
        make_capture(home, kwargs.pop("pid", HOLDER_PID), **kwargs)
    v = stale_check(tmp_path, stale_history(), capture=False)
    assert v.status == FAIL and "no valid capture" in v.summary


def test_stale_wal_refusal_fails_an_ok_open_while_the_holder_lives(tmp_path):
    v = stale_check(tmp_path, stale_history(other_open="ok"))
    assert v.status == FAIL
    assert any(e["record"].get("process") == "cli-0" for e in v.evidence if "record" in e)


def test_stale_wal_refusal_fails_an_open_refused_for_another_reason(tmp_path):
    v = stale_check(tmp_path, stale_history(other_open="other_error"))
    assert v.status == FAIL


def test_stale_wal_refusal_allows_an_open_after_the_holder_closed(tmp_path):
    """Between the holder's close (descriptors released) and its exit record: either way."""
    v = stale_check(tmp_path, stale_history(open_after_close="ok"))
    assert v.status == PASS, v.to_dict()
    assert v.figures["opens_ambiguous"] == 1


def test_stale_wal_refusal_fails_when_nobody_can_open_after_exit(tmp_path):
    v = stale_check(tmp_path, stale_history(post_exit="fail"))
    assert v.status == FAIL and "none ok" in v.summary


def test_stale_wal_refusal_probes_a_copy_when_nobody_opened_after_exit(tmp_path):
    v = stale_check(tmp_path, stale_history(post_exit=None))
    assert v.status == PASS, v.to_dict()
    assert v.figures["fresh_writer_on_copy"] == "ok"


def test_stale_wal_refusal_probe_failure_is_fail(tmp_path):
    home = tmp_path / "home"
    home.mkdir(parents=True)
    # A SQLite header over garbage: not quarantined (SPEC §12 moves only non-SQLite files
    # aside), and no writer can open it.
    (home / "state.db").write_bytes(b"SQLite format 3\x00" + b"\xa5" * 8000)
    v = stale_check(tmp_path, stale_history(post_exit=None), store=False)
    assert v.status == FAIL and "fresh writer" in v.summary


def test_stale_wal_refusal_with_the_real_capture(tmp_path):
    """The real refusal path's capture satisfies (c) for this process's pid."""
    home = tmp_path / "home"
    real_retirement(home)
    h = H()
    me = os.getpid()
    h.spawn("gateway-0")
    h.op("gateway-0", "open", pid=me)
    h.append("gateway-0", "p1", pid=me)
    h.nemesis("delete_sidecars", files=["state.db-wal", "state.db-shm"])
    h.append("gateway-0", "p-refused", "fail", error=REFUSAL, pid=me)
    h.op("gateway-0", "close", pid=me)
    h.exit("gateway-0")
    v = CHECKERS["stale_wal_refusal"](make_ctx(tmp_path, h.history()), {"holder": "gateway"})
    assert v.status == PASS, v.to_dict()
    assert v.figures["holders"]["gateway-0"]["capture"].endswith(f"-{me}")


# ================================================================================== integrity
def integrity_of(tmp_path, mutate=None) -> Verdict:
    db_path = tmp_path / "home" / "state.db"
    make_store(db_path, [f"p{i}" for i in range(12)])
    if mutate is not None:
        conn = sqlite3.connect(db_path, isolation_level=None)
        try:
            mutate(conn)
        finally:
            conn.close()
    return CHECKERS["integrity"](make_ctx(tmp_path, []), {})


def test_integrity_passes_a_healthy_store(tmp_path):
    v = integrity_of(tmp_path)
    assert v.status == PASS, v.to_dict()
    f = v.figures
    assert f["integrity_check"] == "ok" and f["foreign_key_check"] == 0
    assert f["messages_fts"] == "ok" and f["sessions"] == 1 and f["messages"] == 12
    assert f["message_count_mismatches"] == 0


def test_integrity_fails_a_message_count_mismatch(tmp_path):
    v = integrity_of(tmp_path, lambda c: c.execute("UPDATE sessions SET message_count = 99"))
    assert v.status == FAIL and v.figures["message_count_mismatches"] == 1
    assert v.evidence[0] == {"session_id": "s1", "message_count": 99, "counted": 12}


def test_integrity_fails_a_foreign_key_violation(tmp_path):
    def orphan(c):
        c.execute("PRAGMA foreign_keys=OFF")
        c.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                  "VALUES ('ghost', 'user', 'orphan', 1.0)")
    v = integrity_of(tmp_path, orphan)
    assert v.status == FAIL and v.figures["foreign_key_check"] == 1


def test_integrity_fails_an_fts_index_out_of_sync(tmp_path):
    def unindex(c):
        row = c.execute("SELECT id, content, tool_name, tool_calls FROM messages "
                        "ORDER BY id LIMIT 1").fetchone()
        c.execute("INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
                  "VALUES ('delete', ?, ?, ?, ?)", row)
    v = integrity_of(tmp_path, unindex)
    assert v.status == FAIL and v.figures["messages_fts"] != "ok"


def test_integrity_tolerates_unindexed_rows_of_a_pending_rebuild(tmp_path):
    def pending(c):
        row = c.execute("SELECT id, content, tool_name, tool_calls FROM messages "
                        "ORDER BY id LIMIT 1").fetchone()
        c.execute("INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
                  "VALUES ('delete', ?, ?, ?, ?)", row)
        c.execute("INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_high_water', '12'), "
                  "('fts_rebuild_progress', '0')")
    v = integrity_of(tmp_path, pending)
    assert v.status == PASS, v.to_dict()
    assert v.figures["fts_rebuild_pending"] is True and "rebuild pending" in v.figures["messages_fts"]


def test_integrity_fails_a_damaged_trigram_index(tmp_path):
    def damage(c):
        c.execute("UPDATE messages_fts_trigram_data SET block = zeroblob(length(block)) "
                  "WHERE id > 10")
    v = integrity_of(tmp_path, damage)
    assert v.status == FAIL and v.figures["messages_fts_trigram"] != "ok"


def test_integrity_fails_a_missing_fts_table(tmp_path):
    def drop(c):
        for t in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            c.execute(f"DROP TRIGGER {t}")
        c.execute("DROP TABLE messages_fts")
    v = integrity_of(tmp_path, drop)
    assert v.status == FAIL and v.figures["messages_fts"] == "missing"


def test_integrity_fails_a_structural_problem(tmp_path):
    def orphan_pages(c):  # forget an index in the schema: its pages are "never used"
        c.execute("PRAGMA writable_schema=ON")
        c.execute("DELETE FROM sqlite_master WHERE name = 'idx_messages_session'")
        c.execute("PRAGMA writable_schema=OFF")
    v = integrity_of(tmp_path, orphan_pages)
    assert v.status == FAIL and v.figures["integrity_check"] != "ok"


def test_integrity_fails_a_file_that_is_not_a_database(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"\x00garbage" * 1000)
    v = CHECKERS["integrity"](make_ctx(tmp_path, []), {})
    assert v.status == FAIL and "unreadable" in v.summary


def test_integrity_reads_rows_still_in_the_wal(tmp_path):
    db = make_store(tmp_path / "home" / "state.db", ["a", "b"], keep_open=True)
    try:
        v = CHECKERS["integrity"](make_ctx(tmp_path, []), {})
        assert v.status == PASS and v.figures["messages"] == 2
    finally:
        db.close()


# ================================================================================== retry_jitter
def retry_history(sleeps, attempts=None, extra=None) -> list[dict]:
    h = H()
    for i, s in enumerate(sleeps):
        proc = ("gateway-0", "cli-0", "cli-1")[i % 3]
        h.event(proc, "retry", attempt=(attempts[i] if attempts else 1 + i % 4), sleep_s=s,
                error="database is locked", op="append_message")
    if extra:
        extra(h)
    return h.history()


def uniform_sleeps(n=200, lo=0.020, hi=0.150, seed=7):
    rng = random.Random(seed)
    return [rng.uniform(lo, hi) for _ in range(n)]


def jitter(tmp_path, history, **params) -> Verdict:
    return CHECKERS["retry_jitter"](make_ctx(tmp_path, history), params)


def test_ks_statistic_is_exact():
    n = 10
    evenly = [0.020 + (i - 0.5) / n * 0.130 for i in range(1, n + 1)]
    assert ks_uniform(evenly, 0.020, 0.150) == pytest.approx(0.5 / n)
    assert ks_uniform([0.150] * 5, 0.020, 0.150) == pytest.approx(1.0)
    assert ks_uniform([0.085], 0.020, 0.150) == pytest.approx(0.5)
    assert ks_threshold(100) == pytest.approx(0.195)
    assert largest_cluster([0.05, 0.0505, 0.0509, 0.06, 0.1]) == 3


def test_retry_jitter_passes_uniform_sleeps(tmp_path):
    v = jitter(tmp_path, retry_history(uniform_sleeps()))
    assert v.status == PASS, v.to_dict()
    f = v.figures
    assert f["retries"] == 200 and f["ks_d"] <= f["ks_threshold"]
    assert f["max_attempt"] == 4 and set(f["processes_with_retries"]) == {"gateway-0", "cli-0",
                                                                         "cli-1"}
    assert 0.020 <= f["min_sleep_s"] <= f["mean_sleep_s"] <= f["max_sleep_s"] <= 0.150


def test_retry_jitter_fails_a_sleep_out_of_range(tmp_path):
    v = jitter(tmp_path, retry_history(uniform_sleeps(30) + [0.2]))
    assert v.status == FAIL and v.figures["sleeps_out_of_range"] == 1
    assert v.evidence[0]["sleep_s"] == 0.2


def test_retry_jitter_fails_too_many_attempts(tmp_path):
    sleeps = uniform_sleeps(15)
    v = jitter(tmp_path, retry_history(sleeps, attempts=list(range(1, 16))))
    assert v.status == FAIL and v.figures["max_attempt"] == 15
    assert v.evidence[0]["attempt"] == 15
    ok = jitter(tmp_path, retry_history(sleeps[:14], attempts=list(range(1, 15))))
    assert ok.status == PASS


def test_retry_jitter_fails_a_write_that_gave_up(tmp_path):
    extra = lambda h: h.event("cli-0", "write_gave_up", attempts=15, waited_s=17.0,  # noqa: E731
                              lock_owner="PID 1 (x)")
    v = jitter(tmp_path, retry_history(uniform_sleeps(5), extra=extra))
    assert v.status == FAIL and v.figures["write_gave_up"] == 1
    assert any(e.get("event") == "write_gave_up" for e in v.evidence)


def test_retry_jitter_fails_a_fixed_back_off(tmp_path):
    v = jitter(tmp_path, retry_history([0.05] * 40))
    assert v.status == FAIL and "fixed back-off" in v.summary


def test_retry_jitter_fails_a_near_fixed_back_off_that_ks_might_miss(tmp_path):
    rng = random.Random(3)
    sleeps = [0.085 + rng.uniform(-0.0004, 0.0004) for _ in range(11)] + uniform_sleeps(10)
    v = jitter(tmp_path, retry_history(sleeps))
    assert v.status == FAIL and v.figures["largest_1ms_cluster"] == 11


def test_retry_jitter_fails_a_skewed_distribution(tmp_path):
    v = jitter(tmp_path, retry_history(uniform_sleeps(100, 0.020, 0.060)))
    assert v.status == FAIL and v.figures["ks_d"] > v.figures["ks_threshold"]
    assert "KS" in v.summary


def test_retry_jitter_too_few_sleeps_do_not_fail_on_spread(tmp_path):
    near = [0.05 + k * 1e-5 for k in range(19)]  # a near-fixed back-off, every draw distinct
    v = jitter(tmp_path, retry_history(near))
    assert v.status == PASS and "too few" in v.figures["distribution"]
    # the very same float drawn again is one seed behind every draw, whatever the count
    v = jitter(tmp_path, retry_history([0.05] * 19))
    assert v.status == FAIL and "drawn again" in v.summary


def test_retry_jitter_inconclusive_below_min_retries(tmp_path):
    v = jitter(tmp_path, retry_history(uniform_sleeps(3)), min_retries=10)
    assert v.status == INCONCLUSIVE
    assert jitter(tmp_path, retry_history(uniform_sleeps(3)), min_retries=3).status == PASS


def test_retry_jitter_fails_lock_errors_reaching_callers(tmp_path):
    contention = lambda h: h.append("gateway-0", "x", "fail",  # noqa: E731
                                    error="WriteContentionError", message="could not write")
    v = jitter(tmp_path, retry_history(uniform_sleeps(25), extra=contention))
    assert v.status == FAIL and v.figures["lock_errors_reaching_callers"] == 1

    locked = lambda h: h.op("cli-0", "set_title", "info", error="OperationalError",  # noqa: E731
                            message="database is locked")
    assert jitter(tmp_path, retry_history(uniform_sleeps(25), extra=locked)).status == FAIL

    adversary = lambda h: h.op("lock-0", "hold_lock", "fail",  # noqa: E731
                               error="OperationalError", message="database is locked")
    assert jitter(tmp_path, retry_history(uniform_sleeps(25), extra=adversary)).status == PASS


def test_retry_jitter_custom_bounds(tmp_path):
    sleeps = uniform_sleeps(100, 0.010, 0.020)
    assert jitter(tmp_path, retry_history(sleeps)).status == FAIL
    assert jitter(tmp_path, retry_history(sleeps), lo=0.010, hi=0.020).status == PASS


# ================================================================================== checkpoint_cadence
def cadence_history(segments, *, every=50, exitcode=0, mode="PASSIVE", skip=(), extra_seq=(),
                    close=True, process="gateway-0") -> list[dict]:
    """One process with a connection per entry of ``segments`` (its number of writes)."""
    h = H()
    h.spawn(process)
    for n in segments:
        for seq in range(1, n + 1):
            h.event(process, "write", seq=seq, attempts=1, op="append_message")
            if seq % every == 0 and seq not in skip:
                h.event(process, "checkpoint", mode=mode, trigger="cadence", seq=seq, busy=0,
                        log=every, checkpointed=every)
            if seq in extra_seq:
                h.event(process, "checkpoint", mode="PASSIVE", trigger="cadence", seq=seq,
                        busy=0, log=3, checkpointed=3)
        if close:
            h.event(process, "checkpoint", mode="PASSIVE", trigger="close", seq=n, busy=0,
                    log=n % every, checkpointed=n % every)
    h.exit(process, exitcode)
    return h.history()


def cadence(tmp_path, history, **params) -> Verdict:
    return CHECKERS["checkpoint_cadence"](make_ctx(tmp_path, history), params)


def test_checkpoint_cadence_passes_every_50th_write(tmp_path):
    v = cadence(tmp_path, cadence_history([160]))
    assert v.status == PASS, v.to_dict()
    p = v.figures["processes"]["gateway-0"]
    assert p["writes"] == 160 and p["cadence_checkpoints"] == 3 and p["close_checkpoints"] == 1
    assert v.figures["total_checkpoints"] == 4 and v.figures["frames_checkpointed"] == 160


def test_checkpoint_cadence_fails_a_missing_checkpoint(tmp_path):
    v = cadence(tmp_path, cadence_history([160], skip=(100,)))
    assert v.status == FAIL and v.evidence[0]["missing_seq"] == [100]


def test_checkpoint_cadence_fails_other_modes(tmp_path):
    v = cadence(tmp_path, cadence_history([120], mode="TRUNCATE"))
    assert v.status == FAIL and "TRUNCATE" in v.summary
    h = H()
    h.event("cli-0", "write", seq=1)
    h.event("cli-0", "checkpoint", mode="RESTART", trigger="close", seq=1)
    hist = cadence_history([60]) + h.history()
    assert cadence(tmp_path, hist).status == FAIL


def test_checkpoint_cadence_fails_an_off_cadence_checkpoint(tmp_path):
    v = cadence(tmp_path, cadence_history([120], extra_seq=(30,)))
    assert v.status == FAIL and v.evidence[0]["record"]["seq"] == 30


def test_checkpoint_cadence_allows_a_kill_right_after_the_last_write(tmp_path):
    # killed at write 100, before its checkpoint (e.g. failpoint checkpoint.before=crash)
    killed = cadence_history([100], skip=(100,), exitcode=-9, close=False)
    v = cadence(tmp_path, killed)
    assert v.status == PASS, v.to_dict()
    assert v.figures["processes"]["gateway-0"]["allowed_missing_final"] == 100
    # the same gap in a process that exited cleanly is a violation
    assert cadence(tmp_path, cadence_history([100], skip=(100,), close=False)).status == FAIL
    # killed later: writes 101..103 happened after the missed checkpoint
    later = cadence_history([103], skip=(100,), exitcode=-9, close=False)
    assert cadence(tmp_path, later).status == FAIL


def test_checkpoint_cadence_segments_reconnections(tmp_path):
    v = cadence(tmp_path, cadence_history([60, 55]))
    assert v.status == PASS, v.to_dict()
    assert v.figures["processes"]["gateway-0"]["connections"] == 2
    h1 = cadence_history([60])
    h2 = H()
    h2.t = 2000.0
    for seq in range(1, 56):
        h2.event("gateway-0", "write", seq=seq)
    assert cadence(tmp_path, h1 + h2.history()).status == FAIL


def test_checkpoint_cadence_inconclusive_below_every(tmp_path):
    v = cadence(tmp_path, cadence_history([49, 20]))
    assert v.status == INCONCLUSIVE
    assert cadence(tmp_path, cadence_history([30], every=10), every=10).status == PASS
    assert cadence(tmp_path, cadence_history([30]), every=10).status == FAIL


def test_checkpoint_cadence_on_real_store_events(tmp_path):
    """Events recorded from the real write path (SPEC §4) satisfy the checker."""
    writer = HistoryWriter(tmp_path / "history" / "gateway-0.jsonl", "gateway-0")
    events.add_listener(writer.event)
    try:
        db = make_store(tmp_path / "home" / "state.db", [f"p{i}" for i in range(120)],
                        keep_open=True)
        db.close()
    finally:
        events.remove_listener(writer.event)
        writer.close()
    hist = complete(load(tmp_path / "history"))
    writes = [r for r in hist if r.get("event") == "write"]
    assert len(writes) >= 121
    v = cadence(tmp_path, hist)
    assert v.status == PASS, v.to_dict()
    assert v.figures["processes"]["gateway-0"]["cadence_checkpoints"] == len(writes) // 50
    retry = CHECKERS["retry_jitter"](make_ctx(tmp_path, hist), {})
    assert retry.status == PASS and retry.figures["retries"] == 0


# ================================================================================== recovery
def test_recovery_passes_on_a_healthy_store_and_leaves_it_alone(tmp_path):
    home = tmp_path / "home"
    make_store(home / "state.db", ["a", "b"])
    before = tree_state(home)
    v = CHECKERS["recovery"](make_ctx(tmp_path, []), {})
    assert v.status == PASS, v.to_dict()
    assert v.figures["sessions"] == 1 and v.figures["messages"] == 2
    assert tree_state(home) == before


def test_recovery_fails_when_a_fresh_writer_cannot_write(tmp_path, monkeypatch):
    make_store(tmp_path / "home" / "state.db", ["a"])

    def broken(self, *a, **k):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SessionDB, "append_message", broken)
    v = CHECKERS["recovery"](make_ctx(tmp_path, []), {})
    assert v.status == FAIL and v.figures["step"] == "append_message"
    assert "disk I/O error" in v.figures["error"]


def test_recovery_fails_on_an_unusable_schema(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    conn = sqlite3.connect(home / "state.db")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("CREATE VIEW sessions AS SELECT x AS id FROM t")
    conn.commit()
    conn.close()
    v = CHECKERS["recovery"](make_ctx(tmp_path, []), {})
    assert v.status == FAIL and v.evidence and "error" in v.evidence[0]


def test_recovery_after_a_real_retirement(tmp_path):
    home = tmp_path / "home"
    real_retirement(home)
    v = CHECKERS["recovery"](make_ctx(tmp_path, []), {})
    assert v.status == PASS, v.to_dict()
    assert v.figures["messages"] == 2


def test_no_lost_writes_is_inconclusive_when_nothing_was_acknowledged(tmp_path):
    """A run whose every append failed or is unknown proved nothing (found by breaking it)."""
    from hermes_state import SessionDB

    from chaos.checkers import CheckContext
    from chaos.checkers.no_lost_writes import check

    store = tmp_path / "final" / "state.db"
    SessionDB(store).close()
    history = [
        {"t": 1.0, "process": "g-0", "type": "invoke", "op": "append", "op_id": "g-0:1",
         "payload_id": "g-0-1"},
        {"t": 1.1, "process": "g-0", "type": "info", "op": "append", "op_id": "g-0:1",
         "payload_id": "g-0-1", "error": "OperationalError"},
    ]
    ctx = CheckContext(history=history, store_path=store, home=tmp_path / "home",
                       run_dir=tmp_path, scenario={})
    assert check(ctx, {}).status == "INCONCLUSIVE"


# ================================================================================== expect_loss
def test_no_lost_writes_expect_loss_lists_exactly_the_lost_ids(tmp_path):
    make_store(tmp_path / "home" / "state.db", ["a", "c"])
    h = H()
    for p in ("a", "b", "c", "d"):
        h.append("gateway-0", p)
    h.append("gateway-1", "e")
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {"expect_loss": True})
    assert v.status == PASS, v.to_dict()
    assert v.figures["lost_payload_ids"] == ["b", "d", "e"]
    assert v.figures["lost_by_process"] == {"gateway-0": 2, "gateway-1": 1}
    assert "3 acknowledged append(s) lost (b, d, e)" in v.summary
    assert {e["payload_id"] for e in v.evidence} == {"b", "d", "e"}


def test_no_lost_writes_expect_loss_is_not_green_when_nothing_was_lost(tmp_path):
    make_store(tmp_path / "home" / "state.db", ["a", "b"])
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "b")
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {"expect_loss": True})
    assert v.status == INCONCLUSIVE and "no acknowledged write was lost" in v.summary


def test_no_lost_writes_expect_loss_still_fails_a_phantom(tmp_path):
    make_store(tmp_path / "home" / "state.db", ["a", "x"])
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "b")
    h.append("gateway-0", "x", "fail", error="WriteContentionError")
    v = CHECKERS["no_lost_writes"](make_ctx(tmp_path, h.history()), {"expect_loss": True})
    assert v.status == FAIL and v.figures["phantom"] == 1
    assert v.figures["lost_payload_ids"] == ["b"]


def held_then_gave_up(hold_s: float, *, via_samples: bool = False):
    """A lock hold of ``hold_s`` seconds, and a writer that gives up 16.2 s into its wait,
    which started together with the hold."""
    def extra(h: H) -> None:
        start = h.t
        if via_samples:
            for k in range(int(hold_s * 10) + 1):
                h.t = start + k * 0.1
                h.add("sample", "sampler", write_lock={"pid": 4242, "process": "lock-0"})
            h.t = start + hold_s + 0.1
            h.add("sample", "sampler", write_lock=None)
        else:
            op_id = h.invoke("lock-0", "hold_lock", hold_s=hold_s)
            h.t = start + hold_s
            h.complete("lock-0", op_id, "ok")
        h.t = max(h.t, start + 16.2)
        h.event("gateway-0", "write_gave_up", attempts=15, waited_s=16.2,
                lock_owner="PID 4242 (lock-0)")
        h.append("gateway-0", "p-late", "fail", error="WriteContentionError",
                 message="could not write after 15 attempts", latency_s=16.2)
    return extra


@pytest.mark.parametrize("via_samples", [False, True])
def test_retry_jitter_a_lock_held_past_the_budget_justifies_the_give_up(tmp_path, via_samples):
    # SPEC §16.3: "no error reached a caller while the lock was held for LESS than the retry
    # budget": a 19 s hold outlasts 15 attempts of the 1 s busy timeout, so the error is honest.
    v = jitter(tmp_path, retry_history(uniform_sleeps(25),
                                       extra=held_then_gave_up(19.0, via_samples=via_samples)))
    assert v.status == PASS, v.to_dict()
    assert v.figures["lock_errors_justified"] == 1
    assert v.figures["write_gave_up_justified"] == 1
    assert v.figures["lock_errors_reaching_callers"] == 0


@pytest.mark.parametrize("via_samples", [False, True])
def test_retry_jitter_a_short_hold_does_not_justify_a_give_up(tmp_path, via_samples):
    v = jitter(tmp_path, retry_history(uniform_sleeps(25),
                                       extra=held_then_gave_up(3.0, via_samples=via_samples)))
    assert v.status == FAIL
    assert v.figures["lock_errors_reaching_callers"] == 1
    assert v.figures["write_gave_up"] == 1 and v.figures["write_gave_up_justified"] == 0
    # a tighter budget the 3 s hold does meet makes the same history honest
    assert jitter(tmp_path, retry_history(uniform_sleeps(25),
                                          extra=held_then_gave_up(3.0, via_samples=via_samples)),
                  budget_s=2.5).status == PASS
