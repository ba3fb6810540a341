"""``shipway backup SLOT ACCESSORY [--out FILE]`` and ``shipway restore SLOT ACCESSORY FILE
--confirm SLOT``: an accessory's data to a file with its checksum, and back.

What goes where: the backup's own lines (progress, the result) on standard output, or on
standard error with ``-o json``, where standard output is one JSON document.
"""

from __future__ import annotations

from typing import Any

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    one_slot,
    output_option,
    pass_obj,
    reporter_of,
    run_body,
    told,
)
from shipway.cli.completion import complete_slot


@click.command()
@click.argument("slot", shell_complete=complete_slot)
@click.argument("accessory")
@click.option(
    "--out",
    metavar="FILE",
    type=click.Path(path_type=str),
    help="Where to write it: a new file, or a directory (default: the current directory, "
    "named <app>-<slot>-<accessory>-<UTC time>.dump or .rdb). Never overwrites a file.",
)
@output_option
@pass_obj
def backup(obj: Context, slot: str, accessory: str, out: str | None) -> None:
    """Back up ACCESSORY of SLOT to a file, with its SHA-256 beside it (FILE.sha256, which
    `sha256sum -c FILE.sha256` checks too). The server keeps serving; nothing changes.

    \b
    postgres  pg_dump of the server's own major version (custom format, restorable with
              pg_restore); refused when that pg_dump is not installed — a pg_dump of
              another major version is never used in its place
    redis     an RDB snapshot (BGSAVE, waited on), readable by redis-server

    \b
      shipway backup prod db                      ./hello-prod-db-20261204T133000Z.dump
      shipway backup prod db --out /backups/      into a directory
      shipway backup prod cache -o json           path, bytes, sha256, server version
    """

    def body() -> int:
        from shipway import api

        app = obj.app()
        made = api.backup(app, one_slot(app, slot), accessory, out=out, reporter=reporter_of(obj))
        return _said(obj, made.line(), made.to_json())

    run_body(obj, body)


@click.command()
@click.argument("slot", shell_complete=complete_slot)
@click.argument("accessory")
@click.argument("file", type=click.Path(path_type=str))
@confirm_option
@output_option
@pass_obj
def restore(obj: Context, slot: str, accessory: str, file: str, confirm: str | None) -> None:
    """Put the backup FILE back as ACCESSORY's whole data in SLOT (another slot's or
    app's backup too). Its SHA-256 is checked against FILE.sha256 first: a corrupted or
    foreign file is refused (exit 2) and nothing is touched. Needs --confirm SLOT on every
    slot: the data there now is replaced.

    \b
    postgres  loaded into a new database in one transaction, then swapped for the app's
              (the app's connections are cut); a failed load leaves the app's as it was
    redis     the server restarted on the snapshot; the data before it is kept until the
              server answers, and put back when it does not

    \b
      shipway restore staging db hello-prod-db-20261204T133000Z.dump --confirm staging
    """

    def body() -> int:
        from shipway import api

        app = obj.app()
        name = one_slot(app, slot)
        reporter = reporter_of(obj)
        api.restore(app, name, accessory, file, confirm=confirm, reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)


def _said(obj: Context, line: str, doc: dict[str, Any]) -> int:
    """The result: its line, or its JSON document with -o json."""
    if obj.json:
        from shipway.cli.report import emit_json

        emit_json(doc)
    else:
        click.echo(line)
    return 0
