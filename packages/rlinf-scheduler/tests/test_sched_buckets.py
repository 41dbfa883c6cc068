"""The collective's buckets (rlinf_scheduler.weights.buckets), without a network: what the
publisher stages is what the consumer's flats receive, bit for bit, in every dtype."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlinf_scheduler.weights.buckets import alloc_flats, layout_of, recv_buckets, send_buckets, views  # noqa: E402


def roundtrip(state: dict, bucket_bytes: int) -> tuple[dict, list, int]:
    """Send ``state`` into a consumer's flats; returns what it received, each bucket's size and
    how many buckets went straight from the publisher's tensors."""
    layout = layout_of(state, bucket_bytes)
    sent: list = []
    storages: list = []
    own = {v.untyped_storage().data_ptr() for v in state.values() if isinstance(v, torch.Tensor)}

    def publish_side(t):
        storages.append(t.untyped_storage().data_ptr())
        sent.append(t.clone())
        return len(sent) - 1

    send_buckets(layout, state, "cpu", publish_side, lambda handle: None)
    # a bucket inside one contiguous tensor goes straight from it; the others through at most
    # two staging buffers, whatever the model's size
    assert len({p for p in storages if p not in own}) <= 2
    direct = sum(p in own for p in storages)
    flats = alloc_flats(layout, "cpu")
    queue = list(sent)
    recv_buckets(layout, flats, lambda t: t.copy_(queue.pop(0)))
    assert not queue
    return views(layout, flats), [s.numel() for s in sent], direct


def test_every_dtype_arrives_bit_identical_across_bucket_edges() -> None:
    g = torch.Generator().manual_seed(0)
    state = {
        "a": torch.randn(1000, generator=g),
        "b": torch.randn(37, 3, generator=g).to(torch.bfloat16),
        "c": torch.randn(5, generator=g).to(torch.float16),
        "d": torch.arange(11, dtype=torch.int64),
        "e": torch.randn(999, generator=g),
        "flag": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "none": torch.zeros(0, 4),
        "t": torch.randn(6, 8, generator=g).t(),  # not contiguous
        "meta": {"step": 7},
    }
    got, sizes, direct = roundtrip(state, bucket_bytes=1000)
    assert list(got) == [k for k in state if k != "meta"] + ["meta"]
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
            assert torch.equal(got[k], v), k
    assert got["meta"] == {"step": 7}
    assert max(sizes) <= 1000 and sum(sizes) == layout_of(state).nbytes
    assert direct >= 3  # "a" and "e" span several whole buckets: sent without a copy


def test_layout_groups_by_dtype_in_order_and_counts_buckets() -> None:
    state = {"w1": torch.zeros(300), "h": torch.zeros(10, dtype=torch.bfloat16), "w2": torch.zeros(200)}
    layout = layout_of(state, bucket_bytes=400)  # 100 float32 or 200 bf16 per bucket
    assert [g[0] for g in layout.groups] == ["torch.float32", "torch.bfloat16"]
    assert [(e.name, e.offset) for e in layout.entries] == [("w1", 0), ("h", 0), ("w2", 300)]
    assert list(layout.buckets()) == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 300),
        (0, 300, 400),
        (0, 400, 500),
        (1, 0, 10),
    ]
    assert layout.nbytes == 500 * 4 + 10 * 2
    with pytest.raises(ValueError, match="bucket_bytes must be positive"):
        layout_of(state, 0)


def test_consumer_tensors_are_views_of_one_flat_per_dtype() -> None:
    state = {"a": torch.ones(4), "b": torch.full((2, 2), 2.0)}
    got, _, _ = roundtrip(state, bucket_bytes=8)
    assert got["a"].untyped_storage().data_ptr() == got["b"].untyped_storage().data_ptr()
