"""Where events go: a :class:`Sink` takes each one as it happens. The engine emits to one
sink; the command line's reporter is one, the notifier another (:class:`Fanout` gives one
event to several).

A caller of the Python API may still pass a plain line reporter (``line``/``progress``):
:class:`Lines` renders the events for it exactly as shipway printed them before the stream
existed. :class:`Saying` goes the other way, for the code that says lines (the backends):
each line and progress report becomes an event on the sink.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from shipway.events.model import Event, Said, Waiting


@runtime_checkable
class Sink(Protocol):
    def emit(self, event: Event) -> None: ...


class LineReporter(Protocol):
    """The line-and-progress reporter backends speak (backends/protocol.py ``Reporter``)."""

    def line(self, text: str) -> None: ...

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None: ...


def render(event: Event, out: LineReporter) -> None:
    """The terminal form of ``event`` on a line reporter: its lines, or a wait's progress."""
    if isinstance(event, Waiting):
        out.progress(event.process, event.counts, event.note)
        return
    for line in event.lines():
        out.line(line)


class Lines:
    """A sink over a plain line reporter."""

    def __init__(self, out: LineReporter) -> None:
        self.out = out

    def emit(self, event: Event) -> None:
        render(event, self.out)


class Fanout:
    """Each event to every sink, in order, one event at a time (threads share it)."""

    def __init__(self, *sinks: Sink) -> None:
        self.sinks = sinks
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        with self._lock:
            for sink in self.sinks:
                sink.emit(event)


class Saying:
    """A line reporter whose lines and progress become events on ``sink``; it is a sink
    too, so code that holds it can emit typed events (:func:`tell`)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def emit(self, event: Event) -> None:
        self.sink.emit(event)

    def line(self, text: str) -> None:
        self.sink.emit(Said(text))

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        self.sink.emit(Waiting(process, dict(counts), note))


def as_sink(given: object) -> Sink:
    """What the engine emits to: ``given`` when it is a sink, a plain line reporter
    rendered (:class:`Lines`), or nowhere (None)."""
    if isinstance(given, Sink):
        return given
    if given is None:
        return Fanout()
    return Lines(given)  # type: ignore[arg-type]


def tell(out: object, event: Event) -> None:
    """Emit ``event`` to ``out`` when it takes events, else render it on its lines."""
    if isinstance(out, Sink):
        out.emit(event)
    else:
        render(event, out)  # type: ignore[arg-type]


class Recorded:
    """A sink that keeps every event (tests; the last ``ended``)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Event]) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]


def event_line(event: Event) -> bytes:
    """An event as one line of JSON (its JSON form, keys sorted)."""
    import json

    return (json.dumps(event.to_json(), sort_keys=True, default=str) + "\n").encode()


class JsonLines:
    """Each event as one line of JSON appended to ``path`` (made 0600): the stream a
    dashboard or a log shipper reads (the command line writes it when ``SHIPWAY_EVENTS``
    names a file). One write per line, in append mode, so concurrent commands interleave
    whole lines."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        import os

        line = event_line(event)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
