"""A canary's steps, walked: the share set by the backend, the counts read, the decision
made here from them (:func:`shipway.plan.canary.analyse`, pure) — never in a backend, so
every backend whose proxy counts per release gets the same decision.

What must never happen:
  * an abort that leaves the canary any share: the share goes to 0 (``shift_traffic(0)``)
    before the failure is returned, before the undo removes its processes (invariant 17);
  * too little traffic taken for a verdict: ``hold`` until the step's time limit, where the
    spec's ``at_timeout`` decides, said so (``CanaryInconclusive`` when it aborts);
  * a person's decision applied to another canary: it names the canary it is for, and a
    stale one is dropped when a canary starts;
  * a step left out of the history: each verdict is written into the pending record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shipway.backends.canary import CanaryCounts, CanaryNotReady, canaries_of, canary_id
from shipway.backends.protocol import Backend, Failure, Reason, Reporter
from shipway.engine.replica_canary import PodWatch
from shipway.events.model import CanaryFigures
from shipway.events.sink import tell
from shipway.guard import Clearance
from shipway.plan.canary import Analysis, Tally, analyse, rules_of
from shipway.plan.model import AnalyseCanary, HoldCanary, ShiftTraffic
from shipway.release.model import Release, now_utc
from shipway.spec.model import Target

#: how often the counts are read and the test run (each read sees every request since)
CHECK_EVERY = 0.1
#: how often a step still holding says where it stands
SAY_EVERY = 5.0
#: how often the state ``canary status`` shows is written while nothing changes
NOTE_EVERY = 0.5
#: how often a person's decision (``canary promote`` / ``canary abort``) is looked for: a
#: note read is an archive call on Docker, so not at every check of the counts
HAND_EVERY = 0.5


class CanaryWalk:
    """The canary of one rollout: the window of each step (the counts read when its share
    was set), and its analysis."""

    def __init__(
        self,
        backend: Backend,
        clearance: Clearance,
        target: Target,
        reporter: Reporter,
        record: Callable[[Release], None],
    ) -> None:
        self.canaries = canaries_of(backend)
        self.clearance, self.target, self.reporter = clearance, target, reporter
        self.record = record
        self.baseline: CanaryCounts | None = None
        self.since = time.monotonic()
        self.pods = PodWatch(backend)  # a replica-ratio canary's held steps

    def shift(self, release: Release, step: ShiftTraffic) -> Failure | None:
        """Set the step's share; the failure of a canary whose processes did not get ready
        for it (the backend's wait's: its reason, exit code and log tail), else None."""
        c, t = self.clearance, self.target
        if not release.canary and self.baseline is None:  # a canary starts: no stale decision
            self.canaries.canary_note(c, t, "decision", None)
        try:
            self.canaries.shift_traffic(c, t, release, step.percent, self.reporter)
        except CanaryNotReady as exc:
            said = f"the canary is not ready for its {step.percent}% share: {exc.failure.message}"
            return replace(exc.failure, message=said)
        self.baseline = self.canaries.canary_counts(t)
        self.since = time.monotonic()
        return None

    def finish(self, release: Release) -> None:
        """After the switch (every step done): the whole share to the promoted release, the
        canary's own processes gone where the backend kept them beside the route."""
        self.canaries.shift_traffic(self.clearance, self.target, release, 100, self.reporter)
        self.baseline = None

    def analyse(self, release: Release, step: AnalyseCanary) -> tuple[Failure | None, Release]:
        """Hold the step's share until the analysis (or a person) promotes or aborts it:
        (the failure of an abort, None on a promotion; the release with this step's verdict
        in its record)."""
        rules = rules_of(step)
        ident = canary_id(release)
        said = noted = time.monotonic()
        looked = said - HAND_EVERY  # the first check looks for a person's decision too
        while True:
            counts = self.canaries.canary_counts(self.target)
            if counts is None or counts.canary != ident:
                failure = Failure(
                    reason=Reason.CANARY_ABORTED,
                    message=f"the canary r{release.revision} is no longer in the proxy",
                )
                return failure, release
            look = time.monotonic() - looked >= HAND_EVERY
            if isinstance(step, HoldCanary):  # no counts: the canary's pods decide
                verdict = self.pods.decide(self.target, step, time.monotonic() - self.since)
            else:
                verdict = self._verdict(rules_of(step), step.percent, counts)
            if look:
                verdict, looked = self._by_hand(verdict, ident), time.monotonic()
            now = time.monotonic()
            if verdict.verdict != "hold":
                return self._decided(release, step, verdict, rules.steps)
            if now - noted >= NOTE_EVERY:
                self._note(ident, step, verdict, rules.steps)
                self._tell(release, verdict, rules.steps, final=False)
                noted = now
            if now - said >= SAY_EVERY:
                self.reporter.line(f"  {verdict.line()}")
                said = now
            time.sleep(CHECK_EVERY)

    def _verdict(self, rules: Any, percent: int, counts: CanaryCounts) -> Analysis:
        base = self.baseline if self.baseline and self.baseline.canary == counts.canary else None
        on_canary = counts.on_canary.minus(base.on_canary if base else Tally())
        stable = counts.stable.minus(base.stable if base else Tally())
        return analyse(rules, percent, on_canary, stable, time.monotonic() - self.since)

    def _by_hand(self, verdict: Analysis, ident: str) -> Analysis:
        """The verdict, or a person's promote or abort of this canary when one is noted."""
        hand = self.canaries.read_canary_note(self.target, "decision")
        if hand and hand.get("canary") == ident and hand.get("verdict") in ("promote", "abort"):
            self.canaries.canary_note(self.clearance, self.target, "decision", None)
            who = hand.get("actor") or "someone"
            verdict = replace(verdict, verdict=hand["verdict"], why=f"by hand ({who})")
        return verdict

    def _decided(
        self, release: Release, step: AnalyseCanary, verdict: Analysis, steps: tuple[int, ...]
    ) -> tuple[Failure | None, Release]:
        c, t = self.clearance, self.target
        failure = None
        if verdict.verdict == "abort":
            # before anything else: every request back to the stable release
            self.canaries.shift_traffic(c, t, release, 0, self.reporter)
            reason = Reason.CANARY_INCONCLUSIVE if verdict.timed_out else Reason.CANARY_ABORTED
            failure = Failure(
                reason=reason,
                message=f"canary r{release.revision} aborted at {verdict.percent}%: {verdict.why}",
                details=(
                    f"canary: {_counts(verdict.canary)}",
                    f"stable: {_counts(verdict.stable)}",
                ),
            )
            if isinstance(step, HoldCanary):  # no counts; a pods' failure has its own words
                sick = self.pods.failure or Failure(reason, "")
                failure = replace(failure, process=sick.process, exit_code=sick.exit_code,
                                  details=sick.details)  # fmt: skip
        self.reporter.line(f"  {verdict.line()}")
        self._tell(release, verdict, steps, final=True)
        entry = {**verdict.to_json(), "at": now_utc()}
        for side in ("canary", "stable"):  # the record keeps the counts, not the histogram
            entry[side] = {k: v for k, v in entry[side].items() if k != "latency"}
        release = replace(release, canary=(*release.canary, entry))
        self.record(release)
        self._note(canary_id(release), step, verdict, steps)
        return failure, release

    def _tell(
        self, release: Release, verdict: Analysis, steps: tuple[int, ...], final: bool
    ) -> None:
        """The figures of this analysis as a ``canary`` event (the dashboard's chart)."""
        step = steps.index(verdict.percent) + 1 if verdict.percent in steps else 0
        figures = CanaryFigures(
            self.target.app,
            self.target.slot,
            release.revision,
            step,
            steps,
            verdict.percent,
            verdict.verdict,
            verdict.why,
            verdict.elapsed,
            _figures(verdict.canary),
            _figures(verdict.stable),
            final,
        )
        tell(self.reporter, figures)

    def _note(self, ident: str, step: AnalyseCanary, verdict: Analysis, steps: Any) -> None:
        doc = {
            "canary": ident,
            "pid": os.getpid(),
            "steps": list(steps),
            "percent": step.percent,
            "analysis": verdict.to_json(),
            "at": now_utc(),
        }
        self.canaries.canary_note(self.clearance, self.target, "state", doc)


def _counts(t: Tally) -> str:
    p99 = t.quantile(0.99)
    lat = f", p99 {p99 * 1000:.0f} ms" if p99 is not None else ""
    return f"{t.requests} requests, {t.bad} bad ({t.status_5xx} 5xx, {t.failures} failed){lat}"


def _figures(t: Tally) -> dict[str, Any]:
    """A side's counts as an event holds them (the histogram left out)."""
    return {k: v for k, v in t.to_json().items() if k != "latency"}
