"""edgerun keygen: make an Ed25519 key pair for signing bundles."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from edgerun.cli._util import emit_json
from edgerun.errors import EdgerunError


def keygen_cli(
    output: Path = typer.Option(Path("edgerun-signing"), "--output", "-o",
                                help="Key path prefix: writes PREFIX.key (private) and PREFIX.pub."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing key files."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object."),
):
    """Generate an Ed25519 key pair: PREFIX.key signs bundles, PREFIX.pub verifies them.

    Keep the .key file secret (it is written with mode 600); copy the .pub file to devices
    and pass it to `edgerun verify --key` or set EDGERUN_TRUSTED_KEY there.
    """
    from edgerun.bundle import signing

    key, pub = Path(f"{output}.key"), Path(f"{output}.pub")
    for p in (key, pub):
        if p.exists() and not force:
            raise EdgerunError(f"{p} exists; pass --force to overwrite it")
    priv_pem, pub_pem = signing.generate_keypair()
    key.unlink(missing_ok=True)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv_pem)
    pub.write_bytes(pub_pem)
    fp = signing.fingerprint(signing.public_key_bytes(pub_pem))
    if json_out:
        emit_json({"private_key": str(key), "public_key": str(pub), "fingerprint": fp})
    else:
        typer.echo(f"wrote {key} (secret) and {pub}; key fingerprint {fp}")


def register(app: typer.Typer) -> None:
    app.command("keygen")(keygen_cli)
