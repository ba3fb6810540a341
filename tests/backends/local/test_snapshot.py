"""Snapshot digests name exactly the files a release runs; copies verify against them."""

from __future__ import annotations

import os
from pathlib import Path

from shipway.backends.appfiles import AppFiles
from shipway.backends.local import snapshot

CONFIG = AppFiles.plain(["config.ini"])


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
    base = snapshot.digest(root, CONFIG)
    (root / ".git" / "HEAD").write_text("ref: other\n")
    (root / "__pycache__" / "x.pyc").write_bytes(b"1")
    (root / "config.ini").write_text("changed\n")
    assert snapshot.digest(root, CONFIG) == base
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
    rule = AppFiles.plain(["config.ini", ".state"])
    want = snapshot.digest(root, rule)
    dest = tmp_path / "copy"
    snapshot.copy(root, dest, rule)
    assert snapshot.digest(dest, rule) == want
    assert not (dest / ".state").exists()
    assert not (dest / ".git").exists()
    assert not (dest / "config.ini").exists()
    assert os.readlink(dest / "link.py") == "app.py"
    assert (dest / "pkg" / "mod.py").read_text() == "X = 1\n"


def test_kept_snapshots_are_found_by_digest_and_pruned_oldest_first(tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    releases.mkdir()
    for rev in range(1, 9):
        (releases / f"r{rev}").mkdir()
        (releases / f"r{rev}.json").write_text(f'{{"digest": "sha256:{rev % 3}"}}')
    assert snapshot.find([releases], "sha256:1") == releases / "r7"  # the newest one
    assert snapshot.find([tmp_path / "none", releases], "sha256:9") is None
    dropped = snapshot.prune(releases, keep=5, in_use={"r2"})
    assert dropped == ["r1", "r3"]
    assert [p.name for _, p in snapshot.kept(releases)] == ["r8", "r7", "r6", "r5", "r4", "r2"]
    assert not (releases / "r1.json").exists()


def test_make_verifies_the_copy_against_the_digest(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    want = snapshot.digest(src, CONFIG)
    (tmp_path / "rel").mkdir()
    assert snapshot.make(tmp_path / "rel" / "r1", "sha256:other", [src], lambda _: CONFIG) is None
    assert not (tmp_path / "rel" / "r1").exists()
    assert list((tmp_path / "rel").iterdir()) == []  # no temporary left behind
    made = snapshot.make(tmp_path / "rel" / "r1", want, [tmp_path / "gone", src], lambda _: CONFIG)
    assert made is not None and "app.py" in made and "pkg/mod.py" in made
    assert snapshot.digest(tmp_path / "rel" / "r1", CONFIG) == want
