"""Direct point-to-point links between workers, beside the channels.

A :class:`Link` is for a pair of workers that exchange a steady stream of small messages (an env
worker's observations and its rollout worker's actions, every step): a channel routes each item
through its actor and answers every put; a link is one TCP connection with nothing in between.
It speaks the channel data plane's framing, and authenticates with the run's secret the same way.
"""

from __future__ import annotations

import hmac
import pickle
import socket
import struct
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel.wire import HDR, frame

__all__ = ["Link"]

_HELLO = struct.Struct("!qI")  # generation, rank (after the secret's bytes)


class Link:
    """One direct TCP connection between two workers (an env worker and a rollout worker, in
    rlinf-algos): the channel data plane's length-prefixed pickled frames, both ways, in order,
    with no reply and no intermediary. Every wait is bounded by ``timeout``; a broken or closed
    connection raises :class:`~rlinf_core.errors.ChannelError` naming ``peer``.

    The connecting side first sends the run's secret and ``(generation, rank)`` as raw bytes
    (:meth:`send_hello`); the listening side checks the secret before it unpickles anything
    (:meth:`recv_hello`)."""

    def __init__(self, sock: socket.socket, timeout: float, peer: str) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        self.sock, self.timeout, self.peer = sock, timeout, peer
        self.rfile = sock.makefile("rb")

    def send_hello(self, token: str, gen: int, rank: int) -> None:
        """The connecting side's first bytes: the run's secret, the generation and its rank."""
        try:
            self.sock.sendall(token.encode() + _HELLO.pack(gen, rank))
        except OSError as err:
            raise ChannelError(f"the link to {self.peer} broke: {err}") from None

    def recv_hello(self, token: str) -> tuple[int, int] | None:
        """``(generation, rank)`` of a connection that presented ``token``; ``None`` otherwise."""
        want = token.encode()
        try:
            data = self.rfile.read(len(want) + _HELLO.size)
        except (OSError, ValueError):
            return None
        if len(data) < len(want) + _HELLO.size or not hmac.compare_digest(data[: len(want)], want):
            return None
        gen, rank = _HELLO.unpack(data[len(want) :])
        return gen, rank

    def send(self, obj: Any) -> None:
        try:
            self.sock.sendall(frame(obj))
        except TimeoutError:
            raise ChannelTimeout(f"waited {self.timeout:g} s to send to {self.peer}") from None
        except OSError as err:
            raise ChannelError(f"the link to {self.peer} broke: {err}") from None

    def recv(self, what: str = "a message") -> Any:
        try:
            hdr = self.rfile.read(4)
            body = self.rfile.read(HDR.unpack(hdr)[0]) if len(hdr) == 4 else b""
        except TimeoutError:
            raise ChannelTimeout(f"waited {self.timeout:g} s for {what} from {self.peer}") from None
        except (OSError, ValueError) as err:  # ValueError: read on a closed file
            raise ChannelError(f"the link to {self.peer} broke: {err}") from None
        if len(hdr) < 4 or len(body) < HDR.unpack(hdr)[0]:
            raise ChannelError(f"{self.peer} closed the link (it died or ended the iteration)")
        return pickle.loads(body)

    def close(self) -> None:
        for f in (self.rfile.close, lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                f()
            except OSError:
                pass
