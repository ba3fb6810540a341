"""PURE: a replica-ratio canary (``split = "replicas"``, kubernetes): the share in pods, its
steps, and the decision of each held step.

With no router, the canary's pods run beside the stable's behind the stable Service, and
kube-proxy sends each connection to one of them: a share is ``canary / (canary + stable)``
pods. The canary gets ``round(share x stable / (100 - share))`` pods (halves up), at least
one, so a step's share is only approximate — with 2 stable pods, 10 % asked is 1 canary pod
(33 %). Nothing counts requests per release: a step is held ``step_time`` (:func:`held`):
a health signal of the canary's pods aborts it; at the end, having no counts, it is
inconclusive (never a pass: invariant 17) and the spec's ``at_timeout`` decides.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from shipway.plan.canary import Analysis, Tally, canary_steps
from shipway.plan.model import AnalyseCanary, HoldCanary, ShiftReplicas, ShiftTraffic, Step
from shipway.release.artifact import Artifact
from shipway.spec.canary import AtTimeout, Canary
from shipway.spec.model import App


def replica_share(percent: int, stable: int) -> tuple[int, float]:
    """(the canary's pods for ``percent`` beside ``stable`` pods, the share they give in
    percent)."""
    if percent >= 100:
        return max(1, stable), 100.0
    pods = max(1, math.floor(percent * max(1, stable) / (100 - percent) + 0.5))
    return pods, 100.0 * pods / (pods + max(1, stable))


def said(percent: int, stable: Mapping[str, int]) -> str:
    """The pods of each routed process at ``percent``: ``web: 1 pod beside 2 (33%)``."""
    parts = []
    for process, n in sorted(stable.items()):
        pods, share = replica_share(percent, n)
        parts.append(f"{process}: {pods} pod{'s' if pods != 1 else ''} beside {n} ({share:.0f}%)")
    return "; ".join(parts)


def replica_steps(
    steps: Sequence[Step], artifact: Artifact, rules: Canary, stable: Mapping[str, int]
) -> tuple[list[Step], list[str]]:
    """A rollout's steps with a replica-ratio canary's before its switch (where a counted
    canary's would be: :func:`~shipway.plan.canary.canary_steps`), and the plan's notes.
    ``stable``: the replicas of each routed process as the spec declares them."""
    out, why_not = canary_steps(steps, artifact, rules)
    if why_not:
        return out, [why_not]
    declared = json.dumps(rules.to_json(), sort_keys=True)
    mapped: list[Step] = []
    for step in out:
        if isinstance(step, ShiftTraffic):
            pods = said(step.percent, stable)
            step = ShiftReplicas(percent=step.percent, sticky=False, pods=pods)
        elif isinstance(step, AnalyseCanary):
            step = HoldCanary(percent=step.percent, rules=declared, seconds=rules.step_time,
                              at_timeout=rules.at_timeout)  # fmt: skip
        mapped.append(step)
    return mapped, rules.rules()


def held(
    percent: int, seconds: float, elapsed: float, sick: str | None, at_timeout: AtTimeout
) -> Analysis:
    """A held step's decision: ``abort`` on a health signal of the canary's pods (``sick``:
    what it is); once it was held ``seconds``, inconclusive — no request counts, so never a
    pass on its own — and ``at_timeout`` (the spec's, always said) decides; else ``hold``.
    The tallies are empty: no test ran."""
    none = Tally()
    if sick is not None:
        return Analysis("abort", f"the canary's pods are failing: {sick}", percent, elapsed,
                        none, none)  # fmt: skip
    if elapsed >= seconds:
        why = (
            f"inconclusive after {seconds:g}s, its pods healthy (replica-ratio: no request "
            f"counts); at_timeout = {at_timeout!r}"
        )
        return Analysis(at_timeout, why, percent, elapsed, none, none)
    why = f"{elapsed:.0f}s of {seconds:g}s, its pods healthy"
    return Analysis("hold", why, percent, elapsed, none, none)


def routed_replicas(app: App) -> dict[str, int]:
    """The replicas of each routed process of ``app`` (as it runs in a slot)."""
    return {r.process: app.processes[r.process].replicas for r in app.routes}
