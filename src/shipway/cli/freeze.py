"""``shipway freeze SLOT --for 2h --reason TEXT`` and ``shipway unfreeze SLOT``: a freeze
kept in the slot's target, so every machine's Guard refuses changes to it (exit 8) until it
ends or is lifted — ``--break-glass REASON`` on a command overrides it, recorded. Setting
or lifting it takes the slot's lock and is told like any operation (docs/events.md); what
it prints is the stream's ``ended`` event."""

from __future__ import annotations

import re
from typing import Any

import click

from shipway.cli.common import (
    Context,
    confirmation,
    one_slot,
    output_option,
    pass_obj,
    reporter_of,
    run_body,
    slot_argument,
    told,
)

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: the longest freeze ``--for`` sets (a longer one is a window in the spec)
LONGEST = 90 * 86400


def seconds_of(text: str) -> float:
    """``--for``: ``90s``, ``30m``, ``2h``, ``1d``, ``1w`` (input error otherwise)."""
    from shipway.errors import InputError

    m = _SPAN.match(text)
    if m is None:
        raise InputError(f"--for {text!r} is not a duration (e.g. 30m, 2h, 1d, 1w)")
    span = float(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < span <= LONGEST:
        raise InputError(
            f"--for {text!r} must be more than 0 and at most 90d (hint: a recurring or "
            "longer freeze is a window in the spec: [slots.NAME] freeze = [...])"
        )
    return span


def _confirm_option(f: Any) -> Any:
    return click.option(
        "--confirm",
        metavar="SLOT",
        help="Type the slot's name back (guarded and production slots).",
    )(f)


@click.command()
@slot_argument
@click.option("--for", "span", metavar="DURATION", required=True, help="30m, 2h, 1d, 1w …")
@click.option("--reason", required=True, help="Why: said to whoever is refused, and recorded.")
@_confirm_option
@output_option
@pass_obj
def freeze(obj: Context, slot: str | None, span: str, reason: str, confirm: str | None) -> None:
    """Freeze SLOT for DURATION: until then every command that changes it (deploy,
    rollback, restart, promote into it, set-image, switch, run, stop, destroy …) is refused
    with exit code 8, naming the reason and the end — on every machine, since the freeze is
    kept in the slot's target. Freezing again replaces it; `shipway unfreeze SLOT` lifts it;
    `--break-glass REASON` on a command overrides it (recorded in the release). Recurring
    windows (weekends, nights, holidays) are declared in the spec instead."""

    def body() -> int:
        import socket
        from datetime import UTC, datetime, timedelta

        from shipway import api
        from shipway.engine.who import os_user
        from shipway.spec.freeze import Freeze

        if not reason.strip():
            from shipway.errors import InputError

            raise InputError("--reason must say why (it is shown to whoever is refused)")
        app = obj.app()
        name = one_slot(app, slot)
        now = datetime.now(UTC)
        until = (now + timedelta(seconds=seconds_of(span))).isoformat(timespec="seconds")
        made = Freeze(
            reason.strip(),
            until,
            by=f"{os_user()}@{socket.gethostname()}",
            since=now.isoformat(timespec="seconds"),
        )
        reporter = reporter_of(obj)
        api.freeze(app, name, made, confirm=confirmation(app, name, confirm), reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)


@click.command()
@slot_argument
@_confirm_option
@output_option
@pass_obj
def unfreeze(obj: Context, slot: str | None, confirm: str | None) -> None:
    """Lift the freeze `shipway freeze` kept in SLOT's target. A window the spec declares
    still holds (it is said): change the spec to lift it."""

    def body() -> int:
        from shipway import api

        app = obj.app()
        name = one_slot(app, slot)
        reporter = reporter_of(obj)
        api.freeze(app, name, None, confirm=confirmation(app, name, confirm), reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)
