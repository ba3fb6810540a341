"""A channel forwarded to a unix socket on an SSH host (OpenSSH's ``direct-streamlocal``).

``ssh -L local.sock:/var/run/docker.sock host`` opens one such channel per connection: sshd
connects the socket itself, in the process that serves the SSH connection, so nothing is
started on the host.
An Engine API connection made this way took 0.045 s on the test host, against 0.30 s for a
session running ``docker system dial-stdio`` (the Docker CLI started on the host for every
connection, as ``docker -H ssh://`` and docker-py do) at a load of 3 on 2 cores.

paramiko has no call for this channel type (its issue #544, open since 2015): its
``open_channel`` writes the type-specific fields only for the TCP and X11 kinds. This opens
the channel as ``open_channel`` does, with the fields OpenSSH's PROTOCOL (section 2.4) gives
the type: the socket's path, then a reserved string and a reserved integer. The test against
the test environment's real sshd (tests/backends/docker/test_streamlocal.py) is what says
this still holds on the paramiko the project pins.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import paramiko
from paramiko.common import cMSG_CHANNEL_OPEN
from paramiko.message import Message

KIND = "direct-streamlocal@openssh.com"


def open_streamlocal(transport: paramiko.Transport, path: str, timeout: float) -> paramiko.Channel:
    """A channel to the unix socket ``path`` on the host. Raises paramiko.ChannelException
    when sshd refuses it (``code`` 1: forwarding not allowed, as with
    ``AllowStreamLocalForwarding no``; 2: the connect failed: no socket there, or not the
    SSH user's to use), paramiko.SSHException when the connection ends or ``timeout`` passes."""
    if not transport.is_active():
        raise paramiko.SSHException("SSH session not active")
    t: Any = transport  # the private parts open_channel uses, which the stubs leave out
    with t.lock:
        window = t._sanitize_window_size(None)
        packet = t._sanitize_packet_size(None)
        chanid = t._next_channel()
        m = Message()
        m.add_byte(cMSG_CHANNEL_OPEN)
        m.add_string(KIND)
        m.add_int(chanid)
        m.add_int(window)
        m.add_int(packet)
        m.add_string(path)
        m.add_string("")  # reserved
        m.add_int(0)  # reserved
        chan: Any = paramiko.Channel(chanid)
        t._channels.put(chanid, chan)
        t.channel_events[chanid] = event = threading.Event()
        t.channels_seen[chanid] = True
        chan._set_transport(t)
        chan._set_window(window, packet)
    t._send_user_message(m)
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        if not t.is_active():
            raise t.get_exception() or paramiko.SSHException("the SSH connection ended")
        if time.monotonic() > deadline:
            raise paramiko.SSHException(f"no answer to opening a channel to {path} in {timeout}s")
    opened: paramiko.Channel | None = t._channels.get(chanid)
    if opened is None:
        # refused: paramiko keeps why as the transport's one saved exception, which a refusal
        # of another channel at the same moment may have taken (or overwritten) first
        why = t.get_exception()
        if isinstance(why, paramiko.ChannelException):
            raise why
        raise paramiko.ChannelException(0, f"sshd refused a channel to {path}")
    return opened
