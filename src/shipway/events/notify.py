"""Notifications: the events of an operation told to the webhooks its slot declares
(spec/notify.py) — exactly one message per receiver for the outcome (``ended``), and for
``started`` when asked.

**Never delays or changes the outcome.** A message is sent from a thread of its own once the
event is emitted (the outcome is recorded before ``ended`` is, and printed while the thread
sends). A receiver that is down, refuses (HTTP 5xx, 429), or is slow is retried with
exponential back-off (0.5s, 1s, 2s … each try bounded by ``TRY_TIMEOUT``) until ``BUDGET``
seconds after the event; a 4xx other than 429 is not retried. What could not be delivered
within the budget is said (a line, never a failure). The threads are not daemons: a
command's process ends once its messages are delivered or their budget is spent, so its
exit is delayed by at most ``BUDGET`` (``SHIPWAY_NOTIFY_BUDGET`` seconds, default 20),
never its outcome or its exit code.

Why not a spool in the target re-sent by the next run: the next run may be days later, or
never; a message about a Friday-night rollback is worth most in the next seconds. The
bounded send gives that, and says plainly what it could not deliver.

**Signed, never secret.** The JSON body is signed with HMAC-SHA256 under the value of the
receiver's ``secret`` (a ``[secrets]`` reference): header ``X-Shipway-Signature:
sha256=HEX``. ``X-Shipway-Delivery`` is one id per message, the same on each retry, so a
receiver can drop a repeat (a retry after a reply that was lost). Bodies are made from the
events (which hold no secret values) and masked with every secret value the operation
knows besides.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipway.events.model import Ended, Event, Recovered, Started
from shipway.spec.notify import Receiver
from shipway.spec.secrets import Masker, Secret

#: seconds a message may take, all its tries together, from its event
BUDGET = 20.0
#: seconds one try may take
TRY_TIMEOUT = 5.0
FIRST_BACKOFF = 0.5
SIGNATURE_HEADER = "X-Shipway-Signature"


def budget(environ: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get("SHIPWAY_NOTIFY_BUDGET", "")
    try:
        return max(0.0, float(raw)) if raw else BUDGET
    except ValueError:
        return BUDGET


def sign(body: bytes, key: str) -> str:
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def slack_text(event: Event) -> str:
    """One line for a chat channel."""
    if isinstance(event, Started):
        glass = f" — BREAK-GLASS: {event.who.break_glass}" if event.who.break_glass else ""
        return (
            f"shipway: {event.operation} {event.app}/{event.slot} started by "
            f"{event.who.who()}{glass}"
        )
    if isinstance(event, Ended | Recovered):
        return f"shipway: {event.line}"
    return f"shipway: {event.kind}"


@dataclass(frozen=True)
class Delivery:
    """What became of one message."""

    receiver: str
    event: str
    delivered: bool
    tries: int
    problem: str = ""


class Notifier:
    """A sink that sends the events its receivers want. ``secrets``: the values the
    receivers' references name (a signing key, a URL), resolved by the caller; ``mask``
    masks every secret value the operation knows. ``say``: where an undelivered message
    is said."""

    def __init__(
        self,
        receivers: Sequence[Receiver],
        secrets: Mapping[str, Secret],
        mask: Masker,
        say: Callable[[str], None],
        *,
        budget: float = BUDGET,
        try_timeout: float = TRY_TIMEOUT,
    ) -> None:
        self.receivers = tuple(receivers)
        self.secrets = secrets
        self.mask = mask
        self.say = say
        self.budget = budget
        self.try_timeout = try_timeout
        self.threads: list[threading.Thread] = []
        self.deliveries: list[Delivery] = []
        self._started: Started | None = None

    def emit(self, event: Event) -> None:
        if isinstance(event, Started):
            self._started = event
        name = event.outcome if isinstance(event, Ended) else event.kind
        if not isinstance(event, Ended | Started | Recovered):
            return
        for receiver in self.receivers:
            if receiver.wants(name):
                self._send_later(receiver, event)

    def body(self, receiver: Receiver, event: Event) -> bytes:
        if receiver.form == "slack":
            text = slack_text(event)
            begun = self._started
            if isinstance(event, Ended) and begun is not None:
                text += f" — by {begun.who.who()}"
                if begun.who.break_glass:
                    text += f" — BREAK-GLASS: {begun.who.break_glass}"
            doc: dict[str, Any] = {"text": text}
        else:
            doc = event.to_json()
            if isinstance(event, Ended) and self._started is not None:
                doc["started"] = self._started.to_json()  # who, for the one outcome message
        return self.mask(json.dumps(doc, sort_keys=True, default=str)).encode()

    def _send_later(self, receiver: Receiver, event: Event) -> None:
        body = self.body(receiver, event)
        deadline = time.monotonic() + self.budget
        thread = threading.Thread(
            target=self._send,
            args=(receiver, event.kind, body, deadline, uuid.uuid4().hex),
            name=f"notify {receiver.shown()}",
            daemon=False,
        )
        self.threads.append(thread)
        thread.start()

    def _send(self, receiver: Receiver, kind: str, body: bytes, deadline: float, id_: str) -> None:
        url = self._url(receiver)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "shipway",
            "X-Shipway-Event": kind,
            "X-Shipway-Delivery": id_,
        }
        if receiver.secret:
            headers[SIGNATURE_HEADER] = sign(body, self.secrets[receiver.secret].reveal())
        tries, backoff, problem = 0, FIRST_BACKOFF, ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            tries += 1
            problem, again = self._try(url, body, headers, min(self.try_timeout, left))
            if not problem:
                self.deliveries.append(Delivery(receiver.shown(), kind, True, tries))
                return
            if not again or time.monotonic() + backoff >= deadline:
                break
            time.sleep(backoff)  # the back-off between tries, not a wait for a condition
            backoff *= 2
        self.deliveries.append(Delivery(receiver.shown(), kind, False, tries, problem))
        self.say(
            f"warning: the {kind} notification to {receiver.shown()} was not delivered "
            f"({tries} tries: {problem}); the outcome stands"
        )

    def _url(self, receiver: Receiver) -> str:
        if receiver.url_secret:
            return self.secrets[receiver.url_secret].reveal()
        return receiver.url

    def _try(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[str, bool]:
        """One POST: ("", _) delivered, else (why, whether to try again)."""
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                reply.read(1024)
            return "", False
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}", exc.code >= 500 or exc.code == 429
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            return self.mask(f"{type(reason).__name__}: {reason}"), True

    def join(self, timeout: float | None = None) -> None:
        """Wait for every message under way (tests; a process ends after them anyway)."""
        end = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            thread.join(None if end is None else max(0.0, end - time.monotonic()))
