"""``python -m chaos upstream fetch VERSION...`` / ``upstream list``: the release cache (issue 23).

``fetch`` puts a real upstream release of the store into the cache once (pip, the package
registry: :func:`hermes_state.testing.upstream_release.fetch`); the ``upstream`` role kind, the
``older_release_opens`` checker and the benchmarks' peer rows then run it with no network.
``list`` shows what is cached and where (``HERMES_STATE_CACHE`` moves the cache).
"""

from __future__ import annotations

import argparse

from hermes_state.testing import upstream_release as ur


def add_subcommand(sub) -> None:
    """Register ``upstream fetch`` and ``upstream list`` on the ``python -m chaos`` parser."""
    p = sub.add_parser("upstream", help="fetch real upstream releases into the cache (issue 23)")
    cmds = p.add_subparsers(dest="upstream_cmd", required=True)
    fetch = cmds.add_parser("fetch", help="fetch releases once (pip) into the cache")
    fetch.add_argument("versions", nargs="+", type=_version,
                       help=f"upstream release numbers, e.g. {ur.BASELINE} {ur.NEWER}")
    cmds.add_parser("list", help="the cached releases")


def _version(text: str) -> str:
    try:
        return ur.check_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_upstream(args, err) -> int:
    """Run ``upstream fetch|list``; 0 on success, 3 when a fetch failed (with the reason)."""
    if args.upstream_cmd == "list":
        root = ur.cache_root()
        found = sorted(p.name for p in root.iterdir() if (p / "release.json").is_file()) \
            if root.is_dir() else []
        print(f"cache: {root}")
        for v in found:
            info = ur.cached(v) or {}
            print(f"  {v:10} schema {info.get('schema_version')}  "
                  f"{info.get('distribution')}=={info.get('distribution_version')}")
        if not found:
            print(f"  (none: python -m chaos upstream fetch {ur.BASELINE} {ur.NEWER})")
        return 0
    code = 0
    for version in args.versions:
        try:
            ur.fetch(version)
        except (RuntimeError, OSError) as exc:
            err.print(f"[red]upstream {version}: {exc}[/]", highlight=False)
            code = 3
    return code
