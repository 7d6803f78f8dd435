"""Where a planted bug sits, as statements a run can be seen to reach (issue 27 item 7).

A scenario that fails proves nothing about a mutant when none of its processes ran the mutated
code: the failure was the machine's (a timing bound under load) or the scenario's own. The
audit therefore marks the mutated statements: :func:`sites` turns a rewritten region of a file
into *sites*, the statements to mark, each ``{"line", "col", "where"}`` (the statement starting
at ``line``/``col`` in the mutated file; the mark goes ``before`` or ``after`` it in its block).
The import probe (:mod:`chaos.audit.probe`) plants a call before/after each site when the module
is imported (at the AST, so the file on disk stays exactly the mutant), and the first time a
process runs it, it records ``reached`` in the probe log.

The region is what the rewrite inserted (``[start, end)`` character offsets in the new text).
The marked statements are the innermost ones overlapping it. A deletion (nothing inserted, or
only blank text) marks the statement before the deletion point in the same block (the deleted
text's indentation), else the one after it: the place where the deleted code used to run.
"""

from __future__ import annotations

import ast
from bisect import bisect_right

#: Sites of one mutated copy: ``{path relative to the copy's root: [site, ...]}``.
Sites = dict[str, list[dict]]

_LISTS = ("body", "orelse", "finalbody")


class NoSites(ValueError):
    """The rewritten region maps to no statement (the file does not parse, or is empty)."""


class _Text:
    """A source text with (line, byte column) <-> character offset conversions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def offset(self, line: int, col_bytes: int) -> int:
        start = self.starts[line - 1]
        line_text = self.text[start:self.starts[line] if line < len(self.starts) else None]
        return start + len(line_text.encode("utf-8")[:col_bytes].decode("utf-8", "ignore"))

    def line_of(self, offset: int) -> int:
        return bisect_right(self.starts, offset)


def _child_lists(node: ast.AST) -> list[list[ast.stmt]]:
    out = []
    for name in _LISTS:
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(node, "handlers", None) or []:
        out.append(handler.body)
    for case in getattr(node, "cases", None) or []:
        out.append(case.body)
    return out


def _site(st: ast.stmt, where: str) -> dict:
    return {"line": st.lineno, "col": st.col_offset, "where": where}


def _bare_string(tree: ast.Module, site: dict) -> bool:
    for st in _walk(tree.body):
        if (st.lineno, st.col_offset) == (site["line"], site["col"]):
            return (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)
                    and isinstance(st.value.value, str))
    return False


def _walk(stmts: list[ast.stmt]):
    """Every statement, depth first, with its block."""
    for st in stmts:
        yield st
        for lst in _child_lists(st):
            yield from _walk(lst)


def sites(new_text: str, start: int, end: int, indent: int | None = None) -> list[dict]:
    """The statements of ``new_text`` that mark the region ``[start, end)`` (see the module doc).

    Args:
        new_text: the mutated file's source.
        start, end: the inserted text's character offsets (``start == end``: a deletion).
        indent: the column of the deleted text's first line (a deletion), if known.
    Returns:
        A non-empty list of sites.
    Raises:
        NoSites: ``new_text`` does not parse or has no statement.
    """
    try:
        tree = ast.parse(new_text)
    except SyntaxError as exc:
        raise NoSites(f"the mutated file does not parse: {exc}") from None
    if not tree.body:
        raise NoSites("the mutated file has no statement")
    src = _Text(new_text)

    def span(st: ast.stmt) -> tuple[int, int]:
        return (src.offset(st.lineno, st.col_offset),
                src.offset(st.end_lineno or st.lineno, st.end_col_offset or 0))

    if new_text[start:end].strip():
        def innermost(stmts: list[ast.stmt]) -> list[dict]:
            out: list[dict] = []
            for st in stmts:
                a, b = span(st)
                if a < end and b > start:
                    inner = [s for lst in _child_lists(st) for s in innermost(lst)]
                    out += inner or [_site(st, "before")]
            return out

        found = innermost(tree.body)
        # a changed docstring (or bare string) is no behaviour: marked only when alone
        code = [s for s in found if not _bare_string(tree, s)]
        if code or found:
            return code or found
    return _deletion_site(tree, src, start, indent, span)


def _deletion_site(tree: ast.Module, src: _Text, at: int, indent: int | None, span) -> list[dict]:
    every = list(_walk(tree.body))
    # text removed inside one statement (or a compound statement's header): that statement
    inside = [st for st in every if span(st)[0] < at <= span(st)[1]]
    if inside:
        st = max(inside, key=lambda s: span(s)[0])
        children = [c for lst in _child_lists(st) for c in lst]
        if not children or at < min(span(c)[0] for c in children):
            return [_site(st, "before")]
    if indent is None:
        line = src.line_of(at)
        text = src.text[src.starts[line - 1]:]
        indent = len(text) - len(text.lstrip(" \t"))

    def dedented_between(lo: int, hi: int) -> bool:
        return any(st.col_offset < indent and lo < span(st)[0] <= hi for st in every)

    before = [st for st in every if st.col_offset == indent and span(st)[1] <= at
              and not dedented_between(span(st)[1], at)]
    if before:
        return [_site(max(before, key=lambda st: span(st)[1]), "after")]
    after = [st for st in every if st.col_offset == indent and span(st)[0] >= at
             and not dedented_between(at, span(st)[0] - 1)]
    if after:
        return [_site(min(after, key=lambda st: span(st)[0]), "before")]
    containing = [st for st in every if span(st)[0] <= at <= span(st)[1]]
    if containing:
        return [_site(max(containing, key=lambda st: span(st)[0]), "before")]
    nearest = min(tree.body, key=lambda st: abs(span(st)[0] - at))
    return [_site(nearest, "before")]


def changed(old_text: str, at: int, removed: str, inserted: str) -> tuple[int, int, int]:
    """The part of a rewrite that really changed: ``removed`` (at offset ``at`` of
    ``old_text``) became ``inserted``; their common head and tail are context a pattern matched,
    not the mutation.

    Returns:
        ``(start, end, indent)``: the changed region in the new text (``start == end``: text
        was only removed there) and the indentation of the line it starts on.
    """
    head = 0
    while head < min(len(removed), len(inserted)) and removed[head] == inserted[head]:
        head += 1
    tail = 0
    while (tail < min(len(removed), len(inserted)) - head
           and removed[-1 - tail] == inserted[-1 - tail]):
        tail += 1
    start = at + head
    end = at + len(inserted) - tail
    line_start = old_text.rfind("\n", 0, start) + 1
    line = old_text[line_start:]
    return start, end, len(line) - len(line.lstrip(" \t"))


def line_region(text: str, first_line: int, last_line: int) -> tuple[int, int]:
    """Character offsets ``[start, end)`` of lines ``first_line..last_line`` (1-based,
    inclusive) of ``text``; ``last_line < first_line`` is the empty region at the start of
    ``first_line`` (a deletion there)."""
    src = _Text(text)
    n = len(src.starts)
    start = src.starts[min(first_line, n) - 1] if first_line <= n else len(text)
    if last_line < first_line:
        return start, start
    end = src.starts[last_line] if last_line < n else len(text)
    return start, end
