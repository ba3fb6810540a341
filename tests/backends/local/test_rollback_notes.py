"""A rollback says what it goes back to: past a restart (which runs the same code and
config as the release it restarted, so going back to that one would change nothing), and
to a revision that failed when it was deployed (it goes ahead, since the user named it,
with a warning)."""

from __future__ import annotations

from tests.backends.local.conftest import Slot


def test_rollback_after_a_restart_goes_back_to_other_code_and_says_so(slot: Slot) -> None:
    slot.deploy()
    (slot.app_dir / "app.py").write_text((slot.app_dir / "app.py").read_text() + "# r2\n")
    slot.deploy()
    r = slot.run("restart", "local")
    assert r.code == 0, r.text
    r = slot.run("rollback", "local")
    assert r.code == 0, r.text
    assert (
        "rolling back to r1, past r2: it runs the same code and config as the deployed r3"
        in r.out
    ), r.out
    assert slot.history()[-1]["description"] == "rollback to r1"


def test_rollback_to_a_revision_that_failed_warns_first(slot: Slot) -> None:
    slot.deploy()
    slot.deploy(expect=10, spec=slot.app_dir / "shipway-failing.toml")
    r = slot.run("rollback", "local", "2", spec=slot.app_dir / "shipway-failing.toml")
    assert "warning: r2 failed when it was deployed (web: HealthcheckFailed" in r.out, r.out
    assert "rolling back to it anyway: it may fail again" in r.out
