"""CLI modules only parse, call a library function and print (issue 10 item 4): no command module
reaches into the interpreter, kernels, schema, IR or a delegate package; those belong to the
library functions (edgerun.check.check_model, edgerun.run.run, edgerun.convert.convert, ...)."""

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "edgerun" / "cli"
#: what a command module may import: library entry points, the error family, shared CLI helpers
ALLOWED = ("edgerun.errors", "edgerun.check", "edgerun.run", "edgerun.convert", "edgerun.bundle", "edgerun.deploy",
           "edgerun.bench", "edgerun.summary", "edgerun.preprocess", "edgerun.inputs", "edgerun._fs", "edgerun._util",
           "edgerun.cli", "edgerun.litert")
#: presentation helpers a command may use from lower layers (text for a report the library made)
ALLOWED_NAMES = {("edgerun.delegate", "coverage_lines"), ("edgerun", "__version__")}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("edgerun",
                                                                                              "edgerun_delegates"):
            for a in node.names:
                yield node.module, a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("edgerun", "edgerun_delegates"):
                    yield a.name, None


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_command_modules_import_only_library_entry_points(path):
    bad = [f"{mod}.{name}" if name else mod for mod, name in _imports(path)
           if not (mod in ALLOWED or mod.startswith(tuple(a + "." for a in ALLOWED)) or (mod, name) in ALLOWED_NAMES)]
    assert not bad, f"{path.name} reaches past the library: {bad}"


def test_library_functions_exist_for_the_commands():
    from edgerun.bundle import describe_path
    from edgerun.check import check_model
    from edgerun.convert import convert
    from edgerun.run import run

    assert all(callable(f) for f in (check_model, convert, run, describe_path))
