"""The ``edgerun`` command line: one module per command, thin wrappers over library functions.

``main()`` is the only place that catches :class:`EdgerunError`: it prints one line to stderr
(or a JSON object with ``--json``) and exits with the error family's code
(``edgerun.errors.EXIT_CODES``). A check that ran and failed exits 1 through ``typer.Exit(1)``;
``main`` returns that code (click's ``standalone_mode=False`` hands it back as the return value).
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from edgerun.errors import EXIT_CODES, INTERNAL_ERROR, EdgerunError


def exit_code_epilog() -> str:
    """The exit-code table for ``--help`` (one line per code)."""
    return "Exit codes: " + "; ".join(f"{c} {m.split(' (')[0]}" for c, m in EXIT_CODES.items()) + "."

# Command modules, each defining ``register(app)``. Keep sorted.
COMMANDS = ["bench", "check", "convert", "deploy", "devices", "flash", "inspect", "keygen",
            "package", "run", "verify"]


def build_app():
    import typer

    app = typer.Typer(name="edgerun", no_args_is_help=True, add_completion=False,
                      pretty_exceptions_enable=False, epilog=exit_code_epilog(),
                      help="Convert, run, package and deploy TFLite models to edge devices.")

    @app.callback(invoke_without_command=True)
    def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")):
        if version:
            from edgerun import __version__
            typer.echo(__version__)
            raise typer.Exit()

    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"edgerun.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"edgerun.cli.{name}":
                continue  # command not built yet
            raise
        mod.register(app)
    return app


def _limit_blas_threads(argv: list[str]) -> None:
    """`bench --threads N` must reach numpy's BLAS, which reads these only before it loads."""
    if not argv or argv[0] != "bench" or "numpy" in sys.modules:
        return
    n = "1"
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            n = argv[i + 1]
        elif a.startswith("--threads="):
            n = a.split("=", 1)[1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, n)


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _limit_blas_threads(argv)
    import edgerun.litert

    edgerun.litert.QUIET_NATIVE_LOGS = True  # no stray "INFO: Created ... XNNPACK delegate" lines
    try:
        app = build_app()
    except ModuleNotFoundError as e:  # the CLI extras are missing
        print(f"error: the edgerun command needs {e.name}: pip install 'edgerun[cli]'", file=sys.stderr)
        return 2
    try:
        rv = app(argv, standalone_mode=False)
    except EdgerunError as e:
        if _wants_json(argv):
            print(json.dumps(e.to_dict()))
        else:
            print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (click's exits and usage errors; anything else is a bug: exit 70)
        for exc in _click_exception_modules():
            if isinstance(e, getattr(exc, "Exit", ())):
                return e.exit_code
            if isinstance(e, getattr(exc, "Abort", ())):
                print("aborted", file=sys.stderr)
                return 1
            if isinstance(e, getattr(exc, "ClickException", ())):  # usage errors: one line
                e.show()
                return e.exit_code
        # a bug: keep the traceback, but never exit 1 ("the check failed") on one
        import traceback

        traceback.print_exc()
        return INTERNAL_ERROR
    # standalone_mode=False: a typer.Exit(code) raised in a command comes back as its code
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _click_exception_modules():
    """click's exception classes: typer >= 0.2x vendors its own copy as typer._click."""
    mods = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    return mods


if __name__ == "__main__":
    sys.exit(main())
