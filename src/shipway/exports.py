"""A package's public names, imported on first use (a module ``__getattr__``, PEP 562): the
package itself then loads none of the modules behind them, so what a command never asks for
(the engine, for ``validate`` or ``--help``) is never imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[dict[str, str], Callable[[str], Any]]:
    """For ``package``, whose names are ``where`` (module → its names, space-separated): the
    name → module table, and the ``__getattr__`` that imports a name on first use and keeps
    it in ``namespace`` (the package's globals), so it is looked up once."""
    module_of = {name: module for module, names in where.items() for name in names.split()}

    def getattr_(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return module_of, getattr_
