"""The message format between an env worker and a simulator process
(:mod:`rlinf_algos.families.child.wire`): plain data and numpy arrays, no pickle."""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
import time

import numpy as np
import pytest

from rlinf_algos.families.child import wire


def _roundtrip(value):
    r, w = os.pipe()
    try:
        wire.write_message(w, value)
        return wire.read_message(r, 5.0)
    finally:
        os.close(r)
        os.close(w)


def test_values_and_arrays_survive_the_pipe_and_arrays_are_writable() -> None:
    value = {
        "obs": np.arange(12, dtype=np.float32).reshape(3, 4),
        "done": np.array([True, False]),
        "img": np.zeros((2, 4, 4, 3), np.uint8),
        "text": ["pick up the bowl", "close the drawer"],
        "scalars": [1, 2.5, None, True, float("nan"), float("inf"), -float("inf")],
        "nested": {"a": {"b": np.int64(7)}},
    }
    got = _roundtrip(value)
    assert got["obs"].dtype == np.float32 and np.array_equal(got["obs"], value["obs"])
    assert got["done"].dtype == bool and got["done"].tolist() == [True, False]
    assert got["img"].shape == (2, 4, 4, 3) and got["img"].dtype == np.uint8
    assert got["text"] == value["text"]
    assert got["scalars"][:4] == [1, 2.5, None, True]
    assert math.isnan(got["scalars"][4]) and got["scalars"][5:] == [math.inf, -math.inf]
    assert int(got["nested"]["a"]["b"]) == 7
    got["obs"][0, 0] = 42.0  # torch.from_numpy needs writable arrays


def test_objects_are_refused_rather_than_pickled() -> None:
    with pytest.raises(wire.WireError, match="cannot send a value of type"):
        wire.encode({"x": object()})
    with pytest.raises(wire.WireError, match="dtype"):
        wire.encode(np.array(["a"], dtype=object))


def test_a_read_is_bounded_and_a_closed_pipe_is_named() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(wire.WireTimeout):
            wire.read_message(r, 0.2, "the answer")
        os.close(w)
        w = -1
        with pytest.raises(wire.WireError, match="closed while reading the answer"):
            wire.read_message(r, 1.0, "the answer")
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_frames_carry_their_kind_and_a_malformed_one_is_refused() -> None:
    r, w = os.pipe()
    try:
        deadline = time.monotonic() + 5.0
        wire.write_frame(w, wire.STEP)
        assert wire.read_frame(r, deadline) == (wire.STEP, 0)
        wire.write_frame(w, wire.STEPPED, b'{"obs":{}}')
        kind, size = wire.read_frame(r, deadline)
        assert kind == wire.STEPPED and bytes(wire.read_body(r, size, deadline)) == b'{"obs":{}}'
        wire.write_frame(w, wire.STEP)  # a step frame where a message is expected
        with pytest.raises(wire.WireError, match="a frame of kind 2 where the reply was expected"):
            wire.read_message(r, 5.0, "the reply")
        os.write(w, struct.pack("<II", 99, 0))
        with pytest.raises(wire.WireError, match="malformed frame"):
            wire.read_frame(r, deadline)
    finally:
        os.close(r)
        os.close(w)


def test_the_layout_aligns_every_array_apart_and_keeps_text_out_of_the_block() -> None:
    spec = {
        "kind": "dict",
        "keys": {
            "image": {"kind": "box", "shape": [4, 4, 3], "dtype": "uint8"},
            "state": {"kind": "box", "shape": [3], "dtype": "float32"},
            "instruction": {"kind": "text"},
        },
    }
    lay = wire.Layout.for_step(2, 4, spec)
    assert lay.text == ["instruction"]
    assert {"actions", "reward", "done", "final_success_once", "obs/image", "final_obs/state"} <= set(
        lay.fields
    )
    assert "obs/instruction" not in lay.fields
    spans = sorted((off, off + np.dtype(dt).itemsize * int(np.prod(s))) for dt, s, off in lay.fields.values())
    assert all(off % 64 == 0 for off, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    assert spans[-1][1] <= lay.size
    buf = bytearray(lay.size)
    views = lay.views(buf)
    assert views["obs/image"].shape == (2, 4, 4, 3) and views["actions"].dtype == np.float32
    views["obs/image"][:] = 255
    assert not views["obs/state"].any() and not views["final_obs/image"].any()
    # what the child rebuilds from the plain form sent in the `share` message is the same layout
    again = wire.Layout.from_plain(json.loads(json.dumps(lay.to_plain())))
    assert again.fields == lay.fields and again.text == lay.text and again.size == lay.size
    plain = wire.Layout.for_step(3, 1, {"kind": "box", "shape": [2], "dtype": "float32"})
    assert plain.text == [] and plain.fields["obs/"][1] == (3, 2)
