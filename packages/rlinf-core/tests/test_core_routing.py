"""M -> N routing in core (rlinf_core.routing) without numpy: plans, lists, a channel round trip.
The numpy and torch payloads are tested in rlinf-scheduler's test_sched_routing.py."""

from __future__ import annotations

import threading

from rlinf_core.channel import LocalChannel
from rlinf_core.routing import merge_shards, receive_shards, route_plan, send_shards, split_batch


def test_plans_cover_every_item_once_in_order() -> None:
    plan = route_plan(12, 2, 3)
    assert [(s.src, s.dst, s.size) for s in plan] == [(0, 0, 4), (0, 1, 2), (1, 1, 2), (1, 2, 4)]
    assert sorted((s.start, s.stop) for s in plan) == [(0, 4), (4, 6), (6, 8), (8, 12)]


def test_lists_round_trip_over_a_local_channel() -> None:
    ch = LocalChannel("route")
    env = [{"obs": list(range(6 * m, 6 * m + 6))} for m in range(2)]
    senders = [
        threading.Thread(target=send_shards, args=(ch, env[m], m, 2, 3), kwargs={"tag": "obs"})
        for m in range(2)
    ]
    for t in senders:
        t.start()
    got = [receive_shards(ch, n, 2, 3, 12, tag="obs", timeout=10) for n in range(3)]
    for t in senders:
        t.join(10)
    assert [g["obs"] for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    back = merge_shards([split_batch(got[n], n, 3, 2)[0] for n in range(2)])
    assert back == env[0]
