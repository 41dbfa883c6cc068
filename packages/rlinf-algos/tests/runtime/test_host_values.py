"""Nothing crosses a process boundary on a GPU (issue 52, item 3): the role workers return CPU
tensors (:func:`rlinf_algos.runtime.host_values.to_cpu`), checked by
:func:`~rlinf_algos.runtime.host_values.off_host_tensors`, which names any tensor not on the CPU.

No GPU exists here. The ``meta`` device plays a GPU's tensors: the checker flags them as it flags
CUDA ones, and under :class:`MetaIsTheGPU` a copy of a meta tensor to the CPU gives a CPU tensor,
as ``.to("cpu")`` of a CUDA tensor does. Before, ``ActorWorker.state``/``train``/``policy`` and the
bodies' calls returned what the learner held (the optimiser's moments on the GPU), so the checks
below fail on 94aa70d. The ``gpu`` test runs a real learner's state through it on CUDA.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from rlinf_algos.parallel import DataParallel
from rlinf_algos.runtime.host_values import off_host_tensors, to_cpu


class MetaIsTheGPU(TorchFunctionMode):
    """While active, a copy of a ``meta`` tensor to the CPU gives a CPU tensor of its shape and
    dtype filled with 7 (as a CUDA tensor's copy gives its values)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cpu) and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            target = kwargs.get("device", args[1] if len(args) > 1 else "cpu")
            if src.device.type == "meta" and str(target).startswith("cpu"):
                return torch.full(src.shape, 7, dtype=src.dtype, device="cpu")
        return func(*args, **kwargs)


def gpu_state() -> dict[str, Any]:
    """A learner's state as it sits on a GPU (here: meta), optimiser moments included."""
    w = torch.empty(3, 4, device="meta")
    return {
        "model": {"w": w},
        "optimizer": {"state": {0: {"exp_avg": torch.empty(3, 4, device="meta"), "step": torch.tensor(2.0)}}},
        "rows": [np.zeros(2), ("x", torch.empty(1, device="meta"))],
        "version": 3,
    }


def test_the_check_names_every_tensor_off_the_cpu() -> None:
    assert off_host_tensors(gpu_state()) == [
        "result['model']['w'] on meta",
        "result['optimizer']['state'][0]['exp_avg'] on meta",
        "result['rows'][1][1] on meta",
    ]
    assert off_host_tensors({"a": torch.ones(2), "b": [np.ones(1), "s", 1.0]}) == []
    assert off_host_tensors(torch.empty(1, device="meta"), "policy") == ["policy on meta"]


def test_to_cpu_copies_what_is_off_the_cpu_and_keeps_the_rest() -> None:
    with MetaIsTheGPU():
        out = to_cpu(gpu_state())
    assert off_host_tensors(out) == []
    assert torch.equal(out["model"]["w"], torch.full((3, 4), 7.0)) and out["version"] == 3
    assert isinstance(out["rows"][1], tuple) and out["rows"][1][0] == "x"
    cpu = {"w": torch.ones(2), "n": np.ones(2), "k": [1, 2]}
    same = to_cpu(cpu)
    assert same is cpu and same["w"] is cpu["w"]  # nothing to copy: nothing copied
    Point = namedtuple("Point", "x y")
    with MetaIsTheGPU():
        p = to_cpu(Point(torch.empty(1, device="meta"), 2))
    assert isinstance(p, Point) and p.x.device.type == "cpu" and p.y == 2


class Body:
    """The learner body's surface the actor host uses, holding its tensors on a GPU (meta)."""

    version = 0

    def state(self) -> dict[str, Any]:
        return gpu_state()

    def train(self, gen: int) -> dict[str, Any]:
        self.version += 1
        return {"loss": torch.empty((), device="meta"), "aborted": False}

    def weights(self) -> dict[str, Any]:
        return {"w": torch.empty(2, device="meta")}

    def policy(self) -> dict[str, Any]:
        return {"algorithm": "ppo", "spec": {}, "state_dict": {"w": torch.empty(2, device="meta")}}

    def log_probs(self, key: str) -> dict[str, Any]:
        return {"ref_log_probs": torch.empty(2, 3, device="meta")}


def test_the_actor_and_reference_workers_return_cpu_tensors() -> None:
    from rlinf_algos.runtime.workers.actor import ActorWorker
    from rlinf_algos.runtime.workers.reference import ReferenceWorker

    actor = ActorWorker(None)
    actor.dp, actor.body, actor.wb, actor.published, actor.publish_s = DataParallel(), Body(), None, 0, 0.0
    ref = ReferenceWorker(None)
    ref.body = Body()
    with MetaIsTheGPU():
        returned = {
            "actor.state": actor.state(),
            "actor.train": actor.train(0),
            "actor.policy": actor.policy(),
            "reference.log_probs": ref.log_probs("k"),
            "reference.state": ref.state(),
        }
    for call, value in returned.items():
        assert off_host_tensors(value, call) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_learners_state_leaves_the_actor_worker_on_the_cpu() -> None:
    """A real Adam state on CUDA: the learner holds it there, the worker returns it on the CPU."""
    from rlinf_algos.runtime.workers.actor import ActorWorker

    model = torch.nn.Linear(4, 2, device="cuda")
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(3, 4, device="cuda")).sum().backward()
    opt.step()

    class CudaBody(Body):
        def state(self) -> dict[str, Any]:
            return {"model": model.state_dict(), "optimizer": opt.state_dict()}

    held = CudaBody().state()
    assert off_host_tensors(held)  # the learner's own state is on the GPU
    actor = ActorWorker(None)
    actor.dp, actor.body, actor.wb, actor.published = DataParallel(device="cuda"), CudaBody(), None, 0
    assert off_host_tensors(actor.state()) == []
