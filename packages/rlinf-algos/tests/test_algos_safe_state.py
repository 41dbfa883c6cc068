"""rlinf_algos.safe_state: nested state in one safetensors file, no pickle."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from rlinf_algos.safe_state import StateFileError, is_state_file, load_state, save_state


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def test_an_optimizer_state_dict_round_trips_and_training_continues_identically(tmp_path: Path) -> None:
    torch.manual_seed(0)
    nets = [torch.nn.Linear(4, 3) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opt = torch.optim.Adam(nets[0].parameters(), lr=1e-2)
    x = torch.randn(8, 4)
    for _ in range(3):
        opt.zero_grad()
        nets[0](x).pow(2).sum().backward()
        opt.step()
    save_state({"model": nets[0].state_dict(), "optim": opt.state_dict()}, tmp_path / "s.safetensors")
    back = load_state(tmp_path / "s.safetensors")
    assert set(back["optim"]["state"]) == {0, 1}  # int keys stay ints
    assert _same(opt.state_dict()["state"], back["optim"]["state"])
    assert back["optim"]["param_groups"] == opt.state_dict()["param_groups"]
    nets[1].load_state_dict(back["model"])
    opt2 = torch.optim.Adam(nets[1].parameters(), lr=1e-2)
    opt2.load_state_dict(back["optim"])
    for net, o in ((nets[0], opt), (nets[1], opt2)):
        o.zero_grad()
        net(x).pow(2).sum().backward()
        o.step()
    assert torch.equal(nets[0].weight, nets[1].weight)


def test_rng_states_round_trip_and_replay_the_same_draws(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    py = random.Random(5)
    tree = {
        "torch": torch.get_rng_state(),
        "numpy": rng.bit_generator.state,  # 128-bit ints in a dict
        "numpy_legacy": np.random.RandomState(1).get_state(),  # a tuple with an array and a str
        "python": py.getstate(),  # nested tuples of ints, None
    }
    save_state(tree, tmp_path / "rng.safetensors")
    back = load_state(tmp_path / "rng.safetensors")
    assert _same(tree["python"], back["python"])
    torch.set_rng_state(back["torch"])
    a = torch.rand(3)
    torch.set_rng_state(tree["torch"])
    assert torch.equal(a, torch.rand(3))
    other = np.random.default_rng()
    other.bit_generator.state = back["numpy"]
    assert np.array_equal(other.random(4), rng.random(4))
    legacy = np.random.RandomState()
    legacy.set_state(back["numpy_legacy"])
    assert np.array_equal(legacy.rand(3), np.random.RandomState(1).rand(3))
    py2 = random.Random()
    py2.setstate(back["python"])
    assert py2.random() == py.random()


def test_dtypes_views_scalars_and_containers_round_trip(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tree = {
        "bf16": torch.randn(5).to(torch.bfloat16),
        "half": torch.ones(2, dtype=torch.float16),
        "bool": torch.tensor([True, False]),
        "int64": torch.tensor([2**40]),
        "view_row": base[1],  # a slice of a bigger storage
        "view_t": base.t(),  # not contiguous
        "same": base,  # shares memory with the views
        "again": base,  # the same tensor twice
        "empty": torch.zeros(0, 3),
        "scalar_tensor": torch.tensor(7.5),
        "np": np.arange(6, dtype=np.int16).reshape(2, 3),
        "np_f32": np.linspace(0, 1, 5, dtype=np.float32),
        "np_scalar": np.float32(1.5),
        "floats": [math.inf, -math.inf, math.nan, 0.1],
        "mixed": {3: "three", "3": [None, True], 0.5: (1, "x")},
        "magic": {"__t__": "not a tensor"},  # a user key that looks like the format's own
        "nested": [{"a": (torch.zeros(1),)}],
    }
    save_state(tree, tmp_path / "t.safetensors", meta={"note": "hello"})
    back = load_state(tmp_path / "t.safetensors")
    expected = {**tree, "np_scalar": 1.5}
    for key, value in expected.items():
        assert _same(value, back[key]), key
    assert back["view_t"].is_contiguous() and back["view_t"].shape == (4, 3)
    assert is_state_file(tmp_path / "t.safetensors")


def test_an_arbitrary_object_is_refused_naming_where_it_is(tmp_path: Path) -> None:
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"state\.run\.items\[1\].*Thing.*cannot be stored without pickle"):
        save_state({"run": {"items": [1, Thing()]}}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match=r"numpy array of Python objects"):
        save_state({"a": np.array([object()], dtype=object)}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match=r"dict key of type frozenset"):
        save_state({"d": {frozenset(): 1}}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # no temp file left behind


def test_damaged_and_foreign_files_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    save_state({"w": torch.randn(1000), "step": 3}, path)
    data = path.read_bytes()
    cases = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "garbage": b"\x00\xffnot safetensors at all" * 10,
        "header_cut": data[:20],
    }
    for name, content in cases.items():
        bad = tmp_path / f"{name}.safetensors"
        bad.write_bytes(content)
        with pytest.raises(StateFileError) as err:
            load_state(bad)
        assert str(bad) in str(err.value) and "\n" not in str(err.value), name
        assert not is_state_file(bad)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))  # a model's weights, not an rlinf state
    with pytest.raises(StateFileError, match="not an rlinf state file"):
        load_state(foreign)
    assert not is_state_file(foreign)
    with pytest.raises(FileNotFoundError):
        load_state(tmp_path / "missing.safetensors")


def test_the_tree_is_plain_json_in_the_header(tmp_path: Path) -> None:
    """What makes the format safe: the header is JSON and the tensors raw bytes."""
    path = tmp_path / "s.safetensors"
    save_state({"w": torch.ones(2), "name": "ppo"}, path)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    tree = json.loads(header["__metadata__"]["rlinf_tree"])
    assert tree == {"w": {"__t__": "0"}, "name": "ppo"}


def test_a_read_only_array_is_saved_without_a_warning(tmp_path: Path) -> None:
    """An env's observation buffer can be a read-only view; saving it must not print torch's
    "non-writable tensors" warning on the user's console (the quickstart did)."""
    import warnings

    frozen = np.arange(6, dtype=np.float32).reshape(2, 3)
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_state({"obs": frozen}, tmp_path / "s.safetensors")
    back = load_state(tmp_path / "s.safetensors")["obs"]
    np.testing.assert_array_equal(back, frozen)
