"""The local backend's build phase: the app's dependency environment (a Python venv, Node
modules) — not built yet on this backend: it reports that there is nothing to build, and
the app runs with the interpreter and packages the deploying shell has."""

from __future__ import annotations

from shipway.backends.protocol import BuildInputs, Built, Reporter
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.spec.model import App, Target


class LocalBuilds:
    """build_inputs, build: nothing to build (yet) on the local backend."""

    def build_inputs(self, target: Target, app: App, image: bool) -> BuildInputs | None:
        return None

    def build(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        inputs: BuildInputs,
        reporter: Reporter,
    ) -> Built:
        clearance.require_covers(target)
        raise InputError(f"{target}: the local backend has nothing to build")
