"""``[[notify]]`` (every slot) and ``[[slots.NAME.notify]]`` (that slot too): who is told
how each operation ended. Each receiver is a webhook:

* ``url`` — where to POST, or ``url_secret`` naming a ``[secrets]`` entry that holds it (a
  Slack-style URL carries its own token: it is then a secret, never shown);
* ``form`` — ``json`` (default: the event's JSON, signed) or ``slack`` (``{"text": …}``);
* ``secret`` — a ``[secrets]`` name whose value signs the body: the request carries
  ``X-Shipway-Signature: sha256=HEX``, the HMAC-SHA256 of the body under that value;
* ``events`` — which: outcome kinds (``rolled``, ``unchanged``, ``done``: an operation
  that records no release did what it was asked, ``rolled-back``, ``rollback-failed``,
  ``no-anchor``, ``error``, ``failed``: a one-off command exited non-zero, ``recovered``: an
  operation that died, resolved by a later run), ``started``, or the groups ``outcomes``
  (every outcome; the default) and ``failures`` (every outcome but rolled, unchanged and
  done).

A slot's receivers are the app's followed by its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath

NOTIFY_KEYS = ("url", "url_secret", "form", "secret", "events")
#: ``failed``: a one-off command (``shipway run``) that exited non-zero
FAILURES = ("rolled-back", "rollback-failed", "no-anchor", "error", "failed")
#: ``recovered``: an earlier operation that died, resolved (and told) by a later one;
#: ``done``: an operation that records no release (stop, destroy, restore, run, sleep,
#: wake, gc, freeze, unfreeze, build) that did what it was asked
OUTCOMES = ("rolled", "unchanged", "done", *FAILURES, "recovered")
GROUPS = {"outcomes": OUTCOMES, "failures": FAILURES}
EVENT_NAMES = ("started", *OUTCOMES)


@dataclass(frozen=True)
class Receiver:
    """One webhook. ``url`` is empty when ``url_secret`` names where it is (resolved only
    when a message is sent)."""

    url: str = ""
    url_secret: str | None = None
    form: Literal["json", "slack"] = "json"
    secret: str | None = None
    events: tuple[str, ...] = OUTCOMES

    def wants(self, name: str) -> bool:
        return name in self.events

    def shown(self) -> str:
        """What may be shown of it: the URL's host, never a path that may hold a token."""
        if self.url_secret:
            return f"the URL in secret {self.url_secret}"
        from urllib.parse import urlsplit

        return urlsplit(self.url).netloc or "?"


def _receivers(c: Checker, raw: Any, path: KeyPath, secrets: Mapping[str, Any]) -> list[Receiver]:
    hint = 'e.g. [[notify]] url = "https://hooks.example/shipway" secret = "HOOK_KEY"'
    if raw is None:
        return []
    if not isinstance(raw, list):
        c.error(path, "must be a list of receivers ([[notify]] tables)", hint)
        return []
    out = []
    for i, item in enumerate(raw):
        here = (*path, str(i))
        t = c.table(item, here, NOTIFY_KEYS)
        if t is not None:
            receiver = _receiver(c, t, here, secrets, hint)
            if receiver is not None:
                out.append(receiver)
    return out


def _receiver(
    c: Checker, t: Mapping[str, Any], here: KeyPath, secrets: Mapping[str, Any], hint: str
) -> Receiver | None:
    if ("url" in t) == ("url_secret" in t):
        c.error(here, "needs exactly one of url or url_secret", hint)
        return None
    url = c.string(t["url"], (*here, "url")) if "url" in t else ""
    if url is not None and url and not url.startswith(("http://", "https://")):
        c.error((*here, "url"), "is not an http(s) URL", hint)
    named: dict[str, str | None] = {}
    for key in ("url_secret", "secret"):
        name = c.string(t[key], (*here, key)) if key in t else None
        if name is not None and name not in secrets:
            c.error(
                (*here, key),
                f"names no secret: {name!r} is not in [secrets]",
                f'declare it: [secrets] {name} = {{ from_env = "{name}" }}',
            )
        named[key] = name
    form = c.choice(t.get("form", "json"), (*here, "form"), ("json", "slack"))
    events = _events(c, t.get("events", ["outcomes"]), (*here, "events"))
    if url is None or form is None or events is None:
        return None
    shape: Literal["json", "slack"] = "slack" if form == "slack" else "json"
    return Receiver(url, named["url_secret"], shape, named["secret"], events)


def _events(c: Checker, raw: Any, path: KeyPath) -> tuple[str, ...] | None:
    if not isinstance(raw, list) or not raw:
        c.error(path, "must be a list of event names", f"from: {', '.join(EVENT_NAMES)}")
        return None
    out: list[str] = []
    for item in raw:
        if item in GROUPS:
            out += GROUPS[item]
        elif item in EVENT_NAMES:
            out.append(item)
        else:
            names = ", ".join((*EVENT_NAMES, *GROUPS))
            c.error(path, f"{item!r} is not an event", f"from: {names}")
            return None
    return tuple(dict.fromkeys(out))


def with_notify(
    c: Checker, app_raw: Any, slots_raw: Any, slots: dict[str, Any], secrets: Mapping[str, Any]
) -> dict[str, Any]:
    """Every slot with its receivers: the app's ``[[notify]]``, then its own."""
    common = _receivers(c, app_raw, ("notify",), secrets)
    raw = slots_raw if isinstance(slots_raw, Mapping) else {}
    out = {}
    for name, slot in slots.items():
        own_raw = raw.get(name, {}).get("notify") if isinstance(raw.get(name), Mapping) else None
        own = _receivers(c, own_raw, ("slots", name, "notify"), secrets)
        out[name] = replace(slot, notify=(*common, *own)) if common or own else slot
    return out


def with_freeze(c: Checker, slot: Any, s: Mapping[str, Any], path: KeyPath) -> Any:
    """The slot with its declared freeze windows (spec/freeze.py)."""
    if slot is None or "freeze" not in s:
        return slot
    from shipway.spec.freeze import parse_windows

    return replace(slot, freeze=parse_windows(c, s["freeze"], (*path, "freeze")))
