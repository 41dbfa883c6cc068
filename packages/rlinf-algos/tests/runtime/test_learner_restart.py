"""The learner restarts itself: the actor worker's process is killed (SIGKILL on its PID, which
the worker reports) while a PPO run is collecting, on a real embedded Ray with real MuJoCo envs.
With restarts left, the run goes back to the newest checkpoint and finishes; with
``runner.max_restarts: 0`` it ends with a message naming the checkpoint and the ``--resume``
command, and writes the policy and the summary first. One Ray serves the module; each test
takes 40-50 s on a loaded 2-core machine, hence ``slow``."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rlinf_algos.evaluate import load_policy
from rlinf_algos.runtime.recovery import RunFailed
from rlinf_algos.safe_state import load_state
from rlinf_algos.training import run_training

pytestmark = [pytest.mark.network, pytest.mark.slow]


def kill_learner_at(k_kill: int, killed: list[int], rank: int = 0) -> Any:
    """An ``on_collecting`` callback that SIGKILLs the actor worker's process (of ``rank``) once,
    while iteration ``k_kill`` is being collected (the learner is then updating on ``k_kill - 1``
    or waiting for ``k_kill``)."""

    def on_collecting(run: Any, k: int) -> None:
        if k == k_kill and not killed:
            pid = run.pids["actor"][rank]
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    return on_collecting


def test_a_killed_learner_is_restarted_from_the_newest_checkpoint(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path
) -> None:
    killed: list[int] = []
    seen: dict[str, Any] = {}

    def on_iteration(run: Any, k: int) -> None:
        seen["pid"] = run.pids["actor"][0]
        seen["log"] = run.batch_log

    summary = run_training(
        placed_ppo.config(8),
        run_dir=tmp_path,
        callbacks={"on_collecting": kill_learner_at(5, killed), "on_iteration": on_iteration},
    )
    assert len(killed) == 1 and seen["pid"] != killed[0]  # a new process learns
    assert summary["total_env_steps"] == 8 * placed_ppo.batch and summary["restarts"] == 1
    (event,) = summary["learner_restarts"]
    assert set(event) == {"step", "reason", "checkpoint", "steps_lost"}
    # iterations 0-4 were collected (1280 env steps), the newest checkpoint is at 1024
    assert event["checkpoint"].endswith("step_0000001024.safetensors")
    assert 0 < event["steps_lost"] <= 2 * placed_ppo.batch and event["step"] - event["steps_lost"] == 1024
    assert "died" in event["reason"]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["learner_restarts"] == summary["learner_restarts"]
    assert "restarted the learner from step_0000001024.safetensors" in "\n".join(summary["events"])
    # the rows after the checkpoint were dropped and written again once: no step twice
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 9)]
    # every update took one rollout rank's trajectory of one generation and one weight version,
    # never newer than the learner (a batch of the lost lineage would be)
    for batch in seen["log"]:
        assert len(batch["gens"]) == 1 and len(batch["versions"]) == 1, batch
        assert batch["versions"][0] <= batch["learner_version"], batch
    assert [b["iteration"] for b in seen["log"]][-4:] == [4, 5, 6, 7]
    state = load_state(tmp_path / "checkpoints" / "step_0000002048.safetensors")
    assert state["actor"]["learner"]["version"] == 8  # one update per iteration, none twice
    assert state["run"]["learner_restarts"] == summary["learner_restarts"]
    _, record = load_policy(tmp_path / "policy.safetensors")
    assert record["algorithm"] == "ppo"


@pytest.mark.extended  # a Ray run with a fault: 1-2 minutes on CI's 2 cores; CI restarts a learner
def test_without_restarts_left_the_message_names_the_checkpoint_and_the_resume_command(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path
) -> None:
    killed: list[int] = []
    with pytest.raises(RunFailed) as failure:
        run_training(
            placed_ppo.config(6, max_restarts=0),
            run_dir=tmp_path,
            callbacks={"on_collecting": kill_learner_at(3, killed)},
        )
    message = str(failure.value)
    newest = tmp_path / "checkpoints" / "step_0000000512.safetensors"
    assert killed and "the learner (actor worker) died at env step" in message
    assert "runner.max_restarts=0" in message and str(newest) in message
    command = f"rlinf train {tmp_path / 'config.yaml'} --resume {tmp_path}"
    assert f"`{command}`" in message
    assert "policy.safetensors" in message and "Traceback" not in message
    # the last good state: the newest weights the rollout worker held, and the summary
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert message.startswith(summary["error"]) and summary["learner_restarts"] == []
    module, record = load_policy(tmp_path / "policy.safetensors")
    assert record["algorithm"] == "ppo" and module.predict(torch.zeros(1, 4)).shape == (1, 1)
    # the advertised command continues the run: its config.yaml, --resume on the run directory
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    resumed = run_training(config, run_dir=tmp_path, resume=True)
    assert resumed["resumed_from"] == str(newest) and resumed["total_env_steps"] == 6 * placed_ppo.batch
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 7)]


@pytest.mark.extended  # a Ray run with a fault: 1-2 minutes on CI's 2 cores; CI restarts a learner
def test_a_learner_group_that_loses_a_rank_restarts_as_a_group(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path
) -> None:
    """The actor on 2 processes (FSDP): SIGKILL on rank 1 takes the group down (rank 0 leaves its
    collective instead of waiting in it), and both ranks come back from the newest checkpoint."""
    killed: list[int] = []
    pids: list[list[int]] = []
    config = placed_ppo.config(8)
    config["cluster"]["component_placement"]["actor"]["placement"] = "0:0-1"
    config["actor"] = {"strategy": "fsdp"}
    summary = run_training(
        config,
        run_dir=tmp_path,
        callbacks={
            "on_collecting": kill_learner_at(5, killed, rank=1),
            "on_iteration": lambda run, k: pids.append(list(run.pids["actor"])),
        },
    )
    assert killed and summary["learner_world_size"] == 2
    assert summary["total_env_steps"] == 8 * placed_ppo.batch and len(summary["learner_restarts"]) == 1
    (event,) = summary["learner_restarts"]
    assert event["checkpoint"].endswith("step_0000001024.safetensors") and "died" in event["reason"], event
    assert not set(pids[0]) & set(pids[-1])  # both ranks are new processes
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 9)]
    state = load_state(tmp_path / "checkpoints" / "step_0000002048.safetensors")
    assert state["actor"]["learner"]["version"] == 8  # one update per iteration, none twice
    # the checkpoint of the 2-rank group is the single-process format: one rank resumes it
    module, record = load_policy(tmp_path / "policy.safetensors")
    assert record["algorithm"] == "ppo" and module.predict(torch.zeros(1, 4)).shape == (1, 1)
