"""Before/after figures of the rpg_llm layout (run from a checkout's root): Trainer size, top-level
modules, task-kind mentions and Any in the loop, function-local imports of our own modules."""

import ast
import pathlib
import re

root = pathlib.Path(".")


def cls_lines(path, name):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            longest = max(
                ((n.end_lineno - n.lineno + 1), n.name)
                for n in node.body
                if isinstance(n, ast.FunctionDef)
            )
            return node.end_lineno - node.lineno + 1, longest


trainer = next(root.glob("rpg_llm/loop/trainer.py"))
print("Trainer lines, longest method:", cls_lines(trainer, "Trainer"))
top = [p for p in (root / "rpg_llm").glob("*.py") if p.name != "__init__.py"]
print("top-level modules in rpg_llm/:", len(top))
loop = list((root / "rpg_llm" / "loop").rglob("*.py"))
print(
    "nanogpt mentions in loop/:", sum(len(re.findall("nanogpt", p.read_text(), re.I)) for p in loop)
)
print("Any in loop/:", sum(len(re.findall(r"\bAny\b", p.read_text())) for p in loop))
local = 0
for p in (
    list((root / "rpg_llm").rglob("*.py"))
    + list((root / "rpg_jax").rglob("*.py"))
    + list((root / "rpg_core").rglob("*.py"))
    + list((root / "paper_figures").rglob("*.py"))
):
    if "solutions" in p.parts:
        continue
    tree = ast.parse(p.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] in (
                    "rpg_llm",
                    "rpg_jax",
                    "rpg_core",
                    "paper_figures",
                ):
                    local += 1
                elif isinstance(sub, ast.Import) and any(
                    a.name.split(".")[0] in ("rpg_llm", "rpg_jax", "rpg_core", "paper_figures")
                    for a in sub.names
                ):
                    local += 1
print("function-local imports of our own modules:", local)
