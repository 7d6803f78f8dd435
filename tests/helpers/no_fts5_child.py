"""Use a store from a process whose SQLite lacks FTS5 (issue 23.3); print one JSON result line.

Usage: no_fts5_child.py DB_PATH TAG. Makes every connection lack the fts5 module
(:mod:`hermes_state.testing.without_fts`), then: open the store, create session ``nofts-TAG``, append
three messages (one carrying a tool call, one the word ``zephyrTAG``), search for that word,
read the messages back, delete a scratch session, close; open again and report whether that
second open had anything to do. Prints ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
"""

import json
import sys
import traceback

from hermes_state.testing import without_fts as no_fts5


def main() -> int:
    db_path, tag = sys.argv[1], sys.argv[2]
    no_fts5.install()
    out: dict = {"lacks_fts5": no_fts5.lacks_fts5()}
    try:
        from hermes_state import SessionDB

        db = SessionDB(db_path)
        sid = f"nofts-{tag}"
        db.create_session(sid, source="cli")
        ids = [db.append_message(sid, "user", f"find the zephyr{tag} please"),
               db.append_message(sid, "assistant", "calling a tool", tool_calls=[
                   {"id": "c1", "type": "function",
                    "function": {"name": "terminal", "arguments": "{}"}}]),
               db.append_message(sid, "tool", "done", tool_name="terminal")]
        db.create_session(f"scratch-{tag}", source="cli")
        db.append_message(f"scratch-{tag}", "user", "throwaway")
        out["deleted"] = db.delete_session(f"scratch-{tag}")
        out["ids"] = ids
        out["hits"] = [h["id"] for h in db.search_messages(f"zephyr{tag}")]
        out["messages"] = len(db.get_messages(sid))
        out["version"] = db.connection.conn.execute(
            "SELECT version FROM schema_version").fetchone()[0]
        db.close()
        again = SessionDB(db_path)
        out["second_open_work"] = again.connection.migration_report is not None
        again.close()
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the parent asserts on the reply
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}",
                   trace=traceback.format_exc()[-3000:])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
