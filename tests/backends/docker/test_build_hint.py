"""plan/deploy without --build of an app whose image shipway builds (its Dockerfile is in
the app's directory) and that was never built: exit 2, and the hint says what to do —
--build, or --image REF — not to declare an image type (which would only move the failure
to the pull)."""

from __future__ import annotations

from click.testing import CliRunner

from shipway.cli.main import cli
from tests.backends.docker.conftest import Deployment


def _plan(d: Deployment, command: str = "plan") -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["-f", str(d.spec_file), command, "test"])
    return result.exit_code, result.output


def test_an_unbuilt_image_hints_at_build_or_image(deployment: Deployment) -> None:
    d = deployment
    d.write(image=f"{d.env.image_prefix}/{d.name}-never-built", hosts=[d.env.a])
    (d.dir / "Dockerfile").write_text("FROM scratch\n")
    code, out = _plan(d)
    assert code == 2, out
    assert "pass --build to build and push it first, or --image REF" in out, out
    assert "image_type" not in out, out
    code, out = _plan(d, "deploy")
    assert code == 2 and "pass --build to build and push it first, or --image REF" in out, out
    # an app that builds nothing keeps the hint about the image it names
    (d.dir / "Dockerfile").unlink()
    code, out = _plan(d)
    assert code == 2, out
    assert "--build" not in out and "push the image to the registry it names" in out, out
