"""``split`` in ``[slots.NAME.canary]``: what sends a canary its share of the requests.

* ``"gateway"`` (the default): a router that counts — shipway's own proxy on local and
  docker slots, a Gateway API implementation with a Prometheus on kubernetes
  (``gateway`` and ``prometheus`` required there);
* ``"replicas"`` (kubernetes only, docs/canary.md): no router at all — the canary's pods
  run beside the stable's behind the stable Service, so a share is the canary's pods among
  all of them, rounded to whole pods. Nothing counts requests per release, so the keys of
  the request test (and ``gateway``, ``prometheus``) are refused with it: each step is held
  ``step_time`` while the canary's pods' health may abort it, and then, with no counts to
  judge, it ends *inconclusive* — never a pass — and ``at_timeout`` decides; so it is
  required, said by the spec's author, never a default.

Only the reading and the plan's words are here; the share in pods is
:mod:`shipway.plan.replica_canary`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath

Split = Literal["gateway", "replicas"]
SPLITS: tuple[Split, ...] = ("gateway", "replicas")
KEY = "split"
#: the keys that tune the test on counted requests (spec/canary.py's KEYS but the steps and
#: their time): a replica-ratio canary has no counts
COUNTED_KEYS = (
    "step_requests",
    "error_rate",
    "error_ratio",
    "latency_ratio",
    "false_abort",
    "timeout",
    "answer_timeout",
)


def read_split(
    c: Checker, raw: Any, path: KeyPath, backend: str | None
) -> tuple[Split | None, Any]:
    """(the split the table asks for, the table without ``split``); None and a problem on
    ``c`` when it is not one of :data:`SPLITS` or the slot's backend is not kubernetes."""
    if not isinstance(raw, Mapping) or KEY not in raw:
        return "gateway", raw
    rest = {k: v for k, v in raw.items() if k != KEY}
    where = (*path, KEY)
    split = c.choice(raw[KEY], where, SPLITS)
    if split is None:
        return None, rest
    if split == "replicas" and backend != "kubernetes":
        c.error(
            where,
            f"a replica-ratio canary runs on kubernetes slots only; on a {backend or 'local'} "
            "slot shipway's own proxy splits the requests by weight and counts them",
            'remove split (the default is "gateway")',
        )
        return None, rest
    return split, rest


def refuse_counted(c: Checker, table: Mapping[str, Any], path: KeyPath) -> bool:
    """With ``split = "replicas"``: a problem on ``c`` for each key of the request test, the
    Gateway or the Prometheus (nothing counts requests here), and one when ``at_timeout``
    is not said (each step ends inconclusive: the author decides what then). True when
    there was none."""
    clean = True
    if "at_timeout" not in table:
        c.error(
            (*path, "at_timeout"),
            'is required for a replica-ratio canary (split = "replicas"): no router counts its '
            "requests, so each step ends inconclusive after step_time (its pods healthy) and "
            "never passes on its own",
            'say what then: at_timeout = "promote" (go on to the next step) or "abort"',
        )
        clean = False
    for key in (*COUNTED_KEYS, "gateway", "prometheus"):
        if key in table:
            c.error(
                (*path, key),
                'does not apply to a replica-ratio canary (split = "replicas"): no router '
                "counts its requests, each step is held step_time, aborted by its pods' "
                "health, then decided by at_timeout",
                'remove it, or use split = "gateway" with a gateway and a prometheus',
            )
            clean = False
    return clean


def replica_rules(steps: tuple[int, ...], step_time: float, at_timeout: str) -> list[str]:
    """What a plan says of a replica-ratio canary."""
    return [
        f"replica-ratio canary (split = \"replicas\"): steps {', '.join(f'{s}%' for s in steps)} "
        "asked; each share is approximate: the canary's pods among the stable's behind the "
        "stable Service, rounded to the nearest pod (at least one), and kube-proxy picks a "
        "pod per connection",
        "no stickiness: a client's requests reach either release",
        f"no per-release request counts (no router to count them): each share is held "
        f"{step_time:g}s: a crash loop, a readiness probe that fails or a pod that cannot "
        "start aborts it (outcome rolled-back); otherwise it ends inconclusive (no counts: "
        f"never a pass) and at_timeout = {at_timeout!r} decides"
        + (": a canary that answers badly while its pods stay healthy goes on"
           if at_timeout == "promote" else ""),
    ]
