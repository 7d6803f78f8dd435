"""Fixture stores at every historical schema version and the gate's comparison (SPEC §16.6).

:func:`build_fixture` creates a store with exactly the declared schema of a version
(:mod:`hermes_state.schema.history`: upstream's DDL, trigger names and FTS layouts) filled with
deterministic content, and returns a manifest of everything it wrote; :func:`check_migrated`
compares a store migrated to 23 with that manifest. Both are exported by
:mod:`hermes_state.testing`.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

from ..files.paths import sessions_json_path
from ..schema.fts_layout import verify_fts
from ..schema.history import (
    CURRENT_VERSION,
    EXTERNAL_LAYOUT,
    INLINE_LAYOUTS,
    VersionSchema,
    live_fts_layout,
    schema_at,
)
from ..schema.tables import trigram_supported

# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

_CJK_DIGITS = "零一二三四五六七八九"
BASE_TIME = 1_700_000_000.0

#: Sessions that play a role in the fixture (index -> role), when ``sessions`` is large enough.
#: 2 -> 3 -> 5 is a compression lineage; 7, 8 are delegated sub-agents of 1 (8 without config);
#: 9 is a sub-agent child whose model_config is not JSON (left alone by v16); 10 is a
#: 'subagent' without parent (never tagged).
_ROLES = {3: ("cli", 2), 5: ("cli", 3), 7: ("subagent", 1), 8: ("delegate", 1),
          9: ("subagent", 2), 10: ("subagent", None)}
_SOURCES = ("cli", "telegram", "discord", "cli")
_DUP_TITLES = {4: "Duplicate title", 6: "Duplicate title",
               9: "Shared name", 10: "Shared name", 11: "Shared name"}


def cjk_number(n: int, width: int = 4) -> str:
    """``n`` written with CJK digits, zero-padded (a unique CJK run per message)."""
    return "".join(_CJK_DIGITS[int(d)] for d in str(n).zfill(width))


def _table_dump(conn: sqlite3.Connection, table: str) -> list[dict]:
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        conn.row_factory = None


def create_store_schema(conn: sqlite3.Connection, version: int) -> None:
    """Create the exact schema of ``version`` (tables, indexes, FTS layout) on an empty DB.

    The v10/v11 trigram tables are skipped when this SQLite has no trigram tokenizer.
    """
    vs = schema_at(version)
    for spec in vs.tables.values():
        conn.execute(spec.create_sql())
    for _name, sql in vs.indexes:
        conn.execute(sql)
    tri = trigram_supported(conn)
    for name, sql in vs.fts.tables:
        if name == "messages_fts_trigram" and not tri:
            continue
        conn.execute(sql)
    for name, sql in vs.fts.triggers:
        if name.startswith("messages_fts_trigram") and not tri:
            continue
        conn.execute(sql)


def build_fixture(db_path: str | Path, version: int, *, seed: int = 0, sessions: int = 12,
                  messages_per_session: int = 8, write_sessions_json: bool = True) -> dict:
    """Create a WAL store at exactly ``version`` with deterministic content (SPEC §16.6).

    Content: ``sessions`` sessions (a compression lineage, delegated sub-agent children, gateway
    sessions), ``messages_per_session`` messages each (user / assistant with ``tool_calls`` /
    ``role='tool'`` rows / CJK text in every third user message), every column the version has
    filled (titles from v3 with a duplicate pair and a triple for versions < 4, billing from v5,
    routing rows from v13, locks v14, delegations v15, tagged sub-agents from v16, gateway
    metadata from v18, usage rows from v20 and with a ``task`` from v22), ``state_meta`` from
    v12, and ``<dir>/sessions/sessions.json`` (read by the v18 step) whatever the version.

    Args:
        db_path: the ``state.db`` to create (must not exist).
        version: 1..23.
        seed: varies the numbers and words; same seed => same store.
        sessions: at least 1 (12 exercises every role).
        messages_per_session: at least 1.
        write_sessions_json: also write the gateway's ``sessions.json``.
    Returns:
        A manifest: ``version``, ``counts`` {table: rows}, ``rows`` {table: [row dicts as
        written]}, ``messages`` {id: content}, ``titles`` {sid: title}, ``expected_titles`` {sid:
        title after the v4 repair}, ``titles_cleared``, ``subagents`` {sid: parent to be tagged
        by v16}, ``gateway_meta`` {sid: {column: value expected after v18}}, ``usage_totals``
        {sid: {...}}, ``terms`` {id: unique unicode61 word}, ``cjk_terms`` {id: CJK run},
        ``tool_terms`` {id: word only inside tool_calls}, ``sessions_json`` (path or None).
    Raises:
        FileExistsError: ``db_path`` exists.
        KeyError: unknown version.
    """
    db_path = Path(db_path)
    if db_path.exists():
        raise FileExistsError(db_path)
    vs = schema_at(version)
    rng = random.Random(seed)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    manifest: dict[str, Any] = {"version": version, "seed": seed, "path": str(db_path)}
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN")
        create_store_schema(conn, version)
        conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))
        _fill(conn, vs, rng, seed, sessions, messages_per_session, manifest)
        conn.execute("COMMIT")
        manifest["rows"] = {t: _table_dump(conn, t) for t in vs.tables}
        manifest["counts"] = {t: len(r) for t, r in manifest["rows"].items()}
    finally:
        conn.close()
    manifest["expected_routing"] = _expected_routing(manifest, version)
    manifest["sessions_json"] = None
    if write_sessions_json:
        manifest["sessions_json"] = str(_write_sessions_json(db_path, manifest, version))
    return manifest


def _fill(conn: sqlite3.Connection, vs: VersionSchema, rng: random.Random, seed: int,
          n_sessions: int, per_session: int, manifest: dict) -> None:
    v = vs.version
    scols = set(vs.columns("sessions"))
    mcols = set(vs.columns("messages"))
    sids = [f"s{seed:02d}{i:03d}" for i in range(n_sessions)]
    titles: dict[str, str | None] = {}
    subagents: dict[str, str] = {}
    gateway_meta: dict[str, dict] = {}
    usage_totals: dict[str, dict] = {}
    session_rows: list[dict] = []
    for i, sid in enumerate(sids):
        source, parent_idx = _ROLES.get(i, (_SOURCES[i % len(_SOURCES)], None))
        parent = sids[parent_idx] if parent_idx is not None and parent_idx < i else None
        model = rng.choice(["anthropic/claude-sonnet-4.6", "openai/gpt-5", "local/llama"])
        config: str | None = json.dumps({"temperature": round(rng.random(), 2), "top_p": 0.9})
        if i == 8:
            config = None
        if i == 9:
            config = "not json {"
        tagged = parent is not None and source in ("subagent", "delegate") and i != 9
        if tagged:
            subagents[sid] = parent
            if v >= 16:  # the code of v16+ tags sub-agents when it creates them
                cfg = json.loads(config) if config else {}
                cfg["_delegate_from"] = parent
                config = json.dumps(cfg)
        row: dict[str, Any] = {
            "id": sid, "source": source, "user_id": f"user{i % 3}", "model": model,
            "model_config": config, "system_prompt": f"You are helper {i}.",
            "parent_session_id": parent,
            "started_at": BASE_TIME + i * 3600 + round(rng.random(), 3),
            "ended_at": None, "end_reason": None,
            "input_tokens": rng.randint(10, 5000), "output_tokens": rng.randint(10, 3000),
        }
        if i in (2, 3):  # compression split: parent ended with 'compression'
            row["ended_at"] = row["started_at"] + 1800
            row["end_reason"] = "compression"
        elif i % 5 == 4:
            row["ended_at"] = row["started_at"] + 600
            row["end_reason"] = "user_exit"
        if "title" in scols:
            title = _DUP_TITLES.get(i) if v < 4 else None
            if title is None and i % 4 != 1:
                title = f"Session {seed}-{i} " + rng.choice(["docker", "notes", "bugfix", "旅行"])
            row["title"] = title
            titles[sid] = title
        if "cache_read_tokens" in scols:
            row.update(cache_read_tokens=rng.randint(0, 900), cache_write_tokens=rng.randint(0, 90),
                       reasoning_tokens=rng.randint(0, 400), billing_provider="openrouter",
                       billing_base_url="https://openrouter.ai/api/v1", billing_mode="api",
                       estimated_cost_usd=round(rng.random(), 4), actual_cost_usd=None,
                       cost_status="estimated", cost_source="pricing-table",
                       pricing_version="2025-01")
        if "api_call_count" in scols:
            row["api_call_count"] = rng.randint(1, 20)
        gateway = source in ("telegram", "discord")
        if "session_key" in scols and gateway:
            row.update(session_key=f"agent:main:{source}:dm:{i}", chat_id=str(1000 + i),
                       chat_type="dm", thread_id=None if i % 2 else f"t{i}")
        if "display_name" in scols:
            # v17 added the columns (NULL); from v18 on the gateway writes them itself.
            row["display_name"] = f"Chat {i}" if (gateway and v >= 18) else None
            row["origin_json"] = (json.dumps({"platform": source, "chat_id": str(1000 + i)})
                                  if gateway and v >= 18 else None)
            row["expiry_finalized"] = 1 if (gateway and v >= 18 and i % 3 == 0) else 0
            if v == 17 and i == 1:  # set by hand before v18: the back-fill must keep it
                row["display_name"] = "Kept by hand"
        if "cwd" in scols:
            row["cwd"] = f"/home/u/proj{i}"
        if "git_branch" in scols:
            row.update(git_branch="main" if i % 2 else None,
                       git_repo_root=f"/home/u/proj{i}" if i % 2 else None)
        if "handoff_state" in scols:
            row.update(handoff_state="done" if i == 1 else None,
                       handoff_platform="telegram" if i == 1 else None, handoff_error=None)
        if "compression_failure_cooldown_until" in scols:
            row.update(compression_failure_cooldown_until=BASE_TIME + 99 if i == 2 else None,
                       compression_failure_error="too long" if i == 2 else None)
        if "rewind_count" in scols:
            row.update(rewind_count=i % 2, archived=1 if i == 6 else 0)
        if "profile_name" in scols:
            row["profile_name"] = "work" if i % 3 == 0 else None
        if "pinned" in scols:
            row["pinned"] = 1 if i == 0 else 0
        session_rows.append(row)
        usage_totals[sid] = {
            k: row.get(k, 0) for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                       "cache_write_tokens", "reasoning_tokens",
                                       "api_call_count")}
        usage_totals[sid].update(model=model, estimated_cost_usd=row.get("estimated_cost_usd"),
                                 billing_provider=row.get("billing_provider"))
    # messages
    messages: dict[int, str | None] = {}
    terms: dict[int, str] = {}
    cjk_terms: dict[int, str] = {}
    tool_terms: dict[int, str] = {}
    roles: dict[int, str] = {}
    msg_rows: list[tuple[dict, str]] = []
    serial = 0
    for i, sid in enumerate(sids):
        t = session_rows[i]["started_at"]
        for j in range(per_session):
            serial += 1
            word = f"w{seed:02d}x{serial:05d}"
            kind = j % 4
            m: dict[str, Any] = {"session_id": sid, "timestamp": round(t + j * 7.5, 3),
                                 "token_count": rng.randint(1, 400)}
            if kind == 0:
                text = f"user asks {word} about " + rng.choice(["docker", "rust", "sql"])
                if serial % 3 == 0:
                    text += f" 東京会議{cjk_number(serial)}号室の記録"
                m.update(role="user", content=text)
            elif kind == 1:
                call_word = f"arg{seed:02d}x{serial:05d}"
                calls = [{"id": f"call_{serial}", "type": "function",
                          "function": {"name": "terminal",
                                       "arguments": json.dumps({"cmd": f"ls {call_word}"})}}]
                m.update(role="assistant", content=None if serial % 2 else f"running {word}",
                         tool_calls=json.dumps(calls))
                m["_tool_word"] = call_word
                m["_ncalls"] = 1
            elif kind == 2:
                m.update(role="tool", content=f"tool output {word}\nfile_a file_b",
                         tool_call_id=f"call_{serial - 1}", tool_name="terminal")
            else:
                m.update(role="assistant", content=f"answer {word} done "
                         + ("完了しました" if serial % 2 else "ok"))
            if "finish_reason" in mcols and m["role"] == "assistant":
                m["finish_reason"] = "tool_calls" if kind == 1 else "stop"
            if "reasoning" in mcols and m["role"] == "assistant":
                m["reasoning"] = f"thinking about {word}"
                m["reasoning_details"] = json.dumps([{"type": "summary", "text": word}])
                m["codex_reasoning_items"] = None if serial % 2 else json.dumps([{"id": serial}])
            if "reasoning_content" in mcols and m["role"] == "assistant":
                m["reasoning_content"] = "" if serial % 5 == 0 else f"rc {word}"
            if "codex_message_items" in mcols and m["role"] == "assistant":
                m["codex_message_items"] = json.dumps([{"id": f"msg_{serial}", "phase": "final"}])
            if "platform_message_id" in mcols:
                m["platform_message_id"] = f"pm{serial}" if kind == 0 else None
                m["observed"] = serial % 2
            if "effect_disposition" in mcols:
                m["effect_disposition"] = "applied" if m["role"] == "tool" else None
            if "active" in mcols:
                m["active"] = 0 if serial % 11 == 0 else 1
            if "compacted" in mcols:
                m["compacted"] = 1 if serial % 13 == 0 else 0
            if "api_content" in mcols:
                m["api_content"] = f"[sent] {m['content']}" if serial % 7 == 0 else None
            if "display_kind" in mcols:
                m["display_kind"] = "text" if kind == 0 else None
                m["display_metadata"] = json.dumps({"n": serial}) if kind == 3 else None
            msg_rows.append((m, word))
    # Write sessions (parents first: foreign keys) and messages.
    for row in session_rows:
        row["message_count"] = 0
        row["tool_call_count"] = 0
    sess_by_id = {r["id"]: r for r in session_rows}
    for m, _ in msg_rows:
        sess_by_id[m["session_id"]]["message_count"] += 1
        if m["role"] != "tool":
            sess_by_id[m["session_id"]]["tool_call_count"] += m.get("_ncalls", 0)
    for row in session_rows:
        cols = [c for c in row if c in scols]
        conn.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES "
                     f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
    for m, word in msg_rows:
        cols = [c for c in m if c in mcols]
        cur = conn.execute(f"INSERT INTO messages ({', '.join(cols)}) VALUES "
                           f"({', '.join('?' * len(cols))})", [m[c] for c in cols])
        mid = cur.lastrowid
        messages[mid] = m.get("content")
        roles[mid] = m["role"]
        if m.get("content") and word in m["content"]:
            terms[mid] = word
        if m.get("content") and "東京会議" in m["content"]:
            cjk_terms[mid] = "会議" + cjk_number(int(word.split("x")[1])) + "号"
        if "_tool_word" in m:
            tool_terms[mid] = m["_tool_word"]
    # Other tables.
    if "state_meta" in vs.tables:
        conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)", [
            ("fixture_seed", str(seed)), ("last_auto_prune", str(BASE_TIME + 7)),
            ("gateway_version", f"0.{v}")])
    gateway_sids = [r["id"] for r in session_rows if r["source"] in ("telegram", "discord")]
    if "gateway_routing" in vs.tables:
        for k, sid in enumerate(gateway_sids):
            conn.execute("INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) "
                         "VALUES (?, ?, ?, ?)",
                         ("" if k % 2 else "agent:main", f"key-{sid}",
                          json.dumps({"session_id": sid, "k": k}), BASE_TIME + k))
    if "compression_locks" in vs.tables and sids:
        conn.execute("INSERT INTO compression_locks VALUES (?, ?, ?, ?)",
                     (sids[0], "host:pid=999999", BASE_TIME, BASE_TIME + 300))
    if "async_delegations" in vs.tables and len(sids) > 1:
        conn.execute("INSERT INTO async_delegations(delegation_id, origin_session, "
                     "parent_session_id, state, dispatched_at, updated_at, event_json, "
                     "delivery_state, delivery_attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (f"d{seed}-1", sids[1], sids[1], "running", BASE_TIME + 5, BASE_TIME + 6,
                      json.dumps({"task": "research"}), "pending", 0))
    if "session_model_usage" in vs.tables:
        ucols = set(vs.columns("session_model_usage"))
        has_task = "task" in ucols
        v20_shape = "billing_mode" not in ucols
        for n, r in enumerate(session_rows):
            tot = usage_totals[r["id"]]
            # The v20 module copied billing_base_url as is: NULL on some rows (UPSTREAM_API §4.6)
            base_url = r.get("billing_base_url") or ""
            base = {"session_id": r["id"], "model": r["model"] or "",
                    "billing_provider": r.get("billing_provider") or "",
                    "billing_base_url": None if (v20_shape and n % 2) else base_url,
                    "billing_mode": r.get("billing_mode") or "",
                    "first_seen": r["started_at"], "last_seen": r["started_at"] + 60,
                    "estimated_cost_usd": r.get("estimated_cost_usd") or 0.0,
                    "cost_status": r.get("cost_status"), "cost_source": r.get("cost_source")}
            base = {k: v for k, v in base.items() if k in ucols}
            parts = [1.0]
            if has_task and r["id"] == sids[0]:
                parts = [0.75, 0.25]  # a 'compression' task row beside the main one
            for p_idx, share in enumerate(parts):
                row = dict(base)
                for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                          "cache_write_tokens", "reasoning_tokens", "api_call_count"):
                    row[k] = int(tot[k] * share) if p_idx == 0 else tot[k] - int(tot[k] * parts[0])
                if has_task:
                    row["task"] = "" if p_idx == 0 else "compression"
                cols = list(row)
                conn.execute(f"INSERT INTO session_model_usage ({', '.join(cols)}) VALUES "
                             f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
    # Expected effects of the data steps.
    expected_titles = dict(titles)
    cleared = 0
    if titles and v < 4:
        by_title: dict[str, list[tuple[float, str]]] = {}
        for r in session_rows:
            if r.get("title") is not None:
                by_title.setdefault(r["title"], []).append((r["started_at"], r["id"]))
        for members in by_title.values():
            members.sort(reverse=True)
            for _t, sid in members[1:]:
                expected_titles[sid] = None
                cleared += 1
    if v < 3:
        expected_titles = {sid: None for sid in sids}
    for sid in gateway_sids:
        idx = sids.index(sid)
        gateway_meta[sid] = {"display_name": f"Chat {idx}",
                             "origin_json": json.dumps({"platform": sess_by_id[sid]["source"],
                                                        "chat_id": str(1000 + idx)}),
                             "expiry_finalized": 1 if idx % 3 == 0 else 0}
    # What display_name / origin_json / expiry_finalized hold after a migration to v23: from v18
    # on exactly what was written; before, the v18 back-fill fills NULLs (and a 0
    # expiry_finalized the file marks finalized) from sessions.json, never replacing a value.
    expected_gateway: dict[str, dict] = {}
    for r in session_rows:
        cur = {k: r.get(k) for k in ("display_name", "origin_json", "expiry_finalized")}
        if cur["expiry_finalized"] is None:
            cur["expiry_finalized"] = 0
        if v < 18 and r["id"] in gateway_meta:
            src = gateway_meta[r["id"]]
            for k in ("display_name", "origin_json"):
                if cur[k] is None:
                    cur[k] = src[k]
            if src["expiry_finalized"]:
                cur["expiry_finalized"] = 1
        expected_gateway[r["id"]] = cur
    manifest["expected_gateway"] = expected_gateway
    manifest["v16_tags"] = _expected_v16_tags(session_rows, msg_rows, expected_titles) \
        if v < 16 else {}
    manifest.update(messages=messages, roles=roles, titles=titles,
                    expected_titles=expected_titles, titles_cleared=cleared,
                    subagents=subagents, gateway_meta=gateway_meta, usage_totals=usage_totals,
                    terms=terms, cjk_terms=cjk_terms, tool_terms=tool_terms,
                    gateway_sessions=gateway_sids, session_ids=sids)


def _expected_v16_tags(session_rows: list[dict], msg_rows: list, titles: dict) -> dict:
    """``{sid: value}`` the v16 step writes into ``$._delegate_from`` (UPSTREAM_API.md D10).

    Children that are neither branch nor compression children get their parent id; parentless,
    untitled rows with <= 25 messages, a tool message and no children get ``'__orphaned__'``.
    A ``model_config`` that is not a JSON object is never rewritten.
    """
    by_id = {r["id"]: r for r in session_rows}
    parents = {r["parent_session_id"] for r in session_rows if r["parent_session_id"]}
    with_tool = {m["session_id"] for m, _ in msg_rows if m["role"] == "tool"}
    out = {}
    for r in session_rows:
        try:
            cfg = json.loads(r["model_config"]) if r["model_config"] is not None else {}
        except ValueError:
            continue
        if not isinstance(cfg, dict) or cfg.get("_delegate_from") is not None:
            continue
        parent = by_id.get(r["parent_session_id"] or "")
        if r["parent_session_id"]:
            branch = cfg.get("_branched_from") is not None or (
                parent is not None and parent["end_reason"] == "branched"
                and r["started_at"] >= parent["ended_at"])
            compression = parent is not None and parent["end_reason"] == "compression"
            if not branch and not compression:
                out[r["id"]] = r["parent_session_id"]
        elif (cfg.get("_branched_from") is None and not titles.get(r["id"])
              and r["message_count"] <= 25 and r["id"] in with_tool and r["id"] not in parents):
            out[r["id"]] = "__orphaned__"
    return out


def _write_sessions_json(db_path: Path, manifest: dict, version: int) -> Path:
    """The gateway's ``sessions.json``: ``{session_key: entry}`` (shape read by v18).

    Entries carry ``session_id``, ``display_name``, ``origin`` (an object) and
    ``expiry_finalized``; one entry names an unknown session and one is not an object, both of
    which the v18 step must ignore. Session 1 (non-gateway) gets a display name that must NOT
    replace the one set by hand at v17.
    """
    path = sessions_json_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _sessions_json_data(manifest, version)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


_ROUTING = ("session_key", "chat_id", "chat_type", "thread_id")


def _expected_routing(manifest: dict, version: int) -> dict[str, dict]:
    """``{sid: {column: value}}`` of the routing columns after a migration from ``version``
    (issue 23.2; UPSTREAM_API.md §4.1 row 18): below 18 a NULL (or absent) column takes, from
    the first ``sessions.json`` entry naming the session, ``session_key`` (the entry's, else its
    key in the file), ``chat_id``/``thread_id`` (from ``origin``) and ``chat_type``."""
    rows = {r["id"]: r for r in manifest["rows"].get("sessions", [])}
    out = {sid: {c: r.get(c) for c in _ROUTING} for sid, r in rows.items()}
    if version >= 18:
        return out
    for key, entry in _sessions_json_data(manifest, version).items():
        if not isinstance(entry, dict) or entry.get("session_id") not in out:
            continue
        origin = entry.get("origin") if isinstance(entry.get("origin"), dict) else {}
        found = {"session_key": entry.get("session_key") or key,
                 "chat_id": origin.get("chat_id"), "chat_type": entry.get("chat_type"),
                 "thread_id": origin.get("thread_id")}
        cur = out[entry["session_id"]]
        for col, val in found.items():
            if cur[col] is None:
                cur[col] = val
    return out


def _sessions_json_data(manifest: dict, version: int) -> dict[str, Any]:
    """The content of :func:`_write_sessions_json`'s file."""
    data: dict[str, Any] = {}
    for sid, meta in manifest["gateway_meta"].items():
        data[f"agent:main:{sid}"] = {
            "session_id": sid, "session_key": f"agent:main:{sid}",
            "display_name": meta["display_name"], "origin": json.loads(meta["origin_json"]),
            "expiry_finalized": bool(meta["expiry_finalized"]), "updated_at": "2025-01-01",
        }
    sids = manifest["session_ids"]
    if len(sids) > 1 and version == 17:
        data["agent:main:handset"] = {"session_id": sids[1], "display_name": "From JSON"}
    data["agent:main:ghost"] = {"session_id": "no-such-session", "display_name": "Ghost"}
    data["agent:main:broken"] = "not an object"
    return data


