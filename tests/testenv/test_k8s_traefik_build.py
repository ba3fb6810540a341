"""The Gateway's Traefik is built from a copy of its module with stubs in place of what the
tests never use (``slim_traefik`` in scripts/k8s-testenv): each replaced import is found
exactly once, the ECS stub keeps the exported configuration fields of Traefik's own
provider, and a source that no longer has an import fails the build with the file and
the import named. The running Gateway is that build (its binary's cache directory names
the recipe), compiled without inlining."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.testenv.k8s import TESTENV_SCRIPT


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("k8s_testenv_script", str(TESTENV_SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


def _traefik_source(script: ModuleType) -> Path:
    """Traefik's module, as the build takes it (Go's module cache; `up` downloaded it)."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain: Traefik's module cannot be found")
    return Path(script.go_module_dir(script.TRAEFIK_MODULE, script.TRAEFIK_VERSION))


def _imports(path: Path) -> set[str]:
    return set(re.findall(r'^\s*(?:\w+\s+)?"([^"]+)"$', path.read_text(), re.M))


def test_the_slim_recipe_replaces_each_import_once_and_keeps_the_ecs_fields(
    tmp_path: Path,
) -> None:
    script = _script()
    work = tmp_path / "traefik"
    shutil.copytree(_traefik_source(script), work)
    for path in (work, *work.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)
    script.slim_traefik(work)

    module = script.TRAEFIK_MODULE
    assert "github.com/go-acme/lego/v4/providers/dns" not in _imports(
        work / "pkg/provider/acme/provider.go"
    )
    plugins = _imports(work / "pkg/plugins/middlewareyaegi.go")
    assert not {i for i in plugins if i.startswith("github.com/traefik/yaegi/stdlib")}
    assert f"{module}/pkg/plugins/nostdlib" in plugins
    static = _imports(work / "pkg/config/static/static_config.go")
    assert f"{module}/pkg/provider/ecs" not in static
    assert f"{module}/pkg/provider/ecs/noecs" in static

    def exported_fields(go: str) -> list[str]:
        body = re.search(r"^type Provider struct \{\n(.*?)^\}", go, re.M | re.S)
        assert body is not None
        return re.findall(r"^\s+([A-Z]\w*)\s", body.group(1), re.M)

    original = exported_fields((work / "pkg/provider/ecs/ecs.go").read_text())
    stub = (work / "pkg/provider/ecs/noecs/ecs.go").read_text()
    assert original and exported_fields(stub) == original
    assert "not built into this test build" in stub

    # applied again, the imports are gone: the build stops and names what to update
    with pytest.raises(script.Failure, match=r"provider\.go does not import .* once"):
        script.slim_traefik(work)


@pytest.mark.k8s
def test_the_running_gateway_is_the_slim_build(k8s_client: object) -> None:
    script = _script()
    pid = script.running_pid("traefik")
    assert pid is not None, "the Gateway's Traefik is not running"
    binary = Path(f"/proc/{pid}/exe").resolve()
    assert binary == script.traefik_binary().resolve(), binary
    assert f"-{script.TRAEFIK_RECIPE}" in binary.parent.name
    # compiled without inlining: the build settings Go writes into the binary say so
    flags = _build_setting(binary, "-gcflags")
    assert flags is not None and "-l" in flags.split(), flags


def _build_setting(binary: Path, key: str) -> str | None:
    """A setting of the build Go recorded in ``binary`` (``go version -m``'s ``build`` lines;
    a value with spaces is quoted)."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain: the binary's build settings cannot be read")
    shown = subprocess.run(
        ["go", "version", "-m", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    for line in shown.splitlines():
        parts = line.strip().split("\t", 1)
        if parts[0] == "build" and len(parts) == 2 and parts[1].startswith(f"{key}="):
            return parts[1].removeprefix(f"{key}=").strip('"')
    return None
