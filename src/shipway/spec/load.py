"""Finding and reading a spec file (``shipway.toml``; YAML accepted too)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from shipway.errors import InputError, SpecInvalid, SpecProblem
from shipway.spec.locate import Locator, toml_locator, yaml_locator
from shipway.spec.model import App
from shipway.spec.parse import parse

CANDIDATES = ("shipway.toml", "shipway.yaml", "shipway.yml")


def find(path: str | Path | None = None, cwd: Path | None = None) -> Path:
    """The spec at ``path``, else the first of shipway.toml/.yaml/.yml in ``cwd``."""
    if path is not None:
        p = Path(path)
        if p.is_dir():
            cwd, path = p, None
        elif not p.exists():
            raise InputError(f"{p}: no such file (hint: pass -f PATH to a shipway.toml)")
        else:
            return p
    here = cwd or Path.cwd()
    for name in CANDIDATES:
        if (here / name).is_file():
            return here / name
    raise InputError(
        f"no shipway.toml in {here} (hint: run in the app's directory, or pass -f PATH)"
    )


def read(path: Path) -> tuple[Any, Locator]:
    """Raw data and a line locator; syntax errors become SpecInvalid with their line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as exc:
            line = exc.problem_mark.line + 1 if exc.problem_mark else None
            raise SpecInvalid(
                [SpecProblem(str(path), "", f"not valid YAML: {exc.problem}", "", line)]
            ) from exc
        return ({} if data is None else data), yaml_locator(node)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecInvalid([SpecProblem(str(path), "", f"not valid TOML: {exc}")]) from exc
    return data, toml_locator(text)


def load(path: str | Path | None = None) -> App:
    """Find, read and validate a spec. Raises SpecInvalid listing every problem."""
    spec = find(path)
    data, locate = read(spec)
    return parse(data, file=spec.name, locate=locate, base_dir=spec.parent.resolve())
