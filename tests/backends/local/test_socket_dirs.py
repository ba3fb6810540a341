"""Sockets whose preferred path is too long live under ``<temp dir>/shipway-<uid>``: that
directory, in a directory everyone can write to, is made private (0700) and refused when
it is another user's or a symlink — whoever owns it could swap the sockets inside."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir of the test's own, with a short path (socket paths under it must fit)."""
    path = Path(tempfile.mkdtemp(prefix="sw", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def long_state(
    slot: Slot, tmp_path: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A state dir whose socket paths are too long for the kernel, and ``tmp`` as the temp
    dir (for this process too: the fixture stops the supervisor through it)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    state = tmp_path / ("s" * 110)
    slot.env.update(TMPDIR=str(tmp), SHIPWAY_STATE_DIR=str(state))
    slot.state = state
    return tmp / f"shipway-{os.getuid()}"


def test_the_temp_socket_dir_is_made_private(
    monkeypatch: pytest.MonkeyPatch, short_tmp: Path, slot: Slot, tmp_path: Path
) -> None:
    base = long_state(slot, tmp_path, short_tmp, monkeypatch)
    slot.deploy()
    assert stat.S_IMODE(base.lstat().st_mode) == 0o700
    assert slot.get("/") == (200, "hello from r1\n")


@pytest.mark.parametrize("planted", ["another user's", "a symlink"])
def test_a_temp_socket_dir_someone_else_made_is_refused(
    monkeypatch: pytest.MonkeyPatch, short_tmp: Path, slot: Slot, tmp_path: Path, planted: str
) -> None:
    base = long_state(slot, tmp_path, short_tmp, monkeypatch)
    if planted == "a symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        base.symlink_to(elsewhere)
        said = "is not a directory of its own (a symlink, or another kind of file)"
    else:
        base.mkdir()
        os.chown(base, 65534, 65534)  # nobody's
        base.chmod(0o777)
        said = "belongs to another user (uid 65534)"
    r = slot.run("deploy", "local")
    assert r.code != 0, r.text
    assert f"{base} {said}; refusing to use it" in r.text, r.text
    inside = base.resolve()
    assert list(inside.iterdir()) == []  # nothing of ours was put there
