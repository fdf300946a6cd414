"""The package's shape, checked: no import cycle, and imports go one way only.

    cli -> flows -> release -> check -> units/prebuilt/windows -> runtime -> toolchain, source -> config -> base

A module may import its own package and anything below it, never above: nothing imports the
CLI, no stage imports a flow, the runtime never imports the checks (the checks read the runtime).
Inside builder.flows the same holds: repair and build -> platforms -> publish. Imports anywhere in
a file count, lazy ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.common import REPO

BUILDER = REPO / "builder"
LAYERS = (
    ("builder.cli", "builder.__main__"),
    # The flows, one package per family: a new flow package (e.g. builder.deploy) goes into this tuple,
    # beside builder.flows, and may then import every stage below, never the CLI.
    ("builder.flows", "builder.deploy"),
    ("builder.release",),
    ("builder.check",),
    ("builder.units", "builder.prebuilt", "builder.windows"),
    ("builder.runtime",),
    ("builder.toolchain", "builder.source"),
    ("builder.config",),
    ("builder", "builder.errors", "builder.ui", "builder.paths", "builder.proc", "builder.locks", "builder.digest",
     "builder.interpreter"),
)


# inside builder.flows: the flows, then what they share (a platform never imports the flow that runs it)
FLOW_LAYERS = (
    ("builder.flows.build", "builder.flows.repair"),
    ("builder.flows.platforms",),
    ("builder.flows.publish",),
)


def _name(path: Path) -> str:
    rel = path.relative_to(BUILDER.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(p): p for p in BUILDER.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            stems = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            stems = [a.name for a in node.names]
        else:
            continue
        out |= {s for s in stems if s in known}
    return out


def _layer(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    best = None
    for i, prefixes in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or (prefix != "builder" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_imports_only_go_down():
    mods = _modules()
    wrong = []
    for name, path in mods.items():
        for target in _imports(path, set(mods)):
            if target == "builder" or _package(target) == _package(name):
                continue
            if _layer(target) < _layer(name):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports that go up:\n" + "\n".join(sorted(wrong))


def test_inside_the_flows_imports_only_go_down():
    mods = _modules()
    flows = {n: p for n, p in mods.items() if n.startswith("builder.flows.")}
    wrong = []
    for name, path in flows.items():
        for target in _imports(path, set(flows)):
            if target != name and _layer(target, FLOW_LAYERS) < _layer(name, FLOW_LAYERS):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports inside builder.flows that go up:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    mods = _modules()
    graph = {m: {t for t in _imports(p, set(mods)) if t != m and not (mods[t].name == "__init__.py" and
                                                                     m.startswith(t + "."))} for m, p in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            assert state.get(t) != 1, "import cycle: " + " -> ".join(stack[stack.index(t):] + [t])
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_every_module_is_placed_and_the_layers_are_the_packages():
    packages = {p.name for p in BUILDER.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    named = {prefix.split(".")[1] for layer in LAYERS for prefix in layer if prefix.count(".") == 1}
    assert packages <= named, f"packages with no layer: {packages - named}"
    for name in _modules():
        _layer(name)
