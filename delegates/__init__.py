"""edgerun's built-in delegates, installed as the package ``edgerun_delegates``.

Each is found only through the ``edgerun.delegates`` entry-point group (see pyproject.toml),
the same path a third-party delegate takes.
"""
