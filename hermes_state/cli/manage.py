"""``hermes-state sessions archive|unarchive|import`` and ``search --id`` (issue 17 item 4):
parsing and printing only; the store's methods decide (UPSTREAM_API §2.5, §2.8).

Exit codes as the rest of the CLI: 0 ok, 1 refusal or failure, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import common as cli

#: ``sessions import`` reads at most this much (the import's own total limit is 25 MiB).
IMPORT_FILE_LIMIT = 32 * 1024 * 1024


def _resolve(db, given: str) -> str:
    sid = db.resolve_session_id(given)
    if sid is None:
        raise cli.CliError(f"no single session matches {given!r}",
                           "list them with `sessions list` or `sessions search --id`")
    return sid


def cmd_archive(args: argparse.Namespace) -> int:
    """``sessions archive [ID] [--older-than D] [--source S] [--dry-run]``: hide a session (and
    its compression lineage) from the default listing, or every ended session older than D."""
    archived = args.sub == "archive"
    if args.id is None:
        if not archived:
            raise cli.CliError("unarchive needs a session id", "find it with `sessions list "
                                                               "--json` or `search --id`")
        if args.older_than is None:
            raise cli.CliError("archive needs a session id or --older-than DAYS",
                               "preview with `sessions archive --older-than 90 --dry-run`")
        with cli.open_ro(args) as ro:
            rows = ro.list_prune_candidates(older_than_days=args.older_than, source=args.source,
                                            archived=False)
        if args.dry_run:
            return _report(args, {"would_archive": [r["id"] for r in rows]},
                           f"{len(rows)} session(s) would be archived")
        cli.require_store(args, "nothing to archive")
        with cli.open_rw(args) as db:
            n = db.archive_sessions(older_than_days=args.older_than, source=args.source)
        return _report(args, {"archived": n}, f"archived {n} session(s) (with their lineage)")
    cli.require_store(args, "nothing to archive")
    with cli.open_rw(args) as db:
        sid = _resolve(db, args.id)
        changed = db.set_session_archived(sid, archived)
    verb = "archived" if archived else "unarchived"
    return _report(args, {"id": sid, verb: changed},
                   f"{verb} {sid} (and its compression lineage)")


def _report(args: argparse.Namespace, obj: dict, line: str) -> int:
    cli.print_json(obj) if getattr(args, "json", False) else print(line)
    return cli.EXIT_OK


def _load_sessions(path: str) -> list:
    """A JSON list of sessions, one session object, or JSON lines (``export --format
    jsonl``)."""
    from ..files import atomic

    try:
        raw = atomic.read_regular(path, limit=IMPORT_FILE_LIMIT).decode("utf-8")
    except (OSError, ValueError) as exc:
        raise cli.CliError(f"cannot read {path}: {exc}", "give an export file "
                           "(`sessions export --format json|jsonl`)") from None
    try:
        data: Any = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
        try:
            data = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except (ValueError, RecursionError) as exc:
            raise cli.CliError(f"{path} is neither JSON nor JSON lines ({exc})",
                               "give an export file (`sessions export --format json|jsonl`)"
                               ) from None
    return [data] if isinstance(data, dict) else data


def cmd_import(args: argparse.Namespace) -> int:
    """``sessions import FILE [--force] [--json]``: import exported sessions (validated first:
    an invalid file writes nothing); behind the live-writer gate."""
    sessions = _load_sessions(args.file)
    if not isinstance(sessions, list):
        raise cli.CliError(f"{args.file} holds no session list", "give an export file")
    with cli.open_rw(args) as db:
        result = db.import_sessions(sessions, force=args.force)
    if args.json:
        cli.print_json(result)
    elif result["ok"]:
        print(f"imported {result['imported']} session(s), skipped {result['skipped']} already "
              f"present, {result['detached']} without their parent")
    if not result["ok"]:
        if not args.json:
            for err in result["errors"][:20]:
                sid = f" ({err['session_id']})" if err.get("session_id") else ""
                print(f"  entry {err['index']}{sid}: {err['error']}", file=sys.stderr)
        raise cli.CliError(f"nothing imported: {len(result['errors'])} invalid entr"
                           f"{'y' if len(result['errors']) == 1 else 'ies'}",
                           "fix them and run the import again")
    return cli.EXIT_OK


def cmd_search_by_id(args: argparse.Namespace) -> int:
    """``sessions search --id QUERY``: sessions whose id (or lineage root id) contains QUERY,
    exact matches first, then prefixes."""
    with cli.open_ro(args) as db:
        rows = db.search_sessions_by_id(args.query, limit=args.limit or 20)
    if args.json:
        cli.print_json(rows)
        return cli.EXIT_OK
    for r in rows:
        root = (f"  (lineage of {cli.shown(r['_lineage_root_id'])})"
                if r.get("_lineage_root_id") else "")
        print(f"{cli.shown(r.get('id'))}  {cli.shown(r.get('source'), 9)} "
              f"{cli.shown(r.get('message_count') or 0, 5, right=True)} msgs  "
              f"{cli.shown(r.get('title'), 30, cut=30)}{root}")
    if not rows:
        print("no matching session id")
    return cli.EXIT_OK


def register(ss: Any, days_type: Any) -> None:
    """Add the subcommands to the ``sessions`` subparsers."""
    for name, helptext in (("archive", "hide a session (or old ended ones) from the default "
                                       "listing; nothing is deleted"),
                           ("unarchive", "show an archived session (and its lineage) again")):
        ar = ss.add_parser(name, help=helptext)
        ar.add_argument("id", nargs="?", help="session id or unique prefix")
        if name == "archive":
            ar.add_argument("--older-than", type=days_type, metavar="DAYS",
                            help="every ended session started before DAYS ago")
            ar.add_argument("--source", help=cli.SOURCE_HELP)
            ar.add_argument("--dry-run", action="store_true", help=cli.DRY_RUN_HELP)
        ar.add_argument("--json", action="store_true", help=cli.JSON_HELP)
        ar.set_defaults(fn=cmd_archive, older_than=None, source=None, dry_run=False)
    im = ss.add_parser("import", help="import sessions from an export file (json or jsonl)")
    im.add_argument("file", help="a `sessions export` file: json (an array) or jsonl")
    im.add_argument("--force", action="store_true", help="skip the live-writer gate")
    im.add_argument("--json", action="store_true", help=cli.JSON_HELP)
    im.set_defaults(fn=cmd_import)
