"""Structure counts of the package code, measured from the source (the AST), for reviews.

``python scripts/code_metrics.py [ROOT]`` prints, for the packages ``rpg_core``, ``rpg_jax``,
``rpg_llm``, ``paper_figures`` and the ``benchmarks`` scripts (task solutions left out):

* modules over 800 lines, and the largest module;
* import cycles among ``rpg_llm`` modules: strongly connected components of more than one
  module in the graph of runtime imports (module level and function-local; ``TYPE_CHECKING``
  blocks left out; an import names its most specific module);
* function-local imports of the project's own modules, per package;
* the word ``Any`` in ``rpg_llm``'s source (imports, annotations and docstrings alike, as
  ``grep -w`` counts it).

It reads files only; run it on two checkouts to compare them. Duplicate pairs come from the
tool library's ``duplicates`` (not a project dependency), so they are not counted here.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

PACKAGES = ("rpg_core", "rpg_jax", "rpg_llm", "paper_figures")
OWN = (*PACKAGES, "testkit")
BIG = 800


def _files(root: Path, top: str) -> list[Path]:
    """The package's modules (task solutions left out); for ``benchmarks`` its scripts only
    (run folders below it hold generated scripts)."""
    found = (root / top).glob("*.py") if top == "benchmarks" else (root / top).rglob("*.py")
    return sorted(p for p in found if "solutions" not in p.parts)


def _module(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> list[tuple[str, list[str], bool]]:
    """``(base module, imported names, inside a function)`` of every runtime import."""
    out: list[tuple[str, list[str], bool]] = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_func)
                continue
            func = in_func or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                out.extend((a.name, [], in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (child.level - 1)]
                    base = ".".join([*pkg, base] if base else pkg)
                out.append((base, [a.name for a in child.names], in_func))
            visit(child, func)

    visit(tree, False)
    return out


def measure(root: Path) -> dict[str, object]:
    """The counts of the checkout at ``root`` (see the module docstring)."""
    sizes: dict[str, int] = {}
    local: dict[str, int] = defaultdict(int)
    any_count = 0
    modules: dict[str, tuple[Path, ast.AST, bool]] = {}
    for top in (*PACKAGES, "benchmarks"):
        for path in _files(root, top):
            text = path.read_text()
            sizes[str(path.relative_to(root))] = text.count("\n")
            tree = ast.parse(text)
            name = _module(root, path)
            modules[name] = (path, tree, path.name == "__init__.py")
            if top == "rpg_llm":
                any_count += len(re.findall(r"\bAny\b", text))
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (_, tree, is_pkg) in modules.items():
        for base, names, in_func in _imports(tree, name, is_pkg):
            if in_func and base.split(".")[0] in OWN and name.split(".")[0] in PACKAGES:
                local[name.split(".")[0]] += 1
            if not name.startswith("rpg_llm"):
                continue
            targets = [f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names] or [base]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t.startswith("rpg_llm") and t != name:
                    graph[name].add(t)
    cycles = [c for c in _sccs(graph) if len(c) > 1]
    big = sorted(((n, p) for p, n in sizes.items() if n > BIG), reverse=True)
    largest = max(sizes.items(), key=lambda kv: kv[1])
    return {
        "modules_over_800": big,
        "largest": largest,
        "cycles": cycles,
        "local_imports": dict(local),
        "any_rpg_llm": any_count,
    }


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {t for ts in graph.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph.get(nxt, ())))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else ".").resolve()
    m = measure(root)
    big = m["modules_over_800"]
    assert isinstance(big, list)
    print(f"modules over {BIG} lines: {len(big)}")
    for n, p in big:
        print(f"  {n:6d} {p}")
    print(f"largest module: {m['largest']}")
    cycles = m["cycles"]
    assert isinstance(cycles, list)
    print(f"import cycles in rpg_llm: {len(cycles)}")
    for c in cycles:
        print(f"  {len(c)} modules: {', '.join(c)}")
    local = m["local_imports"]
    assert isinstance(local, dict)
    total = sum(local.values())
    print(f"function-local imports of own modules: {total} {dict(sorted(local.items()))}")
    print(f"Any in rpg_llm: {m['any_rpg_llm']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
