"""edgerun flash: send a bundle's model to edgerun firmware over a serial link."""

from __future__ import annotations

import typer

from edgerun.cli._util import JSON_OPT, console, emit_json, progress


def flash_cli(
    bundle: str = typer.Argument(..., help="A .bundle (or a .tflite model)."),
    port: str = typer.Option(..., "--port", "-p",
                             help="Serial device (/dev/ttyACM0, COM3) or pyserial URL (socket://127.0.0.1:5555)."),
    baud: int = typer.Option(115200, "--baud", "-b", help="Line rate (sizes timeouts on sockets and ptys)."),
    force: bool = typer.Option(False, "--force", help="Transfer even when the device already runs this model."),
    rollback: bool = typer.Option(False, "--rollback", help="Switch the device back to its previous model."),
    allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Accept an unsigned bundle "
                                        "(refused by default; see docs/bundles.md)."),
    json_out: bool = JSON_OPT,
):
    """Flash BUNDLE onto the firmware at PORT: the model goes into the inactive slot, the device
    checks its SHA-256, then switches to it. An interrupted transfer resumes where it stopped;
    the previous model stays active until the new one is verified. A bundle must be signed by
    the trusted key (docs/bundles.md) unless --allow-unsigned; a bare .tflite is sent as given.
    """
    from edgerun.deploy.flash import flash
    from edgerun.deploy.flash import rollback as do_rollback

    if rollback:
        report = do_rollback(port, baud)
    else:
        with progress(f"flashing {port}", enabled=not json_out) as cb:
            report = flash(bundle, port, baud, cb, force=force, allow_unsigned=allow_unsigned).to_dict()
    if json_out:
        emit_json(report)
        return
    c = console()
    if rollback:
        c.print(f"{port}: slot {report['slot']} active again (arena {report['arena_bytes']} bytes)")
    elif report["skipped"]:
        c.print(f"{report['board']} on {port} already runs {report['sha256'][:12]} (slot {report['slot']}); "
                "nothing sent")
    else:
        rate = report["payload_bytes"] / report["seconds"] if report["seconds"] else 0.0
        resumed = f", resumed at byte {report['resumed_from']}" if report["resumed_from"] else ""
        c.print(f"flashed {report['size']} bytes to {report['board']} on {port}, slot {report['slot']} active "
                f"({report['seconds']:.1f} s, {rate / 1024:.1f} KiB/s, {report['retransmissions']} retransmissions"
                f"{resumed}); arena {report['arena_bytes']} bytes")


def register(app: typer.Typer) -> None:
    app.command("flash")(flash_cli)
