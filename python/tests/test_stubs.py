"""The type stubs (redlease/__init__.pyi) name everything the package exports, and every
public method and property of its main classes."""

import ast
import inspect
from pathlib import Path

import redlease

STUBS = ast.parse((Path(redlease.__file__).parent / "__init__.pyi").read_text())


def stub_classes():
    return {node.name: node for node in STUBS.body if isinstance(node, ast.ClassDef)}


def stub_members(name, classes):
    node = classes[name]
    members = {
        item.name for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
    } | {item.target.id for item in node.body if isinstance(item, ast.AnnAssign)}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            members |= stub_members(base.id, classes)
    return members


def test_the_stubs_name_every_export():
    named = set()
    for node in STUBS.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            named.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            named |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.AnnAssign):
            named.add(node.target.id)
    assert set(redlease.__all__) - named == set()
    assert {"DEFAULT_TTL", "DEFAULT_WAIT", "__version__"} <= named


def test_the_stubs_name_every_public_member():
    classes = stub_classes()
    missing = {}
    for name in ("Client", "AsyncClient", "Guard", "AsyncGuard", "Latch", "AsyncLatch",
                 "Election", "AsyncElection", "FencedStore"):
        public = {m for m, _ in inspect.getmembers(getattr(redlease, name)) if not m.startswith("_")}
        lacking = public - stub_members(name, classes)
        if lacking:
            missing[name] = sorted(lacking)
    assert missing == {}
