"""``shipway status | ls``: what runs in a slot, and in every slot of this machine.

Engine clients are imported inside the commands, so ``shipway --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from shipway.cli.common import (
    Context,
    one_slot,
    output_option,
    pass_obj,
    run_body,
    slot_argument,
    state_dirs_option,
)

#: the status columns, in this order (then any other a backend reports)
STATUS_COLUMNS = ["process", "generation", "release", "desired", "ready", "state", "health",
                  "pid", "port", "restarts", "uptime", "url", "deployment_id"]  # fmt: skip


@click.command()
@slot_argument
@output_option
@pass_obj
def status(obj: Context, slot: str | None) -> None:
    """What runs in SLOT: what it is doing, the deployed release, each process, each
    volume, each accessory."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json, table
        from shipway.cli.term import colour_on, paint

        app = obj.app()
        result = api.status(app, one_slot(app, slot))
        if obj.json:
            emit_json(result.to_json())
            return 0
        on = colour_on(sys.stdout)
        state = result.state
        word = paint(state.word, state.word.split(" ")[0], on)
        click.echo(f"{result.app}/{result.slot} ({result.backend}): {word}")
        click.echo(f"  {state.line}")
        for frozen in result.freezes:  # every change refused (exit 8) until it ends
            click.echo(f"  {paint(frozen.line(), 'warn', on)}")
        rows = [p.to_json() for p in result.processes]
        present = {k for r in rows for k in r if r.get(k) is not None}
        columns = [c for c in STATUS_COLUMNS if c in present]
        columns += sorted(present - set(columns))
        for row in rows:  # a missing value is "-", so every row has every column
            row.update({c: "-" for c in columns if row.get(c) is None or row.get(c) == ""})
        coloured = ["state", "health"] if on else []
        for line in table(rows, columns, coloured=coloured):
            click.echo(line)
        for volume in result.volumes:
            click.echo(f"volume {volume.line()}")
        for accessory in result.accessories:
            click.echo(f"accessory {accessory.line()}")
        for certificate in result.certificates:
            click.echo(f"certificate {certificate.line()}")
        return 0

    run_body(obj, body)


@click.command(name="ls")
@state_dirs_option
@output_option
@pass_obj
def list_slots(obj: Context, state_dirs: tuple[Path, ...]) -> None:
    """Every app and slot this machine runs (the local state directory): what each is
    doing, its deployed release and how many of its processes are ready. Needs no spec."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import age, emit_json, table
        from shipway.cli.term import colour_on

        found = api.ls(state_dirs)
        if obj.json:
            emit_json({"slots": [s.to_json() for s in found]})
            return 0
        if not found:
            click.echo("no app has been deployed with this state directory")
            return 0
        rows = []
        for s in found:
            ready = sum(p.ready for p in s.processes)
            desired = sum(p.desired for p in s.processes)
            urls = sorted({str(p.detail["url"]) for p in s.processes if p.detail.get("url")})
            rows.append(
                {
                    "app": s.app,
                    "slot": s.slot,
                    "state": s.state.word,
                    "release": f"r{s.deployed.revision}" if s.deployed else "-",
                    "ready": f"{ready}/{desired}" if s.processes else "-",
                    "deployed": age(s.deployed.updated_at) if s.deployed else "-",
                    "url": " ".join(urls) or "-",
                }
            )
        coloured = ["state"] if colour_on(sys.stdout) else []
        columns = ["app", "slot", "state", "release", "ready", "deployed", "url"]
        for line in table(rows, columns, coloured=coloured):
            click.echo(line)
        return 0

    run_body(obj, body)
