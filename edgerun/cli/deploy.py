"""edgerun deploy: copy a bundle to a Linux board over SSH and make it current."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from edgerun.cli._util import JSON_OPT, emit_json, progress
from edgerun.errors import CHECK_FAILED, UsageError


def deploy_cli(
    bundle: Path = typer.Argument(None, help="The .bundle to deploy (not needed with --rollback/--status)."),
    host: str = typer.Option(..., "--host", "-H", help="user@board (or a Host from ~/.ssh/config)."),
    port: int = typer.Option(None, "--port", "-p", help="SSH port."),
    dir: str = typer.Option("edgerun", "--dir", help="Deploy directory on the board (relative to home)."),
    identity: Path = typer.Option(None, "--identity", "-i", help="SSH private key file."),
    ssh_option: list[str] = typer.Option([], "--ssh-option", "-o", help="Extra ssh -o option, repeatable."),
    legacy_scp: bool = typer.Option(False, "--legacy-scp", help="scp -O, for boards without SFTP (Dropbear)."),
    verify: bool = typer.Option(False, "--verify", help="Run the golden vectors on the board before switching."),
    remote_edgerun: str = typer.Option(None, "--remote-edgerun",
                                       help="Command that runs edgerun on the board (default: found there)."),
    key: Path = typer.Option(None, "--key", help="Trusted public key: refuse bundles not signed by it "
                             "(default: EDGERUN_TRUSTED_KEY or trusted_key in ~/.config/edgerun/config.toml)."),
    allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Deploy an unsigned bundle (refused by "
                                        "default, and always when a trusted key is configured)."),
    lock_timeout: float = typer.Option(300.0, "--lock-timeout", help="Seconds to wait for another deploy to the "
                                       "same board directory to finish."),
    timeout: float = typer.Option(None, "--timeout", help="Seconds the copy may take before it is stopped."),
    rollback: bool = typer.Option(False, "--rollback", help="Switch back to the previous bundle."),
    show: bool = typer.Option(False, "--status", help="Show the board's current and previous bundle "
                              "(read-only: creates nothing on the board)."),
    bench: bool = typer.Option(False, "--bench", help="After the switch, run `edgerun bench` on the board's "
                               "current bundle and print the same table as on the host."),
    bench_args: str = typer.Option(None, "--bench-args", help="Options for the board's bench, e.g. "
                                   "'-n 200 --min-duration 10 --subtract-idle'."),
    json_out: bool = JSON_OPT,
):
    """Copy BUNDLE to a board with ssh/scp, check its hash there, then switch `current` to it.

    The previous bundle is kept; `--rollback` switches back. A copy or check that fails at
    any point leaves the previous bundle active. With --verify the golden vectors run on the
    board first, and a failed check exits 1 without switching. Concurrent deploys to the same
    board directory wait for each other (flock on the board).
    """
    from edgerun.deploy import ssh

    target = ssh.SSHTarget(host, port=port, identity=str(identity) if identity else None, options=list(ssh_option),
                            legacy_scp=legacy_scp)
    if rollback:
        report = ssh.rollback(target, remote_dir=dir, lock_timeout=lock_timeout)
    elif show:
        report = ssh.status(target, dir)
    else:
        if bundle is None:
            raise UsageError("give a BUNDLE to deploy (or --rollback / --status)")
        try:
            with progress("deploying", enabled=not json_out and sys.stderr.isatty()) as cb:
                report = ssh.deploy(bundle, target, remote_dir=dir, verify=verify, remote_edgerun=remote_edgerun,
                                    trusted_key=key, allow_unsigned=allow_unsigned, transfer_timeout=timeout,
                                    lock_timeout=lock_timeout, progress=cb)
        except ssh.VerifyFailed as e:  # the check ran on the board and failed: a verdict, exit 1
            if json_out:
                emit_json({**e.to_dict(), "verified": False, "switched": False})
            else:
                typer.echo(f"error: {e}", err=True)
            raise typer.Exit(CHECK_FAILED) from None
    if bench and not (rollback or show):
        from edgerun.bench.remote import bench_on_board

        report["bench"] = bench_on_board(target, remote_dir=dir, remote_edgerun=remote_edgerun, args=bench_args)
    if json_out:
        emit_json(report)
        return
    if report.get("exists") is False:
        typer.echo(f"{report['host']}:{report.get('dir')}  no deploy directory (nothing deployed there)")
        return
    typer.echo(f"{report['host']}:{report.get('dir')}  current -> {report.get('current')}  "
            f"previous -> {report.get('previous')}")
    if report.get("verified"):
        typer.echo("golden vectors verified on the board")
    if report.get("bench"):
        from edgerun.cli.bench import print_table

        b = report["bench"]
        print_table(b, f"{report['host']}: {report.get('current')}, {b.get('scenario')}, "
                       f"driver {b.get('rules', {}).get('driver')}")


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy_cli)
