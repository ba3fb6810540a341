"""An accessory's server asked in its own protocol, spoken just far enough over any stream
(a socket here, an SSH channel to a container on a Docker host): which version is it, and
(Redis) one command's reply and its persistence state. No client library and no subprocess,
so ``status`` starts nothing.

Postgres: the version needs a login — SCRAM-SHA-256, the only method the accessory's
cluster accepts (``initdb --auth=scram-sha-256``) — after which the server sends its
``server_version`` as a ParameterStatus. Redis: ``AUTH`` then one command (``INFO``,
``BGSAVE``, ``CONFIG SET``).

What must never happen: the password on the wire in clear (SCRAM sends a proof, never the
password), or a probe that hangs (the caller's stream has a timeout).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as _random
import struct

from shipway.backends.accessories import PG_USER as USER
from shipway.backends.accessories import Credentials, Stream


def version_over(kind: str, stream: Stream, creds: Credentials) -> str | None:
    """The server's own version at the other end of ``stream`` (``15.18 (Debian
    15.18-0+deb12u1)`` is said ``15.18``; Redis ``7.0.15``), or None when it refuses the
    login. Raises OSError as the stream does."""
    try:
        if kind == "postgres":
            found = pg_login(stream, creds).get("server_version")
            return found.split()[0] if found else None
        return redis_info(stream, creds).get("redis_version")
    except ValueError:
        return None


def answers(kind: str, stream: Stream, creds: Credentials) -> bool:
    """Whether the server at the other end of ``stream`` takes the app's login: Postgres a
    SCRAM login (a server starting up answers the protocol but refuses logins: not yet),
    Redis ``AUTH`` then a command. Raises OSError as the stream does."""
    return version_over(kind, stream, creds) is not None


# -- Redis ---------------------------------------------------------------------------------


def _command(*words: bytes) -> bytes:
    out = b"*%d\r\n" % len(words)
    for w in words:
        out += b"$%d\r\n%s\r\n" % (len(w), w)
    return out


def redis_call(sock: Stream, creds: Credentials, *words: bytes) -> bytes:
    """``AUTH`` then one command; what came back (the AUTH reply first). A bulk reply is
    read whole."""
    sock.sendall(_command(b"AUTH", creds.password.encode()) + _command(*words))
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk
        if _whole(got):
            return got


def _whole(got: bytes) -> bool:
    """Two replies read whole: the AUTH one (a line) and a line or a bulk string."""
    first = got.find(b"\r\n")
    if first < 0:
        return False
    rest = got[first + 2 :]
    end = rest.find(b"\r\n")
    if end < 0:
        return False
    if not rest.startswith(b"$"):
        return True
    length = int(rest[1:end])
    return length < 0 or len(rest) >= end + 2 + length + 2


def redis_command(sock: Stream, creds: Credentials, *words: bytes) -> bytes:
    """One command's reply after ``AUTH`` (the AUTH one checked and dropped); ValueError
    when the login is refused."""
    got = redis_call(sock, creds, *words)
    if not got.startswith(b"+OK\r\n"):
        raise ValueError("the server refused the login")
    return got[5:]


def redis_info(sock: Stream, creds: Credentials, section: bytes = b"server") -> dict[str, str]:
    """``INFO <section>`` as a mapping; a refused login raises ValueError."""
    got = redis_call(sock, creds, b"INFO", section)
    if not got.startswith(b"+OK"):
        raise ValueError("the server refused the login")
    body = got.split(b"\r\n", 2)[2] if got.count(b"\r\n") >= 2 else b""
    out = {}
    for line in body.decode(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


# -- Postgres ------------------------------------------------------------------------------


def pg_login(sock: Stream, creds: Credentials) -> dict[str, str]:
    """Log in as the accessory's user (SCRAM-SHA-256) and return the ParameterStatus
    values the server sends after it; ValueError when it refuses."""
    body = b"".join(
        k + b"\0" + v + b"\0" for k, v in ((b"user", USER.encode()), (b"database", b"postgres"))
    )
    body += b"\0"
    sock.sendall(struct.pack("!ii", len(body) + 8, 196608) + body)
    nonce = base64.b64encode(_random.token_bytes(18)).decode()
    first_bare = f"n=,r={nonce}"
    params: dict[str, str] = {}
    salted = b""
    auth_message = ""
    while True:
        tag, payload = _pg_message(sock)
        if tag == b"E":
            raise ValueError("the server refused the login")
        if tag == b"R":
            code = struct.unpack("!i", payload[:4])[0]
            if code == 10:  # AuthenticationSASL: the mechanisms it offers
                if b"SCRAM-SHA-256\0" not in payload[4:]:
                    raise ValueError("the server offers no SCRAM-SHA-256")
                first = f"n,,{first_bare}".encode()
                data = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first
                sock.sendall(b"p" + struct.pack("!i", len(data) + 4) + data)
            elif code == 11:  # AuthenticationSASLContinue: salt and iterations
                server_first = payload[4:].decode()
                fields = dict(f.split("=", 1) for f in server_first.split(","))
                if not fields.get("r", "").startswith(nonce):
                    raise ValueError("the server's nonce does not extend ours")
                salted = hashlib.pbkdf2_hmac(
                    "sha256", creds.password.encode(), base64.b64decode(fields["s"]),
                    int(fields["i"]),
                )  # fmt: skip
                final_bare = f"c=biws,r={fields['r']}"
                auth_message = f"{first_bare},{server_first},{final_bare}"
                client_key = hmac.digest(salted, b"Client Key", "sha256")
                signature = hmac.digest(
                    hashlib.sha256(client_key).digest(), auth_message.encode(), "sha256"
                )
                proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
                final = f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
                sock.sendall(b"p" + struct.pack("!i", len(final) + 4) + final)
            elif code == 12:  # AuthenticationSASLFinal: the server proves it knows it too
                server_key = hmac.digest(salted, b"Server Key", "sha256")
                expected = hmac.digest(server_key, auth_message.encode(), "sha256")
                said = payload[4:].decode().partition("v=")[2]
                if not hmac.compare_digest(base64.b64decode(said), expected):
                    raise ValueError("the server's signature does not match")
            elif code != 0:
                raise ValueError(f"authentication method {code} is not SCRAM-SHA-256")
        elif tag == b"S":
            name, _, rest = payload.partition(b"\0")
            params[name.decode()] = rest.rstrip(b"\0").decode()
        elif tag == b"Z":  # ready for a query: logged in
            sock.sendall(b"X" + struct.pack("!i", 4))
            return params


def _pg_message(sock: Stream) -> tuple[bytes, bytes]:
    head = _exactly(sock, 5)
    length = struct.unpack("!i", head[1:])[0]
    return head[:1], _exactly(sock, length - 4)


def _exactly(sock: Stream, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise ValueError("the server closed the connection")
        got += chunk
    return got
