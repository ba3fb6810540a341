"""Where the notes live: an SQLite file (``NOTES_DB``, default ``notes.db``)."""

from __future__ import annotations

import html
import os
import sqlite3

SCHEMA = "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"


def connect() -> sqlite3.Connection:
    return sqlite3.connect(os.environ.get("NOTES_DB", "notes.db"))


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
