"""Checkpoints of a run on GPUs (issue 39): they carry the CUDA random state of every GPU the
process sees beside the CPU one and restore it, and every tensor they (and ``policy.safetensors``)
hold is a CPU tensor, so a driver without a GPU reads them.

No GPU exists here. Two stand-ins, for what cannot exist: ``torch.cuda``'s random-state calls
are faked (:class:`FakeCuda`: two GPUs' states as byte tensors), and the ``meta`` device plays a
GPU's tensors in the save path (:class:`MetaIsTheGPU`: copying a meta tensor to the CPU gives a
CPU tensor, as ``.cpu()`` of a CUDA tensor does; a meta tensor that reaches the file writer
fails, as a CUDA tensor in a checkpoint would fail a CPU-only reader). The ``gpu`` test does both
for real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rlinf_algos.run_files import read_state, write_state
from rlinf_algos.rundir import load_checkpoint, write_checkpoint
from rlinf_algos.runtime.stop import cuda_rng_state, rng_state, set_cuda_rng_state, set_rng_state


class FakeCuda:
    """``torch.cuda``'s availability and random-state calls for ``n`` GPUs (only these)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
        self.states = {i: torch.full((16,), i + 1, dtype=torch.uint8) for i in range(n)}
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(
            torch.cuda, "get_rng_state_all", lambda: [self.states[i].clone() for i in range(n)]
        )
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_state)

    def set_state(self, state: torch.Tensor, device: int = 0) -> None:
        assert 0 <= device < len(self.states), f"no GPU {device}"
        self.states[device] = state.clone()


def test_the_cuda_random_state_of_every_gpu_is_saved_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:func:`cuda_rng_state` holds each GPU's stream; written to a checkpoint and read back, it
    restores each one (the learner's ``cuda_rng``, the rollout's and the language-model run's
    ``cuda`` go through these two functions). At 22e5e38 only the CPU stream was saved."""
    cuda = FakeCuda(monkeypatch, 2)
    saved = cuda_rng_state()
    assert saved is not None and [int(s[0]) for s in saved] == [1, 2]
    write_checkpoint(tmp_path, 5, {"algorithm": "ppo", "cuda_rng": saved, "run": {"steps": 5}})
    _, state = load_checkpoint(tmp_path, "ppo")
    cuda.states = {0: torch.zeros(16, dtype=torch.uint8), 1: torch.zeros(16, dtype=torch.uint8)}
    set_cuda_rng_state(state["cuda_rng"])
    assert [int(cuda.states[i][0]) for i in (0, 1)] == [1, 2]
    full = rng_state()  # the process's streams (language-model runs) carry it too
    assert [int(s[0]) for s in full["cuda"]] == [1, 2]
    cuda.states[1] = torch.zeros(16, dtype=torch.uint8)
    set_rng_state(full)
    assert int(cuda.states[1][0]) == 2


def test_a_checkpoint_of_more_gpus_restores_those_this_process_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(monkeypatch, 1)
    set_cuda_rng_state([torch.full((16,), 9, dtype=torch.uint8), torch.full((16,), 8, dtype=torch.uint8)])
    assert int(cuda.states[0][0]) == 9  # GPU 1 is not here: not set, no error


def test_without_cuda_nothing_is_saved_or_set() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("this machine has an initialised GPU")
    assert cuda_rng_state() is None and "cuda" not in rng_state()
    set_cuda_rng_state([torch.zeros(16, dtype=torch.uint8)])  # no GPU: ignored


def test_the_actor_worker_checkpoints_the_cuda_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actor worker's checkpoint state has ``cuda_rng`` beside ``torch_rng`` and its
    ``load`` restores both."""
    from rlinf_algos.parallel import DataParallel
    from rlinf_algos.runtime.workers.actor import ActorWorker

    class Body:  # the learner body's surface the host uses here
        version = 0

        def state(self) -> dict[str, Any]:
            return {"learner": {"w": torch.ones(2)}}

        def load(self, state: dict[str, Any]) -> None:
            self.loaded = state

    cuda = FakeCuda(monkeypatch, 2)
    worker = ActorWorker(None)
    worker.dp, worker.body, worker.wb, worker.published = DataParallel(), Body(), None, 0
    state = worker.state()
    assert state is not None and [int(s[0]) for s in state["cuda_rng"]] == [1, 2]
    cuda.states = {0: torch.zeros(16, dtype=torch.uint8), 1: torch.zeros(16, dtype=torch.uint8)}
    worker.load(state)
    assert [int(cuda.states[i][0]) for i in (0, 1)] == [1, 2]


class MetaIsTheGPU(TorchFunctionMode):
    """While active, a copy of a ``meta`` tensor to the CPU (``.to("cpu")``, ``.cpu()``) gives a
    CPU tensor of its shape and dtype filled with 7, as a CUDA tensor's copy gives its values."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cpu) and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            target = kwargs.get("device", args[1] if len(args) > 1 else "cpu")
            if src.device.type == "meta" and str(target).startswith("cpu"):
                self.copies += 1
                return torch.full(src.shape, 7, dtype=src.dtype, device="cpu")
        return func(*args, **kwargs)


def _gpu_state(device: str) -> dict[str, Any]:
    w = torch.empty(3, 4, device=device)
    return {
        "algorithm": "ppo",
        "learner": {"model": {"w": w, "b": torch.empty(4, device=device)}, "optimizer": {"m": [w]}},
        "run": {"steps": 3},
    }


def test_checkpoints_and_the_policy_file_hold_cpu_tensors(tmp_path: Path) -> None:
    """A learner's state on the GPU (here: meta) is written with every tensor copied to the CPU,
    in both checkpoint layouts and in ``policy.safetensors``, and reads back as CPU tensors."""
    with MetaIsTheGPU() as gpu:
        write_checkpoint(tmp_path, 3, _gpu_state("meta"))
        write_checkpoint(tmp_path / "lm", 3, _gpu_state("meta"), layout="folder")
        write_state(
            {"algorithm": "ppo", "spec": {}, "state_dict": {"w": torch.empty(2, device="meta")}},
            tmp_path / "policy.safetensors",
        )
    assert gpu.copies >= 7
    for run in (tmp_path, tmp_path / "lm"):
        _, state = load_checkpoint(run, "ppo")
        model = state["learner"]["model"]
        assert (
            model["w"].device.type == "cpu" and model["w"].shape == (3, 4) and float(model["w"][0, 0]) == 7.0
        )
    assert read_state(tmp_path / "policy.safetensors")["state_dict"]["w"].device.type == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_learners_checkpoint_is_read_on_the_cpu_and_its_stream_resumes(tmp_path: Path) -> None:
    torch.cuda.init()
    state = _gpu_state("cuda")
    state["cuda_rng"] = cuda_rng_state()
    write_checkpoint(tmp_path, 3, state)
    expected = torch.randn(4, device="cuda")
    _, back = load_checkpoint(tmp_path, "ppo")
    assert back["learner"]["model"]["w"].device.type == "cpu"
    set_cuda_rng_state(back["cuda_rng"])
    assert torch.equal(torch.randn(4, device="cuda"), expected)
