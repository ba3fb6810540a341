"""``shipway deploy SLOT``: roll out what the spec (or ``--image``, or a saved plan) says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from shipway.cli.common import (
    Context,
    build_option,
    confirm_option,
    confirmation,
    fail,
    one_slot,
    output_option,
    pass_obj,
    roll,
    run_body,
    saved_plan,
    slot_argument,
    take_host_option,
    take_over_option,
    timeout_options,
    upgrade_accessory_option,
)

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


@click.command()
@slot_argument
@click.option("--image", metavar="REF", help="Deploy this image instead of the spec's.")
@click.option(
    "--plan",
    "plan_file",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Apply exactly this saved plan, or refuse if the slot changed since.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan and touch nothing: exactly `shipway plan SLOT` (same options).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Roll every process even when nothing changed (default: 'no changes', exit 0).",
)
@confirm_option
@take_host_option
@take_over_option
@upgrade_accessory_option
@build_option
@timeout_options
@output_option
@pass_obj
def deploy(
    obj: Context,
    slot: str | None,
    image: str | None,
    plan_file: str | None,
    dry_run: bool,
    force: bool,
    confirm: str | None,
    take_host: bool,
    take_over: bool,
    upgrade_accessories: tuple[str, ...],
    build: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Roll out to SLOT: lock, read the anchor, build; the release's prerequisites, its release
    command (before any new process starts), the new processes and their health gate, the
    switch, the prune; record — or roll back (a failed release command started nothing).

    When nothing differs from the deployed release (spec, image, secrets, and the target
    matching its record) it says "no changes", applies nothing, records no revision and
    exits 0; --force rolls every process anyway. For a slot whose objects come from a
    source, --image sets the image of the containers the source's image_containers names."""
    from shipway.engine.request import DeployRequest

    asked = DeployRequest(
        image=image,
        take_host=take_host,
        take_over=take_over,
        force=force,
        build=build,
        timeout=timeout,
        rollback_timeout=rollback_timeout,
        upgrade_accessories=tuple(upgrade_accessories),
    )
    if dry_run:
        if plan_file:
            fail(obj, 2, "--dry-run prints a new plan; it takes no --plan FILE")
        from shipway.cli.changes import show_plan

        def dry_run_body() -> int:
            show_plan(obj, slot, asked, None, False)
            return 0

        run_body(obj, dry_run_body)
        return

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name = one_slot(app, slot)
        saved = saved_plan(plan_file)  # a bad plan file is refused before asking
        return api.deploy(
            app,
            name,
            request=replace(asked, saved=saved),
            confirm=confirmation(app, name, confirm),
            reporter=reporter,
        )

    roll(obj, operation, _urls(slot))


def _urls(slot: str | None) -> Callable[[App, Outcome], dict[str, Any]]:
    """For ``-o json``: the URLs the slot serves once the operation settled, by process
    (``{"urls": {"web": ["http://…"]}}``, empty when nothing is routed) — what the text
    output's ``serving http://…`` lines say."""

    def urls(app: App, outcome: Outcome) -> dict[str, Any]:
        from shipway import api

        found: dict[str, list[str]] = {}
        try:
            for p in api.status(app, one_slot(app, slot)).processes:
                url = p.detail.get("url")
                if url:
                    found.setdefault(p.process, [])
                    found[p.process] += [u for u in str(url).split() if u not in found[p.process]]
        except Exception as exc:  # the outcome stands; the URLs are a courtesy
            return {"urls": found, "urls_error": f"{type(exc).__name__}: {exc}"}
        return {"urls": found}

    return urls
