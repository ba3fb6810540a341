"""``shipway init``: write a commented shipway.toml from what the directory already has.

The text is validated by the spec's own parser before it is written (a spec ``init``
writes must validate and deploy locally as it is), and an existing spec is never
overwritten without ``--force``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from shipway.cli.common import (
    Context,
    output_option,
    pass_obj,
    run_body,
)


@click.command()
@click.argument(
    "directory",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--force", is_flag=True, help="Overwrite an existing shipway.toml.")
@click.option("--print", "to_stdout", is_flag=True, help="Print the spec; write nothing.")
@output_option
@pass_obj
def init(obj: Context, directory: Path | None, force: bool, to_stdout: bool) -> None:
    """Write DIRECTORY/shipway.toml (default: here, or the -f FILE) from what the app
    already has: a Procfile, .env, app.json, requirements.txt / pyproject.toml /
    package.json, a Dockerfile. Guesses (a command, a health path) are marked as guesses in
    the file."""

    def body() -> int:
        target, where = _target(obj.spec_file, directory)
        return _write(obj, target, where, force, to_stdout)

    run_body(obj, body)


def _target(spec_file: str | None, directory: Path | None) -> tuple[Path, Path]:
    """The file to write and the app directory it describes."""
    if directory is None and spec_file:
        given = Path(spec_file)
        if given.is_dir():
            return given / "shipway.toml", given
        return given, given.parent
    where = directory or Path(".")
    return where / "shipway.toml", where


def _write(obj: Context, target: Path, directory: Path, force: bool, to_stdout: bool) -> int:
    """Scan ``directory``, validate the text, write ``target`` (refused when a spec is there,
    unless ``force``)."""
    from shipway.cli.report import emit_json
    from shipway.errors import InputError
    from shipway.spec.load import CANDIDATES
    from shipway.spec.parse import parse
    from shipway.spec.scaffold import scan
    from shipway.spec.syntax import parse_toml

    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory (hint: shipway init DIR)")
    if target.suffix in (".yaml", ".yml"):
        raise InputError(f"{target}: init writes TOML (hint: -f path/shipway.toml)")
    existing = [
        p
        for p in dict.fromkeys([target, *(directory / n for n in CANDIDATES)])
        if os.path.lexists(p)
    ]
    if existing and not force and not to_stdout:
        raise InputError(
            f"{existing[0]} already exists; nothing was written "
            "(hint: --force replaces it, --print shows what init would write)"
        )
    found = scan(directory)
    text = found.text()
    if to_stdout:
        click.echo(text, nl=False)
        return 0
    # what is written must validate as it is: checked before anything is written
    data, locate = parse_toml(text, str(target))
    app = parse(data, file=target.name, locate=locate, base_dir=directory.resolve())
    target.write_text(text)
    if obj.json:
        emit_json(
            {
                "written": str(target),
                "app": app.name,
                "found": found.found,
                "processes": list(app.processes),
                "guesses": [f"processes.{p.name}" for p in found.procs if p.guessed],
                "changes": found.changes,
            }
        )
        return 0
    click.echo(f"wrote {target}: app {app.name}, processes {', '.join(app.processes)}")
    click.echo(f"  from: {', '.join(found.found) or 'nothing (a stand-in web process)'}")
    for proc in found.procs:
        if proc.guessed:
            click.echo(f"  guessed: processes.{proc.name} — {proc.guessed}")
    for change in found.changes:
        click.echo(f"  to do: {change}")
    click.echo("  health paths are guesses too; then: shipway plan, shipway deploy")
    return 0
