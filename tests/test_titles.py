"""Titles and lineage numbering (SPEC §5, §7): sanitising, uniqueness, the compression-ancestor
move, automatic titles, lookups and ``get_next_title_in_lineage``. The property tests of
``sanitize_title`` live in ``test_stateful.py``."""

from __future__ import annotations

import pytest

from hermes_state import SessionDB
from hermes_state.api.titles import auto_title_key, sanitize_title

INVISIBLE = ([chr(c) for c in range(0x200B, 0x2010)] + [chr(c) for c in range(0x2028, 0x202F)]
             + [chr(c) for c in range(0x2060, 0x206A)] + ["\ufeff"])
CONTROL = [chr(c) for c in range(0x00, 0x20)] + ["\x7f"]


@pytest.fixture
def db(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as store:
        yield store


def set_started(db, sid, t):
    db._write(lambda c: c.execute("UPDATE sessions SET started_at = ? WHERE id = ?", (t, sid)))


def chain(db, *ids, end_reason="compression"):
    """Create a parent→child chain; every session but the last ends with ``end_reason``."""
    parent = None
    for i, sid in enumerate(ids):
        db.create_session(sid, "cli", parent_session_id=parent)
        if i < len(ids) - 1 and end_reason is not None:
            db.end_session(sid, end_reason)
        parent = sid


# ---------------------------------------------------------------------------- sanitize (SPEC §7)
class TestSanitize:
    def test_plain_title_unchanged(self):
        assert sanitize_title("Fix Docker Build") == "Fix Docker Build"

    def test_none_and_empty_are_none(self):
        assert sanitize_title(None) is None
        assert sanitize_title("") is None
        assert sanitize_title("   \t\n ") is None
        assert sanitize_title("\u200b\ufeff\x00") is None

    def test_whitespace_collapsed_and_trimmed(self):
        assert sanitize_title("  a \t\t b\n\nc  ") == "a b c"
        assert sanitize_title("a\u3000\u00a0b") == "a b"

    @pytest.mark.parametrize("ch", [c for c in CONTROL if c not in "\t\n\r"])
    def test_ascii_control_removed(self, ch):
        assert sanitize_title(f"ab{ch}cd") == "abcd"

    @pytest.mark.parametrize("ch", INVISIBLE)
    def test_invisible_and_bidi_removed(self, ch):
        assert sanitize_title(f"ab{ch}cd") == "abcd"

    def test_removal_happens_before_collapse(self):
        assert sanitize_title("a \u200b b") == "a b"
        assert sanitize_title("\u202e \x01 title \u2066") == "title"

    def test_lone_surrogate_replaced(self):
        assert sanitize_title("a\ud835b") == "a\ufffdb"

    def test_exactly_100_is_fine(self):
        assert sanitize_title("x" * 100) == "x" * 100

    def test_101_raises_with_spec_message(self):
        with pytest.raises(ValueError) as exc:
            sanitize_title("x" * 101)
        assert str(exc.value) == "Title too long (101 chars, max 100)"

    def test_length_is_measured_after_cleaning(self):
        assert sanitize_title("  " + "x" * 100 + "\u200b" * 20 + "  ") == "x" * 100
        with pytest.raises(ValueError, match=r"^Title too long \(149 chars, max 100\)$"):
            sanitize_title("y " * 75)  # trailing space trimmed: 149

    def test_non_string_rejected(self):
        with pytest.raises(TypeError):
            sanitize_title(42)  # type: ignore[arg-type]

    def test_available_on_the_db_class(self):
        assert SessionDB.sanitize_title(" a  b ") == "a b"


# ---------------------------------------------------------------------------- set_session_title
class TestSetSessionTitle:
    def test_set_and_get(self, db):
        db.create_session("s1", "cli")
        assert db.set_session_title("s1", "Fix Docker Build") is True
        assert db.get_session_title("s1") == "Fix Docker Build"

    def test_stored_sanitised(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "  Fix\u200b  Docker\nBuild\x07 ")
        assert db.get_session_title("s1") == "Fix Docker Build"

    def test_unknown_id_returns_false(self, db):
        assert db.set_session_title("nope", "anything") is False
        assert db.get_session_by_title("anything") is None

    def test_unknown_id_with_conflicting_title_raises(self, db):
        """Upstream checks the holder before the id (UPSTREAM_API §2.6)."""
        db.create_session("s1", "cli")
        db.set_session_title("s1", "taken")
        with pytest.raises(ValueError, match="already in use by session s1"):
            db.set_session_title("nope", "taken")

    def test_too_long_raises_and_changes_nothing(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "keep")
        with pytest.raises(ValueError, match=r"Title too long \(101 chars, max 100\)"):
            db.set_session_title("s1", "z" * 101)
        assert db.get_session_title("s1") == "keep"

    def test_conflict_raises_spec_message(self, db):
        db.create_session("s1", "cli")
        db.create_session("s2", "cli")
        db.set_session_title("s1", "Shared")
        with pytest.raises(ValueError) as exc:
            db.set_session_title("s2", "  Shared ")
        assert str(exc.value) == "Title 'Shared' is already in use by session s1"
        assert db.get_session_title("s2") is None
        assert db.get_session_title("s1") == "Shared"

    def test_same_session_may_reset_its_own_title(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "Mine")
        assert db.set_session_title("s1", "Mine") is True
        assert db.get_session_title("s1") == "Mine"

    @pytest.mark.parametrize("empty", [None, "", "   ", "\u200b\u200f", "\x00\t"])
    def test_empty_clears(self, db, empty):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "Old")
        assert db.set_session_title("s1", empty) is True
        assert db.get_session_title("s1") is None
        db.create_session("s2", "cli")
        assert db.set_session_title("s2", "Old") is True  # freed

    def test_many_untitled_sessions_allowed(self, db):
        for i in range(3):
            db.create_session(f"s{i}", "cli")
            db.set_session_title(f"s{i}", "")
        assert [db.get_session_title(f"s{i}") for i in range(3)] == [None] * 3


