"""The request loop of the zero-failed-requests tests (tests/loops.py)."""

from __future__ import annotations

import threading

from tests.loops import RequestLoop


def test_a_loop_around_a_quick_action_still_makes_its_least_requests() -> None:
    asked: list[int] = []
    release = threading.Event()

    def fetch(i: int) -> tuple[int, str]:
        asked.append(i)
        release.wait(timeout=0.01)  # a request that takes a little while, as over HTTP
        return 200, "ok"

    with RequestLoop(fetch, least=7) as loop:
        pass  # the action ended before the loop had asked anything much
    assert loop.done >= 7 and asked[:7] == list(range(7))
    assert loop.failed() == []
    # and a loop still stops when its block ends
    count = loop.done
    assert not loop._thread.is_alive() and loop.done == count