# ---------------------------------------------------------------------------------------------
# The schema-bump gate's comparison (SPEC §16.6)
# ---------------------------------------------------------------------------------------------

#: How rows of each table are matched between the fixture manifest and the migrated store.
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",), "messages": ("id",), "state_meta": ("key",),
    "gateway_routing": ("scope", "session_key"), "compression_locks": ("session_id",),
    "async_delegations": ("delegation_id",),
    "session_model_usage": ("session_id", "model", "billing_provider", "billing_base_url",
                            "billing_mode", "task"),
}
#: state_meta keys the current code adds itself (``gateway_owner``: a running gateway claims the
#: store, SPEC §11; a writer after the migration is one).
OWN_META_KEYS = frozenset({"db_file_generation", "fts_optimize_available", "fts_backfill",
                           "gateway_owner"})


def _rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict]:
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _json_equal(a: Any, b: Any) -> bool:
    try:
        return json.loads(a) == json.loads(b) if a is not None and b is not None else a == b
    except (TypeError, ValueError):
        return a == b


def sqlite_problems(conn: sqlite3.Connection) -> list[str]:
    """``PRAGMA integrity_check`` and ``foreign_key_check`` of ``conn``'s store, as problem
    lines (``[]``: both clean)."""
    problems = []
    ic = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if ic != ["ok"]:
        problems.append(f"integrity_check: {ic[:3]}")
    fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        problems.append(f"foreign_key_check: {len(fk)} violation(s)")
    return problems


