"""edgerun keygen: make an Ed25519 key pair for signing bundles."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from edgerun.cli._util import JSON_OPT, emit_json
from edgerun.errors import EdgerunError, UsageError


def keygen_cli(
    output: Path = typer.Option(Path("edgerun-signing"), "--output", "-o",
                                help="Key path prefix: writes PREFIX.key (private) and PREFIX.pub."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing key files."),
    json_out: bool = JSON_OPT,
):
    """Generate an Ed25519 key pair: PREFIX.key signs bundles, PREFIX.pub verifies them.

    Keep the .key file secret (it is written with mode 600); copy the .pub file to devices
    and pass it to `edgerun verify --key` or set EDGERUN_TRUSTED_KEY there.
    """
    from edgerun._fs import atomic_write, check_output
    from edgerun.bundle import signing

    key, pub = Path(f"{output}.key"), Path(f"{output}.pub")
    for p in (key, pub):
        check_output(p, what="key file")
        if os.path.lexists(p):
            if not force:
                raise UsageError(f"{p} exists; pass --force to overwrite it")
            if os.path.islink(p) or not os.path.isfile(p):
                raise UsageError(f"{p} is not a regular file (a symlink?); remove it yourself")
    priv_pem, pub_pem = signing.generate_keypair()
    for p in (key, pub):
        if force and os.path.lexists(p):
            p.unlink()
    atomic_write(key, priv_pem, mode=0o600, exclusive=True)  # O_CREAT|O_EXCL|O_NOFOLLOW, mode 600
    try:
        atomic_write(pub, pub_pem, exclusive=True)
    except EdgerunError:
        key.unlink(missing_ok=True)  # no half key pair
        raise
    fp = signing.fingerprint(signing.public_key_bytes(pub_pem))
    if json_out:
        emit_json({"private_key": str(key), "public_key": str(pub), "fingerprint": fp})
    else:
        typer.echo(f"wrote {key} (secret) and {pub}; key fingerprint {fp}")


def register(app: typer.Typer) -> None:
    app.command("keygen")(keygen_cli)
