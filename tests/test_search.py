"""``SessionDB.search_messages``: result shape, examples, CJK routing, filters (SPEC §6)."""

from __future__ import annotations

import sqlite3

import hermes_state.schema.tables as schema
import pytest

from hermes_state import SessionDB

SPEC_MESSAGE = ("see issue #123 and src/main.py, don't ship at 50%, ping alice@example.com, ok? "
                "cost $5 a,b chat-send")

CJK_MESSAGES = {
    "memory": "昨天和其他Agent的聊天记录，记忆断裂问题复现了",
    "world": "你好世界",
    "korean": "안녕하세요 여러분",
    "japanese": "こんにちは、元気ですか",
    "tokyo": "東京に行きました",
    "agent": "讨论Agent通信协议",
    "percent": "达成100%完成率",
    "no_percent": "达成100完成率是目标",
}

RESULT_KEYS = {"id", "session_id", "role", "timestamp", "snippet", "context", "source", "model",
               "session_started", "tool_name"}


@pytest.fixture
def db(tmp_path):
    store = SessionDB(tmp_path / "state.db")
    yield store
    store.close()


@pytest.fixture
def corpus(db):
    """A store with the SPEC §6.2 message, the SPEC §6.3 CJK messages and some noise."""
    db.create_session("latin", source="cli", model="model-a")
    db.create_session("cjk", source="telegram", model="model-b")
    ids = {"before": db.append_message("latin", "user", "please look at the build", timestamp=1.0)}
    ids["spec"] = db.append_message("latin", "assistant", SPEC_MESSAGE, timestamp=2.0)
    ids["after"] = db.append_message("latin", "user", "thanks, shipping tomorrow", timestamp=3.0)
    for n, (key, text) in enumerate(CJK_MESSAGES.items()):
        ids[key] = db.append_message("cjk", "user", text, timestamp=10.0 + n)
    return db, ids


def hit_ids(results: list[dict]) -> list[int]:
    return [r["id"] for r in results]


def raw(db, sql, *args):
    return [tuple(r) for r in db.connection.conn.execute(sql, args).fetchall()]


# --------------------------------------------------------------------------- SPEC §6.2 examples

@pytest.mark.parametrize("query", [
    "#123", "src/main.py", "don't", "50%", "alice@example.com", "ok?", "$5", "a,b", "chat-send",
])
def test_spec_queries_find_the_message(corpus, query):
    db, ids = corpus
    results = db.search_messages(query)
    assert ids["spec"] in hit_ids(results)
    hit = next(r for r in results if r["id"] == ids["spec"])
    assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"]


@pytest.mark.parametrize("query", [
    "C++", '"unterminated', "(problem", "{test}", "***", "a AND OR b", "^start", "1.2.3-rc.1",
    "path\\to\\file.txt", '"' * 50_000, "NEAR(a b)", "content:foo", "a\ud835b", "x\x00y",
    "AND", "OR NOT", "*", "\x00", "\ud800", "-", "🙂", "'; DROP TABLE messages; --",
    "%", "_", "\\", "100%", "a" * 100_000, "(" * 3000, "a OR " * 1000,
])
def test_weird_inputs_return_a_list(corpus, query):
    db, _ = corpus
    out = db.search_messages(query)
    assert isinstance(out, list)
    for r in out:
        assert set(r) == RESULT_KEYS
    assert raw(db, "SELECT count(*) FROM messages")[0][0] == 3 + len(CJK_MESSAGES)


@pytest.mark.parametrize("query", ["", "   ", "\t\n", "\u3000"])
def test_empty_or_whitespace_query_is_empty(corpus, query):
    db, _ = corpus
    assert db.search_messages(query) == []


