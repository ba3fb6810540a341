"""The live view of the waits in progress, redrawn in place on a terminal (rich's Live).

One row per process being waited on: a spinner, its name, its counts, what the last probe
said, and for how long it has been waiting, refreshed four times a second — so a wait is
never silent. Imported only when a terminal shows progress (rich costs tens of
milliseconds to import; ``--help`` must not pay them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from shipway.cli.report import Wait


class LiveWaits:
    """Draws ``waits`` (the reporter's, read at each refresh) until :meth:`stop`."""

    def __init__(self, stream: TextIO, waits: Callable[[], Mapping[str, Wait]]) -> None:
        self.console = Console(file=stream, highlight=False)
        self._waits = waits
        self._spinners: dict[str, Spinner] = {}
        self._live = Live(
            self,
            console=self.console,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def __rich__(self) -> Any:
        grid = Table.grid(padding=(0, 1))
        now = time.monotonic()
        for process, wait in self._waits().items():
            spinner = self._spinners.setdefault(process, Spinner("dots", style="cyan"))
            row = Text.assemble(
                (process, "bold"),
                " ",
                wait.counts_text,
                (f" — {wait.note}" if wait.note else "", "yellow"),
                (f"  {now - wait.since:.0f}s", "dim"),
            )
            grid.add_row(Text("✓", style="green") if wait.done else spinner, row)
        return Group(grid)

    def stop(self) -> None:
        self._live.stop()