# ---------------------------------------------------------------------------- ancestor rule (§7)
class TestCompressionAncestorMove:
    def test_parent_title_moves_to_child(self, db):
        chain(db, "p", "c")
        db.set_session_title("p", "Project")
        assert db.set_session_title("c", "Project") is True
        assert db.get_session_title("c") == "Project"
        assert db.get_session_title("p") is None

    def test_moves_from_grandparent_through_compression_chain(self, db):
        chain(db, "g", "p", "c")
        db.set_session_title("g", "Project")
        db.set_session_title("c", "Project")
        assert (db.get_session_title("g"), db.get_session_title("c")) == (None, "Project")

    def test_intermediate_non_compression_link_blocks_move(self, db):
        db.create_session("g", "cli")
        db.end_session("g", "compression")
        db.create_session("p", "cli", parent_session_id="g")
        db.end_session("p", "user_exit")
        db.create_session("c", "cli", parent_session_id="p")
        db.set_session_title("g", "Project")
        with pytest.raises(ValueError, match="already in use by session g"):
            db.set_session_title("c", "Project")
        assert db.get_session_title("g") == "Project"

    def test_live_parent_keeps_title(self, db):
        db.create_session("p", "cli")
        db.create_session("c", "cli", parent_session_id="p")  # a sub-agent, parent still live
        db.set_session_title("p", "Project")
        with pytest.raises(ValueError, match="already in use by session p"):
            db.set_session_title("c", "Project")
        assert db.get_session_title("p") == "Project"

    def test_parent_ended_otherwise_keeps_title(self, db):
        chain(db, "p", "c", end_reason="user_exit")
        db.set_session_title("p", "Project")
        with pytest.raises(ValueError, match="already in use by session p"):
            db.set_session_title("c", "Project")

    def test_descendant_holder_does_not_move_up(self, db):
        chain(db, "p", "c")
        db.set_session_title("c", "Project")
        with pytest.raises(ValueError, match="already in use by session c"):
            db.set_session_title("p", "Project")

    def test_sibling_holder_is_an_error(self, db):
        db.create_session("p", "cli")
        db.end_session("p", "compression")
        db.create_session("a", "cli", parent_session_id="p")
        db.create_session("b", "cli", parent_session_id="p")
        db.set_session_title("a", "Project")
        with pytest.raises(ValueError, match="already in use by session a"):
            db.set_session_title("b", "Project")

    def test_cycle_in_parent_links_terminates(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli", parent_session_id="a")
        db.create_session("x", "cli")
        for sid in ("a", "b"):
            db.end_session(sid, "compression")
        db._write(lambda c: c.execute("UPDATE sessions SET parent_session_id='b' WHERE id='a'"))
        db.set_session_title("x", "Elsewhere")
        with pytest.raises(ValueError, match="already in use by session x"):
            db.set_session_title("a", "Elsewhere")
        db.set_session_title("b", "Loop")
        assert db.set_session_title("a", "Loop") is True  # b is a's compression parent
        assert db.get_session_title("b") is None

    def test_moved_title_is_hand_set(self, db):
        chain(db, "p", "c")
        assert db.set_auto_title("p", "Project") == "Project"
        db.set_session_title("c", "Project")
        assert db.get_meta(auto_title_key("p")) is None
        assert db.set_auto_title("c", "Other") is None
        assert db.get_session_title("c") == "Project"


# ---------------------------------------------------------------------------- set_auto_title
class TestAutoTitle:
    def test_sets_title_on_untitled_session(self, db):
        db.create_session("s1", "cli")
        assert db.set_auto_title("s1", " Fix  Build ") == "Fix Build"
        assert db.get_session_title("s1") == "Fix Build"
        assert db.is_auto_title("s1") is True

    def test_collision_takes_next_number(self, db):
        for sid in ("a", "b", "c"):
            db.create_session(sid, "cli")
        db.set_session_title("a", "Fix Build")
        assert db.set_auto_title("b", "Fix Build") == "Fix Build #2"
        assert db.set_auto_title("c", "Fix Build") == "Fix Build #3"

    def test_number_is_max_plus_one(self, db):
        for sid in ("a", "b", "c"):
            db.create_session(sid, "cli")
        db.set_session_title("a", "T")
        db.set_session_title("b", "T #3")
        assert db.set_auto_title("c", "T") == "T #4"

    def test_numbered_request_collision_renumbers_the_base(self, db):
        for sid in ("a", "b", "c"):
            db.create_session(sid, "cli")
        db.set_session_title("a", "T")
        db.set_session_title("b", "T #2")
        assert db.set_auto_title("c", "T #2") == "T #3"

    def test_free_numbered_request_taken_as_is(self, db):
        db.create_session("a", "cli")
        assert db.set_auto_title("a", "T #7") == "T #7"

    def test_never_replaces_hand_set_title(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "Mine")
        assert db.set_auto_title("s1", "Generated") is None
        assert db.get_session_title("s1") == "Mine"
        assert db.is_auto_title("s1") is False

    def test_replaces_previous_automatic_title(self, db):
        db.create_session("s1", "cli")
        db.set_auto_title("s1", "First guess")
        assert db.set_auto_title("s1", "Better") == "Better"
        assert db.get_session_title("s1") == "Better"
        assert db.get_meta(auto_title_key("s1")) == "Better"

    def test_hand_set_after_auto_becomes_permanent(self, db):
        db.create_session("s1", "cli")
        db.set_auto_title("s1", "Generated")
        db.set_session_title("s1", "Generated")  # the user confirms it by hand
        assert db.set_auto_title("s1", "Another") is None
        assert db.get_session_title("s1") == "Generated"

    def test_title_written_outside_the_api_counts_as_hand_set(self, db):
        db.create_session("s1", "cli")
        db.set_auto_title("s1", "Generated")
        db._write(lambda c: c.execute("UPDATE sessions SET title='Typed' WHERE id='s1'"))
        assert db.set_auto_title("s1", "Again") is None  # stale marker does not match the title
        assert db.get_session_title("s1") == "Typed"

    def test_keeps_own_auto_title_when_equal(self, db):
        db.create_session("s1", "cli")
        db.set_auto_title("s1", "Same")
        assert db.set_auto_title("s1", "Same") == "Same"

    def test_own_numbered_title_is_not_counted_against_itself(self, db):
        for sid in ("a", "b"):
            db.create_session(sid, "cli")
        db.set_session_title("a", "T")
        assert db.set_auto_title("b", "T") == "T #2"
        assert db.set_auto_title("b", "T") == "T #2"

    def test_unknown_and_empty(self, db):
        assert db.set_auto_title("nope", "x") is None
        db.create_session("s1", "cli")
        assert db.set_auto_title("s1", " \u200b ") is None
        assert db.get_session_title("s1") is None

    def test_too_long_is_cut_not_raised(self, db):
        db.create_session("s1", "cli")
        assert db.set_auto_title("s1", "a" * 150) == "a" * 100

    def test_too_long_with_suffix_fits_in_100(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        db.set_session_title("a", "b" * 100)
        got = db.set_auto_title("b", "b" * 100)
        assert got == "b" * 97 + " #2"
        assert len(got) == 100

    def test_after_clearing_by_hand_auto_may_title_again(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "Mine")
        db.set_session_title("s1", None)
        assert db.set_auto_title("s1", "Auto") == "Auto"


# ---------------------------------------------------------------------------- lookups
class TestLookups:
    def test_get_session_title_unknown(self, db):
        assert db.get_session_title("nope") is None

    def test_get_session_by_title_exact(self, db):
        db.create_session("s1", "cli", model="m")
        db.set_session_title("s1", "Exact Title")
        row = db.get_session_by_title("Exact Title")
        assert row["id"] == "s1" and row["model"] == "m"
        assert db.get_session_by_title("exact title") is None
        assert db.get_session_by_title("Exact") is None
        assert db.get_session_by_title(" Exact Title") is None
        assert db.get_session_by_title(None) is None

    def test_resolve_exact(self, db):
        db.create_session("s1", "cli")
        db.set_session_title("s1", "Proj")
        assert db.resolve_session_by_title("Proj") == "s1"
        assert db.resolve_session_by_title("Missing") is None

    def test_resolve_prefers_newest_numbered_variant(self, db):
        for sid, title, t in (("a", "Proj", 100.0), ("b", "Proj #2", 300.0),
                              ("c", "Proj #3", 200.0)):
            db.create_session(sid, "cli")
            db.set_session_title(sid, title)
            set_started(db, sid, t)
        assert db.resolve_session_by_title("Proj") == "b"  # newest by started_at, not max N

    def test_resolve_variant_even_when_exact_is_newer(self, db):
        for sid, title, t in (("a", "Proj", 500.0), ("b", "Proj #2", 100.0)):
            db.create_session(sid, "cli")
            db.set_session_title(sid, title)
            set_started(db, sid, t)
        assert db.resolve_session_by_title("Proj") == "b"

    def test_resolve_ignores_non_numeric_suffixes(self, db):
        for sid, title in (("a", "Proj"), ("b", "Proj #two"), ("c", "Proj #2 extra"),
                           ("d", "Proj #")):
            db.create_session(sid, "cli")
            db.set_session_title(sid, title)
        assert db.resolve_session_by_title("Proj") == "a"

    @pytest.mark.parametrize("title,decoy", [("a_b", "axb #2"), ("100%", "100x #2"),
                                             ("50% off", "50%XYZ off #3"), ("back\\slash",
                                                                           "backXslash #2")])
    def test_resolve_wildcards_literal(self, db, title, decoy):
        db.create_session("real", "cli")
        db.create_session("decoy", "cli")
        db.set_session_title("real", title)
        db.set_session_title("decoy", decoy)
        assert db.resolve_session_by_title(title) == "real"

    def test_resolve_is_case_sensitive(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        db.set_session_title("a", "Proj")
        db.set_session_title("b", "proj #2")
        assert db.resolve_session_by_title("Proj") == "a"


# ---------------------------------------------------------------------------- §7 numbering
class TestNextTitleInLineage:
    def titled(self, db, *titles):
        for i, t in enumerate(titles):
            db.create_session(f"s{i}", "cli")
            db.set_session_title(f"s{i}", t)

    def test_nothing_exists_returns_base(self, db):
        assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build"

    def test_spec_base_exists(self, db):
        self.titled(db, "Fix Docker Build")
        assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build #2"

    def test_spec_2_and_3_exist(self, db):
        self.titled(db, "Fix Docker Build #2", "Fix Docker Build #3")
        assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build #4"

    def test_spec_called_with_numbered_title(self, db):
        self.titled(db, "my project", "my project #2")
        assert db.get_next_title_in_lineage("my project #2") == "my project #3"

    def test_spec_like_wildcards_escaped(self, db):
        self.titled(db, "testXproject #2")
        assert db.get_next_title_in_lineage("test_project") == "test_project"

    def test_numbered_input_with_nothing_existing_returns_base(self, db):
        assert db.get_next_title_in_lineage("Report #5") == "Report"

    def test_percent_literal(self, db):
        self.titled(db, "100xdone #4")
        assert db.get_next_title_in_lineage("100%done") == "100%done"

    def test_only_variant_exists(self, db):
        self.titled(db, "T #2")
        assert db.get_next_title_in_lineage("T") == "T #3"

    def test_case_sensitive(self, db):
        self.titled(db, "fix docker build")
        assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build"
