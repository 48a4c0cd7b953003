"""The single exception family of edgerun.

Every error a user can cause derives from :class:`EdgerunError`. Subclasses also derive from the
matching built-in exception, so ``except ValueError`` keeps working for callers that predate
edgerun. The library raises and never prints; ``edgerun.cli.main`` is the only place that turns
these into a one-line message and a non-zero exit code.

Exit codes (the one table; ``edgerun --help``, the README and docs/verdicts.md print it):

====  =========================================================================================
0     the command did its job; for a check (verify, check, run --verify, convert's own
      validation) the check held
1     the check ran and FAILED: golden mismatch, DOES NOT FIT, ops a target cannot run,
      accuracy budget not met, float conversion off by more than its tolerance
2     usage: a wrong option, argument or combination (:class:`UsageError`, click's usage errors)
3     a model or input file problem (:class:`ModelFormatError`, :class:`InputMismatchError`,
      :class:`UnsupportedOpError`, an input path that is missing or unreadable
      (:class:`InputFileError`, in every command, ``verify`` included), and any other
      :class:`EdgerunError`)
4     conversion failed (:class:`ConversionError`), nothing certified
5     a bundle is malformed or fails its hash/signature check (:class:`BundleError`)
6     a delegate's runtime is missing (:class:`DelegateUnavailableError`)
7     a serial or network link to a device failed (:class:`LinkError`)
8     deploying to a board failed, the previous bundle stays active (:class:`DeployError`)
70    internal error: a bug in edgerun (the traceback is printed; please report it)
130   interrupted (Ctrl-C)
====  =========================================================================================
"""

from __future__ import annotations

#: exit code -> meaning, in the order of the table above (the CLI's ``--help`` prints this)
EXIT_CODES: dict[int, str] = {
    0: "the command succeeded; for a check, the check held",
    1: "the check ran and failed (golden mismatch, DOES NOT FIT, unsupported ops on the target, "
       "accuracy budget not met, float conversion off by more than its tolerance)",
    2: "usage error: wrong option, argument or combination",
    3: "model or input error (malformed model, wrong input, unsupported op, missing file)",
    4: "conversion failed",
    5: "bundle malformed, tampered or wrongly signed",
    6: "delegate runtime missing",
    7: "device link failed",
    8: "deploy failed (the previous bundle stays active)",
    70: "internal error (a bug in edgerun; the traceback is printed)",
    130: "interrupted",
}

#: exit code of an unexpected exception (BSD's EX_SOFTWARE), so a crash never reads as a verdict
INTERNAL_ERROR = 70

#: the code of a check that ran and failed (not an error: the command did its job)
CHECK_FAILED = 1


class EdgerunError(Exception):
    """Root of every error edgerun raises on purpose (bad input, missing runtime, broken link)."""

    #: exit code the CLI uses for this family (see ``EXIT_CODES``); never 1, which means "check failed"
    exit_code = 3

    def to_dict(self) -> dict:
        return {"error": type(self).__name__, "message": str(self), "exit_code": self.exit_code}


class UsageError(EdgerunError, ValueError):
    """A wrong option, argument or combination of them (names the option and what it accepts)."""

    exit_code = 2


class CheckFailedError(EdgerunError):
    """A check a command makes before doing its job failed (``package --target mcu:BOARD`` for a
    model the board's firmware refuses): a verdict, exit code 1, with the reasons in one line."""

    exit_code = CHECK_FAILED


class ModelFormatError(EdgerunError, ValueError):
    """A model file is truncated, malformed or hostile (offsets, lengths, types out of range)."""


class UnsupportedOpError(EdgerunError, NotImplementedError):
    """No kernel for an (op, dtype) pair; names the op, its node index and who could run it."""

    def __init__(self, op: str, dtype: str | None = None, *, node_index: int | None = None,
                 candidates: list[str] | None = None, detail: str = ""):
        self.op, self.dtype, self.node_index, self.detail = op, dtype, node_index, detail
        self.candidates = list(candidates or [])
        where = f" (node {node_index})" if node_index is not None else ""
        what = f"{op}{'/' + dtype if dtype else ''}"
        msg = f"unsupported op {what}{where}"
        if detail:
            msg += f": {detail}"
        if self.candidates:
            msg += f"; delegates that can run it: {', '.join(self.candidates)}"
        super().__init__(msg)


class InputFileError(EdgerunError):
    """A file or folder named as an input (model, bundle, array, labels, key, calibration data)
    is missing, a directory where a file was expected, not a regular file, or unreadable. Exit 3
    in every command, ``verify`` included: no bytes were read, so there is no verdict to give."""


class InputMismatchError(EdgerunError, ValueError):
    """An input has the wrong shape, dtype or name; says what was expected and what was given."""


class ConversionError(EdgerunError, ValueError):
    """The converter cannot produce a model from this input (op, shape, calibration data)."""

    exit_code = 4


class BundleError(EdgerunError, ValueError):
    """A bundle is malformed, unsafe to unpack, or fails its hash or signature check."""

    exit_code = 5


class BundleIntegrityError(BundleError):
    """A bundle's contents do not match its manifest hashes or signature."""


class DelegateUnavailableError(EdgerunError, RuntimeError):
    """A delegate's runtime (library, package, device) is not present; says what to install."""

    exit_code = 6


class LinkError(EdgerunError, OSError):
    """A serial or network link failed (timeout, too many retries, disconnect, refused command)."""

    exit_code = 7


class DeployError(EdgerunError, RuntimeError):
    """Copying or activating a bundle on a remote board failed; the previous bundle stays active."""

    exit_code = 8
