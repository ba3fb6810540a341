"""Snapshot digests name exactly the files a release runs; copies verify against them."""

from __future__ import annotations

import os
from pathlib import Path

from shipway.backends.local import snapshot


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "app.py").write_text("print('hi')\n")
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: main\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    (root / "config.ini").write_text("written per slot\n")
    return root


def test_digest_ignores_vcs_caches_and_declared_config_files(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    base = snapshot.digest(root, exclude=["config.ini"])
    (root / ".git" / "HEAD").write_text("ref: other\n")
    (root / "__pycache__" / "x.pyc").write_bytes(b"1")
    (root / "config.ini").write_text("changed\n")
    assert snapshot.digest(root, exclude=["config.ini"]) == base
    assert snapshot.digest(root) != base  # config.ini counts when not excluded


def test_digest_changes_with_content_names_and_exec_bit(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    base = snapshot.digest(root)
    (root / "pkg" / "mod.py").write_text("X = 2\n")
    changed = snapshot.digest(root)
    assert changed != base
    os.chmod(root / "app.py", 0o755)
    assert snapshot.digest(root) != changed
    (root / "pkg" / "mod.py").rename(root / "pkg" / "other.py")
    assert snapshot.digest(root) not in (base, changed)


def test_copy_has_the_same_digest_and_skips_the_state_dir(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    state = root / ".state"
    (state / "big").mkdir(parents=True)
    (state / "big" / "file").write_text("not part of the app\n")
    os.symlink("app.py", root / "link.py")
    want = snapshot.digest(root, ["config.ini"], [state])
    dest = tmp_path / "copy"
    snapshot.copy(root, dest, ["config.ini"], [state])
    assert snapshot.digest(dest, ["config.ini"]) == want
    assert not (dest / ".state").exists()
    assert not (dest / ".git").exists()
    assert not (dest / "config.ini").exists()
    assert os.readlink(dest / "link.py") == "app.py"
    assert (dest / "pkg" / "mod.py").read_text() == "X = 1\n"