def test_fts5_syntax_is_honoured(db):
    db.create_session("s", source="cli")
    py = db.append_message("s", "user", "python deployment with docker")
    java = db.append_message("s", "user", "python and java deployment")
    k8s = db.append_message("s", "user", "kubernetes rollout")
    assert set(hit_ids(db.search_messages("docker deployment"))) == {py}
    assert set(hit_ids(db.search_messages('"python deployment"'))) == {py}
    assert set(hit_ids(db.search_messages("docker OR kubernetes"))) == {py, k8s}
    assert set(hit_ids(db.search_messages("python NOT java"))) == {py}
    assert set(hit_ids(db.search_messages("deploy*"))) == {py, java}
    assert set(hit_ids(db.search_messages("deployment AND"))) == {py, java}


def test_bm25_order(db):
    db.create_session("s", source="cli")
    weak = db.append_message("s", "user", "alpha " + "filler words here " * 30 + "zebra")
    strong = db.append_message("s", "user", "zebra zebra zebra")
    assert hit_ids(db.search_messages("zebra")) == [strong, weak]


# --------------------------------------------------------------------------- result shape

def test_result_shape_and_session_fields(corpus):
    db, ids = corpus
    (hit,) = db.search_messages("alice@example.com")
    assert set(hit) == RESULT_KEYS
    session = db.get_session("latin")
    assert hit["id"] == ids["spec"]
    assert hit["session_id"] == "latin" and hit["role"] == "assistant"
    assert hit["timestamp"] == 2.0
    assert hit["source"] == "cli" and hit["model"] == "model-a"
    assert hit["session_started"] == session["started_at"]
    assert hit["context"] == [
        {"role": "user", "content": "please look at the build"},
        {"role": "assistant", "content": SPEC_MESSAGE},
        {"role": "user", "content": "thanks, shipping tomorrow"},
    ]


def test_context_orders_by_timestamp_then_id_and_cuts_200_chars(db):
    db.create_session("s", source="cli")
    db.create_session("other", source="cli")
    long_text = "x" * 500
    late = db.append_message("s", "user", "late " + long_text, timestamp=50.0)
    hit = db.append_message("s", "assistant", "needle in the middle", timestamp=20.0)
    db.append_message("other", "user", "other session between", timestamp=25.0)
    tie_a = db.append_message("s", "user", "tie first", timestamp=10.0)
    tie_b = db.append_message("s", "tool", None, timestamp=10.0)  # same ts, larger id: previous
    assert late < hit < tie_a < tie_b
    (res,) = db.search_messages("needle")
    assert res["id"] == hit
    assert res["context"] == [
        {"role": "tool", "content": ""},
        {"role": "assistant", "content": "needle in the middle"},
        {"role": "user", "content": ("late " + long_text)[:200]},
    ]
    assert all(len(c["content"]) <= 200 for c in res["context"])


def test_context_at_session_edges(db):
    db.create_session("s", source="cli")
    only = db.append_message("s", "user", "lonely message")
    (res,) = db.search_messages("lonely")
    assert res["id"] == only
    assert res["context"] == [{"role": "user", "content": "lonely message"}]
    db.append_message("s", "assistant", "reply")
    (res,) = db.search_messages("lonely")
    assert [c["content"] for c in res["context"]] == ["lonely message", "reply"]


def test_context_cuts_the_hit_itself(db):
    db.create_session("s", source="cli")
    db.append_message("s", "user", "needle " + "y" * 1000)
    (res,) = db.search_messages("needle")
    assert res["context"] == [{"role": "user", "content": ("needle " + "y" * 1000)[:200]}]


def test_snippet_markers_and_ellipsis(db):
    db.create_session("s", source="cli")
    words = " ".join(f"word{i}" for i in range(200))
    db.append_message("s", "user", words + " needle " + words)
    (res,) = db.search_messages("needle")
    snip = res["snippet"]
    assert ">>>needle<<<" in snip
    assert snip.startswith("...") and snip.endswith("...")
    assert 30 <= len(snip.split()) <= 50  # ~40 tokens


