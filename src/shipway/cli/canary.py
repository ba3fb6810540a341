"""``shipway canary status | promote | abort SLOT``: a canary slot's live counts and test,
and a person's decision (docs/canary.md)."""

from __future__ import annotations

from typing import Any

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    confirmation,
    one_slot,
    output_option,
    pass_obj,
    print_outcome,
    reporter_of,
    run_body,
    slot_argument,
)


@click.group()
def canary() -> None:
    """A canary release (strategy = "canary"): watch it, or decide it by hand.

    A deploy to a canary slot starts the new release beside the one serving, passes its
    health gates, then sends it each step's share of requests (sticky by a cookie; the
    header X-Shipway-Canary: always / never picks a side) while a sequential test on the
    router's counts of both releases decides: abort (the share goes to 0 at once, the
    canary goes, exit 10), promote (the next step; at 100% the old release drains and goes)
    or hold (too little traffic yet).

    \b
    shipway canary status prod           # share, counts per release, the test's state
    shipway canary status prod -o json
    shipway canary promote prod          # the next step now (the deploy running it acts)
    shipway canary abort prod            # every request back to the stable release now
    """


@canary.command("status")
@slot_argument
@output_option
@pass_obj
def status(obj: Context, slot: str | None) -> None:
    """SLOT's canary now: its share, the counts of both releases, the test's statistics."""

    def body() -> int:
        from shipway import canary as api
        from shipway.cli.report import emit_json

        app = obj.app()
        doc = api.status(app, one_slot(app, slot))
        if obj.json:
            emit_json(doc)
        else:
            for line in _lines(doc):
                click.echo(line)
        return 0

    run_body(obj, body)


def _lines(doc: dict[str, Any]) -> list[str]:
    if not doc["running"]:
        return [f"{doc['slot']}: no canary runs (steps {_steps(doc['steps'])})"]
    alive = "running" if doc["deploy_alive"] else "its deploy is gone: `shipway canary abort`"
    lines = [
        f"{doc['slot']}: canary {doc['canary']} at {doc['percent']}% "
        f"(steps {_steps(doc['steps'])}; deploy pid {doc['deploy_pid']}: {alive})"
    ]
    counts = doc["counts"]
    if doc.get("split") == "replicas":  # nothing counts its requests
        lines.append(
            "  no per-release counts: a replica-ratio canary, aborted by its pods' health, "
            "each step otherwise inconclusive until at_timeout decides"
        )
        counts = None
    for side, key in (("canary", "on_canary"), ("stable", "stable")) if counts else ():
        c = counts[key]
        p99 = f", p99 {c['p99_ms']} ms" if c["p99_ms"] is not None else ""
        lines.append(
            f"  {side:7} {c['requests']} requests, {c['bad']} bad "
            f"({c['5xx']} 5xx, {c['failures']} failed){p99}"
        )
    analysis = doc.get("analysis")
    if analysis:
        lines.append(f"  this step: {analysis['verdict']} ({analysis['why']})")
        for test in analysis["tests"]:
            lines.append(
                f"  test {test['test']}: {test['state']}, statistic {test['llr']} "
                f"(abort at {test['abort_at']}, pass at {test['pass_at']}): {test['seen']}"
            )
    return lines


def _steps(steps: list[int]) -> str:
    return ", ".join(f"{s}%" for s in steps)


def _decide(verdict: str) -> Any:
    @slot_argument
    @confirm_option
    @output_option
    @pass_obj
    def command(obj: Context, slot: str | None, confirm: str | None) -> None:
        def body() -> int:
            from shipway import canary as api
            from shipway.cli.report import emit_json

            app = obj.app()
            name = one_slot(app, slot)
            reporter = reporter_of(obj)
            done = api.decide(
                app,
                name,
                verdict,  # type: ignore[arg-type]
                confirm=confirmation(app, name, confirm),
                reporter=reporter,
            )
            if done.outcome is not None:
                if reporter.ended is None:  # every operation ends in the stream: a bug otherwise
                    raise RuntimeError(f"the {done.outcome.kind} outcome was not told as an event")
                if not obj.json:
                    click.echo(done.line)
                return print_outcome(obj, reporter.ended, {"canary": done.to_json()})
            if obj.json:
                emit_json(done.to_json())
            else:
                click.echo(done.line)
            return 0

        run_body(obj, body)

    return command


promote = canary.command(
    "promote",
    help="Promote SLOT's canary to its next step now (the deploy running it acts at once). "
    "A canary left behind by a killed deploy is rolled to 100% here, under the slot's lock.",
)(_decide("promote"))
abort = canary.command(
    "abort",
    help="Abort SLOT's canary now: every request to the stable release first, then the "
    "canary goes (outcome rolled-back). A canary left behind by a killed deploy is put "
    "back here, under the slot's lock.",
)(_decide("abort"))
