"""M -> N batch routing: plans, split/merge of nested payloads, and a round trip over a channel."""

from __future__ import annotations

import dataclasses
import threading
from typing import NamedTuple

import numpy as np
import pytest

from rlinf_core.channel import LocalChannel
from rlinf_scheduler.routing import (
    Shard,
    batch_length,
    merge_shards,
    receive_shards,
    route_plan,
    send_shards,
    shard_key,
    split_batch,
)


def test_issue_example_12_items_2_to_3() -> None:
    plan = route_plan(12, 2, 3)
    assert [(s.src, s.dst, s.size) for s in plan] == [(0, 0, 4), (0, 1, 2), (1, 1, 2), (1, 2, 4)]
    assert plan[1] == Shard(src=0, dst=1, start=4, stop=6, src_offset=4, dst_offset=0)
    assert plan[2] == Shard(src=1, dst=1, start=6, stop=8, src_offset=0, dst_offset=2)


def test_reverse_direction_mirrors() -> None:
    plan = route_plan(12, 3, 2)
    assert [(s.src, s.dst, s.size) for s in plan] == [(0, 0, 4), (1, 0, 2), (1, 1, 2), (2, 1, 4)]
    forward = {(s.src, s.dst, s.start, s.stop) for s in route_plan(12, 2, 3)}
    assert {(s.dst, s.src, s.start, s.stop) for s in plan} == forward


@pytest.mark.parametrize(
    ("b", "m", "n"), [(12, 2, 3), (12, 3, 2), (8, 8, 1), (8, 1, 8), (24, 4, 6), (6, 6, 6)]
)
def test_plan_covers_every_item_once_contiguously(b: int, m: int, n: int) -> None:
    plan = route_plan(b, m, n)
    covered = sorted(i for s in plan for i in range(s.start, s.stop))
    assert covered == list(range(b))
    for s in plan:
        assert s.start == s.src * (b // m) + s.src_offset
        assert s.start == s.dst * (b // n) + s.dst_offset


def test_bad_sizes_name_the_problem() -> None:
    with pytest.raises(ValueError, match="not divisible by the receiver group size 5"):
        route_plan(12, 2, 5)
    with pytest.raises(ValueError, match="sender group size 5 and the receiver group size 7"):
        route_plan(12, 5, 7)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        route_plan(0, 1, 1)


def test_split_and_merge_nested_dict_of_arrays() -> None:
    env_batches = [
        {
            "obs": {"img": np.arange(6 * 4).reshape(6, 4) + 100 * r, "state": np.arange(6) + 6 * r},
            "ids": list(range(6 * r, 6 * r + 6)),
        }
        for r in range(2)
    ]
    sent = [split_batch(b, r, 2, 3) for r, b in enumerate(env_batches)]
    assert sorted(sent[0]) == [0, 1] and sorted(sent[1]) == [1, 2]
    assert sent[0][1]["ids"] == [4, 5] and sent[1][1]["ids"] == [6, 7]
    assert np.shares_memory(sent[0][0]["obs"]["img"], env_batches[0]["obs"]["img"])  # views, no copy
    rollout1 = merge_shards({1: sent[1][1], 0: sent[0][1]})  # order of arrival does not matter
    assert rollout1["ids"] == [4, 5, 6, 7]
    np.testing.assert_array_equal(rollout1["obs"]["state"], [4, 5, 6, 7])
    np.testing.assert_array_equal(rollout1["obs"]["img"][2], np.arange(4) + 100)
    # and back: 3 rollout ranks -> 2 env ranks restores the env batches exactly
    rollouts = [merge_shards({s: sent[s][d] for s in range(2) if d in sent[s]}) for d in range(3)]
    back = [split_batch(b, r, 3, 2) for r, b in enumerate(rollouts)]
    for e in range(2):
        restored = merge_shards({r: back[r][e] for r in range(3) if e in back[r]})
        np.testing.assert_array_equal(restored["obs"]["img"], env_batches[e]["obs"]["img"])
        assert restored["ids"] == env_batches[e]["ids"]


class Pair(NamedTuple):
    a: np.ndarray
    b: list


@dataclasses.dataclass
class Traj:
    obs: np.ndarray
    extra: Pair


def test_tuples_namedtuples_and_dataclasses() -> None:
    t = Traj(np.arange(4.0), Pair(np.ones((4, 2)), ["a", "b", "c", "d"]))
    parts = split_batch(t, 0, 1, 2)
    assert isinstance(parts[1], Traj) and isinstance(parts[1].extra, Pair)
    assert parts[1].extra.b == ["c", "d"]
    merged = merge_shards([parts[0], parts[1]])
    np.testing.assert_array_equal(merged.obs, t.obs)
    assert merged.extra.b == t.extra.b


def test_leaf_errors_name_the_path() -> None:
    with pytest.raises(ValueError, match=r"obs.a=3, obs.b=4"):
        batch_length({"obs": {"a": np.zeros(3), "b": np.zeros(4)}})
    with pytest.raises(ValueError, match="batch leaf meta is a int"):
        batch_length({"x": np.zeros(2), "meta": 3})
    with pytest.raises(ValueError, match="0-d"):
        batch_length({"x": np.zeros(())})
    with pytest.raises(ValueError, match="keys"):
        merge_shards([{"a": np.zeros(1)}, {"b": np.zeros(1)}])


def test_nested_dict_of_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    batch = {
        "obs": {"rgb": torch.arange(12.0).reshape(6, 2), "mask": torch.ones(6, dtype=torch.bool)},
        "act": np.arange(6),
    }
    parts = split_batch(batch, 0, 1, 3)
    assert parts[2]["obs"]["rgb"].data_ptr() == batch["obs"]["rgb"][4:].data_ptr()
    merged = merge_shards(parts)
    assert torch.equal(merged["obs"]["rgb"], batch["obs"]["rgb"])
    assert merged["obs"]["mask"].dtype == torch.bool
    np.testing.assert_array_equal(merged["act"], batch["act"])


def test_send_and_receive_over_a_channel() -> None:
    ch = LocalChannel("route")
    batches = [{"x": np.arange(6) + 6 * r} for r in range(2)]
    results: dict[int, dict] = {}

    def receiver(rank: int) -> None:
        results[rank] = receive_shards(ch, rank, 2, 3, 12, tag="obs", timeout=10)

    threads = [threading.Thread(target=receiver, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    keys = [send_shards(ch, b, r, 2, 3, tag="obs") for r, b in enumerate(batches)]
    for t in threads:
        t.join(10)
    assert keys[0] == {0: shard_key("obs", 0, 0), 1: "obs:0->1"}
    for r in range(3):
        np.testing.assert_array_equal(results[r]["x"], np.arange(4 * r, 4 * r + 4))
