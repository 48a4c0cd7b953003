"""edgerun verify: check a bundle's hashes and signature (and optionally its golden vectors)."""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.cli._util import emit_json


def verify_cli(
    bundle: Path = typer.Argument(..., help="The .bundle file to check."),
    key: Path = typer.Option(None, "--key", help="Trusted public key: the bundle must be signed by it."),
    golden: bool = typer.Option(False, "--golden", help="Also run the golden vectors here and compare."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object."),
):
    """Check every hash in BUNDLE and its signature; any changed byte fails.

    With --key the bundle must carry a valid signature by that key. Exit code 0 when the
    bundle is intact (and, with --golden, reproduces its golden outputs), 1 otherwise.
    """
    from edgerun.bundle import verify_bundle

    report = verify_bundle(bundle, trusted_key=key, golden=golden)
    if json_out:
        emit_json(report)
    else:
        sig = f"signed by {report['key']}" + (" (trusted key)" if report["trusted"] else " (no --key given)") \
            if report["signed"] else "unsigned"
        typer.echo(f"{bundle}: hashes ok, {sig}")
        if "golden" in report:
            g = report["golden"]
            for name, d in g["max_abs_diff"].items():
                typer.echo(f"  golden {name}: max abs diff {d:g} (tolerance {g['tolerance'][name]:g}) over "
                        f"{g['cases']} cases on {', '.join(g['delegates'])}")
    if not report["ok"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cli)
