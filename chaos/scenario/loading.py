"""Reading a scenario file: bounded file reading, YAML with line numbers (SPEC §16.4).

A scenario file must be a regular file of at most :data:`MAX_FILE_BYTES`, not a symbolic link
(a FIFO, a device, a directory or a link is refused before anything is read from it, so
``chaos validate`` never blocks, fills memory or reads through a planted link:
:mod:`chaos.files.inputs`). The YAML is composed once into a node tree that keeps every node's
line; the data is constructed from the same tree. Aliases may not expand past
:data:`MAX_EXPANDED_NODES`.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Iterable

import yaml

from ..files import inputs

#: Largest scenario file read (bytes): the shipped scenarios are under 4 KiB.
MAX_FILE_BYTES = 1024 * 1024


class FileProblem(Exception):
    """The file cannot be used as a scenario; ``line`` is set for an encoding error."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def read_text(path: str | os.PathLike) -> str:
    """The text of a scenario file, read without following a link, without blocking and within
    :data:`MAX_FILE_BYTES` (:mod:`chaos.files.inputs`).

    Raises:
        FileProblem: the file cannot be opened, is a symbolic link, is not a regular file
            (FIFO, device, socket, directory: refused before any read), is larger than the
            limit, or is not UTF-8 (``line`` set).
    """
    try:
        data = inputs.read_bytes(path, MAX_FILE_BYTES)
    except inputs.InputError as e:
        reason = e.reason
        if reason.startswith("not a regular file"):
            reason += ": a scenario is a YAML file"
        elif reason.startswith("too large"):
            reason += " (a scenario file is at most that)"
        raise FileProblem(reason) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise FileProblem(f"not UTF-8 text: byte {data[e.start]:#04x}", line) from None


class Loader(yaml.SafeLoader):
    """SafeLoader without implicit timestamps: a scenario has no dates, and ``2020-13-45``
    must be a string the schema rejects, not a constructor crash."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.1 wants a dot in a float (``1e-05`` and ``1E5`` would be strings), JSON and YAML 1.2
# do not: ``scenario.resolved.json`` is JSON (``json.dumps`` writes ``1e-05``) and is read back
# with this loader (``chaos replay``), so the JSON forms are numbers too.
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _child(node: yaml.Node | None, key: Any) -> tuple[yaml.Node | None, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        found = None
        for k, v in node.value:  # last one wins, as in the constructed data
            if isinstance(k, yaml.ScalarNode) and k.tag == _STR_TAG and k.value == key:
                found = (k, v)
        return found
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return None, node.value[key]
    return None


def line_of(root: yaml.Node | None, path: Iterable[Any], key: bool = False) -> int:
    """1-based line of the node at ``path`` (of its key node if ``key``); the deepest existing
    ancestor's line when the path does not exist (e.g. a missing required key)."""
    node = root
    path = list(path)
    for i, p in enumerate(path):
        hit = _child(node, p)
        if hit is None:
            break
        knode, node = hit
        if key and i == len(path) - 1 and knode is not None:
            return knode.start_mark.line + 1
    return node.start_mark.line + 1 if node is not None else 1


def yaml_error_line(e: Exception, text: str) -> int:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        return mark.line + 1
    pos = getattr(e, "position", None)  # yaml.reader.ReaderError
    if isinstance(pos, int):
        return text[:pos].count("\n") + 1
    return 1


def yaml_error_message(e: Exception) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        context = e.context or ""
        if context and e.context_mark is not None and e.problem_mark is not None:
            cm = e.context_mark
            if (cm.line, cm.column) != (e.problem_mark.line, e.problem_mark.column):
                context += f" (from line {cm.line + 1}, column {cm.column + 1})"
        parts = [p for p in (context, e.problem) if p]
        msg = "; ".join(parts) if parts else " ".join(str(e).split())
        mark = e.problem_mark or e.context_mark
        if mark is not None:
            msg += f" (column {mark.column + 1})"
        return f"YAML syntax error: {msg}"
    return f"YAML error: {' '.join(str(e).split())}"


def scan_nodes(root: yaml.Node, emit) -> None:
    """Report non-string and duplicate mapping keys (PyYAML silently keeps the last duplicate)."""
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, list]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, int] = {}
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    continue
                line = k.start_mark.line + 1
                if not isinstance(k, yaml.ScalarNode):
                    emit(path, line, "a mapping key must be a plain string, not a list or mapping")
                    continue
                if k.tag != _STR_TAG:
                    kind = k.tag.rsplit(":", 1)[-1]
                    emit(
                        path,
                        line,
                        f"key {k.value!r} is not a string (YAML reads it as {kind}; quote it)",
                    )
                    continue
                if k.value in keys:
                    emit(
                        path + [k.value],
                        line,
                        f"duplicate key {k.value!r} (first on line {keys[k.value]}; "
                        "YAML keys must be unique)",
                    )
                keys.setdefault(k.value, line)
                stack.append((v, path + [k.value]))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, path + [i]))


def sanitize(data: Any, emit_path) -> None:
    """Drop non-string keys (already reported) and report non-finite numbers, in place."""
    seen: set[int] = set()
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, float) and not math.isfinite(obj):
            emit_path(path, f"{obj!r} is not a finite number")
            continue
        if not isinstance(obj, (dict, list)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k in [k for k in obj if not isinstance(k, str)]:
                del obj[k]
            stack.extend((v, path + [k]) for k, v in obj.items())
        else:
            stack.extend((v, path + [i]) for i, v in enumerate(obj))


MAX_EXPANDED_NODES = 10_000


def expanded_size(root: yaml.Node) -> int:
    """Nodes the document would have with every alias expanded (memoized: linear in the file)."""
    memo: dict[int, int] = {}
    order: list[yaml.Node] = []
    stack = [root]
    while stack:  # post-order without recursion
        node = stack.pop()
        if id(node) in memo:
            continue
        memo[id(node)] = -1
        order.append(node)
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for kv in node.value for n in kv)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    for node in reversed(order):
        if isinstance(node, yaml.MappingNode):
            kids = [n for kv in node.value for n in kv]
        elif isinstance(node, yaml.SequenceNode):
            kids = node.value
        else:
            kids = []
        memo[id(node)] = min(1 + sum(max(memo.get(id(k), 1), 1) for k in kids),
                             MAX_EXPANDED_NODES + 1)
    return memo[id(root)]
