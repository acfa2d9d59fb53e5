"""The layout stays readable: no function grows past 100 lines, and the README's annotated file tree lists
exactly the package's modules (a module added, moved or removed shows up here until the tree says so)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "albertlm"
MAX_FUNCTION_LINES = 100


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_function_is_over_100_lines():
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"split these along their steps: {long}"


def readme_tree(readme: Path = REPO / "README.md") -> set[str]:
    """The module paths of the README's file tree, from the ``albertlm/`` line to the next top-level entry:
    an entry indented two spaces is in the package, four spaces in the folder above it."""
    text = readme.read_text(encoding="utf-8")
    block = text[text.index("\nalbertlm/\n") + len("\nalbertlm/\n"):]
    paths, folder = set(), ""
    for line in block.splitlines():
        if not line.startswith(" "):
            break  # the next top-level entry (tests/)
        m = re.match(r"^( {2}| {4})(\S+)", line)
        if not m or len(line) - len(line.lstrip()) > 4:
            continue  # a continuation of a description
        depth, name = len(m.group(1)) // 2, m.group(2)
        if depth == 1:
            folder = name if name.endswith("/") else ""
            if name.endswith(".py"):
                paths.add(name)
        elif name.endswith(".py"):
            paths.add(folder + name)
    return paths


def test_readme_tree_lists_exactly_the_modules():
    modules = {str(p.relative_to(PACKAGE)) for p in _modules() if p.name != "__init__.py"}
    listed = readme_tree()
    assert not modules - listed, f"add to the README's file tree: {sorted(modules - listed)}"
    assert not listed - modules, f"the README's file tree names modules that do not exist: {sorted(listed - modules)}"
