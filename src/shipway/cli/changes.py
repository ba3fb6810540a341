"""The commands that say what changes: ``plan`` (and ``deploy --dry-run``), ``diff``, and
``history`` (with ``--verbose``, what each revision changed).

Secret values never reach their output: a change to a secret names the key only, a
secret-bearing config file is named and never shown, and plans leave the records' secret
marks out of their JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    build_option,
    one_slot,
    output_option,
    pass_obj,
    pick_slot,
    reporter_of,
    revision_of,
    run_body,
    slot_argument,
    upgrade_accessory_option,
)
from shipway.cli.completion import complete_revision

if TYPE_CHECKING:
    from shipway.engine.request import DeployRequest

#: the history columns that fit a terminal, and those ``--wide`` adds
HISTORY_COLUMNS = ["revision", "status", "updated", "image", "description"]
HISTORY_WIDE = ["revision", "status", "created_at", "updated_at", "image", "digest",
                "actor", "generation", "description"]  # fmt: skip

#: ``plan --detailed-exitcode``: the plan changes something (0: no changes). Terraform's
#: -detailed-exitcode uses 2, which is shipway's invalid-input code.
EXIT_CHANGES = 6


@click.command()
@slot_argument
@click.option("--image", metavar="REF", help="Plan for this image instead of the spec's.")
@click.option(
    "--out",
    "out",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Save the plan; apply it later with deploy --plan FILE (repair --plan FILE).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Plan a repair instead: re-assert the deployed release, changing only what drifted.",
)
@click.option(
    "--take-host",
    is_flag=True,
    help="Plan taking a host another app or slot serves today (refused otherwise).",
)
@click.option(
    "--take-over",
    is_flag=True,
    help="Source slots: plan taking objects a Helm release or another tool owns.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Plan the redeploy `deploy --force` would do even when nothing changed.",
)
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help=f"Exit 0 when there are no changes, {EXIT_CHANGES} when there are (errors as usual).",
)
@upgrade_accessory_option
@build_option
@output_option
@pass_obj
def plan(
    obj: Context,
    slot: str | None,
    image: str | None,
    out: str | None,
    repair: bool,
    take_host: bool,
    take_over: bool,
    force: bool,
    detailed_exitcode: bool,
    upgrade_accessories: tuple[str, ...],
    build: bool,
) -> None:
    """Show what a deploy to SLOT would change and do. Touches nothing, starts nothing.

    \b
    The changes are against the deployed release's record and the target: image or
    source digest, env (plain values old → new; secrets named, never shown), config
    files (unified diffs; secret-bearing files named only), processes, routes, the
    release command, and any drift. Nothing differs: "no changes", and a deploy would
    do nothing. In CI: plan --detailed-exitcode exits 0 (no changes) or 6 (changes)."""

    from shipway.engine.request import DeployRequest

    asked = DeployRequest(
        image=image,
        take_host=take_host,
        take_over=take_over,
        force=force,
        build=build,
        upgrade_accessories=tuple(upgrade_accessories),
    )

    def body() -> int:
        code = show_plan(obj, slot, asked, out, repair)
        return code if detailed_exitcode else 0

    run_body(obj, body)


def show_plan(
    obj: Context, given: str | None, asked: DeployRequest, out: str | None, repair: bool
) -> int:
    """``plan`` (and ``deploy --dry-run``, which is exactly this): read-only. Returns 0
    when the plan changes nothing, EXIT_CHANGES when it does."""
    from shipway import api

    app = obj.app()
    slot = one_slot(app, given)
    the_plan = api.plan(
        app,
        slot,
        repair=repair,
        request=asked,
        reporter=reporter_of(obj),  # what planning says (objects taken over, hooks left out)
    )
    detail = [] if the_plan.unchanged else api.object_diff(app, slot, the_plan)
    if out:
        Path(out).write_text(json.dumps(the_plan.to_json(), indent=2, sort_keys=True) + "\n")
    if obj.json:
        from shipway.cli.report import emit_json

        emit_json({**the_plan.to_json(), "diff": detail, "saved_to": out})
    else:
        for line in the_plan.describe() + detail:
            click.echo(line)
        if out:
            verb = "repair" if repair else "deploy"
            click.echo(f"saved to {out}; apply with: shipway {verb} {slot} --plan {out}")
    # an accessory to start is a change, though not one of the app
    return 0 if the_plan.unchanged and not the_plan.mutates else EXIT_CHANGES


@click.command()
@slot_argument
@click.argument("rev_a", required=False, metavar="[REV_A]", shell_complete=complete_revision)
@click.argument("rev_b", required=False, metavar="[REV_B]", shell_complete=complete_revision)
@output_option
@pass_obj
def diff(obj: Context, slot: str | None, rev_a: str | None, rev_b: str | None) -> None:
    """What differs between releases of SLOT; secrets are named, never shown.

    \b
    shipway diff SLOT            the deployed release against what a deploy would run now
    shipway diff SLOT REV        revision REV against its predecessor
    shipway diff SLOT REV_A REV_B
    With revisions it reads the release records only, so it works after the images and
    the snapshots are gone."""

    def body() -> int:
        from shipway import api

        app = obj.app()
        name, a, b = pick_slot(app, slot, rev_a, rev_b)
        result = api.diff(app, name, revision_of(a), revision_of(b))
        if obj.json:
            from shipway.cli.report import emit_json

            emit_json({"slot": name, **result.to_json()})
        else:
            for line in result.describe():
                click.echo(line)
        return 0

    run_body(obj, body)


@click.command()
@slot_argument
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Add a line per revision saying what it changed against its predecessor.",
)
@click.option(
    "--wide", is_flag=True, help="Every column, whole: full digests, actor, generation, times."
)
@output_option
@pass_obj
def history(obj: Context, slot: str | None, verbose: bool, wide: bool) -> None:
    """The release history of SLOT, oldest first. Fits the terminal's width (digests
    shortened, long cells cut with …); --wide shows everything; -o json is always whole."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import listing, table
        from shipway.cli.term import colour_on, short_digests, width

        app = obj.app()
        name = one_slot(app, slot)
        releases = api.history(app, name)
        rows = [r.summary() for r in releases]
        columns = list(HISTORY_WIDE if obj.json or wide else HISTORY_COLUMNS)
        for row, release in zip(rows, releases, strict=True):
            if obj.json and release.canary:  # a canary's steps: verdicts and their counts
                row["canary"] = [dict(step) for step in release.canary]
        if verbose:
            from shipway.plan.diff import history_diffs

            diffs = history_diffs(releases)
            for row in rows:
                found = diffs[row["revision"]]
                row["changed"] = found.summary()
                if obj.json:
                    row["changes"] = [c.to_json() for c in found.changes]
            columns.append("changed")
        if obj.json or wide or not rows:
            return listing(obj.json, name, "releases", rows, columns)
        for row in rows:
            row["updated"] = str(row["updated_at"] or "")[:19].replace("T", " ")
            row["image"] = short_digests(str(row["image"] or ""))
            row["description"] = short_digests(str(row["description"] or ""))
        coloured = ["status"] if colour_on(sys.stdout) else []
        shrink = ["description", "changed", "image"]
        for line in table(rows, columns, width(sys.stdout), coloured, shrink):
            click.echo(line)
        return 0

    run_body(obj, body)
