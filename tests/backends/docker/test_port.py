"""A command with ``$PORT`` (a Procfile's, as the README's rule reads it) runs on Docker
with the process's port in its words: the container listens there, passes its health
gate and serves through the proxy — where the literal ``$PORT`` made it crash."""

from __future__ import annotations

from tests.backends.docker.conftest import Deployment
from tests.testenv.docker import wait_http

PROCESSES = """procfile = "Procfile"

[processes.web]
port = 9090
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 80
"""


def test_a_procfile_command_listens_on_port(deployment: Deployment) -> None:
    d = deployment
    (d.dir / "Procfile").write_text("web: httpd -f -p 0.0.0.0:$PORT -h /app/www\n")
    d.write(processes=PROCESSES, hosts=[d.env.a])
    outcome = d.deploy()
    assert outcome.exit_code == 0, outcome.line()
    (web,) = d.containers(d.env.a, kind="app", process="web")
    assert web.attrs["Config"]["Cmd"] == ["httpd", "-f", "-p", "0.0.0.0:9090", "-h", "/app/www"]
    assert wait_http(d.url(d.env.a, "/up")).strip() == "ok"
