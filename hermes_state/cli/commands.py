"""``hermes-state`` / ``python -m hermes_state``: the operator's command line (SPEC §15).

Argument parsing and printing only; the work is done by the store's modules. Human output by
default, ``--json`` where a machine reads it. Errors go to stderr in one or two lines that end
with the next step. Exit codes: 0 ok, 1 refusal or failure (or doctor found an issue), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

from ..errors import HermesStateError
from ..files.paths import owning_store
from . import manage as cli_manage
from .common import (
    DRY_RUN_HELP,
    EXIT_FAIL,
    EXIT_OK,
    JSON_HELP,
    SOURCE_HELP,
    CliError,
    open_ro,
    open_rw,
    print_json,
    require_store,
    safe_streams,
    shown,
    store_exists,
    store_path,
)
from .export import cmd_export, markdown
from .progress import progress_display


def cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor [--fix] [--json]`` (SPEC §9); returns 1 when something needs action."""
    from ..operator.doctor import run_doctor

    if getattr(args, "bundle", None) is not None:
        return cmd_bundle(args)
    with progress_display(args, "checking the store (holders, quick_check)"):
        report = run_doctor(store_path(args), fix=args.fix)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.render())
    return report.exit_code


def cmd_bundle(args: argparse.Namespace) -> int:
    """``doctor --bundle FILE`` (SPEC §9.4): one JSON file describing the store for a bug
    report, collected read-only; ``-`` writes it to stdout. Returns 0 once written."""
    from ..operator import bundle

    if args.fix:
        raise CliError("--bundle only reads: it cannot be combined with --fix",
                       "run `doctor --bundle FILE` first, then `doctor --fix` on its own")
    if args.bundle != "-":  # never a path a store owns: a lock file replaced splits the lock
        owned = owning_store(args.bundle, store_path(args))
        if owned:
            raise CliError(f"--bundle {args.bundle} is {owned[1]} (store {owned[0]}); writing "
                           "the bundle there would replace a file the store owns",
                           "give a path outside the store's files, or `--bundle -`")
    with progress_display(args, "collecting the bundle (files, processes, locks)"):
        found = bundle.make_bundle(store_path(args))
    try:
        path = bundle.write_bundle(found, args.bundle)
    except OSError as exc:
        raise CliError(f"cannot write the bundle to {args.bundle}: {exc.strerror or exc}",
                       "give a path on another disk (the store's may be full), or `--bundle -` "
                       "to print it") from None
    for line in bundle.summary_lines(found, path):
        print(line, file=sys.stderr)
    return EXIT_OK


def cmd_backup(args: argparse.Namespace) -> int:
    """``backup [create|list|restore ID]`` (SPEC §13); restore refuses under holders."""
    from ..operator import snapshots

    path = store_path(args)
    if args.action == "list":
        items = snapshots.list_snapshots(path)
        if args.json:
            print_json(items)
        else:
            for item in items:
                counts = ("" if item.get("sessions") is None else
                          f"  sessions={item.get('sessions')}  messages={item.get('messages')}")
                print(f"{item.get('id')}  {item.get('kind', 'snapshot')}  "
                      f"verified={item.get('verified')}{counts}")
            if items:
                print("restore one with `backup restore ID` after stopping every process using "
                      "the store")
            else:
                print("no snapshots")
        return EXIT_OK
    if args.action == "restore":
        if not args.id:
            raise CliError("backup restore needs a snapshot id", "list them with `backup list`")
        result = snapshots.restore_snapshot(path, args.id)
        print_json(result) if args.json else print(f"restored {args.id} into {path}")
        return EXIT_OK
    if not store_exists(path):
        raise CliError(f"no session store at {path}", "nothing to back up")
    with progress_display(args, "backup") as bar:
        result = snapshots.create_snapshot(path, reason=args.reason, progress=bar)
    if args.json:
        print_json(result)
    else:
        print(f"snapshot {result.get('path') or result.get('id')}: "
              f"verified={result.get('verified')}")
    return EXIT_OK if result.get("verified", True) else EXIT_FAIL


# --------------------------------------------------------------------------- sessions

