"""The code's shape, for before/after comparisons of a restructuring: modules per package,
the longest modules, functions and classes (a class with its in-repo bases: a mixin's lines
count toward its host), the functions taking more than 8 parameters, and which package
imports which.

    python bench/code_structure.py [ROOT]        # ROOT: a checkout (default: this one)
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from pathlib import Path

PACKAGES = ("service", "worker", "scheduler")


def group(module: str) -> str:
    """service.store.models.jobs -> service.store; worker.engine.sim -> worker.engine."""
    return ".".join(module.split(".")[:2])


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    modules: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    edges: Counter[tuple[str, str]] = Counter()
    classes: dict[str, tuple[int, list[str], str]] = {}  # name -> (lines, bases, where)
    wide: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            source = path.read_text()
            modules.append((len(source.splitlines()), str(rel)))
            here = group(".".join(rel.with_suffix("").parts))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    functions.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
                    if _parameters(node) > 8:
                        wide.append(f"{rel}:{node.name} ({_parameters(node)})")
                if isinstance(node, ast.ClassDef):
                    assert node.end_lineno is not None
                    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                    classes[node.name] = (node.end_lineno - node.lineno + 1, bases,
                                          f"{rel}:{node.name}")
                if (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                        and node.module.split(".")[0] in PACKAGES):
                    there = group(node.module)
                    if there.split(".")[0] != here.split(".")[0]:
                        edges[(here, there)] += 1
    per_package = Counter(name.split("/")[0] for _, name in modules)
    sizes = sorted(n for n, _ in functions)
    print(f"modules: {dict(per_package)}, {len(modules)} in all, "
          f"{sum(n for n, _ in modules)} lines")
    print("longest modules:", ", ".join(f"{name} ({n})" for n, name in sorted(modules)[-6:][::-1]))
    print(f"functions: {len(sizes)}, median {statistics.median(sizes):.0f} lines, "
          f"p90 {sizes[int(0.9 * len(sizes))]}")
    print("longest functions:", ", ".join(f"{name} ({n})"
                                          for n, name in sorted(functions)[-6:][::-1]))
    sized = sorted((_with_bases(name, classes), where) for name, (_, _, where)
                   in classes.items())
    print("largest classes (with in-repo bases):",
          ", ".join(f"{where} ({n})" for n, where in sized[-4:][::-1]))
    print(f"functions over 8 parameters: {len(wide)}" + (": " + ", ".join(wide) if wide else ""))
    print("imports across packages (from -> to: imports):")
    for (here, there), n in sorted(edges.items()):
        print(f"  {here} -> {there}: {n}")


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return count - (1 if names and names[0].arg in ("self", "cls") else 0)


def _with_bases(name: str, classes: dict[str, tuple[int, list[str], str]],
                seen: frozenset[str] = frozenset()) -> int:
    lines, bases, _ = classes[name]
    return lines + sum(_with_bases(b, classes, seen | {name}) for b in bases
                       if b in classes and b not in seen)


if __name__ == "__main__":
    main()
