"""Printing a results file: the rich table, its markdown, and the README section made from it.

The README's benchmark section between ``<!-- bench-table -->`` and ``<!-- /bench-table -->``
is generated from ``benchmarks/results/latest.json`` by :func:`update_readme` (``python -m
benchmarks --readme``), never edited by hand; text that explains the figures lives in
``benchmarks/results/notes.md`` and is copied in after the tables.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
README = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
NOTES = RESULTS / "notes.md"
BEGIN, END = "<!-- bench-table -->", "<!-- /bench-table -->"

_HEAD = ["row", "ours: median (min-max)", "reference: median (min-max)", "ratio", "target",
         "result"]


def fmt(v: float) -> str:
    """A figure with 3 significant-ish digits; ``-`` for NaN."""
    if v != v:  # NaN
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cells(r: dict) -> list[str]:
    o, f = r["ours"], r["ref"]
    return [r["id"], f"{fmt(o['median'])} {r['unit']} ({fmt(o['min'])}-{fmt(o['max'])})",
            f"{fmt(f['median'])} {r['unit']} ({fmt(f['min'])}-{fmt(f['max'])})",
            f"{fmt(r['ratio'])}x", r["target"],
            r.get("verdict") or {True: "PASS", False: "FAIL", None: "info"}[r["pass"]]]


#: Notes of the rows whose extra figures go straight into one sentence.
_NOTES = {
    "lock-writers8": "p99 {p99_on_ms:.1f} ms with, {p99_off_ms:.1f} ms without; {errors} errors",
    "lock-stall": "{throughput_on:.0f} msg/s with, {throughput_off:.0f} without; {errors} errors",
    "writers8": ("{errors} caller errors; p50 {p50_ms:.2f} ms, p99 {p99_ms:.1f} ms (busy handler "
                 "{p99_busy30_ms:.1f} ms, {p99_ratio:.2f}x), max {max_ms:.0f} ms; {causes_note}"),
    "writers8-p99": ("p50 {p50_ms:.2f} ms; p99 of the appends that did not run their cadence "
                     "checkpoint {p99_without_ckpt_ms:.1f} ms (busy handler "
                     "{busy30_p99_without_ckpt_ms:.1f} ms); busy handler alone: "
                     "{busy30_throughput:,.0f} msg/s, {busy30_errors} errors, its PASSIVE "
                     "checkpoints {busy30_checkpoints_busy} busy at once (another connection "
                     "checkpointing) / {busy30_checkpoints_ran} ran. Ours with the checkpoint "
                     "lock off (what a fixed SQLite runs): p99 {p99_nolock_ms:.1f} ms "
                     "({p99_nolock_ratio:.2f}x the busy handler) at {nolock_throughput:,.0f} "
                     "msg/s. Ours {throughput_vs_busy30:.2f}x the busy handler's msg/s, "
                     "{errors} errors; write transactions by lock mode {write_locks}"),
    "stall": "{errors} caller errors; {holds} holds of {hold_s:.2f} s; {causes_note}",
}


class _Missing(dict):
    """Format values of an older results file that lacks a figure: ``?``."""

    def __missing__(self, key: str) -> "_Unknown":
        return _Unknown()


class _Unknown:
    def __format__(self, spec: str) -> str:
        return "?"


def note(r: dict) -> str:
    """The extra figures that decide or explain a row (errors, p99, RSS, causes, ...)."""
    e = r.get("extra", {})
    rerun = e.get("rerun")
    text = _note(r, e)
    if rerun:
        text += (f"{'; ' if text else ''}{rerun['verdict']}: first run {rerun['first_ratio']:.2f}x"
                 f" at load {rerun['first_load']}, rerun {r['ratio']:.2f}x at load "
                 f"{rerun['rerun_load']}")
    return text


def _note(r: dict, e: dict) -> str:
    rid = r["id"]
    if rid in _NOTES:
        text = _NOTES[rid].format_map(_Missing(e))
        if rid == "writers8-p99" and "spec_ratio" in e:
            text += (f". SPEC bound ({e['spec_what']}): p99 {e['spec_p99_ms']:.1f} ms at "
                     f"{e['spec_throughput']:,.0f} msg/s; ours {e['spec_ratio']:.2f}x of its p99, "
                     f"{e['throughput_vs_spec']:.2f}x of its msg/s")
            if e.get("explained"):
                text += f" (EXPLAINED: {e['explained']})"
        return text
    if e.get("note"):
        return e["note"]
    if "rss_mb" in e:
        bad = [x for x in e.get("exits", []) if x != 0]
        spec = ""
        if "spec_ratio" in e:
            sp = e["spec_s"]
            spec = (f"; SPEC bound ({e['spec_what']}): {fmt(sp['median'])} s "
                    f"({fmt(sp['min'])}-{fmt(sp['max'])}), ours {e['spec_ratio']:.2f}x of it")
            if "spec_raw_ratio" in e:
                spec += (f" past each side's fixed cost (the bound's {e['fixed_spec_s']:.2f} s "
                         f"on 1 MiB), {e['spec_raw_ratio']:.2f}x with it")
        fixed = ""
        if "fixed_ours_s" in e:
            fixed = (f"; ratio of the size-dependent part: past each side's fixed cost (the "
                     f"same command on a 1 MiB store: ours {e['fixed_ours_s']:.2f} s, bare "
                     f"{e['fixed_bare_s']:.2f} s), {e['raw_ratio']:.2f}x with it")
        if e.get("unmeasured"):
            fixed += f"; {e['unmeasured']}"
        if e.get("explained"):
            spec += f" (EXPLAINED: {e['explained']})"
        prep = f"; {e['prep']}" if e.get("prep") else ""
        return (f"peak RSS {e['rss_mb']:.0f} MB (bare {e['bare_rss_mb']:.0f} MB)" + spec + fixed
                + prep + (f"; exits {e['exits']}: {e['stderr_tail']}" if bad else ""))
    if rid in ("gate", "pytest"):
        top = "; ".join(f"{n.split('::')[-1]} {s:.0f} s" for s, n in e["slowest"][:3])
        return f"exit {e['exit']}; slowest: {top}" if top else f"exit {e['exit']}"
    if rid == "growth-append" and e.get("png"):
        return f"plot: {Path(e['png']).name}"
    if rid == "migration" and e.get("fts_backfill_to_complete_s") is not None:
        return (f"{e['stats'].get('fts_deferred', 0):,} rows left to the background FTS "
                f"back-fill, complete {e['fts_backfill_to_complete_s']:.1f} s later")
    if rid == "chaos":
        return f"overhead {e['overhead_s']:.2f} s, exits {e['exits']}"
    if rid == "growth-search" and e.get("not_judged"):
        return "not judged (a query too short to judge): " + "; ".join(
            f"{p['messages']:,} msgs {p['ratio']:.2f}x, ours' fixed cost "
            f"{p['fixed_ms_per_query']:.2f} ms/query beside a bare query of "
            f"{p['bare_ms_per_query']:.2f} ms" for p in e["not_judged"])
    if rid == "search":
        return f"sum of medians {e['sum_search_ms']:.0f} / {e['sum_bare_ms']:.0f} ms"
    return e.get("skipped", "")


def _title(result: dict) -> str:
    m = result["machine"]
    load = m.get("loadavg_at_start")
    end = result.get("loadavg_at_end")
    return (f"benchmarks ({result['mode']}): {m['cpu_count']} CPUs"
            + (f", load {load[0]:.1f} at the start" if load else "")
            + (f", {end[0]:.1f} at the end" if end else "")
            + f", Python {m['python']}, SQLite {m['sqlite']}")


def render(result: dict, console=None) -> None:
    """Print the rows of ``result`` as a rich table, the detail tables, then the notes."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(150, Console().width))
    table = Table(title=_title(result))
    for col in _HEAD + ["load"]:
        table.add_column(col, no_wrap=True)
    colour = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]", "info": "info",
              "EXPLAINED": "[cyan]EXPLAINED[/]", "LOADED": "[yellow]LOADED[/]"}
    for r in result["rows"]:
        c = cells(r)
        c[-1] = colour[c[-1]]
        load = r.get("load")
        table.add_row(*c, f"{load[0]:.1f}" if load else "-")
    console.print(table)
    for r in result["rows"]:
        d = r.get("detail")
        if d:
            t = Table(title=d["title"])
            for col in d["columns"]:
                t.add_column(col)
            for values in d["rows"]:
                t.add_row(*[str(v) for v in values])
            console.print(t)
    for r in result["rows"]:
        n = note(r)
        console.print(f"  {r['id']}: {r['what']}  vs  {r['reference']}" + (f"  [{n}]" if n else ""),
                      highlight=False, markup=False)
    console.print(f"total {result['total_s']:.1f} s; command: {result['command']}",
                  highlight=False)


