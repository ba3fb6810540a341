"""How long an operation waits by default: the API's defaults, read by every command.

A module of its own, importing nothing, so that ``shipway.api`` can name the defaults in its
signatures without loading the sequencing (``validate``, ``status`` and ``history`` never
need it)."""

DEFAULT_TIMEOUT = 300.0
DEFAULT_ROLLBACK_TIMEOUT = 300.0