def check_migrated(conn: sqlite3.Connection, manifest: dict, *,
                   extra_messages: bool = False) -> list[str]:
    """Compare a store migrated to v23 with the manifest of its fixture (SPEC §16.6).

    Checks: one ``schema_version`` row = 23; every row of every table the old version had is
    present with every old column value unchanged, except the documented data steps (titles
    repaired by v4, sub-agents tagged by v16, gateway metadata back-filled by v18, usage rows
    rebuilt by v22); no row lost or duplicated; columns added later hold their defaults; usage
    rows seeded by v20 equal the per-session totals; every word of every message is found by a
    direct ``MATCH`` on ``messages_fts`` (``tool_calls`` words too), every CJK run by
    ``messages_fts_trigram`` when that table exists; the FTS tables equal an index rebuilt from
    ``messages`` (:func:`hermes_state.schema.fts_layout.verify_fts`); ``integrity_check`` ok and no
    foreign-key violation.

    Args:
        conn: a plain connection to the migrated store.
        manifest: what :func:`build_fixture` returned.
        extra_messages: tolerate messages/sessions written after the migration.
    Returns:
        Problems found (``[]`` when the gate passes).
    """

    problems: list[str] = []
    old_v = manifest["version"]
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    if versions != [CURRENT_VERSION]:
        problems.append(f"schema_version rows {versions}, expected [{CURRENT_VERSION}]")
    for table, old_rows in manifest["rows"].items():
        if table == "schema_version":
            continue
        key = ROW_KEYS[table]
        live_rows = _rows(conn, f"SELECT * FROM {table}")
        live = {}
        for r in live_rows:
            k = tuple(r.get(c, "") for c in key)
            if k in live:
                problems.append(f"{table}: duplicate row {k}")
            live[k] = r
        for old in old_rows:
            # NULL key parts of a v20 usage row become '' (the v22 rebuild heals them).
            k = tuple((old.get(c) or "") if table == "session_model_usage" else old.get(c, "")
                      for c in key)
            new = live.get(k)
            if new is None:
                problems.append(f"{table}: row {k} lost")
                continue
            for col, val in old.items():
                problems.extend(_compare_cell(table, k, col, val, new, manifest))
        expected_n = len(old_rows)
        if table == "state_meta":
            live_n = len([k for k in live if k[0] not in OWN_META_KEYS])
        else:
            live_n = len(live)
        if live_n != expected_n and not (extra_messages and table in ("messages", "sessions")):
            problems.append(f"{table}: {live_n} rows, expected {expected_n}")
    problems.extend(_check_new_columns(conn, manifest))
    problems.extend(_check_routing(conn, manifest))
    problems.extend(_check_usage(conn, manifest))
    problems.extend(_check_search(conn, manifest))
    for table, verdict in verify_fts(conn).items():
        if verdict != "ok":
            problems.append(f"{table}: {verdict}")
    problems.extend(sqlite_problems(conn))
    if old_v < CURRENT_VERSION and live_fts_layout(conn) not in INLINE_LAYOUTS | {EXTERNAL_LAYOUT}:
        problems.append(f"FTS layout {live_fts_layout(conn)}")
    return problems


