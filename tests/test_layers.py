"""Imports run one way: every import of ``vflbench/`` (module-level or inside a function) goes from a
higher layer of docs/ARCHITECTURE.md to a lower one (or within a layer), and no modules import each
other in a circle. A package's ``__init__`` counts as importing its members (``import_module`` hides
nothing). The checker is also run on planted faults, so that it is known to catch them."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "vflbench"


def read_layers(text: str) -> list[list[str]]:
    """The layer list of docs/ARCHITECTURE.md: numbered lines after the ``layers`` marker, module names in backticks."""
    body = text.split("<!-- layers", 1)[1]
    layers = []
    for line in body.splitlines()[1:]:
        if not re.match(r"\d+\. ", line):
            if layers:
                break
            continue
        layers.append(re.findall(r"`([\w.]+)`", line))
    return layers


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_statements(text: str) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(level, module, names) of every import in a source, function-local ones included (``import a.b``:
    level -1). Parsed once per source text: the planted-fault cases reuse every file they leave alone."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out.append((-1, "", tuple(a.name for a in node.names)))
    return tuple(out)


def imports(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the vflbench modules it imports; ``sources``: module -> (source text, is a package)."""
    mods = set(sources)
    edges: dict[str, set[str]] = {}
    for m, (text, is_pkg) in sources.items():
        pkg = m if is_pkg else m.rsplit(".", 1)[0]
        out: set[str] = set()
        for level, module, names in import_statements(text):
            if level >= 0:
                if level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (level - 1)]
                    target = ".".join(base + ([module] if module else []))
                else:
                    target = module
                targets = [f"{target}.{a}" if f"{target}.{a}" in mods else target for a in names]
            else:
                targets = list(names)
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods:
                    out.add(t)
        if is_pkg and m != "vflbench":  # a package's face stands for its members
            out |= {x for x in mods if x.startswith(m + ".") and x.count(".") == m.count(".") + 1}
        out.discard(m)
        edges[m] = out
    return edges


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The layer of a module: its own name, or its package's, listed (``vflbench.`` dropped)."""
    name = module.removeprefix("vflbench.") if module != "vflbench" else "vflbench"
    while True:
        for i, names in enumerate(layers):
            if name in names:
                return i
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def problems(sources: dict[str, tuple[str, bool]], layers: list[list[str]]) -> list[str]:
    edges = imports(sources)
    out = [f"{m} is in no layer of docs/ARCHITECTURE.md" for m in sorted(edges) if layer_of(m, layers) is None]
    for m, targets in sorted(edges.items()):
        lm = layer_of(m, layers)
        for t in sorted(targets):
            lt = layer_of(t, layers)
            if lm is not None and lt is not None and lt > lm:
                out.append(f"{m} (layer {lm + 1}) imports {t} (layer {lt + 1}): an upward import")
    out += [f"circle: {' -> '.join(c)}" for c in cycles(edges)]
    return out


def project_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in sorted(PKG.rglob("*.py"))}


LAYERS = read_layers((ROOT / "docs" / "ARCHITECTURE.md").read_text())


def test_the_architecture_page_lists_the_layers():
    assert len(LAYERS) >= 8 and LAYERS[0][0] == "vflbench" and "cli" in LAYERS[-1]


def test_the_layers_are_the_folders():
    """Every folder of ``vflbench/`` is a layer's name (and draws in the page's table); the root holds
    ``__init__``, ``__main__`` and at most two other modules."""
    folders = sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    listed = {n for layer in LAYERS for n in layer}
    assert set(folders) <= listed, sorted(set(folders) - listed)
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert all(f"| `{f}/` |" in page for f in folders), [f for f in folders if f"| `{f}/` |" not in page]
    root_modules = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in {"__init__", "__main__"})
    assert len(root_modules) <= 2, root_modules


def test_every_import_runs_down_and_nothing_imports_in_a_circle():
    assert problems(project_sources(), LAYERS) == []


@pytest.mark.parametrize(
    "victim,planted,expect",
    [
        (
            "vflbench.core.errors",
            "\ndef f():\n    from ..cli import app\n",
            "upward import",
        ),  # a function-local upward import
        ("vflbench.nn.optim", "\nfrom ..training.pipeline import execute\n", "upward import"),
        ("vflbench.privacy.channel", "\nfrom ..federation.wire import Wire\n", "upward import"),
        ("vflbench.data.datasets.base", "\nfrom ...methods import METHODS\n", "upward import"),
        (
            "vflbench.privacy.secagg",
            "\nfrom .channel import Channel\n",
            "circle",
        ),  # channel and secagg share a layer: a circle, not a layer fault
    ],
)
def test_the_checker_catches_a_planted_fault(victim, planted, expect):
    sources = project_sources()
    if expect == "circle":
        text, pkg = sources["vflbench.privacy.channel"]
        sources["vflbench.privacy.channel"] = (text + "\nfrom .secagg import KeyedMasking\n", pkg)
    text, pkg = sources[victim]
    sources[victim] = (text + planted, pkg)
    found = problems(sources, LAYERS)
    assert any(expect in p for p in found), found


def test_a_module_outside_the_layers_is_named():
    sources = {**project_sources(), "vflbench.newthing": ("from .core.errors import VFLBenchError\n", False)}
    assert "vflbench.newthing is in no layer of docs/ARCHITECTURE.md" in problems(sources, LAYERS)


def test_every_function_reads_in_one_sitting():
    """No function of ``vflbench/`` is over 100 lines: a longer one is split along the steps it takes."""
    long = []
    for p in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100:
                long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert long == []


def test_a_run_flows_one_way_from_execute():
    """The run object's trip from training/pipeline.py:execute (tests/run_trip.py): the calls that pass it on never
    climb to a higher layer, and reading the run's own settings, key and id is data, not a call back into runs/
    (issue 73: 179 steps, 24 climbs and 49 returns counted that way before; 42, 2 and 8 after)."""
    import run_trip

    run = run_trip.credit_run()
    passed_on = run_trip.figures(run_trip.trip(run))
    assert passed_on["climbs"] == [], passed_on["climbs"]
    own = run_trip.figures(run_trip.trip(run_trip.credit_run(), own=True))
    assert len(own["climbs"]) <= 2 and len(own["returns"]) <= 8, own