def markdown(result: dict) -> str:
    """The tables of ``result`` as GitHub markdown."""
    lines = ["| " + " | ".join(_HEAD[:1] + ["what", "compared with"] + _HEAD[1:]
                               + ["load", "notes"]) + " |", "|" + "---|" * (len(_HEAD) + 4)]
    for r in result["rows"]:
        c = cells(r)
        load = r.get("load")
        lines.append("| " + " | ".join([c[0], r["what"], r["reference"]] + c[1:]
                                       + [f"{load[0]:.1f}" if load else "-",
                                          note(r).replace("|", "/")]) + " |")
    for r in result["rows"]:
        d = r.get("detail")
        if d:
            lines += ["", f"**{d['title']}**", "",
                      "| " + " | ".join(d["columns"]) + " |", "|" + "---|" * len(d["columns"])]
            lines += ["| " + " | ".join(str(v).replace("|", "/") for v in values) + " |"
                      for values in d["rows"]]
    return "\n".join(lines)


def readme_section(result: dict, results_file: str) -> str:
    """The generated README section: provenance, machine and load, the tables, the notes."""
    m = result["machine"]
    load = m.get("loadavg_at_start")
    end = result.get("loadavg_at_end")
    head = (f"Generated by `python -m benchmarks --readme` from `{results_file}`, made with "
            f"`{result['command']}` on {result['started']}: {m['cpu_count']} CPUs, load average "
            f"{load[0]:.1f} at the start and {end[0]:.1f} at the end" if load and end else
            f"Generated by `python -m benchmarks --readme` from `{results_file}`, made with "
            f"`{result['command']}` on {result['started']}: {m['cpu_count']} CPUs")
    head += (f" (each row's own 1-minute load is in its `load` column), Python {m['python']}, "
             f"SQLite {m['sqlite']}; total {result['total_s']:.0f} s.")
    if len(result.get("sources") or []) > 1:
        head = (f"Generated by `python -m benchmarks --readme` from `{results_file}`, merged "
                f"(`--merge`) from {len(result['sources'])} runs on {m['cpu_count']} CPUs shared "
                f"with other jobs (each row's own 1-minute load is in its `load` column), "
                f"Python {m['python']}, SQLite {m['sqlite']}:\n\n" + "\n".join(
                    f"- {', '.join(src['rows'])}: `{src['command']}` on {src['started']}"
                    for src in result["sources"]))
    notes = NOTES.read_text().strip() if NOTES.exists() else ""
    png = [r["extra"].get("png") for r in result["rows"] if r["id"] == "growth-append"]
    plot = ""
    if png and png[0]:
        plot = f"\n\n![growth curves](../benchmarks/results/{Path(png[0]).name})"
    return "\n".join([BEGIN, head, "", markdown(result)]) + plot + \
        ("\n\n" + notes if notes else "") + "\n" + END


def update_readme(results: Path, readme: Path = README) -> bool:
    """Replace the README's generated section with the one made from ``results``.

    Returns:
        True when the README changed.
    Raises:
        ValueError: the README has no ``<!-- bench-table -->`` ... ``<!-- /bench-table -->``.
    """
    import json

    text = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{readme} has no {BEGIN} ... {END} section")
    try:
        name = str(results.resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        name = str(results)
    section = readme_section(json.loads(results.read_text()), name)
    new = pattern.sub(lambda _m: section, text)
    if new != text:
        readme.write_text(new)
    return new != text
