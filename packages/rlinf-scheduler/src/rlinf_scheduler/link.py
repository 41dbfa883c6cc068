"""Direct point-to-point links between workers, beside the channels: the socket implementation
of :mod:`rlinf_core.links`.

A :class:`Link` is for a pair of workers that exchange a steady stream of small messages (an env
worker's observations and its rollout worker's actions, every step): a channel routes each item
through its actor and answers every put; a link is one TCP connection with nothing in between.
It speaks the channel data plane's framing, and authenticates with the run's secret the same way.
:class:`SocketLinks` (what :meth:`RayScheduler.links
<rlinf_scheduler.runtime.scheduler.RayScheduler.links>` returns) listens on the node's Ray
address, so an overlay network carries the links when Ray is bound to one.
"""

from __future__ import annotations

import hmac
import pickle
import socket
import struct
import time
from collections.abc import Collection, Hashable
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_core.links import Link as LinkBase
from rlinf_core.links import LinkListener, Links
from rlinf_scheduler.channel.wire import HDR, frame

__all__ = ["Link", "SocketLinkListener", "SocketLinks"]

_HELLO = struct.Struct("!qI")  # generation, rank (after the secret's bytes)


class Link(LinkBase):
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
        # shutdown first: it ends a read another thread is blocked in, which holds the file's lock
        for f in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.rfile.close, self.sock.close):
            try:
                f()
            except OSError:
                pass


class SocketLinkListener(LinkListener):
    """A listening TCP socket on the node's address (see :class:`rlinf_core.links.LinkListener`)."""

    def __init__(self, sock: socket.socket, secret: str, name: str) -> None:
        self.sock, self._secret, self.name = sock, secret, name
        host, port = sock.getsockname()[:2]
        self._address = (host, port)

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    def accept(
        self, gen: int, ranks: Collection[int], *, timeout: float, peer: str = "rank"
    ) -> dict[int, LinkBase]:
        need = set(ranks)
        links: dict[int, LinkBase] = {}
        deadline = time.monotonic() + timeout
        try:
            while need - links.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(need - links.keys())
                    raise ChannelTimeout(
                        f"{self.name} waited {timeout:.0f} s for {peer} rank(s) {missing} to connect"
                    )
                self.sock.settimeout(left)
                try:
                    conn, addr = self.sock.accept()
                except TimeoutError:
                    continue
                link = Link(conn, min(timeout, 5.0), f"{peer} worker at {addr[0]}:{addr[1]}")
                hello = link.recv_hello(self._secret)
                if hello is None or hello[0] != gen or hello[1] not in need or hello[1] in links:
                    link.close()  # a stranger's connection, or another generation's
                    continue
                link.sock.settimeout(timeout)
                link.timeout, link.peer = timeout, f"{peer} rank {hello[1]}"
                links[hello[1]] = link
        except BaseException:
            for link in links.values():
                link.close()
            raise
        return links

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class SocketLinks(Links):
    """:class:`rlinf_core.links.Links` over TCP; pickles with its secret (it travels only as an
    argument of Ray's authenticated calls) and never shows it."""

    def __init__(self, secret: str) -> None:
        if not isinstance(secret, str) or not secret:
            raise ValueError("links need a non-empty secret")
        self._secret = secret

    def __repr__(self) -> str:
        return "SocketLinks(<secret>)"

    def node_address(self) -> str:
        """This node's Ray address; ``127.0.0.1`` outside Ray (a worker tested on its own)."""
        import ray

        if not ray.is_initialized():  # asking Ray would start one
            return "127.0.0.1"
        from rlinf_scheduler.channel.peer import node_address

        return node_address()

    def listen(self, *, name: str = "this worker", backlog: int = 16) -> SocketLinkListener:
        return SocketLinkListener(
            socket.create_server((self.node_address(), 0), backlog=backlog), self._secret, name
        )

    def connect(
        self, address: Hashable, *, gen: int, rank: int, timeout: float, peer: str, name: str | None = None
    ) -> Link:
        host, port = address  # type: ignore[misc]
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as err:
            raise ChannelError(f"{name or f'rank {rank}'} could not connect to {peer}: {err}") from None
        link = Link(sock, timeout, peer)
        link.send_hello(self._secret, gen, rank)
        return link
