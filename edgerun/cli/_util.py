"""Shared CLI helpers: output in text or JSON, rich progress bars from library callbacks."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import numpy as np


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, type):
        return obj.__name__
    return obj


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
