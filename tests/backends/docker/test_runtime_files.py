"""What a running release wrote inside its own copy of the app, which the next deploy would
lose: read on this backend, and warned about (or, where the backend cannot tell, said)."""

from __future__ import annotations

from typing import Any

import pytest

from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled
from tests.backends.docker.conftest import Deployment


def test_files_a_container_wrote_inside_itself_are_warned_about(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    (web,) = deployment.containers(env.a, kind="app")
    code, said = run_in(web, ["sh", "-c", "mkdir -p uploads && echo x > uploads/a.png && "
                              "echo 1 > notes.db && echo t > /tmp/scratch"])  # fmt: skip
    assert code == 0, said
    deployment.write(image=env.images.v2, hosts=[env.a])
    outcome = deployment.deploy()
    assert isinstance(outcome, Rolled), outcome.line()
    [warning] = [w for w in outcome.warnings if "at run time" in w]
    assert "r1 wrote 2 file(s) at run time" in warning
    assert "notes.db, uploads/a.png (notes.db: a database)" in warning
    assert 'declare a directory volume, [volumes.data] path = "data"' in warning
    assert "/tmp" not in warning and "scratch" not in warning  # not the app's own copy


def test_what_the_containers_wrote_is_read_on_every_host_at_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each host's diffs are read in a thread of its own: both reads are under way at once
    (a barrier of two, which a read one host after the other never passes), and what each
    host's container wrote is in the one warning."""
    import threading

    from docker.models.containers import Container

    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    for host, name in ((env.a, "from-a.txt"), (env.b, "from-b.txt")):
        (web,) = deployment.containers(host, kind="app")
        assert run_in(web, ["sh", "-c", f"echo x > {name}"])[0] == 0
    both = threading.Barrier(2, timeout=20)
    real = Container.diff

    def diff(self: Container) -> Any:
        both.wait()
        return real(self)

    monkeypatch.setattr(Container, "diff", diff)
    deployment.write(image=env.images.v2)
    outcome = deployment.deploy()
    assert isinstance(outcome, Rolled), outcome.line()
    [warning] = [w for w in outcome.warnings if "at run time" in w]
    assert "r1 wrote 2 file(s) at run time" in warning and "from-a.txt, from-b.txt" in warning