def cmd_list(args: argparse.Namespace) -> int:
    """``sessions list``: newest first with preview; returns the exit code."""
    with open_ro(args) as db:
        rows = db.list_sessions(source=args.source, limit=args.limit, offset=args.offset)
    if args.json:
        print_json(rows)
        return EXIT_OK
    for r in rows:
        print(f"{shown(r.get('id'))}  {shown(r.get('source'), 9)} "
              f"{shown(r.get('message_count', 0), 5, right=True)} msgs  "
              f"{shown(r.get('title'), 30, cut=30)}  {shown(r.get('preview'))}")
    if not rows:
        print("no sessions")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """``sessions show ID``: one session and its messages; 1 when it does not exist."""
    with open_ro(args) as db:
        data = db.export_session(args.id)
    if data is None:
        raise CliError(f"no session {args.id!r}", "list them with `sessions list`")
    if args.json:
        print_json(data)
    else:
        print(markdown(data))
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    """``sessions search QUERY`` (SPEC §6): never raises for any query text."""
    if getattr(args, "by_id", False):
        return cli_manage.cmd_search_by_id(args)
    with open_ro(args) as db:
        hits = db.search_messages(args.query, source_filter=[args.source] if args.source else None,
                                  role_filter=[args.role] if args.role else None,
                                  limit=args.limit, offset=args.offset)
    if args.json:
        print_json(hits)
        return EXIT_OK
    for h in hits:
        print(f"{shown(h.get('session_id'))}  #{shown(h.get('id'))}  {shown(h.get('role'))}: "
              f"{shown(h.get('snippet'))}")
    if not hits:
        print("no matches")
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    """``sessions prune`` behind the live-writer gate, or handed to the owning gateway (§11)."""
    from ..processes import writer_gate as maintenance

    path = store_path(args)
    owner = maintenance.gateway_owner_pid(path) if store_exists(path) else None
    decision = maintenance.check_gate(path, "prune", force=args.force, dry_run=args.dry_run,
                                      gateway_owner_pid=owner)
    with open_ro(args) as ro:
        rows = ro.list_prune_candidates(older_than_days=args.older_than, source=args.source)
    preview = [r["id"] for r in rows]
    result: dict = {"older_than_days": args.older_than, "source": args.source,
                    "candidates": preview, "candidate_rows": rows, "action": decision.action}
    say = (lambda *a: None) if args.json else print  # noqa: E731
    say(f"{len(preview)} ended session(s) older than {args.older_than:g} days"
        + (f" from {args.source}" if args.source else "") + " would be pruned")
    for r in rows[:20]:
        say(f"  {shown(r.get('id'))}  {shown(r.get('source'), 9)} "
            f"{shown(r.get('message_count') or 0, 5, right=True)} msgs  "
            f"{shown(r.get('title'), cut=40)}")
    if len(preview) > 20:
        say(f"  ... and {len(preview) - 20} more")
    if decision.action == "dry_run":
        args.json and print_json(result)
        return EXIT_OK
    if decision.action == "handoff":
        with open_rw(args) as db:
            rid = maintenance.request_prune(db, older_than_days=args.older_than, source=args.source)
        result.update(request_id=rid, gateway_pid=decision.owner_pid)
        say(f"the gateway (PID {decision.owner_pid}) owns the store: prune handed to it as "
            f"request {rid}; it runs between turns and skips sessions with a turn in progress")
        args.json and print_json(result)
        return EXIT_OK
    if not args.yes and sys.stdin.isatty():
        answer = input("prune them? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing pruned")
            return EXIT_OK
    elif not args.yes:
        raise CliError("prune needs confirmation", "re-run with --yes (or --dry-run to preview)")
    # Decide again with the store's write lock held through the deletion (issue 11): a writer
    # that appeared since the preview (or the confirmation) is seen, or waits for the prune.
    with maintenance.gate_held(path, "prune", force=args.force,
                               gateway_owner_pid=owner) as decision:
        if decision.action == "handoff":
            with open_rw(args) as db:
                rid = maintenance.request_prune(db, older_than_days=args.older_than,
                                                source=args.source)
            result.update(action="handoff", request_id=rid, gateway_pid=decision.owner_pid)
            say(f"the gateway (PID {decision.owner_pid}) owns the store: prune handed to it as "
                f"request {rid}")
            args.json and print_json(result)
            return EXIT_OK
        with open_rw(args) as db, progress_display(args, "pruning (one transaction)"):
            n = db.prune_sessions(older_than_days=args.older_than, source=args.source)
    result["pruned"] = n
    say(f"pruned {n} session(s)")
    args.json and print_json(result)
    return EXIT_OK


