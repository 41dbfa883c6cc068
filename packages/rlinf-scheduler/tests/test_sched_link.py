"""Direct links (:class:`rlinf_scheduler.link.Link`, which rlinf-algos runs between env and
rollout workers) on a local socket pair: frames in order both ways, the hello checked before
anything is unpickled, and a closed peer reported as a ChannelError at once."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.link import Link

TOKEN = "0123456789abcdef0123456789abcdef"


def pair(timeout: float = 5.0) -> tuple[Link, Link]:
    a, b = socket.socketpair()
    return Link(a, timeout, "rollout rank 0"), Link(b, timeout, "env rank 0")


def test_frames_arrive_in_order_both_ways() -> None:
    env, rollout = pair()
    env.send_hello(TOKEN, 3, 1)
    assert rollout.recv_hello(TOKEN) == (3, 1)
    obs = {"obs": np.arange(8, dtype=np.float32).reshape(2, 4), "rew": np.ones(2, np.float32)}
    env.send((0, obs))
    env.send((1, obs))
    for stage in (0, 1):
        s, got = rollout.recv()
        assert s == stage and np.array_equal(got["obs"], obs["obs"])
    rollout.send((0, np.zeros((2, 3), np.float32)))
    assert env.recv()[1].shape == (2, 3)
    env.close()
    rollout.close()


def test_hello_with_a_wrong_token_is_refused_before_unpickling() -> None:
    env, rollout = pair()
    env.send_hello("f" * len(TOKEN), 0, 0)
    assert rollout.recv_hello(TOKEN) is None
    # a stranger that sends a pickle instead of the hello is refused as well
    env2, rollout2 = pair()
    env2.send({"not": "a hello"})
    assert rollout2.recv_hello(TOKEN) is None
    for link in (env, rollout, env2, rollout2):
        link.close()


def test_a_closed_peer_fails_the_waiter_at_once() -> None:
    env, rollout = pair(timeout=30.0)
    env.close()
    t0 = time.perf_counter()
    with pytest.raises(ChannelError, match="closed the link"):
        rollout.recv("the observations of stage 0")
    assert time.perf_counter() - t0 < 5.0
    rollout.close()


def test_a_silent_peer_times_out_naming_what_was_awaited() -> None:
    env, rollout = pair(timeout=0.2)
    with pytest.raises(ChannelTimeout, match=r"waited 0\.2 s for the actions of stage 1 from env rank 0"):
        rollout.recv("the actions of stage 1")
    env.close()
    rollout.close()


def test_socket_links_authenticate_and_name_missing_ranks() -> None:
    from rlinf_scheduler.link import SocketLinks

    links = SocketLinks(TOKEN)
    assert TOKEN not in repr(links)
    listener = links.listen(name="rollout rank 0")
    try:
        assert listener.address[0] == "127.0.0.1"  # outside Ray: loopback
        SocketLinks("f" * len(TOKEN)).connect(
            listener.address, gen=1, rank=0, timeout=5, peer="rollout rank 0"
        )
        links.connect(listener.address, gen=0, rank=1, timeout=5, peer="rollout rank 0")  # an old generation
        env = links.connect(listener.address, gen=1, rank=1, timeout=5, peer="rollout rank 0")
        got = listener.accept(1, [1], timeout=10, peer="env")
        assert list(got) == [1] and got[1].peer == "env rank 1"
        env.send(("obs", np.arange(3)))
        assert got[1].recv()[1].tolist() == [0, 1, 2]
        with pytest.raises(
            ChannelTimeout, match=r"rollout rank 0 waited 0 s for env rank\(s\) \[0\] to connect"
        ):
            listener.accept(1, [0], timeout=0.3, peer="env")
        env.close()
        got[1].close()
    finally:
        listener.close()
    with pytest.raises(ChannelError, match="env rank 2 could not connect to rollout rank 0"):
        links.connect(listener.address, gen=1, rank=2, timeout=2, peer="rollout rank 0", name="env rank 2")