def _compare_cell(table: str, k: tuple, col: str, val: Any, new: dict, manifest: dict) -> list[str]:
    got = new.get(col, "<missing column>")
    if table == "sessions":
        sid = k[0]
        if col == "title":
            want = manifest["expected_titles"].get(sid)
            return [] if got == want else [f"sessions {sid}.title {got!r}, expected {want!r}"]
        if col == "model_config" and sid in manifest.get("v16_tags", {}):
            want = json.loads(val) if val else {}
            want["_delegate_from"] = manifest["v16_tags"][sid]
            try:
                ok = json.loads(got) == want
            except (TypeError, ValueError):
                ok = False
            return [] if ok else [f"sessions {sid}.model_config {got!r}, expected {want!r}"]
        if col in ("display_name", "origin_json", "expiry_finalized"):
            want = manifest["expected_gateway"][sid][col]
            ok = _json_equal(got, want) if col == "origin_json" else got == want
            return [] if ok else [f"sessions {sid}.{col} {got!r}, expected {want!r}"]
    if table == "session_model_usage" and col in ("task", "billing_base_url", "billing_mode"):
        return [] if got == (val or "") else [f"usage {k}.{col} {got!r}"]
    if got != val or type(got) is not type(val):
        return [f"{table} {k}.{col} = {got!r}, expected {val!r}"]
    return []


