"""What a deploy was asked, as one value: built once where the options are parsed (the
command line, or the API's keywords) and passed whole through the API and the engine, so no
layer retypes the options one by one.

A module of its own, importing nothing heavy, so that the CLI and ``shipway.api`` can build
one without loading the sequencing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.errors import InputError

if TYPE_CHECKING:
    from shipway.plan.model import Plan


@dataclass(frozen=True, slots=True)
class DeployRequest:
    """One deploy's options. ``saved``: a plan made earlier, applied exactly or refused
    (it takes none of ``image``, ``take_host``, ``force``, ``build``). ``operation`` and
    ``description`` name the release (``promote`` deploys through this too)."""

    image: str | None = None
    saved: Plan | None = None
    build: bool = False
    take_host: bool = False
    take_over: bool = False
    force: bool = False
    operation: str = "deploy"
    description: str = ""
    timeout: float = DEFAULT_TIMEOUT
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT
    #: accessories whose major-version change is asked for (``--upgrade-accessory NAME``)
    upgrade_accessories: tuple[str, ...] = ()

    def taken(self) -> tuple[str, ...]:
        """What it takes beyond its clearance, as the audit names it."""
        return ("take-host",) * self.take_host + ("take-over",) * self.take_over

    def check_saved(self, slot: str) -> None:
        """A saved plan is applied exactly as it was made: an option that would change it
        is refused, naming the command that makes a new one."""
        if self.saved is None:
            return
        given = [
            (self.image is not None, "--image", " REF"),
            (self.take_host, "--take-host", ""),
            (self.force, "--force", ""),
            (self.build, "--build", ""),
            (bool(self.upgrade_accessories), "--upgrade-accessory", " NAME"),
        ]
        flag = next(((name, value) for on, name, value in given if on), None)
        if flag is not None:
            raise InputError(
                f"a saved plan is applied exactly as it was made: it takes no {flag[0]} "
                f"(hint: make a new one: shipway plan {slot} {flag[0]}{flag[1]} --out FILE)"
            )
