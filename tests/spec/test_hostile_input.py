"""Hostile input that cannot live in ``hostile/`` as a file (a FIFO, /dev/zero, a symlink
loop, 10 MB, 100,000 keys), and every hostile case through the real command line.

Each must end in exit code 2 with an error naming the file and a hint: never a traceback,
never "unexpected error", never a hang (pytest-timeout ends a hang; no timing is asserted:
bench figures are measured, not tested).
"""

from __future__ import annotations

import itertools
import json
import os
import string
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from shipway.errors import InputError, SecretUnavailable, SpecInvalid
from shipway.spec import SecretRef, load
from shipway.spec.limits import MAX_SECRET_FILE_BYTES, MAX_VALUES
from tests import cliproc
from tests.spec.test_validation_cases import HOSTILE, SPECS, expected, problems

OK = '[app]\nname = "hello"\n[processes.web]\ncommand = "python3 app.py"\nport = 8000\n'


def names(count: int) -> list[str]:
    """``count`` distinct short lowercase names (a, b, …, aa, ab, …)."""
    letters = string.ascii_lowercase
    every = ("".join(t) for n in itertools.count(1) for t in itertools.product(letters, repeat=n))
    return list(itertools.islice(every, count))


def keys(count: int, line: str) -> str:
    return "".join(line.format(n) for n in names(count))


TOO_MANY = f"holds more than {MAX_VALUES:,} keys and values"


def write(text: Callable[[], str], name: str) -> Callable[[Path], Path]:
    """A maker writing ``text()`` (built when the case runs, not when tests are collected)."""

    def make(tmp: Path) -> Path:
        (tmp / name).write_text(text())
        return tmp / name

    return make


def ten_megabytes(tmp: Path) -> Path:
    spec = tmp / "shipway.yaml"
    spec.write_text("app:\n  name: hello\nnotes: |\n" + ("  " + "x" * 97 + "\n") * 100_000)
    return spec


def dev_zero(tmp: Path) -> Path:
    return Path("/dev/zero")


def fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "shipway.toml")  # nobody ever writes to it: reading must not wait
    return tmp / "shipway.toml"


def symlink_loop(tmp: Path) -> Path:
    (tmp / "shipway.toml").symlink_to("shipway.toml")
    return tmp / "shipway.toml"


def directory_as_file(tmp: Path) -> Path:
    (tmp / "shipway.toml").mkdir()
    return tmp  # found in the directory, and it is not a file


def not_a_directory(tmp: Path) -> Path:
    (tmp / "shipway.toml").write_text(OK)
    return tmp / "shipway.toml" / "shipway.toml"


# name → (make the input in a tmp dir, error type, what the message must say)
GENERATED: dict[str, tuple[Callable[[Path], Path], type[InputError], str]] = {
    "10_megabytes": (ten_megabytes, InputError, "is larger than 256 KiB"),
    "dev_zero": (dev_zero, InputError, "is a character device, not a regular file"),
    "fifo": (fifo, InputError, "is a FIFO (named pipe), not a regular file"),
    "symlink_loop": (symlink_loop, InputError, "is a symlink loop"),
    "directory_as_file": (directory_as_file, InputError, "is a directory, not a regular file"),
    "not_a_directory": (not_a_directory, InputError, "a part of the path is not a directory"),
    "100k_keys_toml": (
        write(lambda: OK + "[env]\n" + keys(100_000, "{} = 1\n"), "shipway.toml"),
        InputError,
        "is larger than 256 KiB",
    ),
    "100k_keys_yaml": (
        write(lambda: "env:\n" + keys(100_000, " {}: 1\n"), "shipway.yaml"),
        InputError,
        "is larger than 256 KiB",
    ),
    # as many keys as fit in the size limit: refused by count, before they are built
    "20k_keys_toml": (
        write(lambda: OK + "[env]\n" + keys(20_000, "{}=1\n"), "shipway.toml"),
        SpecInvalid,
        TOO_MANY,
    ),
    "20k_keys_yaml": (
        write(lambda: "env:\n" + keys(20_000, " {}: 1\n"), "shipway.yaml"),
        SpecInvalid,
        TOO_MANY,
    ),
    "20k_inline_keys_toml": (
        write(lambda: OK + "[env]\nX = {" + keys(20_000, "{}=1,")[:-1] + "}\n", "shipway.toml"),
        SpecInvalid,
        TOO_MANY,
    ),
    "20k_tables_toml": (
        write(lambda: OK + keys(20_000, "[{}]\n"), "shipway.toml"),
        SpecInvalid,
        TOO_MANY,
    ),
    "60k_documents_yaml": (write(lambda: "---\n" * 60_000, "shipway.yaml"), SpecInvalid, TOO_MANY),
    "100k_list_items_yaml": (
        write(lambda: "env:\n  X: [" + ",".join(["1"] * 100_000) + "]\n", "shipway.yaml"),
        SpecInvalid,
        TOO_MANY,
    ),
}


