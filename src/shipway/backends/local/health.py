"""Probes the health gate and ``status`` use: plain HTTP GET and TCP connect on loopback."""

from __future__ import annotations

import http.client
import socket


def http_probe(port: int, path: str, timeout: float) -> tuple[bool, str]:
    """GET ``path`` on 127.0.0.1:port. Healthy: a 2xx or 3xx answer within ``timeout``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "shipway-healthcheck"})
        response = conn.getresponse()
        response.read(65536)
        ok = 200 <= response.status < 400
        return ok, f"GET {path} answered {response.status}"
    except ConnectionRefusedError:
        return False, f"GET {path}: connection refused (nothing listens on port {port} yet)"
    except TimeoutError:
        return False, f"GET {path}: no answer within {timeout:g}s"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"GET {path}: {type(exc).__name__}: {exc}"
    finally:
        conn.close()


def tcp_probe(port: int, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True, f"port {port} accepts connections"
    except OSError as exc:
        return False, f"port {port}: {exc.strerror or exc}"
