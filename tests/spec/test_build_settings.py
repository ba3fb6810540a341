"""``[build]`` and ``[app] build``: parsed into BuildSettings, and kept in a release's spec
snapshot (a restart re-renders from it, so a recorded release builds as it was built)."""

from __future__ import annotations

from pathlib import Path

from shipway.spec import load
from shipway.spec.model import BuildSettings
from shipway.spec.parse import from_snapshot

CASES = Path(__file__).parent / "cases"


def test_build_settings_are_parsed_and_survive_the_snapshot(tmp_path: Path) -> None:
    spec = tmp_path / "shipway.toml"
    spec.write_text((CASES / "build_settings.toml").read_text())
    app = load(spec)
    assert app.build == BuildSettings(
        dockerfile="docker/Dockerfile.prod",
        args={"PYTHON_VERSION": "3.11"},
        host="ssh://builder@build-1",
        python="3.11",
        command=("make", "deps"),
    )
    again = from_snapshot(app.snapshot(app.slots.get("local")), tmp_path)
    assert again.build == app.build


def test_build_false_turns_detection_off_and_the_default_builds(tmp_path: Path) -> None:
    spec = tmp_path / "shipway.toml"
    spec.write_text('[app]\nname = "a"\nbuild = false\n[processes.web]\ncommand = "x"\n')
    app = load(spec)
    assert not app.build.enabled and app.build.command is None
    assert not from_snapshot(app.snapshot(), tmp_path).build.enabled
    spec.write_text('[app]\nname = "a"\n[processes.web]\ncommand = "x"\n')
    assert load(spec).build == BuildSettings()
    assert "build" not in load(spec).snapshot()  # nothing to keep when nothing is set
