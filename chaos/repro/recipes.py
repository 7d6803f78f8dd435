"""One recipe per lockup class: the roles, fault and checkers that make its state again and judge
it by the user's symptom (issue 25). Shared parts are in :mod:`.build`."""

from __future__ import annotations

from .build import (
    Draft,
    Entry,
    client_roles,
    ensure_writer,
    proc_ref,
    store_entry,
    terminate_all,
)
from .cases import BIG_WAL_FRAMES, REPLAYED_COMMANDS, Case
from .source import Bundle

#: The user's patience in the stall classes: a write that waits longer is the reported lockup.
STALL_BOUND = "2s"
#: Appends a writer makes while a reader pins the WAL before the reader ends (about 12 frames
#: each: far past :data:`BIG_WAL_FRAMES`).
PINNED_APPENDS = 400


def _guards(draft: Draft, *, allow_in: list[str] | None = None) -> None:
    """The checkers that show nothing was lost beside the symptom."""
    draft.expect.append(("no_lost_writes", {"allow_in": allow_in} if allow_in else {},
                         ["and nothing acknowledged is lost"]))
    draft.expect.append(("integrity", {}, ["and the store stays intact"]))


def sidecar(b: Bundle, case: Case) -> Draft:
    i = case.key[0]
    p = b.processes[i]
    retired = case.detail["retired"]
    d = Draft(case, "repro-sidecar-under-live-holder",
              "A sidecar of the store was deleted or replaced while a process still held it: "
              "that process holds a retired WAL generation, refuses every write from then on "
              "(nothing is lost: it captures its WAL and spools) and new processes refuse to "
              "open. Made from a user's bundle by `python -m chaos repro`.",
              "error_taxonomy", "writes refused with DeletedWalGenerationError ('session "
              "storage stopped writing because another process still holds a deleted "
              "state.db-wal')")
    s, why, missing = store_entry(b)
    d.store, d.not_inferred = Entry(s, why), d.not_inferred + missing
    role = p.get("role") if p.get("role") in ("gateway", "cli", "cron", "desktop") else "holder"
    holder = "holder"
    d.roles.append(Entry({"name": holder, "kind": "gateway", "count": 1,
                          "workload": {"appends_per_s": 50}},
                         [f"the process holding the retired generation ({role}): "
                          + proc_ref(b, i, "retired", "role"),
                          "a gateway: it lived across the deletion and kept writing"]))
    others = client_roles(b, d, {i})
    main_files = [f for f in retired if f.split(" ")[0].endswith(".db")]
    sidecars = sorted({"wal" if "-wal" in f else "shm" for f in retired if f not in main_files})
    renamed = [f for f in retired if not f.endswith(("(deleted)", "(replaced)"))]
    fault: dict
    if main_files:
        fault = {"fault": "replace_db", "how": "mv", "source": "other"}
        what = f"state.db itself was replaced ({', '.join(main_files)})"
    elif renamed:
        fault = {"fault": "rename_sidecars", "files": sidecars or ["wal"]}
        what = f"a sidecar was renamed aside ({', '.join(renamed)})"
    else:
        fault = {"fault": "delete_sidecars", "files": sidecars or ["wal", "shm"]}
        what = f"{', '.join(retired)}: deleted at the path, still open in the holder"
    d.nemesis.append(Entry({"after": {"role": holder, "ok": 60}, **fault},
                           [what + ": " + b.ref("processes", "processes", i, "retired"),
                            "after the holder's 60th write (its cadence checkpoint at the 50th "
                            "has run): a live, writing holder"]))
    if any("(replaced)" in f for f in retired):
        d.not_inferred.append("whether the sidecar was replaced by a file of its own or by an "
                              "opener that created a new one after a deletion: deleted here")
    d.nemesis.append(Entry({"after": {"step": 0, "delay": "1.5s"}, "fault": "terminate",
                            "role": holder},
                           ["the holder keeps refusing for 1.5 s, then stops (the operator's "
                            "first step: stop every process)"]))
    terminate_all(d, 1, "0.5s", others)
    d.expect.append(("error_taxonomy", {}, [
        "the user's symptom: the holder's writes are refused (DeletedWalGenerationError "
        "reaches it). FAILS by design: the store refuses rather than write into a generation "
        "nobody else sees"]))
    d.expect.append(("stale_wal_refusal", {"holder": holder},
                     ["and the refusal is the right one: a capture, new openers refuse, a "
                      "writer works once the holder is gone"]))
    _guards(d, allow_in=["capture", "spool"])
    d.must_observe = [fault["fault"], "refusal"]
    d.fix = ("stop every process of the profile (doctor names the holders), start one again; "
             "`sessions salvage CAPTURE --apply` and `sessions replay-spool` bring back what "
             "the refusing process held")
    return d


