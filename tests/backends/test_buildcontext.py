"""The build context of an image, on real files: what .dockerignore leaves out stays out,
what must never reach an image never does, and the digest is a content digest."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from shipway.backends.buildcontext import BuildContext
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg/shop"
[secrets]
TOKEN = { from_file = "config/token" }
[processes.web]
command = "serve"
"""


def make(root: Path) -> BuildContext:
    return BuildContext.of(app_from_toml(SPEC, root))


def test_the_context_holds_the_app_only(tmp_path: Path) -> None:
    for name, text in {
        "Dockerfile": "FROM x\n",
        "app.py": "print(1)\n",
        ".dockerignore": "# comments are skipped\n*.log\ndocs/\n",
        "debug.log": "x",
        "docs/index.md": "x",
        ".env": "TOKEN=s3cret\n",
        ".env.production": "TOKEN=s3cret\n",
        ".env.example": "TOKEN=\n",
        "config/token": "s3cret\n",
        "config/settings.py": "x = 1\n",
        ".git/HEAD": "ref\n",
        ".venv/bin/python": "",
        "env/pyvenv.cfg": "home = /usr/bin\n",
        "env/lib/site.py": "",
        "__pycache__/app.cpython-311.pyc": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    context = make(tmp_path)
    assert set(context.files()) == {
        "Dockerfile", "app.py", ".dockerignore", ".env.example", "config/settings.py"
    }  # fmt: skip
    buffer = io.BytesIO()
    context.write_tar(buffer)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        members = {m.name for m in tar.getmembers() if m.isfile()}
        assert members == set(context.files())
        assert {m.mtime for m in tar.getmembers()} == {315532800}


def test_the_digest_follows_what_goes_in_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "app.py").write_text("print(1)\n")
    first = make(tmp_path).digest()
    assert make(tmp_path).digest() == first  # deterministic
    (tmp_path / ".env").write_text("TOKEN=changed\n")
    (tmp_path / "app.py").touch()  # a new mtime, the same bytes
    assert make(tmp_path).digest() == first
    (tmp_path / "app.py").write_text("print(2)\n")
    assert make(tmp_path).digest() != first


def test_the_spec_is_not_what_the_image_is_built_from(tmp_path: Path) -> None:
    """shipway.toml, shipway.yaml and the file -f names stay out of the context and its
    digest: editing the spec alone changes nothing a build makes."""
    from shipway.spec import load

    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "shipway.yaml").write_text("# another spec beside it\n")
    spec = tmp_path / "prod.toml"  # named with -f
    spec.write_text(SPEC.replace('from_file = "config/token"', 'from_env = "TOKEN"'))
    (tmp_path / "shipway.toml").write_text(spec.read_text())
    context = BuildContext.of(load(spec))
    assert set(context.files()) == {"Dockerfile", "app.py"}
    first = context.digest()
    spec.write_text(spec.read_text() + "\n[env]\nLEVEL = 'debug'\n")
    (tmp_path / "shipway.toml").write_text("# edited\n")
    (tmp_path / "shipway.yaml").write_text("# edited too\n")
    again = BuildContext.of(load(spec))
    assert again.digest() == first and set(again.files()) == set(context.files())
    (tmp_path / "app.py").write_text("print(2)\n")
    assert BuildContext.of(load(spec)).digest() != first