def test_snippet_for_tool_name_and_tool_calls_hits(db):
    db.create_session("s", source="cli")
    mid = db.append_message("s", "assistant", "calling a tool",
                            tool_calls=[{"function": {"name": "weather_lookup"}}])
    tid = db.append_message("s", "tool", "sunny", tool_name="geocoder")
    (res,) = db.search_messages("weather_lookup")
    assert res["id"] == mid and ">>>" in res["snippet"]
    (res,) = db.search_messages("geocoder")
    assert res["id"] == tid and ">>>geocoder<<<" in res["snippet"]


# --------------------------------------------------------------------------- SPEC §6.3 CJK

@pytest.mark.parametrize("query, key", [
    ("记忆断裂", "memory"), ("世界", "world"), ("안녕", "korean"), ("こんにちは", "japanese"),
    ("東京", "tokyo"), ("Agent通信", "agent"), ("100%完成", "percent"),
])
def test_cjk_examples(corpus, query, key):
    db, ids = corpus
    results = db.search_messages(query)
    assert hit_ids(results) == [ids[key]]
    snip = results[0]["snippet"]
    assert f">>>{query}<<<" in snip, snip


def test_percent_is_literal_not_a_wildcard(corpus):
    db, ids = corpus
    assert ids["no_percent"] not in hit_ids(db.search_messages("100%完成"))
    assert hit_ids(db.search_messages("100完成")) == [ids["no_percent"]]


def test_like_escapes_underscore_and_backslash(db):
    db.create_session("s", source="cli")
    under = db.append_message("s", "user", "变量_名")
    plain = db.append_message("s", "user", "变量x名")
    back = db.append_message("s", "user", "路径\\名")
    assert hit_ids(db.search_messages("量_")) == [under]
    assert hit_ids(db.search_messages("径\\")) == [back]
    assert plain not in hit_ids(db.search_messages("量_名"))


def test_latin_word_glued_to_cjk_is_found_by_the_retry(corpus):
    db, ids = corpus
    assert set(hit_ids(db.search_messages("Agent"))) == {ids["memory"], ids["agent"]}
    # the retry also covers short Latin terms via LIKE
    assert set(hit_ids(db.search_messages("Agent 通信"))) == {ids["agent"]}


@pytest.mark.parametrize("query, keys", [
    ("记忆断裂 AND 世界", set()),                       # short term never dropped: no match-all
    ("记忆断裂 世界", set()),
    ("记忆断裂 OR 世界", {"memory", "world"}),
    ("记忆断裂 OR 東京", {"memory", "tokyo"}),
    ("聊天记录 记忆", {"memory"}),
    ("达成 NOT 目标", {"percent"}),
    ("达成 NOT 100%完成", {"no_percent"}),
    ("世界 OR 东京 OR 안녕", {"world", "korean"}),
    ("完成率 AND 目标 OR 世界", {"no_percent", "world"}),
    ("Agent 记忆断裂", {"memory"}),
    ("Agent NOT 通信", {"memory"}),
])
def test_mixed_short_and_long_cjk_terms_equal_a_like_scan(corpus, query, keys):
    db, ids = corpus
    assert set(hit_ids(db.search_messages(query))) == {ids[k] for k in keys}


def test_tool_rows_need_a_tool_role_filter_for_substring_search(db):
    """SPEC §2.4/§6.3: tool rows are not trigram-indexed; role_filter 'tool' routes to LIKE."""
    db.create_session("s", source="cli")
    user = db.append_message("s", "user", "记忆断裂 in a user message")
    tool = db.append_message("s", "tool", "工具输出：记忆断裂日志", tool_name="grep")
    assert hit_ids(db.search_messages("记忆断裂")) == [user]
    assert hit_ids(db.search_messages("记忆断裂", role_filter=["tool"])) == [tool]
    assert set(hit_ids(db.search_messages("记忆断裂", role_filter=["user", "tool"]))) == {user, tool}
    # Latin words in tool output are in the unicode61 index
    tool2 = db.append_message("s", "tool", "grep exited with status 2")
    assert hit_ids(db.search_messages("exited")) == [tool2]