def cmd_optimize(args: argparse.Namespace) -> int:
    """``sessions optimize`` behind the live-writer gate (SPEC §8, §11)."""
    from ..processes import writer_gate as maintenance

    path = require_store(args, "nothing to optimize")
    if args.dry_run:
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        print(f"would optimize {path} ({size} bytes): FTS merge, PASSIVE checkpoint, VACUUM, "
              "TRUNCATE checkpoint")
        return EXIT_OK
    with maintenance.gate_held(path, "optimize", force=args.force), open_rw(args) as db, \
            progress_display(args, "optimizing (FTS merge, checkpoint, VACUUM, TRUNCATE)"):
        result = maintenance.optimize(db)
    if args.json:
        print_json(result)
    else:
        print(f"optimized {path}: {result['before_bytes']} -> {result['after_bytes']} bytes")
    return EXIT_OK


def cmd_optimize_storage(args: argparse.Namespace) -> int:
    """``sessions optimize-storage`` (v23 FTS layout, resumable) behind the gate."""
    from ..processes import writer_gate as maintenance

    path = require_store(args, "nothing to optimize")
    from ..fts.switch import optimize_storage

    if args.dry_run:
        with open_ro(args) as ro:
            layout = ro.connection.read(lambda c: c.execute(
                "SELECT sql FROM sqlite_master WHERE name='messages_fts'").fetchone())
        external = bool(layout and "content='messages'" in (layout[0] or ""))
        print("nothing to do: already on the external-content layout" if external
              else "would move the FTS tables to the external-content layout and rebuild them")
        return EXIT_OK

    with maintenance.gate_held(path, "optimize-storage", force=args.force), \
            open_rw(args) as db, progress_display(args, "indexing messages") as bar:
        result = optimize_storage(db, progress=bar.update)
    print_json(result) if args.json else print(
        "nothing to do" if result.get("status") == "nothing to do"
        else f"optimize-storage done: {json.dumps(result, default=str)}")
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    """``sessions recover`` (SPEC §14): --inspect-only changes no byte; 0 when recoverable."""
    from ..operator.recover import recover

    source = _recover_source(args)
    if not args.inspect_only and not args.output:
        raise CliError("recover needs --inspect-only or --output NEW.db",
                       "start with --inspect-only: it changes no file")
    with progress_display(args, "recover") as bar:
        report = recover(source, output=args.output, inspect_only=args.inspect_only,
                         allow_partial=args.allow_partial, report=args.report, progress=bar,
                         protect=(store_path(args),))
    print_json(report)
    print(_recover_summary(report), file=sys.stderr)
    return EXIT_OK if report.get("recoverable") and not report.get("failed") else EXIT_FAIL


def _recover_source(args: argparse.Namespace) -> str:
    """The one FILE of ``recover``: positional, ``--from``, or the deprecated ``--source`` (which
    warns: everywhere else ``--source`` is a session's platform)."""
    given = [v for v in (args.file, args.from_file, args.source_file) if v is not None]
    if args.source_file is not None:
        print("warning: `sessions recover --source FILE` is deprecated (--source means a "
              "session source elsewhere); write `sessions recover FILE`", file=sys.stderr)
    if not given:
        raise CliError("recover needs the FILE to work on",
                       "`sessions recover STATE.DB --inspect-only` (it changes no file)")
    if len(set(given)) > 1:
        raise CliError(f"recover got two files: {' and '.join(given)}", "give one FILE")
    return given[0]


