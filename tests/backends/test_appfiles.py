"""The one rule of what an app's directory holds that is the app (invariant 12): the local
snapshot and the Docker build context both follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipway.backends.appfiles import AppFiles
from shipway.errors import InputError
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
[processes.web]
command = "python3 app.py"
[secrets]
API_TOKEN = { from_file = "secrets/token.txt" }
"""


def tree(root: Path) -> Path:
    files = {
        "app.py": "print('hi')\n",
        "pkg/mod.py": "X = 1\n",
        ".git/HEAD": "ref: main\n",
        ".venv/pyvenv.cfg": "home = /usr\n",
        ".venv/lib/site.py": "\n",
        "env/pyvenv.cfg": "home = /usr\n",  # a virtualenv by its mark, whatever its name
        "env/bin/python": "\n",
        "node_modules/left-pad/index.js": "\n",
        "pkg/__pycache__/mod.cpython-311.pyc": "\0",
        "pkg/old.pyc": "\0",
        ".env": "API_TOKEN=s3cr3t\n",
        ".env.production": "API_TOKEN=s3cr3t\n",
        ".env.example": "API_TOKEN=\n",
        "secrets/token.txt": "s3cr3t\n",
        "secrets/README": "where the token goes\n",
        "media/upload.png": "png\n",
        "notes/todo.md": "x\n",
        "notes/keep.md": "y\n",
        ".shipwayignore": "media/\nnotes/*\n!notes/keep.md\n*.log\n",
        "debug.log": "z\n",
        ".state/shop/records": "\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_rule_leaves_out_everything_that_is_not_the_app(tmp_path: Path) -> None:
    root = tree(tmp_path / "shop")
    (root / "shipway.toml").write_text(SPEC)
    app = app_from_toml(SPEC, root)
    kept = AppFiles.of(app, root, also=[root / ".state"]).walk(root)
    assert kept == [
        ".env.example",
        ".shipwayignore",
        "app.py",
        "notes/",
        "notes/keep.md",
        "pkg/",
        "pkg/mod.py",
        "secrets/",
        "secrets/README",
        "shipway.toml",
    ]


def test_the_same_rule_decides_for_a_copy(tmp_path: Path) -> None:
    """Relative, so a copy hashed under the rule of its source holds the same paths."""
    root = tree(tmp_path / "shop")
    app = app_from_toml(SPEC, root)
    rule = AppFiles.of(app, root)
    copy = tmp_path / "copy"
    for rel in rule.walk(root):
        target = copy / rel
        if rel.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((root / rel).read_bytes())
    assert rule.walk(copy) == rule.walk(root)


def test_an_unreadable_shipwayignore_is_a_clear_input_error(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    root.mkdir()
    (root / ".shipwayignore").write_bytes(b"\xff\xfe\x00bad")
    app = app_from_toml(SPEC, root)
    with pytest.raises(InputError, match=r"\.shipwayignore: cannot be read"):
        AppFiles.of(app, root)


def test_the_build_context_follows_the_same_rule(tmp_path: Path) -> None:
    """One rule, two copies: with no .dockerignore, an image's build context holds exactly
    the files a local snapshot holds."""
    from shipway.backends.buildcontext import BuildContext

    root = tree(tmp_path / "shop")
    (root / "Dockerfile").write_text("FROM scratch\n")
    spec = SPEC.replace('name = "shop"', 'name = "shop"\nimage = "reg/shop"')
    app = app_from_toml(spec, root)
    snapshot_files = [p for p in AppFiles.of(app, root).walk(root) if not p.endswith("/")]
    context_files = sorted(BuildContext.of(app).files())
    assert context_files == snapshot_files
    assert "node_modules/left-pad/index.js" not in context_files
    assert "media/upload.png" not in context_files  # .shipwayignore'd
    assert "secrets/token.txt" not in context_files and ".env" not in context_files