def test_without_trigram_table_everything_works_through_like(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "trigram_supported", lambda conn: False)
    db = SessionDB(tmp_path / "state.db")
    try:
        assert raw(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE "
                       "'messages_fts_trigram%'") == [(0,)]
        db.create_session("cjk", source="cli")
        ids = {k: db.append_message("cjk", "user", v) for k, v in CJK_MESSAGES.items()}
        for query, key in [("记忆断裂", "memory"), ("世界", "world"), ("Agent通信", "agent"),
                           ("100%完成", "percent"), ("こんにちは", "japanese")]:
            res = db.search_messages(query)
            assert hit_ids(res) == [ids[key]]
            assert f">>>{query}<<<" in res[0]["snippet"]
        assert set(hit_ids(db.search_messages("Agent"))) == {ids["memory"], ids["agent"]}
        assert set(hit_ids(db.search_messages("记忆断裂 OR 世界"))) == {ids["memory"], ids["world"]}
    finally:
        db.close()


def test_cjk_table_is_used_when_present(tmp_path):
    """SPEC §6.3: ``messages_fts_cjk`` first when it exists (here a stand-in using trigram)."""
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s", source="cli")
    mid = db.append_message("s", "user", "昨天和其他Agent的聊天记录，记忆断裂问题复现了")
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, "
                 "tool_calls, content='messages', content_rowid='id', tokenize='trigram')")
    conn.execute("INSERT INTO messages_fts_cjk(messages_fts_cjk) VALUES ('rebuild')")
    conn.execute("DROP TABLE messages_fts_trigram")  # prove the hit cannot come from trigram
    conn.commit()
    conn.close()
    db = SessionDB(path)
    try:
        res = db.search_messages("记忆断裂")
        assert hit_ids(res) == [mid] and ">>>" in res[0]["snippet"]
        # no hit in the cjk table (1-char term): falls through to LIKE
        assert hit_ids(db.search_messages("断")) == [mid]
    finally:
        db.close()


def test_like_snippet_is_text_around_the_first_match(db):
    db.create_session("s", source="cli")
    text = "前" * 100 + "世界" + "后" * 100 + "世界"
    db.append_message("s", "user", text)
    (res,) = db.search_messages("世界")
    snip = res["snippet"]
    assert snip.startswith("...") and snip.endswith("...")
    assert ">>>世界<<<" in snip and snip.count(">>>") == 1
    assert len(snip) < 120


# --------------------------------------------------------------------------- filters and paging

@pytest.fixture
def multi_source(db):
    for sid, source in [("c1", "cli"), ("t1", "telegram"), ("d1", "discord")]:
        db.create_session(sid, source=source, model=f"m-{source}")
    ids: dict[str, list[int]] = {"cli": [], "telegram": [], "discord": []}
    # 40 strong cli hits rank first; the 3 discord hits and 5 telegram hits rank last
    for i in range(40):
        ids["cli"].append(db.append_message("c1", "user" if i % 2 else "assistant",
                                            f"deploy deploy deploy number {i}", timestamp=i))
    for i in range(5):
        ids["telegram"].append(db.append_message(
            "t1", "user", "deploy " + "padding " * 40 + str(i), timestamp=100 + i))
    for i in range(3):
        ids["discord"].append(db.append_message(
            "d1", "assistant", "deploy " + "padding " * 60 + str(i), timestamp=200 + i))
    return db, ids


def test_source_filter_applies_before_limit(multi_source):
    db, ids = multi_source
    assert set(hit_ids(db.search_messages("deploy", source_filter=["discord"], limit=2))) <= set(
        ids["discord"])
    assert len(db.search_messages("deploy", source_filter=["discord"], limit=2)) == 2
    assert len(db.search_messages("deploy", source_filter=["discord"], limit=2, offset=2)) == 1
    got = db.search_messages("deploy", source_filter=["discord", "telegram"], limit=100)
    assert set(hit_ids(got)) == set(ids["discord"] + ids["telegram"])
    assert {r["source"] for r in got} == {"discord", "telegram"}
    assert db.search_messages("deploy", source_filter="discord", limit=100)[0]["source"] == \
        "discord"


