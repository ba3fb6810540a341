"""A rolling slot refuses a host another app serves, naming it, unless told to take it
(the ownership check is the engine's, for every strategy)."""

from __future__ import annotations

from tests.backends.local.conftest import Slot, blog_serving_hello


def test_a_rolling_slot_refuses_a_host_another_app_serves_unless_taken(slot: Slot) -> None:
    spec = blog_serving_hello(slot.app_dir)
    slot.deploy(spec=spec)
    assert slot.get("/") == (200, "blog from r1\n")

    # hello, rolling, serves hello.localhost (its default host) too: refused, naming blog
    refused = slot.run("deploy", "local")
    assert refused.code == 2, refused.text
    assert (
        f"host hello.localhost is served by blog/local (router 127.0.0.1:{slot.port}); "
        "refusing to take it (hint: pass --take-host" in refused.err
    ), refused.text
    assert not any("hello" in name and "blog" not in name for name in slot.programs())
    assert slot.get("/") == (200, "blog from r1\n")
    assert slot.run("plan", "local").code == 2  # the plan says so too

    taken = slot.deploy("--take-host")
    assert "taking host hello.localhost from blog/local" in taken.out
    assert slot.get("/") == (200, "hello from r1\n")
    assert any("hello" in name and "blog" not in name for name in slot.programs())
    slot.deploy()  # it is hello's now: no --take-host needed
