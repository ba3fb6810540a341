"""The command line's shape: one list of commands in one module, every command a plain
``click.command`` in a module of its own (or of its concern), shared helpers in one module,
and nothing imported back from the package's ``__init__``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import click

from shipway.cli import main

CLI = Path(main.__file__).parent


def test_every_command_defined_is_in_the_one_list() -> None:
    defined: dict[int, click.Command] = {}
    for path in sorted(CLI.glob("*.py")):
        module = importlib.import_module(f"shipway.cli.{path.stem}")
        for value in vars(module).values():
            callback = getattr(value, "callback", None)
            ours = callback is not None and callback.__module__ == module.__name__
            if isinstance(value, click.Command) and ours and value is not main.cli:
                defined[id(value)] = value
    nested = [
        sub
        for command in main.COMMANDS
        if isinstance(command, click.Group)
        for sub in command.commands.values()
    ]
    listed = {id(command) for command in [*main.COMMANDS, *nested]}
    assert set(defined) - listed == set(), [defined[i].name for i in set(defined) - listed]
    assert set(main.cli.commands) == {command.name for command in main.COMMANDS}


def test_no_module_imports_back_from_the_package() -> None:
    offenders = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "shipway.cli":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
    package = ast.parse((CLI / "__init__.py").read_text())
    assert not [n for n in package.body if isinstance(n, ast.Import | ast.ImportFrom)]


def test_commands_register_one_way() -> None:
    """No ``@cli.command`` and no per-module lists: ``main.COMMANDS`` is the registration."""
    for path in sorted(CLI.glob("*.py")):
        text = path.read_text()
        assert "@cli.command" not in text, path.name
        if path.name != "main.py":
            assert "add_command" not in text, path.name
            assert "\nCOMMANDS" not in text, path.name
