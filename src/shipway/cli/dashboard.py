"""``shipway dashboard``: serve the read-only web page of every app and slot it knows."""

from __future__ import annotations

from pathlib import Path

import click

from shipway.cli.common import Context, pass_obj, run_body, state_dirs_option

#: the port the page is served on unless --port says otherwise
DEFAULT_PORT = 7450


@click.command()
@click.option(
    "-f",
    "--file",
    "specs",
    metavar="SPEC",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A spec whose slots to show (repeatable; also the -f given before the command). "
    "Without any, the spec of this directory when there is one.",
)
@state_dirs_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port to serve on (0: any free one; the address is printed).",
)
@click.option(
    "--listen",
    metavar="ADDR",
    default="127.0.0.1",
    show_default=True,
    help="The address to serve on. Beyond loopback it needs --token.",
)
@click.option(
    "--token",
    metavar="TOKEN",
    envvar="SHIPWAY_DASHBOARD_TOKEN",
    help="A secret of 16 characters or more that every request must carry (header "
    "`Authorization: Bearer TOKEN`, or the cookie the login link /?token=TOKEN sets). "
    "Needed to listen beyond loopback. Default: $SHIPWAY_DASHBOARD_TOKEN.",
)
@pass_obj
def dashboard(
    obj: Context,
    specs: tuple[Path, ...],
    state_dirs: tuple[Path, ...],
    port: int,
    listen: str,
    token: str | None,
) -> None:
    """Serve a web page of every app and slot: the specs given and the apps of this
    machine's local state, each slot's live release, state, age and health; a slot's
    history, the diff of any two releases, its processes, volumes, accessories and log
    tail; and the operation running now (any shipway command on this machine), live: its
    plan, steps, waits and outcome, a canary's share and counts as a chart. It updates
    itself while open.

    \b
    Read-only: GET and HEAD only, no route changes anything; secrets are masked as
    everywhere. Served on 127.0.0.1 unless --listen says otherwise; beyond loopback a
    token is required, and every request must carry it:
      shipway dashboard                          http://127.0.0.1:7450/
      shipway dashboard -f a/shipway.toml -f b/shipway.toml --port 8080
      SHIPWAY_DASHBOARD_TOKEN=... shipway dashboard --listen 0.0.0.0
    Ctrl-C stops it."""

    def body() -> int:
        from shipway.dashboard.reads import Catalogue
        from shipway.dashboard.server import DashboardServer, check_listen

        check_listen(listen, token)
        given = [*([Path(obj.spec_file)] if obj.spec_file else []), *specs]
        catalogue = Catalogue(list(dict.fromkeys(given)) or _here(), list(state_dirs))
        # a spec that does not validate is an input error now, before anything listens
        for path in catalogue.specs:
            obj.spec_file = str(path)
            obj.app()
        try:
            server = DashboardServer((listen, port), catalogue, token)
        except OSError as exc:
            from shipway.errors import InputError

            hint = "hint: --port another one, or 0 for any free port"
            raise InputError(f"cannot listen on {listen}:{port}: {exc.strerror} ({hint})") from exc
        server.overview.get()  # the first view is read before anyone asks
        login = " (login link: ?token=TOKEN)" if token else ""
        click.echo(f"shipway dashboard: {server.url}{login} — read-only; Ctrl-C stops it")
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0

    run_body(obj, body)


def _here() -> list[Path]:
    """The spec of this directory, when there is one."""
    return [p for p in (Path("shipway.toml"), Path("shipway.yaml")) if p.is_file()][:1]
