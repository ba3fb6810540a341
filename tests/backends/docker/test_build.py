"""Images built by shipway on the real test hosts: the example Flask app (examples/notes)
built from its Dockerfile on host A — FROM the Python base image the test environment made
itself, its wheels served from this machine, so nothing is pulled from the internet —
pushed to the test registry and deployed BY DIGEST to both hosts."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

import docker
import pytest

from shipway import api
from shipway.backends.buildcontext import BuildContext
from shipway.backends.imagebuild import INPUTS_LABEL
from shipway.backends.registry import lookup
from shipway.engine import Rolled, RolledBack, Unchanged
from shipway.errors import ImageMetadataMissing, RegistryLookupFailed
from shipway.plan import Build
from shipway.release.model import ImageMeta, Release
from tests.backends.docker.conftest import SLOT, Deployment, Lines, names_in
from tests.testenv.docker import DockerEnv, DockerHost, wait_http
from tests.testenv.wheelhouse import Wheelhouse

NOTES = Path(__file__).resolve().parents[3] / "examples" / "notes"
NOTES_META = ImageMeta("dockerfile", "/srv/notes", 8000)
TOKEN = "tok-build-27182818"


def bridge_address(env: DockerEnv) -> str:
    """Host A's bridge gateway: where its build containers reach this machine."""
    client = env.local_client(env.a)
    try:
        return str(client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Gateway"])
    finally:
        client.close()


@pytest.fixture
def notes(deployment: Deployment, wheelhouse: Wheelhouse) -> Deployment:
    """examples/notes, copied; its spec points the build at host A, the test Python base
    and the wheelhouse (build args, as a user would point it at a private index)."""
    shutil.copytree(NOTES, deployment.dir, dirs_exist_ok=True)
    address = bridge_address(deployment.env)
    wheelhouse.serve(address)
    write_spec(deployment, wheelhouse, address, [deployment.env.a, deployment.env.b])
    return deployment


def write_spec(
    d: Deployment, wheels: Wheelhouse, address: str, hosts: list[DockerHost], extra: str = ""
) -> None:
    env = d.env
    d.hosts = hosts
    (d.dir / "token.txt").write_text(TOKEN + "\n")
    d.spec_file.write_text(
        f"""
[app]
name = "{d.name}"
image = "{env.image_prefix}/{d.name}"
release_command = "python3 migrate.py"

[build]
host = "{env.a.url}"
args = {{ PYTHON_IMAGE = "{env.images.python}", PIP_FIND_LINKS = "{wheels.url}", \
PIP_NO_INDEX = "1", PIP_TRUSTED_HOST = "{address}" }}

[secrets]
TOKEN = {{ from_file = "token.txt" }}

[processes.web]
command = "gunicorn app:app"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "200ms"
attempts = 100

[processes.worker]
command = "python3 worker.py"
[processes.worker.healthcheck]
path = false
initial_delay = "1s"

[slots.{SLOT}]
backend = "docker"
hosts = [{", ".join(f'"{h.url}"' for h in hosts)}]
proxy_image = "{env.images.proxy}"
proxy_port = {d.port}
drain_timeout = "1s"
{extra}
"""
    )


def built_images(d: Deployment) -> list[str]:
    """Ids of the images on host A that a shipway build made for this test's app (other
    tests build theirs on the same host at the same time)."""
    client = d.local(d.env.a)
    try:
        found = client.images.list(
            name=f"{d.env.image_prefix}/{d.name}", filters={"label": INPUTS_LABEL}
        )
        return sorted(i.id for i in found)
    finally:
        client.close()


def plan_files(d: Deployment) -> set[str]:
    """The files of the build context the spec's build would send."""
    return set(BuildContext.of(d.app()).files())


def deployed(d: Deployment) -> Release:
    found = api.status(d.app(), SLOT).deployed
    assert found is not None
    return found


def test_deploy_build_pushes_and_runs_the_digest_on_both_hosts(notes: Deployment) -> None:
    env = notes.env
    # what must never reach the image: a secret file, .env, VCS and virtualenv dirs
    (notes.dir / ".env").write_text(f"TOKEN={TOKEN}\n")
    (notes.dir / ".git").mkdir()
    (notes.dir / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (notes.dir / "env" / "bin").mkdir(parents=True)
    (notes.dir / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    plan = api.plan(notes.app(), SLOT, build=True)
    step = plan.steps[0]
    assert isinstance(step, Build) and not step.reuse and step.kind == "image"
    assert step.what.startswith(f"{env.image_prefix}/{notes.name}:src-")
    lines = Lines()
    outcome = notes.deploy(lines, build=True)
    assert isinstance(outcome, Rolled), outcome.line()
    record = deployed(notes)
    assert record.image == step.what and record.build is not None
    assert record.build.inputs == step.inputs and not record.build.reused
    digest = record.build.result
    assert record.digest == digest and digest.startswith("sha256:")
    assert record.image_meta == NOTES_META  # read from the built image itself
    # the registry serves that digest under the content-addressed tag
    assert lookup(step.what, insecure=[env.registry]).digest == digest
    by_digest = f"{env.image_prefix}/{notes.name}@{digest}"
    for host in (env.a, env.b):
        assert "<h1>notes</h1>" in wait_http(notes.url(host, "/"))
        client = notes.local(host)
        try:
            for kind in ("web", "worker"):
                (c,) = notes.containers(host, kind="app", process=kind)
                assert c.attrs["Config"]["Image"] == by_digest  # run by digest, not tag
            (web,) = notes.containers(host, kind="app", process="web")
            files = set(names_in(client.containers.get(web.id), "/srv/notes"))
        finally:
            client.close()
        assert {"app.py", "migrate.py", "requirements.txt"} <= files
        assert not files & {".env", ".git", "env", "token.txt", "README.md", "shipway.toml"}, files
    assert any("build | Step 1/" in line for line in lines.lines)


def test_an_unchanged_source_is_not_rebuilt(notes: Deployment, wheelhouse: Wheelhouse) -> None:
    write_spec(notes, wheelhouse, bridge_address(notes.env), [notes.env.a])
    assert isinstance(notes.deploy(build=True), Rolled)
    first = deployed(notes)
    assert first.build is not None
    images = built_images(notes)
    assert len(images) == 1  # the first deploy's build
    # files the context leaves out change nothing
    (notes.dir / "notes.db").write_text("a database .dockerignore leaves out\n")
    (notes.dir / "__pycache__").mkdir(exist_ok=True)
    (notes.dir / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    # nor does the spec: it says how to deploy the image, not what it is built from
    notes.spec_file.write_text(notes.spec_file.read_text() + "\n# an edited comment\n")
    assert "shipway.toml" not in plan_files(notes)
    # nothing differs: "no changes" — nothing built, nothing applied, no revision
    assert api.plan(notes.app(), SLOT, build=True).unchanged
    lines = Lines()
    assert isinstance(notes.deploy(lines, build=True), Unchanged)
    assert deployed(notes).revision == 1 and built_images(notes) == images
    # forced: a new revision; the build step finds the image in the registry
    plan = api.plan(notes.app(), SLOT, build=True, force=True)
    step = plan.steps[0]
    assert isinstance(step, Build) and step.reuse and step.inputs == first.build.inputs
    assert isinstance(notes.deploy(lines, build=True, force=True), Rolled)
    again = deployed(notes)
    assert again.revision == 2 and again.digest == first.digest
    assert again.build is not None and again.build.reused
    assert built_images(notes) == images  # no image was built
    assert not any("build |" in line for line in lines.lines)
    # a changed source is built: a new tag, a new digest
    (notes.dir / "app.py").write_text((notes.dir / "app.py").read_text() + "\n# v2\n")
    assert isinstance(notes.deploy(build=True), Rolled)
    third = deployed(notes)
    assert third.image != first.image and third.digest != first.digest
    assert len(built_images(notes)) == len(images) + 1


def test_promote_moves_the_tested_digest_and_never_builds(
    notes: Deployment, wheelhouse: Wheelhouse
) -> None:
    env = notes.env
    prod_port = notes.another_port()
    prod = f"""promotes_to = "prod"

[slots.prod]
backend = "docker"
hosts = ["{env.b.url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {prod_port}
drain_timeout = "1s"
"""
    write_spec(notes, wheelhouse, bridge_address(env), [env.a], extra=prod)
    assert isinstance(notes.deploy(build=True), Rolled)
    tested = deployed(notes)
    images = built_images(notes)
    assert len(images) == 1
    # the source moves on; promote moves what was tested, and builds nothing
    (notes.dir / "app.py").write_text((notes.dir / "app.py").read_text() + "\n# v3\n")
    lines = Lines()
    outcome = api.promote(notes.app(), SLOT, reporter=lines, timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    promoted = api.status(notes.app(), "prod").deployed
    assert promoted is not None and promoted.digest == tested.digest
    assert promoted.build is None and not any("build" in line for line in lines.lines[:3])
    assert built_images(notes) == images
    assert "<h1>notes</h1>" in wait_http(f"http://{env.b.address}:{prod_port}/")


def test_a_failing_run_step_fails_the_release_before_any_container_changes(
    notes: Deployment,
) -> None:
    env = notes.env
    assert isinstance(notes.deploy(build=True), Rolled)
    def running() -> dict[str, list[str]]:
        """The app's and proxy's containers per host (records and the lock are written
        on every deploy, failed or not)."""
        kinds = ("app", "proxy", "files")
        return {
            h.name: sorted(c.id for k in kinds for c in notes.containers(h, kind=k))
            for h in (env.a, env.b)
        }

    before = running()
    dockerfile = notes.dir / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace(
            "COPY . .",
            f"RUN echo 'checking {TOKEN}' && python3 -c 'raise SystemExit(\"no wheel for x\")'\n"
            "COPY . .",
        )
    )
    lines = Lines()
    outcome = notes.deploy(lines, build=True)
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10, outcome.line()
    assert outcome.failure.reason == "BuildFailed"
    assert "returned a non-zero code: 1" in outcome.failure.message
    assert "no wheel for x" in "\n".join(outcome.failure.details)
    shown = outcome.line() + "\n".join(outcome.details()) + lines.text()
    assert TOKEN not in shown and "checking ***" in shown  # the log excerpt is masked
    assert running() == before  # no container was created, replaced or removed
    for host in (env.a, env.b):
        assert "<h1>notes</h1>" in wait_http(notes.url(host, "/"))
    history = api.history(notes.app(), SLOT)
    assert [str(r.status) for r in history] == ["deployed", "failed"]


def test_the_recorded_metadata_serves_once_the_image_is_gone(
    notes: Deployment, wheelhouse: Wheelhouse
) -> None:
    """Deployed to host B only, built on A. Then the image leaves the build host and the
    registry forgets it: the release record is all that knows its kind, working dir and
    port, and a restart still works from it (B has the layers, by digest)."""
    env = notes.env
    write_spec(notes, wheelhouse, bridge_address(env), [env.b])
    assert isinstance(notes.deploy(build=True), Rolled)
    first = deployed(notes)
    assert first.image and first.digest
    a = notes.local(env.a)
    try:
        a.images.remove(first.image, force=True)
        with pytest.raises(docker.errors.ImageNotFound):
            a.images.get(first.image)
    finally:
        a.close()
    repository = first.image.split("/", 1)[1].rsplit(":", 1)[0]
    request = urllib.request.Request(
        f"http://{env.registry}/v2/{repository}/manifests/{first.digest}", method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202
    with pytest.raises(RegistryLookupFailed):
        lookup(first.image, insecure=[env.registry])
    outcome = api.restart(notes.app(), SLOT, "web", reporter=Lines(), timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    restarted = deployed(notes)
    assert restarted.revision == 2 and restarted.image_meta == NOTES_META
    assert "<h1>notes</h1>" in wait_http(notes.url(env.b, "/"))
    (web,) = notes.containers(env.b, kind="app", process="web")
    assert web.labels["org.shipway.release"] == "2"
    # nothing but that record knows the image now: an app without it cannot tell
    other = notes.dir / "other.toml"
    other.write_text(notes.spec_file.read_text().replace(f'"{notes.name}"', f'"{notes.name}x"'))
    with pytest.raises(ImageMetadataMissing, match="cannot tell what kind of image"):
        api.plan(api.load(other), SLOT, image=first.image)