def stopped_owner(b: Bundle, case: Case) -> Draft:
    i = case.key[0]
    p = b.processes[i]
    locks = case.detail["locks"]
    d = Draft(case, "repro-stopped-lock-owner",
              "A process was stopped (SIGSTOP, a debugger, a suspended session) while it held a "
              "lock every writer needs: the other writers wait until it is resumed. Made from a "
              "user's bundle by `python -m chaos repro`.",
              "no_lockup", "writes hang (and give up after 15 attempts) while a stopped process "
                           "holds the lock")
    s, why, missing = store_entry(b)
    d.store, d.not_inferred = Entry(s, why), d.not_inferred + missing
    client = p.get("role") in ("gateway", "cli", "cron", "desktop")
    held_why = [f"stopped holding {', '.join(locks)}: " + proc_ref(b, i, "state", "holds")]
    if client:
        d.roles.append(Entry({"name": "holder", "kind": "gateway", "count": 1,
                              "workload": {"appends_per_s": 20}},
                             held_why + ["a client of the store (its role), frozen inside its "
                                         "own transaction by a failpoint, then stopped"]))
    else:
        d.roles.append(Entry({"name": "holder", "kind": "lock_holder", "count": 1,
                              "workload": {"first_at": "0.5s", "hold": "20s", "every": "30s"}},
                             held_why + ["not a client of the store: a bare SQLite connection "
                                         "holding BEGIN IMMEDIATE stands for it"]))
    writers = ensure_writer(d, client_roles(b, d, {i}))
    if client:
        point = "checkpoint.locked" if case.detail["checkpointing"] else "write.before_commit"
        d.nemesis.append(Entry(
            {"after": {"role": "holder", "ok": 10}, "fault": "arm_failpoint", "role": "holder",
             "failpoint": point, "action": "sleep(1500)@1"},
            [f"{point}: the holder stops inside "
             + ("a checkpoint (it held the checkpoint lock exclusively)" if point.startswith(
                 "checkpoint") else "a write transaction (it held the write lock)")]))
        d.nemesis.append(Entry({"after": {"event": "failpoint", "role": "holder"},
                                "fault": "stop", "role": "holder"},
                               [f"SIGSTOP while it holds the lock: {b.ref('processes', 'processes', i, 'state')}"]))
        stop = 1
    else:
        d.nemesis.append(Entry({"after": {"event": "retry"}, "fault": "stop", "role": "holder"},
                               ["SIGSTOP once a writer meets its lock (the first retry): "
                                + b.ref("processes", "processes", i, "state")]))
        stop = 0
    d.nemesis.append(Entry({"after": {"step": stop, "delay": "3s"}, "fault": "cont",
                            "role": "holder"},
                           ["resumed after 3 s (the bundle cannot tell how long it stayed "
                            "stopped)"]))
    terminate_all(d, stop + 1, "1s", ["holder"] + writers)
    d.expect.append(("no_lockup", {"bound": STALL_BOUND, "scale_with_load": False}, [
        f"the user's symptom: writes wait longer than {STALL_BOUND} (the user's patience "
        "cannot be inferred, and is not stretched by the machine's load); the verdict names "
        "the stopped lock owner"]))
    _guards(d)
    d.must_observe = ["stop"]
    d.fix = ("resume or stop the stopped process: `kill -CONT PID` (or end it); doctor names "
             "it (`checkpoint lock held by PID N ... stopped`)")
    return d


def full_disk(b: Bundle, case: Case) -> Draft:
    d = Draft(case, "repro-full-disk",
              "The filesystem of the store filled up: every commit that must grow the WAL "
              "fails with 'database or disk is full' until room is made. Made from a user's "
              "bundle by `python -m chaos repro`.",
              "error_taxonomy", "writes fail with 'database or disk is full'")
    s, why, missing = store_entry(b, tmpfs="16M", cap=1000)
    why.append(f"{case.detail['free']} bytes free on the store's filesystem: "
               f"{b.ref('store', 'disk', 'free_bytes')}: the store is put on a 16 MiB tmpfs "
               "that a balloon file fills")
    d.store, d.not_inferred = Entry(s, why), d.not_inferred + missing + [
        "the size of the user's filesystem and what filled it"]
    writers = ensure_writer(d, client_roles(b, d, set()))
    d.nemesis.append(Entry({"after": {"role": writers[0], "ok": 20}, "fault": "fill_disk"},
                           ["fill the filesystem while the writers write: "
                            + b.ref("store", "disk")]))
    d.nemesis.append(Entry({"after": {"step": 0, "delay": "1.5s"}, "fault": "free_disk"},
                           ["then make room (the operator's fix)"]))
    terminate_all(d, 1, "1s", writers)
    d.expect.append(("error_taxonomy", {}, [
        "the user's symptom: writes fail with SQLITE_FULL ('database or disk is full')"]))
    _guards(d)
    d.must_observe = ["fill_disk"]
    d.fix = ("free space on the store's filesystem (nothing acknowledged was lost; writes "
             "resume by themselves); `doctor` shows the sizes")
    return d


