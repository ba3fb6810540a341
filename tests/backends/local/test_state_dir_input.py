"""A state directory that cannot be one is bad input: exit 2, the message names where it
came from and the fix, nothing is touched — never "unexpected error" (exit 1)."""

from __future__ import annotations

from pathlib import Path

from tests.backends.local.conftest import Slot


def test_a_state_dir_that_is_a_file_is_refused_as_input(slot: Slot, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a directory\n")
    for given in (taken, taken / "below"):
        slot.env["SHIPWAY_STATE_DIR"] = str(given)
        r = slot.run("plan", "local")
        assert r.code == 2, r.text
        assert f"SHIPWAY_STATE_DIR: {taken} is a file, not a directory (hint:" in r.err
    assert taken.read_text() == "not a directory\n"


def test_a_state_dir_with_a_name_too_long_is_refused_as_input(slot: Slot, tmp_path: Path) -> None:
    slot.env.pop("SHIPWAY_STATE_DIR")
    slot.edit_spec("[env]", f'[slots.local]\nstate_dir = "{"x" * 300}"\n\n[env]')
    r = slot.run("deploy", "local")
    assert r.code == 2, r.text
    assert "slots.local.state_dir" in r.err and "300 bytes long" in r.err, r.err
    assert "unexpected error" not in r.text


def test_a_state_dir_too_long_for_what_is_kept_in_it_is_refused_as_input(
    slot: Slot, tmp_path: Path
) -> None:
    slot.env["SHIPWAY_STATE_DIR"] = str(tmp_path / "/".join(["y" * 200] * 16))
    r = slot.run("deploy", "local")
    assert r.code == 2, r.text
    assert "(hint: use a shorter path)" in r.err
    assert not (tmp_path / ("y" * 200)).exists()
