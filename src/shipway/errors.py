"""Every error shipway raises, and the exit code each one means.

::

    ShipwayError                      exit 1  unexpected, or an engine failure
    ├── InputError                    exit 2  the user can fix the input; nothing was touched
    │   ├── SpecInvalid                       a spec file failed validation (carries every error)
    │   ├── UnknownSlot
    │   ├── HostTaken                         a host another app or slot serves
    │   ├── ObjectsTaken                      objects another manager owns (Helm, kubectl …)
    │   ├── SecretUnavailable                 a secret reference cannot be resolved
    │   └── ImageMetadataMissing              image gone and no recorded release knows it
    ├── GuardRefused                  exit 3  the guard refused: confirmation missing or wrong,
    │   ├── ConfirmationRequired              or a clearance spent on another slot
    │   ├── ConfirmationMismatch
    │   └── ClearanceError
    ├── SlotLocked                    exit 4  another deploy holds the slot's lock
    ├── StalePlan                     exit 5  the world changed since a saved plan was made
    ├── WriteFailed                   exit 7  a file shipway keeps could not be written (a full
    │                                         disk): it is named; what served before serves
    └── BackendError                  exit 1  an engine (Kubernetes, Docker, OS) said no;
        ├── RecordError                       translated at the backend edge
        ├── CleanupFailed                     best-effort cleanup failed (carries the manual fix)
        ├── LockLost                          the slot's lock was taken over or deleted while
        │                                     held: the operation stops
        ├── RegistryLookupFailed              a registry could not tell an image's config
        ├── BuildFailed                       a build failed (carries its log's last lines)
        └── HostKeyRefused                    an SSH host key is not trusted; nothing was sent
            ├── UnknownHostKey                    not in known_hosts (with the line to add)
            └── HostKeyMismatch                   known_hosts records another key

    Interrupted                       exit 128+N  SIGINT/SIGTERM during an operation (a
                                              BaseException, as KeyboardInterrupt is: no
                                              ``except Exception`` may swallow it)

Library exceptions (lightkube, docker, OSError …) never cross a backend's edge: they are
translated into these, most specific first, with ``raise ... from exc``.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass


class Interrupted(BaseException):
    """The operation was interrupted by a signal (:mod:`shipway.engine.signals` raises it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class ShipwayError(Exception):
    """Base of every error shipway raises on purpose."""

    exit_code = 1


class InputError(ShipwayError):
    """Bad input: the message names the file, the key and the fix. Nothing was touched."""

    exit_code = 2


@dataclass(frozen=True)
class SpecProblem:
    """One validation error: where it is, what is wrong, how to fix it."""

    file: str
    path: str
    message: str
    hint: str = ""
    line: int | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        text = f"{where}: {self.path or '(top level)'}: {self.message}"
        return text + (f" (hint: {self.hint})" if self.hint else "")

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "hint": self.hint,
        }


class SpecInvalid(InputError):
    """The spec failed validation; ``problems`` holds every error found, not just the first."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{count} error{'s' if count != 1 else ''} in the spec:"]
        lines += [f"  {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class UnknownSlot(InputError):
    pass


class HostTaken(InputError):
    """A host name is served by another app or slot; taking it needs ``--take-host``."""

    def __init__(self, host: str, owner: str) -> None:
        self.host, self.owner = host, owner
        super().__init__(
            f"host {host} is served by {owner}; refusing to take it "
            "(hint: pass --take-host to move it to this slot)"
        )


class ObjectsTaken(InputError):
    """Objects a source would apply already exist and belong to someone else (a Helm
    release, another field manager, another slot); taking them needs ``--take-over``."""

    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = dict(owners)
        lines = [f"  {key}: {owner}" for key, owner in sorted(owners.items())]
        super().__init__(
            f"{len(owners)} object{'s' if len(owners) != 1 else ''} of this slot's source "
            "already exist and belong to someone else; refusing to take them:\n"
            + "\n".join(lines)
            + "\n(hint: pass --take-over to take them, or remove them from the source)"
        )


class SecretUnavailable(InputError):
    """A secret reference could not be resolved. The message names the reference, never a value."""


class ImageMetadataMissing(InputError):
    """Neither the image nor any recorded release says what kind of image this is."""


class GuardRefused(ShipwayError):
    exit_code = 3


class ConfirmationRequired(GuardRefused):
    pass


class ConfirmationMismatch(GuardRefused):
    pass


class ClearanceError(GuardRefused):
    """A clearance was presented for a target it does not cover, or was not issued by Guard."""


class SlotFrozen(GuardRefused):
    """A freeze holds the slot (declared in the spec, or set by ``shipway freeze`` and kept
    in the target): names why and until when. ``--break-glass REASON`` overrides it."""

    exit_code = 8

    def __init__(self, slot: str, lines: Sequence[str]) -> None:
        self.slot = slot
        self.lines = tuple(lines)
        super().__init__(
            f"slot {slot!r} is frozen; nothing was changed: "
            + "; ".join(self.lines)
            + " (hint: wait for its end, shipway unfreeze the slot, or override with "
            "--break-glass REASON, which is recorded and notified)"
        )


class SlotLocked(ShipwayError):
    """Another operation holds the slot's lock. Names the holder and since when."""

    exit_code = 4

    def __init__(self, slot: str, holder: str, since: str, expires: str | None = None) -> None:
        self.slot, self.holder, self.since, self.expires = slot, holder, since, expires
        text = f"slot {slot!r} is locked by {holder} since {since}"
        if expires:
            text += f" (the lock expires at {expires} unless renewed)"
        super().__init__(text)


