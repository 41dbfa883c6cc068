"""In-process links (LocalLinks): the same contract as the socket links of rlinf-scheduler."""

from __future__ import annotations

import threading
import time

import pytest

from rlinf_core import LocalLinks
from rlinf_core.errors import ChannelError, ChannelTimeout


def test_links_of_one_generation_carry_messages_both_ways() -> None:
    links = LocalLinks("s3cret")
    listener = links.listen(name="rollout rank 0")
    try:
        assert "s3cret" not in repr(links)
        envs = [
            links.connect(listener.address, gen=2, rank=r, timeout=5, peer="rollout rank 0") for r in (1, 0)
        ]
        got = listener.accept(2, [0, 1], timeout=5, peer="env")
        assert sorted(got) == [0, 1] and got[1].peer == "env rank 1"
        envs[0].send({"obs": [1, 2]})
        envs[0].send({"obs": [3]})
        assert got[1].recv() == {"obs": [1, 2]} and got[1].recv() == {"obs": [3]}
        got[0].send("action")
        assert envs[1].recv() == "action"
        envs[1].close()
        with pytest.raises(ChannelError, match="env rank 0 closed the link"):
            got[0].recv()
    finally:
        listener.close()


def test_strangers_and_other_generations_are_refused_and_missing_ranks_named() -> None:
    links = LocalLinks("right")
    listener = links.listen(name="rollout rank 1")
    try:
        stranger = LocalLinks("wrong").connect(listener.address, gen=0, rank=0, timeout=5, peer="x")
        old = links.connect(listener.address, gen=-1, rank=0, timeout=5, peer="x")
        t0 = time.monotonic()
        with pytest.raises(
            ChannelTimeout, match=r"rollout rank 1 waited 0 s for env rank\(s\) \[0\] to connect"
        ):
            listener.accept(0, [0], timeout=0.3, peer="env")
        assert time.monotonic() - t0 < 5
        for refused in (stranger, old):
            with pytest.raises(ChannelError, match="closed the link"):
                refused.recv()
    finally:
        listener.close()
    with pytest.raises(ChannelError, match="env rank 0 could not connect to rollout rank 1"):
        links.connect(listener.address, gen=0, rank=0, timeout=1, peer="rollout rank 1", name="env rank 0")


def test_a_wait_on_a_silent_peer_times_out_naming_it() -> None:
    links = LocalLinks("k")
    listener = links.listen()
    try:
        box: list = []
        t = threading.Thread(target=lambda: box.append(listener.accept(0, [0], timeout=5, peer="env")))
        t.start()
        link = links.connect(listener.address, gen=0, rank=0, timeout=0.2, peer="rollout rank 0")
        t.join(5)
        with pytest.raises(
            ChannelTimeout, match=r"waited 0\.2 s for the actions of stage 0 from rollout rank 0"
        ):
            link.recv("the actions of stage 0")
    finally:
        listener.close()
