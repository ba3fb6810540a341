"""Shell completion: ``shipway completion bash|zsh|fish`` prints the script; slots and
processes complete from the spec, revisions and generations from the slot's records —
asked the way the shells ask (bash through its own completion function)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shipway.cli.main import cli
from tests.backends.local.conftest import Slot
from tests.cli.conftest import TWO_SLOTS


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o nosort -F _shipway_completion shipway"),
     ("zsh", "#compdef shipway"),
     ("fish", "complete --no-files --command shipway")],
)  # fmt: skip
def test_completion_prints_each_shells_script(shell: str, marker: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell])
    assert result.exit_code == 0, result.output
    assert marker in result.output and "_SHIPWAY_COMPLETE" in result.output


def bash_complete(words: str, env: dict[str, str], cwd: Path) -> list[str]:
    """What bash offers for ``words`` (the last word is being typed), through the function
    the completion script defines."""
    script = subprocess.run(
        [sys.executable, "-m", "shipway", "completion", "bash"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    parts = words.split(" ")
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(p) for p in parts)}); "
        f"COMP_CWORD={len(parts) - 1}; _shipway_completion shipway; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    bindir = Path(sys.executable).parent
    path = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, check=True,
        env={**env, "PATH": path}, cwd=cwd,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if line]


def test_slots_and_processes_complete_from_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "shipway.toml"
    spec.write_text(TWO_SLOTS.format(state=tmp_path / "state"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPWAY_")}
    assert bash_complete("shipway deploy ", env, tmp_path) == ["test1", "prod"]
    assert bash_complete("shipway status p", env, tmp_path) == ["prod"]
    assert bash_complete("shipway restart prod ", env, tmp_path) == ["web", "worker"]
    assert bash_complete("shipway re", env, tmp_path) == ["repair", "restart", "restore"]
    # -f (and SHIPWAY_FILE) name the spec completion reads
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    assert bash_complete(f"shipway -f {spec} logs test1 w", env, elsewhere) == ["web", "worker"]
    assert bash_complete("shipway logs ", {**env, "SHIPWAY_FILE": str(spec)}, elsewhere) == [
        "test1",
        "prod",
    ]
    # a spec that does not load completes nothing, and says nothing
    assert bash_complete("shipway deploy ", env, elsewhere) == []


def test_revisions_and_generations_complete_from_the_records(hello: Slot) -> None:
    hello.spec.write_text(
        hello.spec.read_text() + '\n[slots.local]\nstrategy = "blue-green"\nsleep_after = "0.3s"\n'
    )
    assert hello.run("deploy").code == 0
    hello.edit_spec('GREETING = "hello"', 'GREETING = "hi"')
    assert hello.run("deploy").code == 0
    env, cwd = hello.env, hello.app_dir
    assert bash_complete("shipway rollback local ", env, cwd) == ["2", "1"]  # newest first
    generations = [g["name"] for g in hello.json("gens")["generations"]]
    assert len(generations) == 2
    assert sorted(bash_complete("shipway switch local ", env, cwd)) == sorted(generations)
    # one slot: what may come in SLOT's place is offered with it
    offered = bash_complete("shipway restart ", env, cwd)
    assert offered == ["local", "web", "worker"]
    assert bash_complete("shipway rollback ", env, cwd) == ["local", "2", "1"]
