"""``shipway audit [SLOT]``: who changed what, when, under which clearance — read from the
release records each slot's target keeps (release/audit.py), so every machine sees the
same trail."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from shipway.cli.common import Context, output_option, pass_obj, run_body, slot_argument

if TYPE_CHECKING:
    from shipway.release.model import Release

COLUMNS = ["slot", "revision", "status", "when", "operation", "who", "clearance", "summary"]
WIDE = [*COLUMNS, "commit", "author", "ci"]


def audit_row(release: Release) -> dict[str, Any]:
    """One record's audit line; a record older than the audit names its actor only."""
    a = release.audit
    row: dict[str, Any] = {
        "app": release.app,
        "slot": release.slot,
        "revision": release.revision,
        "status": str(release.status),
        "when": release.created_at,
        "description": release.description,
        "operation": a.operation if a else "",
        "who": a.who() if a else release.actor,
        "clearance": ", ".join(a.clearance) if a else "",
        "break_glass": a.break_glass if a else None,
        "summary": (a.summary if a else "") or release.description.split("\n")[0],
        "commit": a.commit if a else None,
        "author": a.author if a else None,
        "ci": " ".join(f"{k}={v}" for k, v in a.ci.items()) if a and a.ci else "",
    }
    if a and a.break_glass:
        row["clearance"] += f" ({a.break_glass})"
    return row


@click.command()
@slot_argument
@click.option("--wide", is_flag=True, help="Every column, whole: commit, author, CI identity.")
@output_option
@pass_obj
def audit(obj: Context, slot: str | None, wide: bool) -> None:
    """Who made each release of SLOT (every slot of the spec when none is given), newest
    first: the OS user and host, the source's git commit and author, the CI identity, the
    clearance used (confirm, take-host, take-over, break-glass and its reason) and what it
    changed. Read from the records the targets keep, so every machine sees the same trail;
    a slot that cannot be read is said, and the others are listed. -o json: every field,
    with the record's full audit."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json, table
        from shipway.cli.term import width

        app = obj.app()
        names = [slot] if slot is not None else app.slots.names()
        rows: list[dict[str, Any]] = []
        problems: list[dict[str, str]] = []
        releases: list[Release] = []
        for name in names:
            if name not in app.slots:
                from shipway.errors import InputError

                raise InputError(f"no slot {name!r} (slots: {', '.join(app.slots.names())})")
            try:
                releases += api.history(app, name)
            except Exception as exc:  # one slot's engine down: the others are still told
                problems.append({"slot": name, "error": f"{type(exc).__name__}: {exc}"})
        releases.sort(key=lambda r: (r.created_at, r.revision), reverse=True)
        if obj.json:
            docs = [
                {**audit_row(r), "audit": r.audit.to_json() if r.audit else None} for r in releases
            ]
            emit_json({"app": app.name, "records": docs, "errors": problems})
            return 1 if problems and not docs else 0
        rows = [audit_row(r) for r in releases]
        for row in rows:
            row["when"] = str(row["when"])[:19].replace("T", " ")
        for p in problems:
            click.echo(f"warning: slot {p['slot']} could not be read: {p['error']}", err=True)
        if not rows:
            click.echo(f"no release records for {app.name} in {', '.join(names)}")
        columns = WIDE if wide else COLUMNS
        limit = None if wide else width(sys.stdout)
        for line in table(rows, columns, limit, shrink=["summary", "who"]):
            click.echo(line)
        return 1 if problems and not rows else 0

    run_body(obj, body)