def _check_routing(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    """The routing columns v18 fills (``expected_routing``; absent in older manifests)."""
    out = []
    for sid, want in (manifest.get("expected_routing") or {}).items():
        row = conn.execute("SELECT session_key, chat_id, chat_type, thread_id FROM sessions "
                           "WHERE id = ?", (sid,)).fetchone()
        if row is None:
            continue  # a lost row is reported by the row comparison
        got = dict(zip(_ROUTING, row))
        if got != want:
            out.append(f"sessions {sid} routing {got!r}, expected {want!r}")
    return out


#: Columns added after v1 whose value for an old row is the declared default.
_DEFAULTS = {
    "messages": {"observed": 0, "active": 1, "compacted": 0},
    "sessions": {"rewind_count": 0, "archived": 0, "pinned": 0, "api_call_count": 0,
                 "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0},
}


def _check_new_columns(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    out = []
    vs = schema_at(manifest["version"])
    for table, defaults in _DEFAULTS.items():
        old_cols = set(vs.columns(table))
        for col, want in defaults.items():
            if col in old_cols:
                continue
            ids = [r["id"] for r in manifest["rows"][table]]
            bad = [i for i, v in conn.execute(f"SELECT id, {col} FROM {table}")
                   if i in set(ids) and v != want]
            if bad:
                out.append(f"{table}.{col}: old rows {bad[:5]} do not hold the default {want!r}")
    return out


def _check_usage(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    if manifest["version"] >= 20:
        return []  # compared row by row above
    out = []
    rows = _rows(conn, "SELECT * FROM session_model_usage")
    by_sid: dict[str, list[dict]] = {}
    for r in rows:
        by_sid.setdefault(r["session_id"], []).append(r)
    for sid, tot in manifest["usage_totals"].items():
        got = by_sid.get(sid, [])
        if len(got) != 1:
            out.append(f"usage of {sid}: {len(got)} seeded rows, expected 1")
            continue
        r = got[0]
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "reasoning_tokens", "api_call_count"):
            if r[k] != tot[k]:
                out.append(f"usage of {sid}.{k} = {r[k]}, expected {tot[k]}")
        if r["model"] != (tot["model"] or "") or r["task"] != "":
            out.append(f"usage of {sid}: key {r['model']!r}/{r['task']!r}")
        if r["estimated_cost_usd"] != (tot["estimated_cost_usd"] or 0):
            out.append(f"usage of {sid}.estimated_cost_usd = {r['estimated_cost_usd']}")
    return out


def _check_search(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    out = []
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    def match(table: str, term: str) -> set[int]:
        q = '"' + term.replace('"', '""') + '"'
        return {r[0] for r in conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (q,))}

    for mid, term in manifest["terms"].items():
        if int(mid) not in match("messages_fts", term):
            out.append(f"messages_fts MATCH {term!r} misses message {mid}")
    for mid, term in manifest["tool_terms"].items():
        if int(mid) not in match("messages_fts", term):
            out.append(f"messages_fts MATCH {term!r} (tool_calls) misses message {mid}")
    if "messages_fts_trigram" in names:
        for mid, term in manifest["cjk_terms"].items():
            if match("messages_fts_trigram", term) != {int(mid)}:
                out.append(f"messages_fts_trigram MATCH {term!r} != {{{mid}}}")
        if live_fts_layout(conn) != EXTERNAL_LAYOUT:
            return out  # upstream's inline trigram indexes every role (UPSTREAM_API.md §4.2)
        tool_ids = {int(i) for i, role in manifest["roles"].items() if role == "tool"}
        leaked = tool_ids & {r[0] for r in conn.execute(
            "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'tool output'")}
        if leaked:
            out.append(f"messages_fts_trigram indexes role='tool' rows {sorted(leaked)[:5]}")
    return out
