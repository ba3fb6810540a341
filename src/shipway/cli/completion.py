"""Shell completion: ``shipway completion bash|zsh|fish`` prints the script, and the
arguments complete from what the user has — slots and processes from the spec (``-f`` and
``SHIPWAY_FILE`` honoured), revisions and generations from the slot's own records.

A completer never fails and never prints: a spec that does not load, or a slot that does
not answer, completes nothing. Everything it needs is imported when it runs, so this
module costs ``shipway --help`` nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from shipway.spec.model import App

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_SHIPWAY_COMPLETE"


def _app(ctx: click.Context) -> App | None:
    try:
        from shipway.spec import load

        return load(ctx.find_root().params.get("spec_file"))
    except Exception:  # a completer completes nothing rather than fail the shell
        return None


def _slot_of(ctx: click.Context, app: App) -> str | None:
    """The slot a completion is for: the one given, else the spec's only slot."""
    given = ctx.params.get("slot")
    if given in app.slots:
        return str(given)
    names = app.slots.names()
    return names[0] if len(names) == 1 else None


def _items(values: list[tuple[str, str]], incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(v, help=h or None) for v, h in values if v.startswith(incomplete)]


def _guarded(
    find: Callable[[click.Context, App], list[tuple[str, str]]],
) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        app = _app(ctx)
        if app is None:
            return []
        try:
            return _items(find(ctx, app), incomplete)
        except Exception:  # an engine that does not answer: nothing to offer
            return []

    return complete


def _processes(ctx: click.Context, app: App) -> list[tuple[str, str]]:
    return [(n, " ".join(p.command or ())) for n, p in app.processes.items()]


def _revisions(ctx: click.Context, app: App) -> list[tuple[str, str]]:
    from shipway import api
    from shipway.cli.term import short_digests

    slot = _slot_of(ctx, app)
    if slot is None:
        return []
    return [
        (str(r.revision), short_digests(f"{r.status} — {r.description}"))
        for r in reversed(api.history(app, slot))
    ]


def _generations(ctx: click.Context, app: App) -> list[tuple[str, str]]:
    from shipway import api

    slot = _slot_of(ctx, app)
    if slot is None:
        return []
    return [(g.name, f"{g.state}, r{g.release}") for g in api.generations(app, slot)]


complete_process = _guarded(_processes)
complete_revision = _guarded(_revisions)
complete_generation = _guarded(_generations)


def _slots(ctx: click.Context, app: App) -> list[tuple[str, str]]:
    """The spec's slots; with one slot only, what may come in its place as well (``restart
    <TAB>`` offers ``local web worker``: SLOT may be left out)."""
    out = [(s.name, f"{s.backend}, {s.role}") for s in app.slots]
    if len(out) == 1:
        arguments = [p for p in ctx.command.params if isinstance(p, click.Argument)]
        after = arguments[1:2]
        finders = {"process": _processes, "revision": _revisions, "generation": _generations}
        for param in after:
            if param.name in finders:
                out += finders[param.name](ctx, app)
    return out


complete_slot = _guarded(_slots)


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish).

    \b
    bash:  eval "$(shipway completion bash)"          (in ~/.bashrc)
    zsh:   eval "$(shipway completion zsh)"           (in ~/.zshrc)
    fish:  shipway completion fish > ~/.config/fish/completions/shipway.fish

    Commands and options complete, and so do SLOT and PROCESS (from the spec: -f and
    SHIPWAY_FILE are honoured), REVISION and GENERATION (from the slot's records).
    """
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root().command
    cls = get_completion_class(shell)
    assert cls is not None  # SHELLS are click's own
    script = cls(root, {}, "shipway", COMPLETE_VAR)
    # the template alone: bash's own version check would run this machine's bash, and the
    # script may be meant for another one
    click.echo(script.source_template % script.source_vars())
