"""Every file shipway writes stays inside its root: a ``[files]`` entry whose directory in
the app is a symlink out of it is refused, and nothing is written through the link."""

from __future__ import annotations

from pathlib import Path

from tests.backends.local.conftest import Slot


def test_a_config_file_through_a_symlinked_app_directory_is_refused(
    slot: Slot, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (slot.app_dir / "config").symlink_to(outside)  # the app's config dir points elsewhere
    slot.edit_spec('[env]', '[files]\n"config/app.ini" = "mode=strict\\n"\n\n[env]')
    r = slot.run("deploy", "local")
    assert r.code == 12, r.text  # the step failed; nothing ran before, nothing to restore
    assert "'config/app.ini' leads out of" in r.out, r.text
    assert f"config is a symlink to {outside}" in r.out
    assert list(outside.iterdir()) == []  # nothing was written through the link
