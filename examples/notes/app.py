"""notes: a small Flask app to deploy with shipway — locally, to Docker hosts, to a cluster.

GET  /        the notes, newest first, and which release serves them
POST /        add a note (form field ``text``)
GET  /up      health check (the release command, migrate.py, runs once the new processes
              are healthy and before traffic moves to them)

The notes live in an SQLite file (``NOTES_DB``): with one per container, as here, web makes
sure its own file has the schema; with a shared database, migrate.py is what puts it there.
"""

from __future__ import annotations

import os

from flask import Flask, redirect, request

import store

app = Flask(__name__)
RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")
store.migrate()


@app.get("/up")
def up() -> str:
    return "ok\n"


@app.get("/")
def index() -> str:
    items = "".join(f"<li>{text}</li>" for text in store.notes())
    return (
        f"<h1>notes</h1><p>served by {RELEASE}</p>"
        '<form method="post"><input name="text"><button>add</button></form>'
        f"<ul>{items}</ul>\n"
    )


@app.post("/")
def add():  # type: ignore[no-untyped-def]
    text = (request.form.get("text") or "").strip()
    if text:
        store.add(text)
    return redirect("/", code=303)