def _recover_summary(report: dict) -> str:
    """Two or three human lines for stderr (stdout keeps the JSON report alone, SPEC §14)."""
    tables = report.get("tables") or {}
    counts = ", ".join(
        f"{name} {t.get('rows')} rows" + (f" ({t.get('unreadable_rows')} unreadable)"
                                          if t.get("unreadable_rows") else "")
        for name, t in tables.items() if name in ("sessions", "messages"))
    verdict = ("recoverable" if report.get("recoverable") and not report.get("failed")
               else "NOT recoverable" if not report.get("recoverable") else "failed")
    lines = [f"{report.get('operation')}: {verdict}: {counts or 'no table readable'}; "
             f"source unchanged: {report.get('source_unchanged')}"]
    if report.get("failure"):
        lines.append(f"failure: {report['failure']}")
    if report.get("next_step"):
        lines.append(f"next: {report['next_step']}")
    return "\n".join(lines)


def cmd_replay_spool(args: argparse.Namespace) -> int:
    """``sessions replay-spool`` (SPEC §10.1): exactly once; 1 when a record failed."""
    from ..api.spool import replay_spool

    require_store(args, "replay-spool imports into an existing store")
    # --dry-run only counts: read-only, so it never migrates or writes the store (issue 22.6)
    with (open_ro(args) if args.dry_run else open_rw(args)) as db:
        result = replay_spool(db, dry_run=args.dry_run)
    print_json(result) if args.json else print(
        f"imported {result['imported']} message(s), {result['skipped']} already imported, "
        f"{result['failed']} failed from {result['files']} spool file(s)")
    if result["failed"] and not args.json:
        for line in result["errors"][:20]:
            print(f"  not imported: {line}", file=sys.stderr)
        print("the spool files are kept: fix or remove those lines, then run replay-spool "
              "again (what was imported is never imported twice)", file=sys.stderr)
    return EXIT_OK if not result["failed"] else EXIT_FAIL


def cmd_salvage(args: argparse.Namespace) -> int:
    """``sessions salvage [CAPTURE_DIR...] [--apply] [--allow-foreign]``: what retired-WAL
    captures hold that the store lacks; ``--apply`` appends it in one transaction behind the
    gate (issue 16). A capture of another store is refused unless ``--allow-foreign``; rows that
    cannot be added are listed with why, and the exit code is then 1 (issue 22 item 5)."""
    from ..operator import salvage

    path = require_store(args, "salvage appends into an existing store")
    captures = [Path(c) for c in args.capture] or salvage.captures_beside(path)
    if not captures:
        raise CliError(f"no retired-WAL capture beside {path}",
                       "name one: `sessions salvage DIR` (doctor lists them)")
    if args.apply and not args.dry_run:
        results = salvage.apply_captures(path, captures, force=args.force,
                                         allow_foreign=args.allow_foreign)
        failed = [row for res in results for row in res["not_salvaged"]]
        if args.json:
            print_json(results)
            return EXIT_FAIL if failed else EXIT_OK
        for res in results:
            plan = res["plan"]
            print(f"{Path(plan['capture']).name}: appended {res['messages_added_total']} "
                  f"message(s) and {len(res['sessions_added'])} session(s) "
                  f"({plan['matched_messages']} of {plan['capture_messages']} were already in "
                  "the store)")
            if res["record_key"]:
                print(f"  recorded in state_meta as {res['record_key']}")
            _print_not_salvaged(res["not_salvaged"], "not salvaged")
        return EXIT_FAIL if failed else EXIT_OK
    plans = [salvage.plan_capture(path, c, allow_foreign=args.allow_foreign).to_dict()
             for c in captures]
    if args.json:
        print_json(plans)
        return EXIT_OK
    for plan in plans:
        print(f"{Path(plan['capture']).name} (captured {plan['captured_at']} by PID "
              f"{plan['captured_by_pid']}, {plan['trigger']}): {plan['capture_sessions']} "
              f"session(s), {plan['capture_messages']} message(s), "
              f"{plan['matched_messages']} already in the store")
        if plan["identity"].get("allowed_foreign"):
            print(f"  a capture of ANOTHER store (token {plan['identity']['capture_token']}; "
                  f"this store: {plan['identity']['store_token']}), compared as asked "
                  "(--allow-foreign)")
        _print_not_salvaged(plan["not_salvageable"], "cannot be salvaged")
        if not plan["missing_messages"] and not plan["missing_sessions"]:
            print("  the store has every session and message of this capture: nothing to salvage")
            continue
        print(f"  the store lacks {plan['missing_messages']} message(s) and "
              f"{len(plan['missing_sessions'])} whole session(s):")
        for s in plan["by_session"]:
            new = " (new session)" if s["new_session"] else ""
            print(f"    {s['session_id']}{new}: {s['messages']} message(s), first "
                  f"{s['first']['role']}: {s['first']['content']!r}")
        for d in plan["differing_sessions"]:
            print(f"  not applied: session {d['id']} differs in {', '.join(d['fields'])}")
    if any(p["missing_messages"] or p["missing_sessions"] for p in plans):
        print("append them with `hermes-state sessions salvage "
              + " ".join(str(c) for c in args.capture) + (" " if args.capture else "")
              + ("--allow-foreign " if args.allow_foreign else "")
              + "--apply` after stopping every process using the store")
    return EXIT_OK


