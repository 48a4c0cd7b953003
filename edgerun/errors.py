"""The single exception family of edgerun.

Every error a user can cause derives from :class:`EdgerunError`. Subclasses also derive from the
matching built-in exception, so ``except ValueError`` keeps working for callers that predate
edgerun. The library raises and never prints; ``edgerun.cli.main`` is the only place that turns
these into a one-line message and a non-zero exit code.
"""

from __future__ import annotations


class EdgerunError(Exception):
    """Root of every error edgerun raises on purpose (bad input, missing runtime, broken link)."""

    #: exit code the CLI uses for this family
    exit_code = 1

    def to_dict(self) -> dict:
        return {"error": type(self).__name__, "message": str(self)}


class ModelFormatError(EdgerunError, ValueError):
    """A model file is truncated, malformed or hostile (offsets, lengths, types out of range)."""


class UnsupportedOpError(EdgerunError, NotImplementedError):
    """No kernel for an (op, dtype) pair; names the op, its node index and who could run it."""

    def __init__(self, op: str, dtype: str | None = None, *, node_index: int | None = None,
                 candidates: list[str] | None = None, detail: str = ""):
        self.op, self.dtype, self.node_index = op, dtype, node_index
        self.candidates = list(candidates or [])
        where = f" (node {node_index})" if node_index is not None else ""
        what = f"{op}{'/' + dtype if dtype else ''}"
        msg = f"unsupported op {what}{where}"
        if detail:
            msg += f": {detail}"
        if self.candidates:
            msg += f"; delegates that can run it: {', '.join(self.candidates)}"
        super().__init__(msg)


class InputMismatchError(EdgerunError, ValueError):
    """An input has the wrong shape, dtype or name; says what was expected and what was given."""


class ConversionError(EdgerunError, ValueError):
    """The converter cannot produce a model from this input (op, shape, calibration data)."""


class BundleError(EdgerunError, ValueError):
    """A bundle is malformed, unsafe to unpack, or fails its hash or signature check."""


class BundleIntegrityError(BundleError):
    """A bundle's contents do not match its manifest hashes or signature."""


class DelegateUnavailableError(EdgerunError, RuntimeError):
    """A delegate's runtime (library, package, device) is not present; says what to install."""


class LinkError(EdgerunError, OSError):
    """A serial or network link failed (timeout, too many retries, disconnect, refused command)."""


class DeployError(EdgerunError, RuntimeError):
    """Copying or activating a bundle on a remote board failed; the previous bundle stays active."""
