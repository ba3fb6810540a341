"""PURE planning: desired (spec + release) vs observed (+ recorded) → Plan. No I/O here."""

from shipway.plan.change import Change, Diff
from shipway.plan.diff import between, drift, plan_diff, release_diff
from shipway.plan.generation import switch_plan, switch_steps
from shipway.plan.model import (
    ApplyObject,
    Build,
    DropHost,
    NoOp,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    RunReleaseCommand,
    Scale,
    Step,
    WaitReplicas,
    WaitRollout,
    changes_between,
)
from shipway.plan.rollout import discard_steps, restore_steps, rollout_plan, rollout_steps

__all__ = [
    "ApplyObject",
    "Build",
    "Change",
    "Diff",
    "DropHost",
    "NoOp",
    "Observed",
    "ObservedUnit",
    "Plan",
    "PointHost",
    "Remove",
    "RunReleaseCommand",
    "Scale",
    "Step",
    "WaitReplicas",
    "WaitRollout",
    "between",
    "changes_between",
    "discard_steps",
    "drift",
    "plan_diff",
    "release_diff",
    "restore_steps",
    "rollout_plan",
    "rollout_steps",
    "switch_plan",
    "switch_steps",
]
