"""The layers of DESIGN.md, checked on the source: cli (and the dashboard) → api → engine →
plan (pure) → spec / guard / release, and backends for I/O only. Nothing imports upward, the engine
never names a backend, and the CLI reaches the backends only through the API. Imports made
only for type checking (``if TYPE_CHECKING:``) are not dependencies and are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "shipway"

#: package (or module) → prefixes it must never import at run time
FORBIDDEN = {
    "cli": ("shipway.backends",),
    # the dashboard is a client of the API, as the CLI is: it reads through it alone
    "dashboard": ("shipway.backends", "shipway.engine", "shipway.cli"),
    "api": ("shipway.cli", "shipway.dashboard"),
    "canary": ("shipway.cli", "shipway.dashboard"),  # the canary's API, beside api.py
    "engine": (
        "shipway.api",
        "shipway.cli",
        "shipway.backends.local",
        "shipway.backends.docker",
        "shipway.backends.kubernetes",
    ),
    "backends": ("shipway.api", "shipway.cli", "shipway.engine"),
    "plan": ("shipway.api", "shipway.cli", "shipway.engine", "shipway.backends"),
    "spec": ("shipway.api", "shipway.cli", "shipway.engine", "shipway.backends", "shipway.plan"),
    "release": (
        "shipway.api",
        "shipway.cli",
        "shipway.engine",
        "shipway.backends",
        "shipway.plan",
    ),
    "events": ("shipway.api", "shipway.cli", "shipway.engine", "shipway.backends", "shipway.plan"),
    "guard": ("shipway.api", "shipway.cli", "shipway.engine", "shipway.backends", "shipway.plan"),
    "errors": ("shipway.",),
    "exports": ("shipway.",),  # the lazy public names of a package: a leaf
}
# nothing below the API imports the dashboard either
for _below in ("engine", "backends", "plan", "spec", "release", "guard"):
    FORBIDDEN[_below] += ("shipway.dashboard",)


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _runtime_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every import outside an ``if TYPE_CHECKING:`` block, with its line."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


MODULES = sorted(p for p in SRC.rglob("*.py") if _layer(p) in FORBIDDEN)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_nothing_imports_upward(path: Path) -> None:
    forbidden = FORBIDDEN[_layer(path)]
    tree = ast.parse(path.read_text(), filename=str(path))
    wrong = [
        f"{path.relative_to(SRC)}:{line}: imports {name}"
        for line, name in _runtime_imports(tree)
        if any(name == f.rstrip(".") or name.startswith(f.rstrip(".") + ".") for f in forbidden)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_layer_table_covers_every_package() -> None:
    layers = {_layer(p) for p in SRC.rglob("*.py")}
    assert layers - {"__init__", "__main__"} <= set(FORBIDDEN), layers - set(FORBIDDEN)


def test_the_deploy_path_is_followed_by_imports_alone() -> None:
    """No module between the CLI and the backends picks code by a string: a reader (and
    mypy) follows ``api`` → ``backends.open_backend`` → each backend's ``connect`` through
    plain imports. Only the package's lazy public names (``exports``) import by name."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "exports.py":
            continue
        text = path.read_text()
        if "import_module(" in text or "__import__(" in text:
            offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


@pytest.mark.parametrize(
    ("backend", "module"),
    [
        ("local", "shipway.backends.local.backend"),
        ("docker", "shipway.backends.docker.backend"),
        ("kubernetes", "shipway.backends.kubernetes.backend"),
    ],
)
def test_open_backend_names_each_backend_in_its_own_case(backend: str, module: str) -> None:
    """``open_backend`` holds one visible case per backend, importing that backend's
    ``connect`` inside the case (lazy, so ``--help`` pays for none of them)."""
    source = (SRC / "backends" / "__init__.py").read_text()
    tree = ast.parse(source)
    cases = [node for node in ast.walk(tree) if isinstance(node, ast.match_case)]
    by_name = {
        ast.literal_eval(case.pattern.value): ast.unparse(case)  # type: ignore[attr-defined]
        for case in cases
        if isinstance(case.pattern, ast.MatchValue)
    }
    assert f"from {module} import connect" in by_name[backend]


def test_no_module_passes_800_lines() -> None:
    """A module that passes 800 lines is asking to be split by concern (STYLE)."""
    long = {
        str(path.relative_to(SRC)): n
        for path in SRC.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 800
    }
    assert long == {}
