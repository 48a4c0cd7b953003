"""edgerun verify: check a bundle's hashes and signature (and optionally its golden vectors)."""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.cli._util import JSON_OPT, emit_json


def verify_cli(
    bundle: Path = typer.Argument(..., help="The .bundle file to check."),
    key: Path = typer.Option(None, "--key", help="Trusted public key: the bundle must be signed by it."),
    golden: bool = typer.Option(False, "--golden", help="Also run the golden vectors here and compare."),
    allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Accept an unsigned bundle (refused by "
                                        "default; see docs/bundles.md)."),
    json_out: bool = JSON_OPT,
):
    """Check every hash in BUNDLE and its signature; any changed byte fails.

    With --key the bundle must carry a valid signature by that key. With --golden the golden
    vectors run on every kernel path in use here: edgerun's kernels must match bit for bit, a
    delegate within the tolerance measured at package time. Exit code 0 when the bundle is
    intact (and reproduces its golden outputs), 1 when a check fails (a changed byte, a bad
    signature, a golden mismatch, no golden cases to run); see `edgerun --help` for the rest.
    """
    from edgerun.bundle import verify_bundle
    from edgerun.errors import CHECK_FAILED, BundleError

    try:
        report = verify_bundle(bundle, trusted_key=key, golden=golden, allow_unsigned=allow_unsigned)
    except BundleError as e:
        if not bundle.exists():
            raise  # nothing to check: an error, not a verdict
        # the bundle failed the check (changed bytes, bad signature, malformed): a verdict
        if json_out:
            emit_json({**e.to_dict(), "ok": False, "exit_code": CHECK_FAILED})
        else:
            typer.echo(f"error: {e}", err=True)
        raise typer.Exit(CHECK_FAILED) from None
    if json_out:
        emit_json(report)
    else:
        sig = f"signed by {report['key']}" + (" (trusted key)" if report["trusted"] else " (no --key given)") \
            if report["signed"] else "unsigned"
        typer.echo(f"{bundle}: hashes ok, {sig}")
        if "golden" in report:
            for line in golden_lines(report["golden"]):
                typer.echo(line)
    if not report["ok"]:
        raise typer.Exit(CHECK_FAILED)


def golden_lines(g: dict) -> list[str]:
    """Text for a golden verification (edgerun.bundle.golden.verify), one line per path and output."""
    if not g["cases"]:
        return ["  golden: FAILED: the bundle has no golden cases, nothing was verified"]
    lines = []
    for path, r in (g.get("paths") or {"edgerun": {**g, "source": "bit-exact"}}).items():
        for name, d in r["max_abs_diff"].items():
            if r.get("ok") is None:
                verdict, tol = "NOT VERIFIED", r["source"]
            else:
                verdict = "ok" if d <= r["tolerance"][name] else "FAILED"
                tol = f"tolerance {r['tolerance'][name]:g}, {r['source']}"
            lines.append(f"  golden {name} on {path}: max abs diff {d:g} ({tol}) over {g['cases']} cases: {verdict}")
    return lines


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cli)
