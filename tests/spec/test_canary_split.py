"""``split = "replicas"`` where shipway's own proxy splits (local, docker): refused when
the spec is read, exit 2, naming the file, line, key and the fix, before anything runs."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests import cliproc


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_split_replicas_is_refused_where_shipways_proxy_splits(
    tmp_path: Any, backend: str
) -> None:
    docker = 'backend = "docker"\nhosts = ["unix:///run/docker.sock"]\n'
    where = docker if backend == "docker" else ""
    spec = tmp_path / "shipway.toml"
    spec.write_text(
        '[app]\nname = "hello"\nimage = "hello:1"\n\n[processes.web]\ncommand = "serve"\n'
        f'port = 8000\n\n[slots.test1]\n{where}strategy = "canary"\n\n'
        '[slots.test1.canary]\nsplit = "replicas"\n'
    )
    done = cliproc.run([sys.executable, "-m", "shipway", "-f", str(spec), "deploy", "test1"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "shipway.toml:" in done.stderr and "slots.test1.canary.split" in done.stderr
    assert "a replica-ratio canary runs on kubernetes slots only" in done.stderr, done.stderr
    assert 'remove split (the default is "gateway")' in done.stderr, done.stderr
