"""PURE planning: desired (spec + release) vs observed (+ recorded) → Plan. No I/O here."""

from shipway.plan.generation import switch_plan, switch_steps
from shipway.plan.model import (
    ApplyObject,
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
    "changes_between",
    "discard_steps",
    "restore_steps",
    "rollout_plan",
    "rollout_steps",
    "switch_plan",
    "switch_steps",
]