def test_exclude_sources_and_role_filter(multi_source):
    db, ids = multi_source
    got = db.search_messages("deploy", exclude_sources=["cli", "telegram"], limit=100)
    assert set(hit_ids(got)) == set(ids["discord"])
    got = db.search_messages("deploy", role_filter=["user"], limit=100)
    assert {r["role"] for r in got} == {"user"}
    assert len(got) == 20 + 5
    got = db.search_messages("deploy", source_filter=["cli", "discord"],
                             exclude_sources=["cli"], role_filter=["assistant"], limit=100)
    assert set(hit_ids(got)) == set(ids["discord"])
    assert db.search_messages("deploy", source_filter=["nowhere"]) == []


def test_paging_covers_every_hit_once(multi_source):
    db, _ = multi_source
    full = hit_ids(db.search_messages("deploy", limit=1000))
    assert len(full) == 48
    paged: list[int] = []
    for offset in range(0, 60, 7):
        paged += hit_ids(db.search_messages("deploy", limit=7, offset=offset))
    assert paged == full
    assert db.search_messages("deploy", limit=7, offset=1000) == []


def test_paging_of_substring_routes(db):
    db.create_session("s", source="cli")
    for i in range(12):
        db.append_message("s", "user", f"第{i}次 世界", timestamp=float(i))
    for query in ("世界", "次 世界", "第1"):
        full = hit_ids(db.search_messages(query, limit=100))
        paged = []
        for offset in range(0, 15, 5):
            paged += hit_ids(db.search_messages(query, limit=5, offset=offset))
        assert paged == full and len(full) == len(set(full))
    assert len(db.search_messages("世界", limit=100)) == 12
    # LIKE route: newest first
    assert [r["timestamp"] for r in db.search_messages("世界", limit=3)] == [11.0, 10.0, 9.0]


def test_latin_retry_keeps_paging_on_one_route(corpus):
    db, ids = corpus
    # 'build' has an FTS hit; an empty page past the end must not switch to substring search
    assert hit_ids(db.search_messages("build")) == [ids["before"]]
    assert db.search_messages("build", offset=1) == []
    # 'Agent' has no FTS hit: every page comes from the substring route
    assert len(db.search_messages("Agent", limit=1)) == 1
    assert len(db.search_messages("Agent", limit=1, offset=1)) == 1
    assert db.search_messages("Agent", limit=1, offset=2) == []


@pytest.mark.parametrize("kwargs", [
    {"limit": 0}, {"limit": -5}, {"limit": "abc"}, {"limit": None}, {"limit": 10**40},
    {"offset": -3}, {"offset": "x"}, {"offset": 10**40}, {"limit": float("nan")},
    {"source_filter": []}, {"exclude_sources": []}, {"role_filter": []},
    {"source_filter": [None, 3]}, {"role_filter": "user"}, {"source_filter": 5},
    {"exclude_sources": ["\ud800"]}, {"role_filter": ("tool",)},
])
def test_odd_arguments_never_raise(corpus, kwargs):
    db, _ = corpus
    assert isinstance(db.search_messages("chat-send", **kwargs), list)
    assert isinstance(db.search_messages("世界", **kwargs), list)


def test_empty_filter_lists_upstream_semantics(corpus):
    """An empty source_filter matches nothing; an empty role_filter or exclude list is no
    filter (UPSTREAM_API §2.5)."""
    db, ids = corpus
    assert db.search_messages("chat-send", source_filter=[]) == []
    assert db.search_messages("世界", source_filter=[]) == []
    assert hit_ids(db.search_messages("chat-send", role_filter=[], exclude_sources=[])) == [
        ids["spec"]]