def _print_not_salvaged(rows: list[dict], what: str) -> None:
    """One line per capture row that cannot be (or was not) added, with why (stderr)."""
    for row in rows[:200]:
        where = (f"message #{row['capture_row_id']} ({row['role']}) of session "
                 f"{row['session_id']!r}" if row["table"] == "messages"
                 else f"session {row['session_id']!r}")
        print(f"  {what}: {where}: {row['why']}", file=sys.stderr)
    if len(rows) > 200:
        print(f"  ... and {len(rows) - 200} more (--json lists every one)", file=sys.stderr)


# --------------------------------------------------------------------------- parser

class _Subparsers:
    """``add_subparsers()`` whose every parser also takes the common ``--home``/``-p``."""

    def __init__(self, action, common: argparse.ArgumentParser) -> None:
        self._action, self._common = action, common

    def add_parser(self, name: str, **kw) -> argparse.ArgumentParser:
        return self._action.add_parser(name, parents=[self._common], **kw)


class _VersionAction(argparse.Action):
    """``--version``, resolved only when asked (importlib.metadata is not imported otherwise)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {_version()}")
        parser.exit()


#: Largest limit/offset: SQLite's integer range (a larger one cannot even be bound).
MAX_COUNT = 2 ** 63 - 1
#: Largest --older-than: about 2 700 years; beyond it a cutoff date means nothing.
MAX_DAYS = 1_000_000.0


def _count(text: str) -> int:
    """argparse type: an integer from 0 to :data:`MAX_COUNT` (a limit or an offset).

    Anything else (negative, huge, NaN, a float, not a number) is a usage error (exit 2),
    never a traceback (issue 11.11).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if not 0 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"expected an integer from 0 to {MAX_COUNT}, got {text!r}")
    return value


