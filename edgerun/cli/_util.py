"""Shared CLI helpers: output in text or JSON, rich progress bars from library callbacks."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

from edgerun._util import to_jsonable


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")


def console():
    from rich.console import Console
    return Console()


@contextmanager
def progress(description: str, enabled: bool = True):
    """Yields a callback ``cb(done, total)`` driving a rich progress bar (stderr)."""
    if not enabled:
        yield lambda done, total=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as p:
        task = p.add_task(description, total=None)

        def cb(done, total=None):
            p.update(task, completed=done, total=total)

        yield cb


# -- options shared by several commands, declared once ---------------------------------------
def _opt(*decls, help: str, default=None):
    import typer

    return typer.Option(default, *decls, help=help)


SIZE_OPT = _opt("--size", help="Image inputs: resize to HxW, e.g. 224x224 (default: the model's input size).")
MEAN_OPT = _opt("--mean", help="Image inputs: per-channel mean, e.g. 127.5 or 123.7,116.3,103.5.")
STD_OPT = _opt("--std", help="Image inputs: per-channel std, e.g. 127.5 or 58.4,57.1,57.4.")
SCALE_OPT = _opt("--scale", help="Image inputs: multiply pixels by this before mean/std (e.g. 0.00392).")
CHANNEL_ORDER_OPT = _opt("--channel-order", help="Image inputs: RGB, BGR or L (grayscale).")
JSON_OPT = _opt("--json", help="Print a JSON object.", default=False)


def image_options(**kw) -> dict:
    """The image options given on the command line (None values dropped)."""
    return {k: v for k, v in kw.items() if v is not None}
