"""Out of memory is not a crash to restart (issue 39): a learner that raises
``torch.OutOfMemoryError`` ends the run with one message naming where it ran out and the knobs
that lower the need; the newest checkpoint (the last good state) is kept and named, and nothing
is restarted into the same error.

No GPU exists here: the real ``torch.OutOfMemoryError`` type is raised from a hook on the
learner's update (the point the code reports: the update of a given iteration), which is where
a CUDA allocation fails on a GPU.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos.config import load_sections
from rlinf_algos.parallel import DataParallel, LearnerOutOfMemory
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.ppo.learner import PPOLearner
from rlinf_algos.rundir import latest_checkpoint
from rlinf_algos.runtime.recovery import RunFailed, out_of_memory, out_of_memory_message
from rlinf_core.worker import WorkerInfo

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)"
KNOBS = ("actor.micro_batch_size", "algorithm.minibatch_size", "model.lora", "model.dtype: bfloat16")


def _train_ppo(run_dir: Path, total: int, checkpoint_interval: int) -> dict[str, Any]:
    from rlinf_algos.config import RolloutConfig, RunSections
    from rlinf_algos.embodied.flow import EmbodiedFlow
    from rlinf_algos.ppo.recipe import PPORecipe
    from rlinf_algos.runtime.driver import Driver

    env, model, runner = load_sections(
        {
            "env": {"id": "InvertedPendulum-v5", "num_envs": 2},
            "model": {"hidden_sizes": [16, 16]},
            "runner": {"total_steps": total, "log_interval": 64, "checkpoint_interval": checkpoint_interval},
        }
    )
    sections = RunSections(env=env, model=model, runner=runner, rollout=RolloutConfig())
    recipe = PPORecipe(PPOConfig(rollout_steps=32, minibatch_size=32, update_epochs=1))
    return Driver(EmbodiedFlow(recipe, sections), None, run_dir).run()


def test_an_out_of_memory_update_ends_the_run_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates 1 and 2 succeed (a checkpoint after each: 64 env steps apart), update 3 runs out of
    memory: the run ends with :class:`RunFailed` naming the learner, torch's message, the knobs
    and the checkpoint of update 2 with the ``--resume`` command; ``summary.json`` holds the
    error and the checkpoint is still there. At 22e5e38 torch's error escaped as a traceback and
    no summary was written."""
    update = PPOLearner.update
    calls = []

    def failing(self: PPOLearner, r: Any) -> dict[str, float]:
        calls.append(self.version)
        if len(calls) == 3:  # the hook: the third update's allocation fails
            raise torch.OutOfMemoryError(CUDA_OOM)
        return update(self, r)

    monkeypatch.setattr(PPOLearner, "update", failing)
    with pytest.raises(RunFailed) as err:
        _train_ppo(tmp_path, 64 * 5, 64)
    msg = str(err.value)
    # the actor worker's line (runner.scheduler: local runs it in this process): role, device, call
    assert "actor rank 0 ran out of memory on cpu in train(): CUDA out of memory" in msg
    assert all(k in msg for k in KNOBS) and "not restarted" in msg
    kept = latest_checkpoint(tmp_path)
    assert kept == tmp_path / "checkpoints" / "step_0000000128.safetensors" and kept.is_file()
    assert str(kept) in msg and "--resume" in msg
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "ran out of memory" in summary["error"] and summary["learner_restarts"] == []
    assert (tmp_path / "policy.safetensors").is_file()
    assert len(calls) == 3  # nothing ran the update again


def test_the_actor_worker_reports_out_of_memory_and_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actor worker turns torch's error into :class:`LearnerOutOfMemory` naming its rank,
    device and call, on a group of one and on a group of several, where any other failure of a
    call makes the rank exit (so the driver restarts the group): an OOM must not."""
    from rlinf_algos.runtime.workers.actor import ActorWorker

    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)

    def train(gen: int) -> dict[str, Any]:
        raise torch.OutOfMemoryError(CUDA_OOM)

    worker = ActorWorker(None)
    worker.bind(WorkerInfo(component="actor", rank=1, world_size=2))
    for world in (1, 2):
        worker.dp = DataParallel(rank=0, world=1)
        worker.dp.world, worker.dp.distributed = (
            world,
            world > 1,
        )  # a group of two: the rank would exit on another error
        with pytest.raises(
            LearnerOutOfMemory, match=r"actor rank 1 ran out of memory on cpu in train\(\): CUDA"
        ):
            worker._collective(train, 0)
    assert exits == []

    def broken(gen: int) -> None:
        raise RuntimeError("a peer is gone")

    from rlinf_algos.parallel import LearnerGroupBroken
    from rlinf_algos.runtime.workers.actor import EXIT_GRACE_S

    # the contrast: a failed collective is named to the driver, then the rank exits
    with pytest.raises(LearnerGroupBroken, match=r"in broken\(\): a peer is gone"):
        worker._collective(broken, 0)
    deadline = time.monotonic() + EXIT_GRACE_S + 30
    while not exits and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exits == [70]


def test_the_driver_recognises_an_out_of_memory_worker_error() -> None:
    """What a worker's OOM looks like on the driver (the scheduler's :class:`WorkerError` with
    the remote class name) is recognised, and the message names the component and rank; a dead
    process is not an OOM (that one is restarted)."""
    from rlinf_scheduler.runtime.worker_group import WorkerError

    def worker_error(error_type: str, summary: str) -> WorkerError:
        return WorkerError(
            component="actor",
            rank=0,
            node_rank=0,
            node_ip="127.0.0.1",
            method="train",
            error_type=error_type,
            summary=summary,
        )

    oom = worker_error(
        "LearnerOutOfMemory", f"actor rank 0 ran out of memory on cuda:0 in train(): {CUDA_OOM}"
    )
    assert out_of_memory(oom) and out_of_memory(worker_error("OutOfMemoryError", CUDA_OOM))
    assert out_of_memory(torch.OutOfMemoryError(CUDA_OOM)) and out_of_memory(LearnerOutOfMemory("x"))
    assert not out_of_memory(worker_error("WorkerDied", "the worker's process died"))
    assert not out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    msg = out_of_memory_message(oom, "the newest checkpoint is X")
    assert msg.startswith(
        "actor rank 0 (train()) ran out of memory: actor rank 0 ran out of memory on cuda:0"
    )
    assert msg.endswith("the newest checkpoint is X") and "\n" not in msg
