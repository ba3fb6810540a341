"""Where the notes live: an SQLite file (``NOTES_DB``; default ``notes-<slot>.db`` in the
temporary directory — never inside the release's own files, which a release keeps as
they were deployed)."""

from __future__ import annotations

import html
import os
import sqlite3
import tempfile

DEFAULT = os.path.join(tempfile.gettempdir(), f"notes-{os.environ.get('SHIPWAY_SLOT', 'dev')}.db")

SCHEMA = "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"


def connect() -> sqlite3.Connection:
    return sqlite3.connect(os.environ.get("NOTES_DB", DEFAULT))


def migrate() -> None:
    with connect() as db:
        db.execute(SCHEMA)


def add(text: str) -> None:
    with connect() as db:
        db.execute("INSERT INTO notes (text) VALUES (?)", (text,))


def notes() -> list[str]:
    with connect() as db:
        rows = db.execute("SELECT text FROM notes ORDER BY id DESC LIMIT 50").fetchall()
    return [html.escape(text) for (text,) in rows]
