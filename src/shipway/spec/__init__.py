"""The declarations: app, processes, routes, secrets, slots; loading and validation."""

from shipway.spec.load import find, load
from shipway.spec.model import (
    App,
    ConfigFile,
    DockerHost,
    Healthcheck,
    Process,
    Resources,
    Route,
    Slot,
    SlotRegistry,
    Target,
)
from shipway.spec.parse import parse
from shipway.spec.secrets import Secret, SecretRef

__all__ = [
    "App",
    "ConfigFile",
    "DockerHost",
    "Healthcheck",
    "Process",
    "Resources",
    "Route",
    "Secret",
    "SecretRef",
    "Slot",
    "SlotRegistry",
    "Target",
    "find",
    "load",
    "parse",
]