def _days(text: str) -> float:
    """argparse type: a finite number of days from 0 to :data:`MAX_DAYS` (``--older-than``)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_DAYS:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of days from 0 to {MAX_DAYS:g}, got {text!r}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hermes-state")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``hermes-state`` argument parser (SPEC §15): --home/-p before or after the subcommand."""
    p = argparse.ArgumentParser(prog="hermes-state", description="Operate a hermes session store.")
    p.add_argument("--home", help="HERMES_HOME to use (default: $HERMES_HOME or ~/.hermes)")
    p.add_argument("-p", "--profile", help="named profile under <home>/profiles/<name>")
    p.add_argument("--version", action=_VersionAction, nargs=0, help="print the version and exit")
    p.add_argument("--progress", action="store_true", default=False,
                   help="show progress on stderr even when it is not a terminal")
    # The recovery guide writes `doctor -p <profile>`: every subcommand takes --home/-p too
    # (SUPPRESS keeps a value given before the subcommand when it is not repeated after it).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS,
                        help="HERMES_HOME to use (default: $HERMES_HOME or ~/.hermes)")
    common.add_argument("-p", "--profile", default=argparse.SUPPRESS,
                        help="named profile under <home>/profiles/<name>")
    common.add_argument("--progress", action="store_true", default=argparse.SUPPRESS,
                        help="show progress on stderr even when it is not a terminal (long "
                             "commands show it by themselves on a terminal after 2 s)")
    sub = _Subparsers(p.add_subparsers(dest="cmd", required=True), common)

    doc = sub.add_parser("doctor", help="check the store; exit 1 when something needs action")
    doc.add_argument("--fix", action="store_true", help="do the safe repairs when nothing holds it")
    doc.add_argument("--json", action="store_true", help=JSON_HELP)
    doc.add_argument("--bundle", metavar="FILE", default=None,
                     help="write one JSON file describing the store for a bug report (no "
                          "message text; read-only; `-` prints it) instead of the checks")
    doc.set_defaults(fn=cmd_doctor)

    bk = sub.add_parser("backup", help="snapshot the store (or list / restore snapshots)")
    bk.add_argument("action", nargs="?", choices=("create", "list", "restore"), default="create",
                    help="create a snapshot (default), list them, or restore one by id")
    bk.add_argument("id", nargs="?", help="snapshot id for restore")
    bk.add_argument("--reason", default="manual", help="snapshot reason (pre-update: emergency copy)")
    bk.add_argument("--json", action="store_true", help=JSON_HELP)
    bk.set_defaults(fn=cmd_backup)

    ses = sub.add_parser("sessions", help="list, show, search, export, import, archive, unarchive, prune, optimize, optimize-storage, recover, salvage, replay-spool")
    ss = _Subparsers(ses.add_subparsers(dest="sub", required=True), common)
    ls = ss.add_parser("list", help="sessions, newest first, with a preview")
    ls.add_argument("--source", help=SOURCE_HELP)
    ls.add_argument("--limit", type=_count, default=20, help="at most this many (default 20)")
    ls.add_argument("--offset", type=_count, default=0, help="skip this many first (default 0)")
    ls.add_argument("--json", action="store_true", help=JSON_HELP)
    ls.set_defaults(fn=cmd_list)
    sh = ss.add_parser("show", help="one session and its messages")
    sh.add_argument("id", help="the session id (see `sessions list`)")
    sh.add_argument("--json", action="store_true", help=JSON_HELP)
    sh.set_defaults(fn=cmd_show)
    se = ss.add_parser("search", help="full-text search (FTS5 syntax is sanitised)")
    se.add_argument("query", help="words to find; any text is accepted (FTS5 syntax is "
                    "sanitised, never an error)")
    se.add_argument("--source", help=SOURCE_HELP)
    se.add_argument("--role", help="only messages of this role (user, assistant, tool, system)")
    se.add_argument("--limit", type=_count, default=20, help="at most this many hits (default 20)")
    se.add_argument("--offset", type=_count, default=0, help="skip this many first (default 0)")
    se.add_argument("--id", action="store_true", dest="by_id",
                    help="QUERY is (part of) a session id: list the matching sessions")
    se.add_argument("--json", action="store_true", help=JSON_HELP)
    se.set_defaults(fn=cmd_search)
    ex = ss.add_parser("export", help="export one session (or all) as json, jsonl or md")
    ex.add_argument("id", nargs="?", help="the session to export (default: every session)")
    ex.add_argument("--source", help=SOURCE_HELP)
    ex.add_argument("--format", choices=("json", "jsonl", "md"), default="json",
                    help="json (one array, default), jsonl (one session per line) or md")
    ex.add_argument("--output", "-o", help="file to write (a new or replaced regular file, or a "
                    "FIFO); `-` or nothing: stdout. Never one of the store's files")
    ex.set_defaults(fn=cmd_export)
    pr = ss.add_parser("prune", help="delete ended sessions older than --older-than days")
    pr.add_argument("--older-than", type=_days, default=90.0, metavar="DAYS",
                    help="ended more than this many days ago (default 90)")
    pr.add_argument("--source", help=SOURCE_HELP)
    pr.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    pr.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    pr.add_argument("--force", action="store_true", help="skip the live-writer gate")
    pr.add_argument("--json", action="store_true", help=JSON_HELP)
    pr.set_defaults(fn=cmd_prune)
    for name, fn in (("optimize", cmd_optimize), ("optimize-storage", cmd_optimize_storage)):
        op = ss.add_parser(name, help=(
            "FTS optimize, VACUUM, TRUNCATE checkpoint (gated)" if name == "optimize"
            else "move the FTS index to the external-content layout (gated, resumable)"))
        op.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
        op.add_argument("--force", action="store_true", help="skip the live-writer gate")
        op.add_argument("--json", action="store_true", help=JSON_HELP)
        op.set_defaults(fn=fn)
    rc = ss.add_parser("recover", help="inspect or salvage a damaged store (never in place)")
    rc.add_argument("file", nargs="?", metavar="FILE",
                    help="the damaged store, a *.bak copy or DIR/state.db of a retired-WAL "
                    "capture (worked on as a copy; never changed)")
    rc.add_argument("--from", dest="from_file", metavar="FILE", help="the same as FILE")
    rc.add_argument("--source", dest="source_file", metavar="FILE",
                    help="deprecated spelling of FILE (elsewhere --source is a session source)")
    rc.add_argument("--inspect-only", action="store_true",
                    help="report what is readable as JSON; change no file")
    rc.add_argument("--output", metavar="NEW.db", help="build a fresh store at this new path "
                    "from every readable row (never swapped into place)")
    rc.add_argument("--allow-partial", action="store_true",
                    help="skip unreadable row ranges instead of failing")
    rc.add_argument("--report", metavar="R.json", help="also write the JSON report to this file")
    rc.set_defaults(fn=cmd_recover)
    sv = ss.add_parser("salvage", help="bring back the messages a retired-WAL capture holds "
                       "that the store lacks (--apply; gated)")
    sv.add_argument("capture", nargs="*", metavar="CAPTURE_DIR",
                    help="a state.db.retired-wal-<UTCSTAMP>-<pid>/ directory (default: every "
                    "capture beside the store, oldest first)")
    sv.add_argument("--apply", action="store_true", help="append the missing sessions and "
                    "messages in one transaction (refused while another process holds the store)")
    sv.add_argument("--dry-run", action="store_true", help="only list (the default without "
                    "--apply; wins over --apply)")
    sv.add_argument("--force", action="store_true", help="skip the live-writer gate")
    sv.add_argument("--allow-foreign", action="store_true",
                    help="also salvage a capture taken from ANOTHER store (its token differs "
                    "from this store's: another profile, or this store was rebuilt since)")
    sv.add_argument("--json", action="store_true", help=JSON_HELP)
    sv.set_defaults(fn=cmd_salvage)
    rs = ss.add_parser("replay-spool", help="import spooled (refused) messages exactly once")
    rs.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    rs.add_argument("--json", action="store_true", help=JSON_HELP)
    rs.set_defaults(fn=cmd_replay_spool)
    cli_manage.register(ss, _days)
    return p


