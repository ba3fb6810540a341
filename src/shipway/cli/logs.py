"""``shipway logs``: every process of a slot interleaved, like honcho and foreman show
them — a prefix per instance (``web.1@r3 |``), in its own colour on a terminal, the time
each line was written with ``--timestamps``, the last ``-n`` lines or those ``--since`` a
time, of what runs or of one release (``--release N``, a failed one too). When the lines
are not simply what runs (after ``stop``, say), a line on stderr says what they are.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    output_option,
    pass_obj,
    pick_slot,
    run_body,
    slot_argument,
)
from shipway.cli.completion import complete_process, complete_revision

if TYPE_CHECKING:
    from shipway.backends.logs import LogLine


PALETTE = ("cyan", "yellow", "green", "magenta", "blue", "red", "bright_cyan", "bright_yellow")
_AGO = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def since_of(value: str | None, now: float | None = None) -> float | None:
    """``--since``: a duration ago (``90s``, ``10m``, ``2h``, ``1d``) or a time (ISO 8601;
    without a zone, this machine's), as epoch seconds."""
    if value is None:
        return None
    m = _AGO.match(value.strip())
    if m:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        from shipway.errors import InputError

        raise InputError(
            f"--since {value!r} is neither a duration nor a time "
            "(hint: --since 10m, --since 2h, --since 2026-12-01T09:30)"
        ) from None
    return (when if when.tzinfo else when.astimezone()).timestamp()


def stamp(at: float | None) -> str:
    """A line's time as ``--timestamps`` shows it (this machine's zone, milliseconds)."""
    if at is None:
        return " " * 29
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="milliseconds")


class Prefixes:
    """The ``source |`` prefix of each line: padded to the widest seen, coloured per
    process on a terminal (a process keeps its colour for the whole run)."""

    def __init__(self, processes: list[str], shown: list[str], colour: bool) -> None:
        self.colour = colour
        self.colours = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(processes)}
        # as wide as the longest shown process's ``.1@r1`` from the start; wider when one is
        self.width = max((len(p) for p in shown), default=0) + len(".1@r1")

    def __call__(self, source: str, process: str) -> str:
        if not source:
            return ""
        self.width = max(self.width, len(source))
        text = f"{source.ljust(self.width)} |"
        if self.colour:
            fg = self.colours.setdefault(process, PALETTE[len(self.colours) % len(PALETTE)])
            text = click.style(text, fg=fg)
        return text + " "


@click.command()
@slot_argument
@click.argument("process", required=False, shell_complete=complete_process)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="How many of the last lines to print first (all processes together).",
)
@click.option("-t", "--timestamps", is_flag=True, help="Show when each line was written.")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only lines written since then: a duration ago (10m, 2h) or a time (ISO 8601).",
)
@click.option(
    "--release",
    "release",
    type=int,
    metavar="N",
    shell_complete=complete_revision,
    help="The logs of release N's instances (a failed one's too) instead of what runs.",
)
@output_option
@pass_obj
def logs(
    obj: Context,
    slot: str | None,
    process: str | None,
    follow: bool,
    lines: int,
    timestamps: bool,
    since: str | None,
    release: int | None,
) -> None:
    """Print the logs of SLOT's processes (or of PROCESS only), interleaved by time, each
    line after its instance (web.1@r3); secret values are masked."""

    def body() -> int:
        from shipway import api
        from shipway.cli.term import colour_on

        app = obj.app()
        name, proc = pick_slot(app, slot, process)
        view = api.log_view(
            app, name, proc, lines=lines, since=since_of(since), release=release, follow=follow
        )
        if obj.json and not follow:
            from shipway.cli.report import emit_json

            emit_json(
                {
                    "slot": name,
                    "process": proc,
                    "release": release,
                    "about": view.about,
                    "lines": [_json(line) for line in view.lines],
                }
            )
            return 0
        if view.about:
            click.echo(f"-- {view.about} --", err=True)
        shown = [proc] if proc else list(app.processes)
        prefix = Prefixes(list(app.processes), shown, colour_on(sys.stdout))
        try:
            for line in view.lines:
                if obj.json:
                    click.echo(json.dumps(_json(line)))
                    continue
                when = f"{stamp(line.at)} " if timestamps else ""
                click.echo(f"{when}{prefix(line.source, line.process)}{line.text}")
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (| head): not an error
            return 0
        return 0

    run_body(obj, body)


def _json(line: LogLine) -> dict[str, object]:
    at = datetime.fromtimestamp(line.at).astimezone().isoformat() if line.at else None
    return {"source": line.source, "process": line.process, "at": at, "text": line.text}
