"""Plans as plain data: ordered steps, the observed state they were made from, and the
release they would record. A plan describes itself (the dry-run lines), round-trips
through JSON, and carries a fingerprint of the observed state so a saved plan can be
refused when the world changed since.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal

from shipway.plan.change import Change, Diff
from shipway.release import codec
from shipway.release.artifact import DATA_KINDS
from shipway.release.model import Release, now_utc

# -- observed state --------------------------------------------------------------------

UnitState = Literal["running", "stopped", "created", "asleep", "present"]


@dataclass(frozen=True)
class ObservedUnit:
    """One unit as the backend found it. ``digest`` None: present, but not made by shipway
    from a known artifact (so it differs from anything desired)."""

    key: str
    kind: str
    digest: str | None
    state: UnitState = "present"
    process: str | None = None
    host: str | None = None
    generation: str | None = None
    phase: int = 1

    def signature(self) -> str:
        return f"{self.digest}:{self.state}"


@dataclass(frozen=True)
class Observed:
    """What lives in the target now, plus the head of its release history."""

    units: Mapping[str, ObservedUnit] = field(default_factory=dict)
    head: str = "none"

    @classmethod
    def of(cls, units: list[ObservedUnit], head: str = "none") -> Observed:
        return cls({u.key: u for u in units}, head)

    def of_generation(self, generation: str | None) -> Observed:
        """Only the units of one generation (None: units outside any generation), and the
        slot's volumes, which every generation mounts."""
        return Observed(
            {
                k: u
                for k, u in self.units.items()
                if u.generation == generation or u.kind in DATA_KINDS
            },
            self.head,
        )

    def with_altered(self, keys: Iterable[str]) -> Observed:
        """The same, with the units at ``keys`` known to differ from what made them (their
        digest unknown): a rollout applies them again and a diff calls them altered."""
        wanted = set(keys)
        return Observed(
            {k: replace(u, digest=None) if k in wanted else u for k, u in self.units.items()},
            self.head,
        )

    def summary(self) -> dict[str, str]:
        out = {key: unit.signature() for key, unit in sorted(self.units.items())}
        out["(records)"] = self.head
        return out

    def fingerprint(self) -> str:
        return fingerprint_of(self.summary())