def _refusal_dict(exc: HermesStateError) -> dict:
    """``--json`` form of a refusal: ``{"refused", "error", "message", "detail", "holders":
    [{"pid", "command", "files"}], "scan_complete"}`` (the text still goes to stderr)."""
    found = []
    for h in getattr(exc, "holders", None) or []:
        pid, command, files = h.as_tuple() if hasattr(h, "as_tuple") else h
        found.append({"pid": pid, "command": command, "files": list(files)})
    unreadable = getattr(exc, "unreadable", None)
    incomplete = getattr(exc, "incomplete", None)
    complete = (not unreadable) if unreadable is not None else (
        None if incomplete is None else not incomplete)
    return {"refused": True, "error": type(exc).__name__, "message": exc.user_message,
            "detail": exc.operator_detail, "holders": found, "scan_complete": complete}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hermes-state`` console script. Returns the exit code."""
    safe_streams()
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.next_step:
            print(f"next: {exc.next_step}", file=sys.stderr)
        return EXIT_FAIL
    except HermesStateError as exc:
        print(str(exc), file=sys.stderr)
        if getattr(args, "json", False):
            print_json(_refusal_dict(exc))
        return EXIT_FAIL
    except BrokenPipeError:
        # The reader went away (`hermes-state doctor | head`): not an error of the store.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAIL
    except PermissionError as exc:
        from ..files.paths import permission_error

        err = permission_error(exc.filename) if exc.filename else None
        print(f"error: {err.user_message if err else exc}", file=sys.stderr)
        fix = err.operator_detail.removeprefix("fix: ") if err else "run as the store's owner"
        print(f"next: {fix}", file=sys.stderr)
        return EXIT_FAIL
    except (sqlite3.Error, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("next: run `hermes-state doctor` to see the state of the store", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
