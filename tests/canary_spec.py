"""The ``[slots.NAME.canary]`` table the canary tests of every backend write: steps 10, 50
and 100 %, a test that must catch a canary 10 times worse (so a broken one is aborted on a
few requests), and the step's time and requests each test picks."""

from __future__ import annotations


def canary_table(slot: str, step_time: str, step_requests: int, **more: str) -> str:
    """The table's TOML; ``more``: further string keys (a Gateway, a Prometheus)."""
    lines = [
        f"[slots.{slot}.canary]",
        "steps = [10, 50, 100]",
        f'step_time = "{step_time}"',
        f"step_requests = {step_requests}",
        "error_ratio = 10",
        *(f'{key} = "{value}"' for key, value in more.items()),
    ]
    return "\n".join(lines) + "\n"
