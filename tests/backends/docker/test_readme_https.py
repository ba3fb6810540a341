"""README's two-app, two-host HTTPS specs, deployed as written on the test hosts (with only
the substitutions README lists), and both apps checked over HTTPS on both hosts."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipway import api
from shipway.engine import Rolled
from shipway.spec import load
from tests.backends.docker.conftest import Deployment, Lines, free_port
from tests.backends.docker.test_https import served
from tests.testenv.acme import AcmeEnv, challenge_port
from tests.testenv.docker import DockerEnv

README = Path(__file__).parents[3] / "README.md"
MARK = re.compile(r"<!-- readme-https: (\w+)/shipway\.toml -->\n```toml\n(.*?)```", re.S)


def readme_specs() -> dict[str, str]:
    """README's specs, by app directory."""
    found = dict(MARK.findall(README.read_text()))
    assert set(found) == {"shop", "blog"}, found
    return found


def substituted(
    text: str, app: str, name: str, env: DockerEnv, acme: AcmeEnv, port: int, tls_port: int
) -> str:
    """A README spec with the test environment's hosts, names, image, CA and proxy."""
    swaps = [
        (f'name = "{app}"', f'name = "{name}"'),
        (f'"registry.example/{app}:1"', f'"{env.images.v1}"'),
        ('"ssh://deploy@web1", "ssh://deploy@web2"', f'"{env.b.url}", "{env.a.url}"'),
        (f"{app}.example.com", f"{name}.{acme.domain}"),
        ('acme = { email = "ops@example.com" }',
         f'acme = {{ directory = "{acme.directory}", root = "ca.pem", email = "ops@example.com" }}'
         f'\nproxy_image = "{env.images.proxy}"\nproxy_port = {port}\nproxy_tls_port = {tls_port}'),
    ]  # fmt: skip
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.fixture
def both(
    docker_env: DockerEnv, acme_env: AcmeEnv, ssh_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[Deployment, Deployment]]:
    with challenge_port(acme_env) as port:
        made = []
        for app in ("shop", "blog"):
            (tmp_path / app).mkdir()
            (tmp_path / app / "ca.pem").write_bytes(
                acme_env.directory_ca.read_bytes() + acme_env.root.read_bytes()
            )
            made.append(
                Deployment(
                    env=docker_env,
                    name=f"{app}-{uuid.uuid4().hex[:6]}",
                    dir=tmp_path / app,
                    port=port,
                )
            )
        try:
            yield made[0], made[1]
        finally:
            for d in made:
                d.cleanup()


@pytest.mark.timeout(600)
def test_the_readme_two_app_two_host_https_specs_work_as_written(
    both: tuple[Deployment, Deployment], acme_env: AcmeEnv
) -> None:
    specs, tls_port = readme_specs(), free_port()
    env = both[0].env
    for d in both:
        app = d.name.split("-")[0]
        text = substituted(specs[app], app, d.name, env, acme_env, d.port, tls_port)
        d.spec_file.write_text(text)
        outcome = api.deploy(load(d.spec_file), "prod", confirm="prod", reporter=Lines(),
                             timeout=180)  # fmt: skip
        assert isinstance(outcome, Rolled), outcome
    for d in both:
        name = f"{d.name}.{acme_env.domain}"
        for host in (env.b, env.a):
            status, headers, body, cert = served(host, tls_port, name, acme_env.root)
            assert (status, body) == (200, "v1\n"), (host.name, name)
            assert ("DNS", name) in cert["subjectAltName"]
            hsts = headers.get("Strict-Transport-Security")
            assert hsts == ("max-age=31536000" if d.name.startswith("shop") else None)