class StalePlan(ShipwayError):
    """The saved plan was made from a state that is no longer the live one."""

    exit_code = 5

    def __init__(self, changes: Sequence[str]) -> None:
        self.changes = tuple(changes)
        lines = ["the saved plan is stale: the slot changed since it was made; make a new plan"]
        lines += [f"  {c}" for c in self.changes]
        super().__init__("\n".join(lines))


class BackendError(ShipwayError):
    """An engine refused or failed an operation (translated at the backend's edge)."""


class WriteFailed(BackendError):
    """A file shipway keeps on this machine could not be written (the disk is full, the
    file system read-only …). Names the file; the previous release keeps serving. A
    BackendError too: a step that fails this way is a failed step, undone like any."""

    exit_code = 7

    def __init__(self, path: object, exc: OSError) -> None:
        import errno

        self.path = str(path)
        why = exc.strerror or str(exc)
        hint = {
            errno.ENOSPC: "the disk holding it is full: free space there, then run again",
            errno.EDQUOT: "the disk quota of this user is used up: free some, then run again",
            errno.EROFS: "its file system is read-only: make it writable, then run again",
        }.get(exc.errno or 0, "make it writable, then run again")
        super().__init__(f"cannot write {self.path}: {why} (hint: {hint})")


class RecordError(BackendError):
    """A release record cannot be written or read (too large, unknown schema, corrupt)."""


class CleanupFailed(BackendError):
    """Best-effort cleanup failed. Reported with the manual fix; never fails an operation."""

    def __init__(self, message: str, manual_fix: str) -> None:
        self.manual_fix = manual_fix
        super().__init__(message)


class LockLost(BackendError):
    """The slot's lock is gone or someone else's while this operation held it: renewing is
    over and every further mutation is refused."""


class RegistryLookupFailed(BackendError):
    """The registry could not tell (unreachable, refused, no such image). The message says
    which call and why, never a credential."""


class BuildFailed(BackendError):
    """A build (an image, a dependency environment) failed. ``log_tail``: the last lines of
    its log, for the user to act on; masked with the slot's secrets before any output."""

    def __init__(self, message: str, log_tail: Sequence[str] = ()) -> None:
        self.log_tail = tuple(log_tail)
        super().__init__(message)


class HostKeyRefused(BackendError):
    """The host's SSH key is not trusted; nothing was sent to the host."""


class UnknownHostKey(HostKeyRefused):
    """A host whose key is not in known_hosts: refused, with its fingerprint and the exact
    line that would trust it (after the user checked the fingerprint)."""

    def __init__(
        self,
        host: str,
        hostname: str,
        port: int | None,
        key_type: str,
        key_line: str,
        fingerprint: str,
        known_hosts: str,
    ) -> None:
        self.host, self.key_type, self.fingerprint, self.line = (
            host,
            key_type,
            fingerprint,
            key_line,
        )
        short = key_type.removeprefix("ssh-").removeprefix("ecdsa-sha2-")
        flag = f"-p {port} " if port not in (None, 22) else ""
        super().__init__(
            f"host {host}: its SSH host key is not in {known_hosts}, so shipway refuses "
            f"to connect (it never accepts an unknown key). The host presented a "
            f"{key_type} key with fingerprint {fingerprint}.\n"
            f"To trust it: check that fingerprint against the host's own, on the host itself "
            f"or from its provider (e.g. `ssh-keygen -lf /etc/ssh/ssh_host_{short}_key.pub` "
            f"on {hostname}); if they match, add the key:\n"
            f"  ssh-keyscan -t {key_type} {flag}{hostname} >> {known_hosts}\n"
            f"or append exactly this line to {known_hosts}:\n"
            f"  {key_line}"
        )


class HostKeyMismatch(HostKeyRefused):
    """A host presenting another key than known_hosts records: refused, loudly."""

    def __init__(
        self,
        host: str,
        hostname: str,
        got: tuple[str, str],
        expected: tuple[str, str],
        known_hosts: str,
    ) -> None:
        (got_type, self.fingerprint), (expected_type, self.expected) = got, expected
        self.host = host
        super().__init__(
            f"HOST KEY MISMATCH for {host}: {known_hosts} records a {expected_type} "
            f"key {self.expected}, but the host presented a {got_type} key "
            f"{self.fingerprint}. Someone may be intercepting the connection (or the host was "
            f"reinstalled). shipway refuses to connect. If, and only if, you have verified the "
            f"new key: ssh-keygen -R {hostname} -f {known_hosts}, then add the new one."
        )
