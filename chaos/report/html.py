"""``report.html``: one self-contained page per run (SPEC §16.5; issue 16).

Built only from the files a run leaves behind (``history.jsonl`` or ``history/*.jsonl``,
``results.json``, ``scenario.resolved.json``), so ``python -m chaos report RUN_DIR`` can rebuild it
at any time. No network dependency: CSS, the zoom script and every chart are inline (SVG).

The page opens on what a person needs first, in one screen:

1. the verdict banner (``#verdict-banner``): PASS / FAIL / INCONCLUSIVE, the checkers that did
   not pass, each linking to its evidence, and the moment the run failed (its first evidence);
2. the timeline (:mod:`chaos.report.lanes`): one lane per process, operations as bars from invoke
   to completion, faults as bands, phases on top, every checker's evidence numbered at its time;

then the fault schedule (planned, fired, healed), latency per op kind with the checkers' bounds,
throughput per op kind, the WAL (size, checkpoints, retired generations still held)
(:mod:`chaos.report.plots`), the verdicts with their figures and evidence, and the run's facts.
One time base everywhere: seconds since the run start (:func:`chaos.history.run_start`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import store
from ..checkers import CHECKERS
from ..checkers.base import run_status
from ..history import ADVERSARY_OPS, evidence_process, relative_times
from ..params import build
from .evidence import NOT_PASSING, Mark, checker_anchor, first_failure, item_anchor, marks
from .lanes import legend, timeline_svg
from .plots import Bound, latency_svg, throughput_svg, wal_svg
from .svg import esc
from .timeline import Timeline


# ------------------------------------------------------------------------------ rendering
def write_report(run_dir: str | os.PathLike) -> Path:
    """(Re)build ``<run_dir>/report.html`` from the run's files; returns its path.

    Written atomically (:func:`chaos.store.write_text_atomic`): a reader never sees half a page.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory (see :func:`chaos.store.load_run`).
    """
    run = store.RunDir(Path(run_dir))
    records, results, scenario = store.load_run(run.path)
    page = render(records, results, scenario, title=run.path.name)
    return store.write_text_atomic(run.report, page)


def overall(results: dict) -> str:
    """The run's verdict: ``results.json``'s ``verdict``, else
    :func:`chaos.checkers.base.run_status` of its verdicts (FAIL, INCONCLUSIVE, SKIPPED when no
    checker was judged, PASS); NONE without verdicts."""
    verdicts = results.get("verdicts") or []
    if not verdicts:
        return "NONE"
    return str(results.get("verdict") or run_status(verdicts))


def bounds_of(scenario: dict) -> list[Bound]:
    """The latency bounds the scenario's checkers judge by (drawn on the latency plots):
    ``no_lockup``'s ``bound`` (every op but the adversaries' and its ``ignore_ops``) and
    ``latency``'s ``p99_bound``/``max_bound``."""
    expect = scenario.get("expect") or {}
    out = []
    if "no_lockup" in expect:
        p = build(CHECKERS["no_lockup"].Params, dict(expect.get("no_lockup") or {}))
        out.append(Bound("no_lockup", f"no_lockup bound {p.bound:g} s", float(p.bound),
                         exempt=frozenset(ADVERSARY_OPS) | frozenset(p.ignore_ops)))
    if "latency" in expect:
        p = build(CHECKERS["latency"].Params, dict(expect.get("latency") or {}))
        ops = frozenset(p.ops) if p.ops else None
        for name, value in (("p99", p.p99_bound), ("max", p.max_bound)):
            if value is not None:
                out.append(Bound("latency", f"latency {name} bound {value:g} s", float(value),
                                 ops=ops))
    return out


