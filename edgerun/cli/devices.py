"""edgerun devices: list serial ports, and with --probe, which edgerun firmware answers on each."""

from __future__ import annotations

import typer

from edgerun.cli._util import JSON_OPT, console, emit_json


def devices_cli(
    probe: bool = typer.Option(False, "--probe", help="Ask each port for edgerun firmware (HELLO, STATUS)."),
    port: list[str] = typer.Option([], "--port", "-p", help="Also probe this port or URL (repeatable)."),
    baud: int = typer.Option(115200, "--baud", "-b", help="Line rate for probing."),
    timeout: float = typer.Option(0.5, "--timeout", help="Seconds to wait for an answer per port."),
    json_out: bool = JSON_OPT,
):
    """List serial ports. With --probe, show the firmware, board, RAM/flash and active model on each."""
    from edgerun.deploy.flash import list_devices

    report = list_devices(probe=probe or bool(port), extra_ports=list(port), baud=baud, timeout=timeout)
    if json_out:
        emit_json(report)
        return
    c = console()
    if not report:
        c.print("no serial ports found")
    for d in report:
        line = f"{d['port']}"
        if d.get("description"):
            line += f"  ({d['description']})"
        fw = d.get("firmware")
        if fw:
            active = fw.get("active_model")
            line += (f"  edgerun {fw['fw_version']} on {fw['board']}: arena {fw['arena_bytes']} B, slot "
                     f"{fw['slot_bytes']} B, active {active[:12] if active else 'none'}")
        elif d.get("error"):
            line += f"  [{d['error']}]"
        c.print(line)


def register(app: typer.Typer) -> None:
    app.command("devices")(devices_cli)
