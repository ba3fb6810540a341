"""A real gunicorn app whose settings raise SyntaxError: the failure shows the traceback
(the first error-looking block) and the log's tail, each once, masked, and says where the
whole log is."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from tests.backends.local.conftest import Slot

GUNICORN = Path(sys.executable).parent / "gunicorn"  # the test extra installs it
SECRET = "postgres://shop:hunter2-s3cret@db/shop"
SPEC = f"""
[app]
name = "shop"
[processes.web]
command = "{GUNICORN} shop.wsgi --bind 127.0.0.1:$PORT --workers 1"
port = 8000
[processes.web.healthcheck]
path = "/"
interval = "200ms"
attempts = 100
[secrets]
DATABASE_URL = {{ from_env = "SHOP_DATABASE_URL" }}
"""
WSGI = """\
import atexit, os

# said at exit, so in the log's tail: shipway must mask the secret there
atexit.register(lambda: print("worker leaving; DATABASE_URL=" + os.environ["DATABASE_URL"]))

from shop import settings


def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [settings.GREETING.encode()]
"""
NOISE = "".join(f"LINE_{i} = {i}\n" for i in range(100))


def test_the_excerpt_shows_the_syntax_error_and_the_tail_once_each(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    app = tmp_path / "shop"
    (app / "shop").mkdir(parents=True)
    (app / "shop" / "__init__.py").write_text("")
    (app / "shop" / "wsgi.py").write_text(WSGI)
    (app / "shop" / "settings.py").write_text(f"DEBUG = True\n{NOISE}GREETING = = 'hello'\n")
    (app / "shipway.toml").write_text(SPEC)
    slot = local_app(app)
    slot.env["SHOP_DATABASE_URL"] = SECRET

    r = slot.run("deploy")
    assert r.code == 12, r.text  # no-anchor: the first deploy failed, nothing to restore
    out = r.text
    assert SECRET not in out and "hunter2" not in out
    assert "first error in its log (from line " in out
    block = out[out.index("first error in its log") :]
    assert "Traceback (most recent call last):" in block
    assert 'shop/settings.py", line 102' in block and "GREETING = = 'hello'" in block
    assert out.count("SyntaxError: invalid syntax") == 1  # the cause, once
    assert "last lines:" in block and "Reason: Worker failed to boot." in block
    assert out.count("Reason: Worker failed to boot.") == 1  # the tail, once
    assert "DATABASE_URL=***" in block  # masked where it stands in the tail
    # with the -f the deploy was given: it can be pasted as it is
    assert f"full log: shipway -f {slot.spec} logs local web --release 1" in out

    full = slot.run("logs", "local", "web", "--release", "1")
    assert full.code == 0, full.text
    assert "SyntaxError: invalid syntax" in full.out and "Booting worker" in full.out
    assert SECRET not in full.text