def _banner(results: dict, scenario: dict, tl: Timeline, ms: list[Mark], title: str) -> str:
    verdict = overall(results)
    name = results.get("scenario") or scenario.get("name") or title
    verdicts = results.get("verdicts") or []
    bad = [v for v in verdicts if v.get("status") in NOT_PASSING]
    first = first_failure(ms)
    when = ""
    if first:
        # The time its evidence carries (a lost write: its acknowledgement, which may come
        # before the fault that lost it), so "first evidence", and what that evidence is.
        item = next(((v.get("evidence") or [None] * (first.index + 1))[first.index]
                     for v in verdicts if v.get("checker") == first.checker), None)
        parts = [item.get("violation") if isinstance(item, dict) else None,
                 evidence_process(item)]
        what = ", ".join(str(x) for x in parts if x not in (None, ""))
        when = (f' · first evidence at <a class="first-failure-link" '
                f'href="#{esc(first.anchor)}">{first.at_s:.3f}s</a> '
                f'({esc(first.checker)}{": " + esc(what) if what else ""})')
    head = (f'{esc(name)} · seed {esc(results.get("seed", scenario.get("seed", "?")))} · '
            f'{len(verdicts) - len(bad)} of {len(verdicts)} checkers passed{when}')
    if results.get("skipped"):
        head += f' · SKIPPED: {esc(results["skipped"])}'
    items = []
    for v in bad:
        checker = str(v.get("checker"))
        mine = sorted((m for m in ms if m.checker == checker and m.number),
                      key=lambda m: m.at_s)
        at = (f' <span class="at">first evidence <a href="#{esc(mine[0].anchor)}">'
              f'{mine[0].at_s:.3f}s</a> (#{mine[0].number})</span>' if mine else
              ' <span class="at">(no timed evidence)</span>')
        items.append(f'<li class="banner-checker" data-checker="{esc(checker)}" '
                     f'data-status="{esc(v.get("status"))}"><a href="#{checker_anchor(checker)}">'
                     f'<b>{esc(checker)}</b> {esc(v.get("status"))}</a>: '
                     f'{esc(_cut(str(v.get("summary", "")), 300))}{at}</li>')
    body = f'<ul class="banner-checkers">{"".join(items)}</ul>' if items else ""
    return (f'<div id="verdict-banner" class="banner b-{esc(verdict)}" '
            f'data-verdict="{esc(verdict)}"><div class="verdict-word">{esc(verdict)}</div>'
            f'<div class="banner-body"><div class="banner-title">{head}</div>{body}</div></div>')


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _facts(results: dict, scenario: dict, title: str, tl: Timeline) -> str:
    planned = results.get("duration_s", scenario.get("duration"))
    ran = f"{tl.t1 - tl.t0:.1f} s" if tl.records else "?"
    facts = [("ran", ran + (f" (duration {float(planned):g} s)" if planned is not None else "")),
             ("SQLite", results.get("sqlite", "?")),
             ("exit code", results.get("exit_code", "?")),
             ("run directory", results.get("run_dir", title))]
    line = " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts)
    desc = scenario.get("description") or results.get("description") or ""
    return (f'<p class="facts">{line}</p>'
            + (f'<p class="desc">{esc(_cut(desc, 400))}</p>' if desc else ""))


def _planned(step: dict) -> str:
    if step.get("at") is not None:
        return f"at {float(step['at']):g}s"
    after = step.get("after")
    if isinstance(after, dict):
        delay = f" + {float(after['delay']):g}s" if after.get("delay") else ""
        if after.get("step") is not None:
            return f"after step {after['step']} is done{delay}"
        if after.get("event"):
            return (f"after {after.get('count', 1)} {after['event']} event(s)"
                    + (f" of {after['role']}" if after.get("role") else "") + delay)
        for outcome in ("ok", "fail", "info"):
            if after.get(outcome):
                return (f"after {after['role']}'s {_ordinal(after[outcome])} {outcome} "
                        f"{after.get('op', 'append')}{delay}")
    return "?"


def _ordinal(n) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``60th``."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return str(n)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


_STEP_KEYS_SHOWN = ("role", "index", "files", "command", "args", "signal", "failpoint", "hit",
                    "mode", "path", "bytes", "page")