# --------------------------------------------------------------------------- index coverage

def test_pending_rebuild_range_is_like_scanned(db):
    """SPEC §2.4: rows in (P, H] are in no index yet; search still finds them."""
    db.create_session("s", source="cli")
    db.set_meta("fts_rebuild_high_water", 3)
    db.set_meta("fts_rebuild_progress", 1)
    m1 = db.append_message("s", "user", "rebuild marker one 记忆断裂")
    m2 = db.append_message("s", "user", "rebuild marker two 记忆断裂")
    m3 = db.append_message("s", "user", "rebuild marker three 世界")
    m4 = db.append_message("s", "user", "rebuild marker four 记忆断裂")
    assert (m1, m2, m3, m4) == (1, 2, 3, 4)
    assert raw(db, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'marker' "
                   "ORDER BY rowid") == [(1,), (4,)]
    got = hit_ids(db.search_messages("marker", limit=100))
    assert sorted(got) == [1, 2, 3, 4] and set(got[:2]) == {1, 4}  # index hits rank first
    assert hit_ids(db.search_messages('"marker two"')) == [2]
    assert set(hit_ids(db.search_messages("记忆断裂"))) == {1, 2, 4}
    assert hit_ids(db.search_messages("世界")) == [3]
    assert hit_ids(db.search_messages("marker", role_filter=["assistant"])) == []
    res = {r["id"]: r for r in db.search_messages("marker", limit=100)}
    assert ">>>marker<<<" in res[2]["snippet"] and ">>>marker<<<" in res[1]["snippet"]
    paged = []
    for offset in range(0, 4):
        paged += hit_ids(db.search_messages("marker", limit=1, offset=offset))
    assert paged == got


def test_deleted_messages_are_not_found(db):
    db.create_session("s", source="cli")
    db.append_message("s", "user", "ephemeral 记忆断裂")
    assert len(db.search_messages("ephemeral")) == 1
    db._write(lambda c: c.execute("DELETE FROM messages WHERE session_id = 's'"))
    assert db.search_messages("ephemeral") == []
    assert db.search_messages("记忆断裂") == []


def test_read_only_store_can_search(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "readonly needle 世界")
    with SessionDB(path, read_only=True) as ro:
        assert len(ro.search_messages("needle")) == 1
        assert len(ro.search_messages("世界")) == 1
        assert not ro.connection.conn.in_transaction


def test_no_read_transaction_outlives_the_call(corpus):
    db, _ = corpus
    for q in ("chat-send", "世界", "记忆断裂", "Agent", '"' * 10):
        db.search_messages(q)
        assert not db.connection.conn.in_transaction


def test_routing_uses_the_trigram_index_only_when_every_term_can(corpus, monkeypatch):
    """SPEC §6.3 routing, observed: which page function serves which query."""
    import hermes_state.api.search as search

    db, ids = corpus
    calls: list[str] = []
    real_like, real_match = search._like_page, search._match_page
    monkeypatch.setattr(search, "_like_page",
                        lambda conn, q: calls.append("like") or real_like(conn, q))
    monkeypatch.setattr(search, "_match_page", lambda conn, q, table, *a: calls.append(table)
                        or real_match(conn, q, table, *a))

    def route(query, **kw):
        calls.clear()
        db.search_messages(query, **kw)
        return list(calls)

    assert route("chat-send") == ["messages_fts"]
    assert route("记忆断裂") == ["messages_fts_trigram"]
    assert route("记忆断裂 OR 聊天记录") == ["messages_fts_trigram"]
    assert route("记忆断裂 OR 世界") == ["like"]
    assert route("記 ok 记忆断裂") == ["like"]
    assert route("记忆断裂", role_filter=["tool"]) == ["like"]
    assert route("Agent") == ["messages_fts", "messages_fts_trigram"]
    assert route("build", offset=5) == ["messages_fts", "messages_fts"]  # existence check only
