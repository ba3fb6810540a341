"""Health probes of a container, made through its host's connection (:meth:`dial`), so the
check sees the container exactly where the proxy will send traffic: its address on the
slot's network. HTTP: healthy on a 2xx or 3xx answer. TCP: healthy when the port accepts.
"""

from __future__ import annotations

from collections.abc import Callable

from shipway.backends.docker.connection import Stream

Dial = Callable[[str, int, float], Stream]


def http_probe(dial: Dial, ip: str, port: int, path: str, timeout: float) -> tuple[bool, str]:
    try:
        conn = dial(ip, port, timeout)
    except ConnectionRefusedError:
        return False, f"GET {path}: connection refused (nothing listens on port {port} yet)"
    except OSError as exc:
        return False, f"GET {path}: cannot connect: {exc}"
    try:
        conn.sendall(
            f"GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: shipway-healthcheck\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n" not in head and len(head) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    except OSError as exc:  # timeouts included
        return False, f"GET {path}: {type(exc).__name__}: {exc or 'no answer'}"
    finally:
        conn.close()
    line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return False, f"GET {path}: not an HTTP answer ({line[:60]!r})"
    status = int(parts[1])
    return 200 <= status < 400, f"GET {path} answered {status}"


def tcp_probe(dial: Dial, ip: str, port: int, timeout: float) -> tuple[bool, str]:
    try:
        conn = dial(ip, port, timeout)
    except ConnectionRefusedError:
        return False, f"port {port}: connection refused"
    except OSError as exc:
        return False, f"port {port}: {exc}"
    conn.close()
    return True, f"port {port} accepts connections"
