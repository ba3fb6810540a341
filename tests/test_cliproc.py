"""The tests' forked shipway commands (tests/cliproc.py) behave as ``python -m shipway``
started by exec: same output, exit code, working directory and environment, and a process
of their own that signals reach."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from tests import cliproc

SPEC = """\
[app]
name = "forked"

[processes.web]
command = "python -m http.server $PORT"

[slots.local]
backend = "local"
"""


def both(args: list[str], **kw: object) -> tuple[subprocess.CompletedProcess[str], ...]:
    argv = [*cliproc.SHIPWAY, *args]
    forked = cliproc.run(argv, capture_output=True, text=True, **kw)  # type: ignore[arg-type]
    execd = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    return forked, execd


def test_output_exit_code_and_working_directory_match_exec(tmp_path: Path) -> None:
    (tmp_path / "shipway.toml").write_text(SPEC)
    forked, execd = both(["-f", "shipway.toml", "validate", "-o", "json"], cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        execd.returncode, execd.stdout, execd.stderr,
    )  # fmt: skip
    assert forked.returncode == 0 and '"forked"' in forked.stdout

    (tmp_path / "shipway.toml").write_text(SPEC.replace('"local"', '"nowhere"'))
    forked, execd = both(["-f", "shipway.toml", "validate"], cwd=tmp_path)
    assert forked.returncode == execd.returncode == 2
    assert forked.stderr == execd.stderr and "backend" in forked.stderr


def test_the_environment_is_the_one_given(tmp_path: Path) -> None:
    state = tmp_path / "elsewhere"
    env = {**os.environ, "SHIPWAY_STATE_DIR": str(state), "NO_COLOR": "1"}
    (tmp_path / "shipway.toml").write_text(SPEC)
    forked, execd = both(["-f", str(tmp_path / "shipway.toml"), "ls", "-o", "json"], env=env)
    assert forked.returncode == execd.returncode
    assert forked.stdout == execd.stdout


def _as_from_a_shell() -> None:
    """The exec'd command's signals as a shell gives them (the forked one gets the same
    from its zygote), whatever the pytest worker's own state."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve_dashboard(
    popen: type[subprocess.Popen[str]], tmp_path: Path
) -> tuple[subprocess.Popen[str], str]:
    """``shipway dashboard --port 0``: a command that runs until a signal ends it."""
    shell = {} if popen is cliproc.ShipwayProcess else {"preexec_fn": _as_from_a_shell}
    (tmp_path / "shipway.toml").write_text(SPEC)
    proc = popen(
        [*cliproc.SHIPWAY, "-f", str(tmp_path / "shipway.toml"), "dashboard", "--port", "0",
         "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, **shell,  # type: ignore[arg-type]
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    url = line[line.index("http://") :].split()[0]
    return proc, url


def test_a_command_is_its_own_process_that_sigint_ends_as_exec_s_does(tmp_path: Path) -> None:
    ended = []
    for popen in (cliproc.ShipwayProcess, subprocess.Popen):
        proc, url = serve_dashboard(popen, tmp_path)
        assert proc.pid != os.getpid()
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        ended.append((proc.returncode, out.splitlines()[1:]))
    assert ended[0] == ended[1]


def test_sigkill_kills_a_forked_command(tmp_path: Path) -> None:
    proc, _ = serve_dashboard(cliproc.ShipwayProcess, tmp_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
