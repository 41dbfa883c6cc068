"""The message format between an env worker and a simulator process
(:mod:`rlinf_algos.families.child.wire`): plain data and numpy arrays, no pickle."""

from __future__ import annotations

import math
import os

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