def fingerprint_of(summary: Mapping[str, str]) -> str:
    """A short hash of an observed summary: what a saved plan was made from."""
    raw = json.dumps(dict(summary), sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def changes_between(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Human lines saying how one observed summary differs from another."""
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if key == "(records)":
            out.append(f"release history changed: {a} -> {b}")
        elif a is None:
            out.append(f"{key} appeared ({b})")
        elif b is None:
            out.append(f"{key} disappeared (was {a})")
        else:
            out.append(f"{key} changed: {a} -> {b}")
    return out


# -- steps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """Base of every step. ``name`` is the step's JSON tag; ``mutates`` says whether
    executing it changes the target; ``best_effort`` steps report failures, never fail."""

    name: ClassVar[str] = ""
    mutates: ClassVar[bool] = True
    best_effort: ClassVar[bool] = False

    def describe(self) -> str:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"step": self.name}
        for f in fields(self):
            value = getattr(self, f.name)
            data[f.name] = list(value) if isinstance(value, tuple) else value
        return data


def _seconds(value: float) -> str:
    """300 → "5m", 90 → "90s", 7200 → "2h"."""
    for unit, size in (("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def _at(host: str | None, generation: str | None = None) -> str:
    parts = []
    if generation:
        parts.append(f"generation {generation}")
    if host:
        parts.append(f"on {host}")
    return (" " + " ".join(parts)) if parts else ""


@dataclass(frozen=True)
class ApplyObject(Step):
    name: ClassVar[str] = "apply"
    unit: str
    kind: str
    action: Literal["create", "update", "start"]
    process: str | None = None
    host: str | None = None
    generation: str | None = None

    def describe(self) -> str:
        return f"{self.action} {self.unit}{_at(self.host)}"


@dataclass(frozen=True)
class Build(Step):
    """The build phase: first in a release, before anything new starts. ``kind``: an
    ``image`` (Docker, Kubernetes) or a dependency ``environment`` (local); ``what`` names
    it (the content-addressed tag, the environment's directory); ``inputs`` is the content
    digest of what it is built from (``source``: the Dockerfile, the dependency files).
    ``reuse``: those inputs were built before — nothing is built, what exists is used."""

    name: ClassVar[str] = "build"
    kind: str
    what: str
    inputs: str
    source: str
    reuse: bool = False

    def describe(self) -> str:
        inputs = self.inputs.removeprefix("sha256:")[:12]
        if self.reuse:
            return f"reuse {self.kind} {self.what} (already built from inputs {inputs})"
        return f"build {self.kind} {self.what} from {self.source} (inputs {inputs})"


@dataclass(frozen=True)
class RunReleaseCommand(Step):
    """The release phase: the release command, once, in the new release's environment,
    after its prerequisites and before any of its processes starts."""

    name: ClassVar[str] = "release-command"
    command: tuple[str, ...]
    #: seconds it may run before it is stopped (None: only the deploy's own deadline)
    timeout: float | None = None

    def describe(self) -> str:
        limit = f" (stopped after {_seconds(self.timeout)})" if self.timeout is not None else ""
        words = " ".join(self.command)
        return f"run the release command, before any new process starts: {words}{limit}"


@dataclass(frozen=True)
class WaitRollout(Step):
    """Wait for ``units`` to pass their gate. ``watch``: units of the release whose own
    wait comes later (a worker's, after the web's route moved): one that has already
    crashed fails this wait too, so no route moves to a release known to be failing."""

    name: ClassVar[str] = "wait-rollout"
    mutates: ClassVar[bool] = False
    process: str
    units: tuple[str, ...]
    host: str | None = None
    watch: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"wait until {self.process} is ready{_at(self.host)}"


@dataclass(frozen=True)
class GenerationStep(Step):
    """A step only a blue-green backend performs (:class:`~shipway.backends.protocol.
    GenerationBackend`): scaling, waiting on, and moving hosts between generations. A
    rolling plan never holds one."""


@dataclass(frozen=True)
class Scale(GenerationStep):
    """Scale a process (of a generation). ``delay``: seconds to let connections drain first."""

    name: ClassVar[str] = "scale"
    process: str
    replicas: int
    generation: str | None = None
    delay: float = 0.0

    def describe(self) -> str:
        verb = "put to sleep" if self.replicas == 0 else f"scale to {self.replicas}"
        after = f" after {self.delay:g}s" if self.delay else ""
        return f"{verb}: {self.process}{_at(None, self.generation)}{after}"


@dataclass(frozen=True)
class WaitReplicas(GenerationStep):
    name: ClassVar[str] = "wait-replicas"
    mutates: ClassVar[bool] = False
    process: str
    replicas: int
    generation: str | None = None

    def describe(self) -> str:
        return f"wait until {self.replicas} {self.process} ready{_at(None, self.generation)}"


@dataclass(frozen=True)
class PointHost(GenerationStep):
    name: ClassVar[str] = "point-host"
    host: str
    process: str
    generation: str | None = None

    def describe(self) -> str:
        return f"point {self.host} at {self.process}{_at(None, self.generation)}"


@dataclass(frozen=True)
class DropHost(GenerationStep):
    name: ClassVar[str] = "drop-host"
    best_effort: ClassVar[bool] = True
    host: str
    generation: str | None = None

    def describe(self) -> str:
        return f"drop {self.host} from{_at(None, self.generation) or ' the old release'}"


@dataclass(frozen=True)
class CanaryStep(Step):
    """A step of a canary (``strategy = "canary"``, plan/canary.py): only a backend whose
    proxy splits and counts requests per release performs its part
    (:class:`~shipway.backends.canary.Canaries`); the decision is the engine's."""


@dataclass(frozen=True)
class ShiftTraffic(CanaryStep):
    """Send ``percent`` of the requests of every host the release moves to it (the canary),
    the rest to the release serving them now; a client keeps its side (a cookie), unless
    ``sticky`` is false (a Gateway whose implementation sets no cookie: a client without
    one is split per request)."""

    name: ClassVar[str] = "shift-traffic"
    percent: int
    sticky: bool = True

    def describe(self) -> str:
        how = "sticky by cookie"
        if not self.sticky:
            how = "each request split by weight (the Gateway's implementation sets no cookie)"
        return f"send {self.percent}% of requests to the new release (the canary), {how}"


@dataclass(frozen=True)
class AnalyseCanary(CanaryStep):
    """Hold the share and analyse the counts until the canary is promoted or aborted.
    ``rules``: the canary's declaration (JSON), so a saved plan applies exactly them."""

    name: ClassVar[str] = "analyse-canary"
    mutates: ClassVar[bool] = False
    percent: int
    rules: str

    def describe(self) -> str:
        return f"analyse the canary at {self.percent}%: promote, abort (share 0 at once) or hold"


@dataclass(frozen=True)
class ShiftReplicas(ShiftTraffic):
    """A replica-ratio canary's share (``split = "replicas"``, plan/replica_canary.py): the
    canary's pods beside the stable's behind the stable Service. ``pods``: what the spec's
    replicas give, per routed process (``web: 1 beside 2``); the backend counts the live
    stable's pods when it scales."""

    name: ClassVar[str] = "shift-replicas"
    pods: str = ""

    def describe(self) -> str:
        return (
            f"run the new release (the canary) beside the stable for about {self.percent}% of "
            f"requests by pod count ({self.pods}); the Service splits per connection, not sticky"
        )


@dataclass(frozen=True)
class HoldCanary(AnalyseCanary):
    """Hold a replica-ratio canary's share ``seconds`` watching its pods: no router counts
    its requests, so a health signal aborts it, and at the end it is inconclusive and
    ``at_timeout`` (the spec's) decides."""

    name: ClassVar[str] = "hold-canary"
    seconds: float = 0.0
    at_timeout: Literal["abort", "promote"] = "abort"

    def describe(self) -> str:
        return (
            f"hold the canary at {self.percent}% for {self.seconds:g}s watching its pods: a "
            "crash loop or a failing readiness probe aborts it (its pods removed at once); "
            f"then, inconclusive (no request counts), at_timeout = {self.at_timeout!r} decides"
        )


@dataclass(frozen=True)
class WorkloadStep(Step):
    """A step on a workload shipway did not render (``set-image``): only a backend with
    such workloads performs it (:class:`~shipway.backends.protocol.SourceBackend`)."""


@dataclass(frozen=True)
class SetImage(WorkloadStep):
    """Patch one container's image (and nothing else) of ``workload`` (``Kind/name``);
    ``was`` is the anchor, the image it ran before."""

    name: ClassVar[str] = "set-image"
    workload: str
    container: str
    image: str
    was: str

    def describe(self) -> str:
        return f"set the image of {self.workload}:{self.container} to {self.image} (was {self.was})"


@dataclass(frozen=True)
class WaitImage(WorkloadStep):
    name: ClassVar[str] = "wait-image"
    mutates: ClassVar[bool] = False
    workload: str
    container: str
    image: str

    def describe(self) -> str:
        return f"wait until {self.workload} runs {self.image}"


@dataclass(frozen=True)
class Remove(Step):
    name: ClassVar[str] = "remove"
    best_effort: ClassVar[bool] = True
    unit: str
    kind: str
    reason: str
    process: str | None = None
    host: str | None = None

    def describe(self) -> str:
        return f"remove {self.unit}{_at(self.host)} ({self.reason})"


@dataclass(frozen=True)
class StartAccessory(Step):
    """An accessory made to run as declared (spec/accessories.py): created (credentials and
    data made once), started again (it was down), restarted (its own declaration changed),
    or upgraded to another major version (asked for: a dump and restore). Never a step of
    an app's rollback, restart or switch. ``declaration``: the
    accessory's JSON form, so a saved plan starts exactly what it showed."""

    name: ClassVar[str] = "accessory"
    accessory: str
    kind: str
    version: str
    action: Literal["create", "start", "restart", "upgrade"]
    declaration: str
    why: str = ""

    def describe(self) -> str:
        what = f"accessory {self.accessory} ({self.kind} {self.version})"
        if self.action == "create":
            return f"create {what}: credentials made once, data kept across releases"
        if self.action == "start":
            return f"start {what}: it is not running{self.why and f' ({self.why})'}"
        if self.action == "upgrade":
            how = (
                "snapshotted (as shipway backup takes it), the snapshot loaded by the new "
                "server in a new data directory"
                if self.kind == "redis"
                else "dumped, restored into a new cluster"
            )
            return (
                f"upgrade {what}: {self.why}: {how}, the old data directory kept until the "
                "new server answers (and put back if it does not); its clients lose their "
                "connections meanwhile"
            )
        return (
            f"restart {what}: its declaration changed ({self.why}); its clients lose "
            "their connections while it restarts"
        )


@dataclass(frozen=True)
class NoOp(Step):
    name: ClassVar[str] = "no-op"
    mutates: ClassVar[bool] = False
    reason: str

    def describe(self) -> str:
        return f"nothing to do: {self.reason}"


STEP_TYPES: dict[str, type[Step]] = {
    cls.name: cls
    for cls in (
        Build,
        ApplyObject,
        RunReleaseCommand,
        WaitRollout,
        Scale,
        WaitReplicas,
        PointHost,
        DropHost,
        Remove,
        NoOp,
        SetImage,
        WaitImage,
        StartAccessory,
        ShiftTraffic,
        AnalyseCanary,
        ShiftReplicas,
        HoldCanary,
    )
}


def step_from_json(data: Mapping[str, Any]) -> Step:
    data = dict(data)
    tag = data.pop("step", None)
    cls = STEP_TYPES.get(str(tag))
    if cls is None:
        raise ValueError(f"unknown plan step {tag!r}")
    names = {f.name: f for f in fields(cls)}
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
    return cls(**kwargs)


# -- the plan --------------------------------------------------------------------------

PLAN_FORMAT = 1


@dataclass(frozen=True)
class Plan:
    app: str
    slot: str
    backend: str
    operation: str
    steps: tuple[Step, ...]
    observed: Mapping[str, str]
    release: Release | None = None
    created_at: str = field(default_factory=now_utc)
    #: what differs between what runs (the deployed release, the target) and the plan
    diff: Diff | None = None
    #: what the plan cannot promise, and the volumes it runs with (``not zero-downtime: web
    #: mounts ReadWriteOnce volume data``); shown, never part of the fingerprint
    notes: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.observed)

    @property
    def unchanged(self) -> bool:
        """ "No changes": nothing differs, so applying the plan makes no revision."""
        return self.release is None and self.diff is not None and self.diff.empty

    @property
    def mutates(self) -> bool:
        return any(s.mutates for s in self.steps)

    def describe(self) -> list[str]:
        head = f"{self.operation} {self.app} to slot {self.slot} ({self.backend})"
        if self.release is not None:
            head += f": release r{self.release.revision}"
            if self.release.image:
                head += f", image {self.release.image}"
        elif self.unchanged:
            # an accessory to start is not a change of the app (no revision is made)
            head += ": no changes to the app" if self.mutates else ": no changes"
        lines = [head]
        if self.diff is not None and not self.unchanged:
            lines += [f"  {line}" for line in self.diff.describe()]
        lines += [f"  {i}. {step.describe()}" for i, step in enumerate(self.steps, start=1)]
        lines += [f"  {note}" for note in self.notes]
        lines.append(f"  (made from observed state {self.fingerprint})")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "app": self.app,
            "slot": self.slot,
            "backend": self.backend,
            "operation": self.operation,
            "fingerprint": self.fingerprint,
            "observed": dict(self.observed),
            "steps": [s.to_json() for s in self.steps],
            # never the secret marks: a plan is shown and saved outside the target
            "release": codec.to_json(self.release, marks=False) if self.release else None,
            "created_at": self.created_at,
            "compared_with": self.diff.before if self.diff else None,
            "no_changes": self.unchanged,
            "changes": [c.to_json() for c in self.diff.changes] if self.diff else None,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        if data.get("format") != PLAN_FORMAT:
            raise ValueError(f"unknown plan format {data.get('format')!r}")
        plan = cls(
            app=data["app"],
            slot=data["slot"],
            backend=data["backend"],
            operation=data["operation"],
            steps=tuple(step_from_json(s) for s in data["steps"]),
            observed=dict(data["observed"]),
            release=codec.from_json(dict(data["release"])) if data.get("release") else None,
            created_at=data.get("created_at", ""),
            diff=_diff_from_json(data),
            notes=tuple(str(n) for n in data.get("notes") or ()),
        )
        if data.get("fingerprint") not in (None, plan.fingerprint):
            raise ValueError("the plan's fingerprint does not match its observed state")
        if plan.release is not None and (plan.release.app, plan.release.slot) != (
            plan.app,
            plan.slot,
        ):
            raise ValueError(
                f"the plan is for {plan.app}/{plan.slot} but records a release of "
                f"{plan.release.app}/{plan.release.slot}"
            )
        return plan


def _diff_from_json(data: Mapping[str, Any]) -> Diff | None:
    if data.get("changes") is None:
        return None  # a plan saved before plans carried their changes
    changes = tuple(Change.from_json(c) for c in data["changes"])
    return Diff(data.get("compared_with"), None, changes)