def _fault_table(tl: Timeline, scenario: dict) -> str:
    steps = scenario.get("nemesis") or []
    if not steps:
        return '<p class="none">no nemesis step in this scenario</p>'
    fired = {f["step"]: f for f in tl.faults()}
    never = {r.get("step") for r in tl.never_fired()}
    rows = []
    for i, step in enumerate(steps):
        what = ", ".join(f"{k} {json.dumps(step[k])}" for k in _STEP_KEYS_SHOWN
                         if step.get(k) not in (None, [], ""))
        f = fired.get(i)
        if f is None:
            status = "never fired" if i in never else "not reached"
            fired_at, healed, detail, cls = "—", "—", "", "never"
        else:
            status = f["status"]
            fired_at = f"{tl.rel(f['t_start']):.3f}s"
            if f.get("lasting"):
                healed = f"{tl.rel(f['t_end']):.3f}s by {esc(f.get('healed_by', ''))}"
            else:
                healed = "— (instantaneous)" if status == "done" else "—"
            d = f.get("details") or {}
            # what the step did (files, inodes, bytes, PIDs, exit code, error), never empty {}
            keep = {k: v for k, v in d.items() if k not in ("fault", "step", "role", "index")
                    and v not in (None, [], {}, "")}
            detail = json.dumps(relative_times(keep, tl.t0), default=str) if keep else ""
            cls = "ok" if status == "done" else "bad"
        rows.append(f'<tr class="fault-row {cls}" data-step="{i}" '
                    f'data-fault="{esc(step.get("fault"))}" data-status="{esc(status)}">'
                    f'<td>{i}</td><td><b>{esc(step.get("fault"))}</b> {esc(what)}</td>'
                    f'<td>{esc(_planned(step))}</td><td>{esc(fired_at)} {esc(status)}</td>'
                    f'<td>{healed}</td><td><code>{esc(_cut(detail, 240))}</code></td></tr>')
    heal = next((r for r in tl.records if r.get("type") == "phase" and r.get("phase") == "heal"),
                None)
    note = (f'<p class="note">heal phase at {tl.rel(heal["t"]):.3f}s: '
            f'{esc(_cut(_healed(heal.get("heal")), 300))}</p>' if heal else "")
    return ('<table class="faults" id="fault-schedule"><tr><th>step</th><th>fault</th>'
            '<th>planned</th><th>fired</th><th>healed</th><th>details</th></tr>'
            + "".join(rows) + "</table>" + note)


def _healed(heal) -> str:
    """What the heal phase did, in words: only the heals that had something to do."""
    if not isinstance(heal, dict):
        return "nothing to heal" if not heal else json.dumps(heal, default=str)
    done = []
    for name, what in heal.items():
        if isinstance(what, dict):
            what = {k: v for k, v in what.items() if v not in (None, [], {}, "", 0, False)}
        if what:
            done.append(f"{name} {json.dumps(what, default=str)}")
    return "; ".join(done) or "nothing to heal (no stopped process, balloon or mount left)"


def _fig_value(key: str, value, tl: Timeline) -> str:
    if (key in ("T", "t") or key.endswith("_t")) and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return f"{tl.rel(value):.3f}s since the start"
    text = value if isinstance(value, str) else json.dumps(relative_times(value, tl.t0),
                                                           default=str)
    return _cut(text, 500)


def _verdicts(results: dict, tl: Timeline, ms: list[Mark]) -> str:
    verdicts = results.get("verdicts") or []
    if not verdicts:
        obs = results.get("observations")
        if obs:
            rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in obs.items())
            return f'<table class="figures">{rows}</table>'
        return '<p class="none">no verdicts (results.json missing or empty)</p>'
    by_item = {(m.checker, m.index): m for m in ms}
    rows = []
    for v in verdicts:
        checker, status = str(v.get("checker")), str(v.get("status", "?"))
        figures = v.get("figures") or {}
        fig_rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_fig_value(k, val, tl))}</td></tr>"
                           for k, val in figures.items() if k != "error")
        items = []
        for i, item in enumerate(v.get("evidence") or []):
            m = by_item.get((checker, i))
            at = (f'<a class="at" href="#{esc(m.anchor)}">'
                  f'{"#" + str(m.number) + " " if m.number else ""}{m.at_s:.3f}s</a> '
                  if m else '<span class="at">(no time)</span> ')
            shown = relative_times(item, tl.t0) if isinstance(item, dict) else item
            items.append(f'<li id="{esc(item_anchor(checker, i))}" class="evidence-item">{at}'
                         f'<code>{esc(_cut(json.dumps(shown, default=str, ensure_ascii=False), 900))}'
                         "</code></li>")
        open_ = " open" if status in NOT_PASSING else ""
        ev = (f'<details class="evidence-list"{open_}><summary>evidence ({len(items)})</summary>'
              f'<ul>{"".join(items)}</ul></details>' if items else "")
        err = figures.get("error")
        err_html = (f"<details open><summary>error</summary><pre>{esc(err)}</pre></details>"
                    if err else "")
        rows.append(f'<tr class="verdict" id="{checker_anchor(checker)}" '
                    f'data-checker="{esc(checker)}" data-status="{esc(status)}">'
                    f'<td>{esc(checker)}</td><td><span class="badge s-{esc(status)}">'
                    f'{esc(status)}</span></td><td>{esc(v.get("summary", ""))}'
                    f'<details><summary>figures</summary><table class="figures">{fig_rows}'
                    f'</table></details>{ev}{err_html}</td></tr>')
    return ('<table class="verdicts"><tr><th>checker</th><th>verdict</th><th>summary, figures and '
            'evidence (times: seconds since the run start)</th></tr>' + "".join(rows) + "</table>")


