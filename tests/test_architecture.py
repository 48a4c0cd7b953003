"""The layering of docs/architecture.md, checked on the source (imports parsed with ast, lazy
ones inside functions included) and on a real import in a child process."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"edgerun": ROOT / "edgerun", "edgerun_delegates": ROOT / "delegates"}

#: layers, lowest first; a module may import its own layer and the ones below (docs/architecture.md).
#: The delegate plugins (edgerun_delegates) share the library layer: a target's table lives next to
#: the delegate that enforces it, and check / flash read it there.
LAYERS = ("base", "model", "ops", "delegate", "runtime", "library", "cli")
DEVICE_CORE = ("base", "model", "ops", "delegate", "runtime")
#: third-party packages the device core may import (everything else there: standard library only)
CORE_THIRD_PARTY = {"numpy", "flatbuffers"}
#: upward imports that are known debts, each with the reason it is still there
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def layer(module: str) -> str:
    if module.startswith("edgerun_delegates"):
        return "library"
    parts = module.split(".")
    if module in ("edgerun.errors", "edgerun._util") or parts[:2] == ["edgerun", "native"]:
        return "base"
    if module == "edgerun.ir" or parts[:2] == ["edgerun", "schema"]:
        return "model"
    if parts[:2] == ["edgerun", "ops"]:
        return "ops"
    if module == "edgerun.delegate":
        return "delegate"
    if parts[:2] == ["edgerun", "runtime"]:
        return "runtime"
    if parts[:2] == ["edgerun", "cli"] or module == "edgerun.__main__":
        return "cli"
    return "library"


def modules() -> dict[str, Path]:
    found = {}
    for pkg, base in PACKAGES.items():
        for p in sorted(base.rglob("*.py")):
            parts = [pkg, *p.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = p
    return found


def _imports(path: Path, module: str, is_pkg: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement, TYPE_CHECKING blocks excluded."""
    tree = ast.parse(path.read_text(), str(path))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out += [(f"{mod}.{a.name}", node.lineno) for a in node.names]
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {internal module it imports: line}. ``from pkg import sub`` counts as the
    submodule; importing a module's own parent package is not an edge (Python has always
    initialised it first)."""
    mods = modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, p in mods.items():
        for name, line in _imports(p, m, p.name == "__init__.py"):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != m and not m.startswith(name + "."):
                graph[m].setdefault(name, line)
    return graph


def cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (lazy imports included): " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downwards():
    order = {name: i for i, name in enumerate(LAYERS)}
    graph = import_graph()
    bad = []
    for m, deps in graph.items():
        if m == "edgerun":  # the package's lazy facade (edgerun.Interpreter, edgerun.load)
            continue
        for d, line in deps.items():
            lm, ld = layer(m), layer(d)
            if order[ld] > order[lm] and (m, d) not in KNOWN_EXCEPTIONS:
                bad.append(f"{modules()[m].relative_to(ROOT)}:{line}: {m} ({lm}) imports {d} ({ld})")
    assert not bad, "\n".join(bad)


def test_device_core_needs_numpy_and_flatbuffers_only():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for m, p in modules().items():
        if layer(m) not in DEVICE_CORE:
            continue
        for name, line in _imports(p, m, p.name == "__init__.py"):
            top = name.split(".")[0]
            if top and top not in ("edgerun", "edgerun_delegates") and top not in stdlib | CORE_THIRD_PARTY:
                bad.append(f"{p.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_importing_and_running_the_core_loads_no_converter_cli_or_litert():
    code = (
        "import sys, numpy as np, edgerun\n"
        "from edgerun.testing import mobilenet_v1\n"
        "it = edgerun.Interpreter(model_content=mobilenet_v1(0.25, 32, 10))\n"
        "it.allocate_tensors()\n"
        "d = it.get_input_details()[0]\n"
        "it.set_tensor(d['index'], np.zeros(d['shape'], d['dtype'])); it.invoke()\n"
        "bad = ('edgerun.convert', 'edgerun.cli', 'edgerun.bundle', 'edgerun.deploy', 'edgerun.delegate',\n"
        "       'edgerun_delegates', 'onnx', 'onnxruntime', 'ai_edge_litert', 'tflite_runtime', 'typer',\n"
        "       'click', 'rich', 'PIL', 'serial', 'cryptography')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in bad or m.startswith(bad)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_layer_table_matches_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for name in LAYERS:
        assert f"**{name}**" in doc, f"docs/architecture.md does not describe the {name!r} layer"


def test_no_code_outside_runtime_reaches_into_the_interpreter():
    """The interpreter's private state (runners, budgets, options) is read only in runtime/;
    everyone else uses its public API (steps(), delegation_report(), partitions, ...)."""
    from edgerun.runtime.interpreter import Interpreter, SubgraphRunner

    private = {name for cls in (Interpreter, SubgraphRunner) for name in vars(cls) if name.startswith("_")
               and not name.startswith("__")}
    # instance attributes set in __init__
    private |= {"_runners", "_memory", "_work", "_custom_ops", "_profiling", "_delegates", "_model",
                "_input_shapes", "_active_subgraphs", "_preserve_all", "_preserve_inputs"}
    assert "_runner" in private
    bad = []
    roots = [ROOT / "edgerun", ROOT / "delegates", ROOT / "tests", ROOT / "tools"]
    for p in sorted(f for r in roots for f in r.rglob("*.py")):
        if (ROOT / "edgerun" / "runtime") in p.parents or p == Path(__file__):
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Attribute) and node.attr in private and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not bad, "\n".join(bad)


def test_no_test_module_imports_another_test_module():
    """Helpers shared by test files live in tests/support/ (docs/architecture.md): a test module
    (tests/**/test_*.py), or a tool, never imports from another test module."""
    bad = []
    for p in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "tools").rglob("*.py"),
                     *(ROOT / "firmware").rglob("*.py")]):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "tests" and any(q.startswith("test_") for q in parts[1:]):
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not bad, "\n".join(bad)