@pytest.mark.parametrize("name", list(GENERATED))
def test_generated_hostile_input_is_refused_naming_the_file(name: str, tmp_path: Path) -> None:
    make, error, says = GENERATED[name]
    path = make(tmp_path)
    with pytest.raises(error) as raised:
        load(path)
    message = str(raised.value)
    assert says in message
    assert str(path) in message and "hint:" in message


HOSTILE_FILES = [p for p in SPECS if p.parent == HOSTILE]
YAML_FILES = [p for p in HOSTILE_FILES if p.suffix == ".yaml"]


@pytest.mark.parametrize("case", YAML_FILES, ids=[p.stem for p in YAML_FILES])
def test_hostile_yaml_is_refused_alike_without_libyaml(
    case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML without its C extension parses in Python: same limits, same problems."""
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert problems(case, tmp_path, monkeypatch) == expected(case)


def copied(case: Path) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        spec = tmp / f"shipway{case.suffix}"
        spec.write_bytes(case.read_bytes())
        return spec

    return make


def cli_cases() -> list[tuple[str, Callable[[Path], Path]]]:
    return [(f"hostile/{p.stem}", copied(p)) for p in HOSTILE_FILES] + [
        (name, make) for name, (make, _, _) in GENERATED.items()
    ]


CLI_CASES = cli_cases()


@pytest.mark.parametrize("make", [m for _, m in CLI_CASES], ids=[n for n, _ in CLI_CASES])
def test_the_cli_exits_2_with_the_file_and_a_hint(
    make: Callable[[Path], Path], tmp_path: Path
) -> None:
    path = make(tmp_path)
    p = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(path), "validate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "SHIPWAY_DEBUG"},
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "unexpected error" not in p.stderr, p.stderr
    assert p.stderr.startswith("error: ") and "hint:" in p.stderr, p.stderr
    assert path.name in p.stderr, p.stderr  # validation names the file, reading its path
    assert p.stdout == ""


def test_json_output_lists_a_hostile_problem(tmp_path: Path) -> None:
    spec = tmp_path / "shipway.yaml"
    spec.write_bytes((HOSTILE / "alias_bomb.yaml").read_bytes())
    p = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(spec), "validate", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2
    [problem] = json.loads(p.stdout)["error"]["problems"]
    assert problem["file"] == str(spec) and problem["line"] == 5
    assert "aliases are expanded" in problem["message"] and "alias bomb" in problem["hint"]


# -- the files a spec points at: secrets are read later, by the same rules -------------------


def fifo_at(path: Path) -> None:
    os.mkfifo(path)


SECRET_FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (fifo_at, "is a FIFO (named pipe), not a regular file"),
    "symlink_loop": (lambda p: p.symlink_to(p.name), "is a symlink loop"),
    "directory": (lambda p: p.mkdir(), "is a directory, not a regular file"),
    "too_large": (
        lambda p: p.write_bytes(b"x" * (MAX_SECRET_FILE_BYTES + 1)),
        "is larger than 1 MiB",
    ),
    "bad_utf8": (lambda p: p.write_bytes(b"s3cr\xe9t-value"), "is not UTF-8 text"),
}


@pytest.mark.parametrize("name", list(SECRET_FILES))
def test_a_hostile_secret_file_is_refused_by_name_never_echoed(name: str, tmp_path: Path) -> None:
    make, says = SECRET_FILES[name]
    make(tmp_path / "token")
    (tmp_path / "shipway.toml").write_text(OK + '[secrets]\nTOKEN = { from_file = "token" }\n')
    app = load(tmp_path)  # the spec is valid: the file is read when a deploy needs it
    ref = app.secrets["TOKEN"]
    with pytest.raises(SecretUnavailable) as raised:
        ref.resolve()
    message = str(raised.value)
    assert f"secrets.TOKEN: file {tmp_path / 'token'} {says}" in message
    assert "hint:" in message and "s3cr" not in message and "xe9" not in message


def test_dev_zero_as_a_secret_file_is_refused() -> None:
    with pytest.raises(SecretUnavailable, match="is a character device"):
        SecretRef("T", from_file="/dev/zero").resolve()