def _processes(results: dict, tl: Timeline) -> str:
    procs = results.get("processes") or []
    rows = "".join(f"<tr><td>{esc(p.get('process'))}</td><td>{esc(p.get('pid'))}</td>"
                   f"<td>{esc(p.get('exitcode'))}</td></tr>" for p in procs)
    table = (f'<table class="figures"><tr><th>process</th><th>pid</th><th>exit code</th></tr>'
             f"{rows}</table>") if procs else ""
    extra = ""
    if results.get("wal_reset_exposure"):
        extra = f'<p class="warn">WAL-reset exposure: {esc(results["wal_reset_exposure"])}</p>'
    if (results.get("wal_reset") or {}).get("line"):
        extra += f'<p class="warn">WAL-reset race: {esc(results["wal_reset"]["line"])}</p>'
    return table + extra


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:10px 14px;color:#222}
h2{font-size:15px;margin:18px 0 4px}
table{border-collapse:collapse;margin:4px 0} th,td{border:1px solid #ddd;padding:2px 6px;
text-align:left;vertical-align:top}
.banner{display:flex;gap:12px;align-items:flex-start;border-radius:6px;padding:8px 12px;
margin-bottom:6px;border:2px solid}
.b-PASS{background:#e9f7ec;border-color:#2e9e44}.b-FAIL{background:#fdecec;border-color:#d62728}
.b-INCONCLUSIVE{background:#fff6e0;border-color:#c98d00}.b-SKIPPED,.b-NONE{background:#f2f2f2;
border-color:#999}
.verdict-word{font-size:26px;font-weight:800;letter-spacing:1px;min-width:90px}
.b-PASS .verdict-word{color:#1f7a33}.b-FAIL .verdict-word{color:#b01f20}
.b-INCONCLUSIVE .verdict-word{color:#9a6b00}
.banner-title{font-size:15px;font-weight:600}.banner-checkers{margin:4px 0 0;padding-left:18px}
.banner-checkers li{margin:1px 0}.at{color:#555;font-size:12px}
.facts{margin:2px 0;color:#333;font-size:13px}.desc{margin:2px 0 4px;color:#555;font-size:12px}
.badge{font-weight:bold;padding:1px 6px;border-radius:3px;color:#fff}
.s-PASS{background:#2e9e44}.s-FAIL{background:#d62728}.s-INCONCLUSIVE{background:#c98d00}
.s-SKIPPED{background:#999}
pre{white-space:pre-wrap;max-height:320px;overflow:auto;background:#f8f8f8;padding:6px}
code{font-size:12px}
.scroll{overflow-x:auto;border:1px solid #ddd}
.grid{stroke:#e6e6e6;stroke-width:1} .tick{font-size:10px;fill:#666}
.strip-label{font-size:10px;fill:#888}
.lane-bg{fill:#fff} .lane-bg.odd{fill:#fafafa} .lane-label{font-size:11px;fill:#222}
.life{stroke:#ccc;stroke-width:1} .exit{font-size:12px;fill:#666} .exit.bad{fill:#d62728}
.op-ok{fill:#2e9e44} .op-fail{fill:#d62728} .op-info{fill:#f0a30a}
.op.refused{stroke:#6b0000;stroke-width:1}
.fault-band{fill:#b03fd4;fill-opacity:.12;stroke:#b03fd4;stroke-opacity:.5}
.fault-error{stroke-dasharray:4 3;fill:#888}
.fault-tick{stroke:#b03fd4;stroke-width:1.5}
.fault-label{font-size:10px;fill:#7a1fa0;font-weight:bold}
.phase-label{font-size:10px;fill:#555}
.ev-retry{stroke:#ff7f0e;stroke-width:1.5} .ev-checkpoint{fill:#1f77b4}
.ev-refusal{fill:#d62728;stroke:#600;stroke-width:.8} .ev-capture{fill:#7a1fa0}
.ev-migration{fill:#17becf}
.span-lock{fill:#7a1fa0;fill-opacity:.75} .span-wait{fill:#ff7f0e;fill-opacity:.8}
.span-stopped{fill:#555;fill-opacity:.35} .span-retired{fill:#d62728;fill-opacity:.6}
.span-read{fill:#17becf;fill-opacity:.8}
.evidence{stroke:#999;stroke-width:1;stroke-dasharray:2 3}
.evidence-badge{fill:#fff;stroke:#999}.evidence-num{font-size:8px;fill:#666}
.evidence-ring{fill:none;stroke:#999;stroke-width:1}
.evidence-mark[data-status=FAIL] .evidence,.evidence-mark[data-status=INCONCLUSIVE] .evidence{
stroke:#d62728;stroke-width:1.5;stroke-dasharray:4 2}
.evidence-mark[data-status=FAIL] .evidence-badge,
.evidence-mark[data-status=INCONCLUSIVE] .evidence-badge{fill:#d62728;stroke:#600}
.evidence-mark[data-status=FAIL] .evidence-num,
.evidence-mark[data-status=INCONCLUSIVE] .evidence-num{fill:#fff;font-weight:bold}
.evidence-mark[data-status=FAIL] .evidence-ring,
.evidence-mark[data-status=INCONCLUSIVE] .evidence-ring{stroke:#d62728;stroke-width:2}
.first-failure .evidence{stroke-width:2.5}
.panel-bg{fill:#fcfcfc;stroke:#eee} .panel-label{font-size:11px;font-weight:bold;fill:#333}
.lat-dot{stroke:none}
.bound-line{stroke:#d62728;stroke-width:1.2;stroke-dasharray:6 3}
.bound-label{font-size:10px;fill:#b01f20}
.rate-line{fill:none;stroke-width:1.6} .fail-line{stroke:#d62728;stroke-dasharray:4 2}
.wal-line{fill:none;stroke:#1f77b4;stroke-width:1.5}
.retired-area{fill:#d62728;fill-opacity:.35;stroke:#d62728}
.legend{font-size:12px;margin:2px 0}.legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.none{color:#777} .warn{color:#a05a00} .note{font-size:12px;color:#555}
tr.fault-row.bad td{background:#fff3f3} tr.fault-row.never td{color:#999}
:target{outline:2px solid #d62728}
.evidence-list li{margin:2px 0}
"""

_JS = """
(function(){var z=document.getElementById('zoom');if(!z)return;
var svgs=document.querySelectorAll('svg.zoomable');var base=[];
svgs.forEach(function(s){base.push(+s.getAttribute('width'));});
z.addEventListener('input',function(){var f=+z.value;
svgs.forEach(function(s,i){s.setAttribute('width',Math.round(base[i]*f));});});})();
"""


def render(records: list[dict], results: dict, scenario: dict, title: str = "chaos run") -> str:
    """The whole page as a string (see the module docstring for its sections)."""
    tl = Timeline(records)
    ms = marks(results, tl)
    zoom = ('<label class="note">zoom <input id="zoom" type="range" min="1" max="12" step="0.5" '
            'value="1"></label> <span class="note">times are seconds since the run start; hover '
            'a mark for details; a numbered badge links to its evidence</span>')
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(overall(results))}: {esc(title)}</title><style>{_CSS}</style></head>"
            "<body>"
            f"{_banner(results, scenario, tl, ms, title)}"
            f"{_facts(results, scenario, title, tl)}"
            f'<div class="scroll" id="timeline-box">{timeline_svg(tl, ms)}</div>'
            f'<p class="legend">{legend()}</p>{zoom}'
            f'<h2 id="faults">Fault schedule</h2>{_fault_table(tl, scenario)}'
            '<h2 id="latency-h">Latency per op kind (log scale; dashed: a checker\'s bound; '
            'shaded: faults)</h2>'
            f'<div class="scroll">{latency_svg(tl, bounds_of(scenario))}</div>'
            '<h2 id="throughput-h">Throughput per op kind (completions per second)</h2>'
            f'<div class="scroll">{throughput_svg(tl)}</div>'
            '<h2 id="wal-h">WAL: size, checkpoints (triangles), retired generations still held'
            f'</h2><div class="scroll">{wal_svg(tl)}</div>'
            f'<h2 id="verdicts">Verdicts</h2>{_verdicts(results, tl, ms)}'
            f'<h2 id="processes">Processes</h2>{_processes(results, tl)}'
            f"<script>{_JS}</script></body></html>\n")
