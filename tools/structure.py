"""The shape of the code, measured: ``python tools/structure.py [--json]`` (issue 26).

Prints, for ``hermes_state/`` and ``chaos/``: the package tree (modules and lines per package),
import cycles between siblings, the import-linter contracts (upward imports; every module on a
layer where a contract is exhaustive), the largest flat folder, the longest modules, and the
private reaches across modules (``from m import _x`` or ``m._x`` where ``m`` is another module of
the project), and private attributes reached on objects of other modules (``obj._x`` where
``obj`` is not ``self``/``cls`` and this module defines no ``_x``). ``tests/test_structure.py``
holds the limits.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hermes_state", "chaos")


def modules(package: str) -> dict[str, Path]:
    """``{dotted name: path}`` of every module of ``package``."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def tree(package: str) -> list[dict]:
    """One row per folder: its dotted name, module count and lines."""
    rows: dict[str, dict] = {}
    for name, path in modules(package).items():
        folder = ".".join(path.relative_to(ROOT).parent.parts)
        row = rows.setdefault(folder, {"package": folder, "modules": 0, "lines": 0})
        row["modules"] += 1
        row["lines"] += len(path.read_text(encoding="utf-8").splitlines())
    return sorted(rows.values(), key=lambda r: r["package"])


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_reaches(package: str) -> list[str]:
    """``importer -> module._name`` for every private name of another project module used."""
    mods = {**modules("hermes_state"), **modules("chaos")}
    found = []
    for name, path in modules(package).items():
        tree_ = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree_):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(name, path, node)
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:
                        aliases[a.asname or a.name] = sub
                    elif target in mods and target != name and a.name.startswith("_") \
                            and not a.name.startswith("__"):
                        found.append(f"{name} -> {target}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree_):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = aliases.get(node.value.id)
                if target and target != name and node.attr.startswith("_") \
                        and not node.attr.startswith("__"):
                    found.append(f"{name} -> {target}.{node.attr}")
    return sorted(found)


def attribute_reaches(package: str) -> list[str]:
    """``module: expr._name`` for every private attribute of an object that is not ``self``/
    ``cls`` and whose name this module never defines (a reach into another module's object)."""
    found = []
    for name, path in modules(package).items():
        tree_ = ast.parse(path.read_text(encoding="utf-8"))
        defined: set[str] = set()
        for node in ast.walk(tree_):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
        for node in ast.walk(tree_):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and node.attr not in defined
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                found.append(f"{name}: {ast.unparse(node.value)[:30]}.{node.attr}")
    return sorted(found)


def cycles(package: str) -> list[list[str]]:
    """Strongly connected sets of modules (lazy imports count, type-checking imports do not)."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    mods = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(mods)) for m in mods}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return found


def contracts() -> dict:
    """Run import-linter with this interpreter: ``{"kept": n, "broken": n, "output": text}``."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
         " sys.exit(lint_imports_command())", "--config", str(ROOT / "pyproject.toml"),
         "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    kept = out.count(" KEPT")
    broken = out.count(" BROKEN")
    return {"returncode": proc.returncode, "kept": kept, "broken": broken, "output": out}


def measure(with_contracts: bool = True) -> dict:
    """Every figure of the report, as a dict."""
    result: dict = {}
    for package in PACKAGES:
        mods = modules(package)
        lengths = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in mods.items()}
        folders = Counter(".".join(p.relative_to(ROOT).parent.parts) for p in mods.values())
        widest = max(folders.items(), key=lambda kv: kv[1])
        result[package] = {
            "tree": tree(package),
            "modules": len(mods),
            "lines": sum(lengths.values()),
            "cycles": cycles(package),
            "widest_folder": {"package": widest[0], "modules": widest[1]},
            "longest": sorted(lengths.items(), key=lambda kv: -kv[1])[:5],
            "private_reaches": private_reaches(package),
            "attribute_reaches": attribute_reaches(package),
        }
    if with_contracts:
        result["contracts"] = contracts()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--no-contracts", action="store_true", help="skip import-linter")
    args = ap.parse_args(argv)
    m = measure(with_contracts=not args.no_contracts)
    if args.json:
        print(json.dumps(m, indent=2, default=str))
        return 0
    for package in PACKAGES:
        r = m[package]
        print(f"{package}/: {r['modules']} modules, {r['lines']} lines")
        for row in r["tree"]:
            print(f"  {row['package']:<32} {row['modules']:>3} modules {row['lines']:>6} lines")
        print(f"  cycles: {len(r['cycles'])}")
        w = r["widest_folder"]
        print(f"  widest flat folder: {w['package']} ({w['modules']} modules)")
        print("  longest: " + ", ".join(f"{n} {k}" for n, k in r["longest"]))
        print(f"  private reaches across modules: {len(r['private_reaches'])}")
        for reach in r["private_reaches"]:
            print(f"    {reach}")
        print(f"  private attributes of other modules' objects: {len(r['attribute_reaches'])}")
        for reach in r["attribute_reaches"]:
            print(f"    {reach}")
    if "contracts" in m:
        c = m["contracts"]
        print(f"import-linter: {c['kept']} contracts kept, {c['broken']} broken"
              " (upward imports: a broken layers contract)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