def maintenance(b: Bundle, case: Case) -> Draft:
    i = case.key[0]
    command, ours = case.detail["command"], case.detail["ours"]
    d = Draft(case, "repro-maintenance-beside-writer",
              "A maintenance command held the store's write lock beside a live writer: the "
              "writer's turns wait until it is done. Made from a user's bundle by `python -m "
              "chaos repro`.", "no_lockup",
              "the writer's turns hang while the maintenance command holds the store")
    s, why, missing = store_entry(b)
    d.store, d.not_inferred = Entry(s, why), d.not_inferred + missing + [
        "how long the command held the store (a failpoint or a lock holder stretches it to "
        "3 s, the same on any machine)"]
    writers = ensure_writer(d, client_roles(b, d, {i}))
    cite = proc_ref(b, i, "maintenance", "holds")
    if ours and command in REPLAYED_COMMANDS:
        d.nemesis.append(Entry(
            {"after": {"role": writers[0], "ok": 20}, "fault": "run", "command": command,
             "force": True, "failpoints": "cmd.maintenance.locked=sleep(3000)@1"},
            [f"`sessions {command}` beside the writer: {cite}",
             "force: true: whether the user forced it or started it on a quiet store before the "
             "writer opened, the writer waits the same way; the failpoint keeps the store's "
             "write lock held 3 s"]))
        d.must_observe = ["run"]
        last = 0
    else:
        d.roles.append(Entry({"name": "maintenance", "kind": "lock_holder", "count": 1,
                              "workload": {"first_at": "1s", "hold": "3s", "every": "60s"}},
                             [f"{command or 'a maintenance command'} the toolkit does not run "
                              f"as such: {cite}",
                              "a bare SQLite connection holding the write lock 3 s stands for "
                              "it"]))
        d.nemesis.append(Entry({"after": {"role": "maintenance", "ok": 1, "op": "hold_lock"},
                                "fault": "terminate", "role": "maintenance"},
                               ["its hold is over"]))
        last = 0
    terminate_all(d, last, "0.5s", writers)
    d.expect.append(("no_lockup", {"bound": STALL_BOUND, "scale_with_load": False}, [
        f"the user's symptom: the writer's turns wait longer than {STALL_BOUND} while the "
        "command holds the store"]))
    _guards(d)
    d.fix = ("run maintenance with every writer stopped (gateway stop, quit the desktop app, "
             "pause cron): without --force the gated commands refuse under a live writer")
    return d


def long_reader(b: Bundle, case: Case, *, starved: bool = False) -> Draft:
    name = "repro-checkpoint-starvation" if starved else "repro-long-reader"
    d = Draft(case, name,
              ("Read transactions overlap without end: at every moment some reader holds a "
               "read mark, so the WAL never restarts and grows while writers go on."
               if starved else
               "A read transaction stayed open: checkpoints cannot copy frames past its "
               "snapshot and the WAL cannot restart, so it grows while writers go on.")
              + " Made from a user's bundle by `python -m chaos repro`.",
              "wal_growth", "state.db-wal grows without end (disk use, slow reads)")
    s, why, missing = store_entry(b)
    d.store, d.not_inferred = Entry(s, why), d.not_inferred + missing
    readers = case.key
    writers = ensure_writer(d, client_roles(b, d, set(readers), rate=100), rate=100,
                            gateway=True)
    facts = list(case.facts)
    if starved:
        k = min(max(2, len(readers)), 4)
        period = 1.3
        names = []
        for j in range(k):
            rname = f"reader-{j + 1}"
            names.append(rname)
            d.roles.append(Entry(
                {"name": rname, "kind": "long_reader", "count": 1,
                 "workload": {"first_at": f"{0.3 + j * period / k:.2f}s", "hold": "1s",
                              "every": f"{period}s"}},
                (facts if j == 0 else []) + ([f"{len(readers)} reader process(es) in the "
                                              f"bundle, {k} here (at least 2, at most 4); "
                                              "staggered so one is always reading"]
                                             if j == 0 else [])))
    else:
        names = ["reader"]
        d.roles.append(Entry({"name": "reader", "kind": "long_reader", "count": 1,
                              "workload": {"first_at": "0.3s", "hold": "25s", "holds": 1}},
                             facts + ["one read transaction held until the writers wrote "
                                      f"{PINNED_APPENDS} messages"]))
    d.nemesis.append(Entry({"after": {"role": writers[0], "ok": PINNED_APPENDS},
                            "fault": "terminate", "role": names[0]},
                           [f"after {PINNED_APPENDS} writes (about 12 WAL frames each) the "
                            "reader" + ("s stop" if starved else " ends its transaction")]))
    for extra in names[1:]:
        d.nemesis.append(Entry({"after": {"step": 0}, "fault": "terminate", "role": extra}, []))
    terminate_all(d, len(names) - 1, "1s", writers)
    d.expect.append(("wal_growth", {"max_frames": BIG_WAL_FRAMES}, [
        f"the user's symptom: the WAL grows past {BIG_WAL_FRAMES} frames (the store "
        "checkpoints every 50 writes); the verdict names the readers that pinned it"]))
    _guards(d)
    d.fix = ("end the long read transactions (doctor names the processes holding read marks); "
             "the next checkpoints copy the WAL back and it restarts from its beginning")
    return d


RECIPES = {"sidecar": sidecar, "stopped_owner": stopped_owner, "full_disk": full_disk,
           "maintenance": maintenance, "long_reader": long_reader,
           "starved": lambda b, c: long_reader(b, c, starved=True)}
