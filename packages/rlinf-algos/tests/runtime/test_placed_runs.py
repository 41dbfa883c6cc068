"""The distributed runner on a real embedded Ray with real MuJoCo envs: one short run of PPO
(two env workers routed to one rollout worker, two pipeline stages) and SAC, checkpoint/resume
restoring the learner exactly, and a rollout worker killed mid-run (restarted, its partial batch
dropped). One Ray serves the whole module; every run starts its own worker processes on it."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos.evaluate import load_policy
from rlinf_algos.rundir import latest_checkpoint
from rlinf_algos.runtime.workers.actor import digest as _digest
from rlinf_algos.safe_state import load_state
from rlinf_algos.training import run_training

pytestmark = [pytest.mark.slow, pytest.mark.network]

ENV = "InvertedPendulum-v5"
SUMMARY_KEYS = {"total_env_steps", "wall_s", "env_steps_per_s", "final_return_mean", "best_return_mean"}


def placement(env: str = "0", rollout: str = "0") -> dict[str, Any]:
    return {
        "num_nodes": 1,
        "component_placement": {
            "env": {"node_group": "node", "placement": env},
            "rollout": {"node_group": "node", "placement": rollout},
            "actor": {"node_group": "node", "placement": "0"},
        },
    }


def ppo_config(**runner: Any) -> dict[str, Any]:
    return {
        "cluster": placement(env="0:0-1"),  # two env workers on the node, one rollout worker
        "algorithm": {"name": "ppo", "rollout_steps": 32, "update_epochs": 2, "minibatch_size": 64},
        "env": {"id": ENV, "num_envs": 8},
        "model": {"hidden_sizes": [16, 16]},
        "rollout": {"pipeline_stages": 2},
        "runner": {"total_steps": 512, "log_interval": 256, "seed": 3, **runner},
    }


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_ppo_run_writes_the_run_directory(ray_cluster: Any, tmp_path: Path) -> None:
    summary = run_training(ppo_config(checkpoint_interval=256), run_dir=tmp_path)
    assert set(summary) >= SUMMARY_KEYS and summary["total_env_steps"] == 512
    assert summary["workers"] == {"env": 2, "rollout": 1, "actor": 1, "pipeline_stages": 2}
    assert summary["restarts"] == 0 and summary["dropped_batches"] == 0
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["total_env_steps"] == 512 and on_disk["episodes"] > 0
    table = rows(tmp_path)
    assert [int(r["step"]) for r in table] == [256, 512]
    assert {"step", "wall_s", "episode_return_mean", "policy_loss", "policy_lag"} <= set(table[0])
    assert float(table[-1]["episode_return_mean"]) > 0
    assert (tmp_path / "config.yaml").is_file()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*.safetensors"))
    assert ckpts == ["step_0000000256.safetensors", "step_0000000512.safetensors"]
    module, record = load_policy(tmp_path / "policy.safetensors")
    assert record["env_id"] == ENV and record["algorithm"] == "ppo"
    assert module.predict(torch.zeros(1, 4)).shape == (1, 1)


def test_resume_restores_the_learner_exactly(ray_cluster: Any, tmp_path: Path) -> None:
    run_training(ppo_config(checkpoint_interval=256, total_steps=256), run_dir=tmp_path)
    saved = load_state(latest_checkpoint(tmp_path))
    assert saved["run"]["steps"] == 256
    seen: dict[str, Any] = {}

    def on_iteration(run: Any, k: int) -> None:
        seen.setdefault("digest", run.resume_digest)
        seen.setdefault("k", k)

    summary = run_training(
        ppo_config(checkpoint_interval=256),
        run_dir=tmp_path,
        resume=True,
        callbacks={"on_iteration": on_iteration},
    )
    # the actor holds exactly the checkpointed weights, optimiser, RNG and statistics
    assert seen == {"digest": _digest(saved["actor"]), "k": 1}
    assert summary["total_env_steps"] == 512 and summary["resumed_from"].endswith(
        "step_0000000256.safetensors"
    )
    steps = [int(r["step"]) for r in rows(tmp_path)]
    assert steps == [256, 512]
    after = load_state(latest_checkpoint(tmp_path))
    opt_before = saved["actor"]["learner"]["optimizer"]["state"][0]["step"]
    opt_after = after["actor"]["learner"]["optimizer"]["state"][0]["step"]
    assert float(opt_after) == float(opt_before) * 2  # one more iteration of the same minibatch steps
    assert after["actor"]["learner"]["version"] == saved["actor"]["learner"]["version"] + 1


def test_sac_streams_transitions_to_the_learner(ray_cluster: Any, tmp_path: Path) -> None:
    config = {
        "cluster": placement(),
        "algorithm": {
            "name": "sac",
            "learning_starts": 128,
            "batch_size": 32,
            "updates_per_step": 0.5,
            "update_order": "pipelined",  # the learner publishes from its second thread's snapshots
        },
        "env": {"id": ENV, "num_envs": 4},
        "model": {"hidden_sizes": [32, 32]},
        "rollout": {"steps_per_iteration": 32, "chunk_steps": 8, "max_chunks_ahead": 1},
        "runner": {"total_steps": 384, "log_interval": 128, "checkpoint_interval": 384},
    }
    bounds: list[int] = []
    summary = run_training(
        config,
        run_dir=tmp_path,
        callbacks={"on_iteration": lambda run, k: bounds.append(run.traj_ch.maxsize)},
    )
    assert summary["total_env_steps"] == 384
    assert set(bounds) == {1}  # each rollout worker's queue to the learner holds one message
    table = rows(tmp_path)
    assert [int(r["step"]) for r in table] == [128, 256, 384]
    # 0.5 gradient steps per env step received after learning_starts
    assert float(table[-1]["updates"]) == pytest.approx((384 - 128) * 0.5, abs=1)
    # a message is 8 steps x 4 envs = 16 gradient steps; with one message queued, the actions of a
    # message are at most two messages' worth of gradient steps behind the learner that takes it
    lags = [float(r["policy_lag"]) for r in table]
    assert all(0 <= lag <= 32 for lag in lags), lags
    state = load_state(latest_checkpoint(tmp_path))
    assert len(state["actor"]["buffer"]["rewards"]) == 384
    _, record = load_policy(tmp_path / "policy.safetensors")
    assert record["algorithm"] == "sac"


def test_killed_rollout_and_env_workers_are_restarted_and_their_batches_dropped(
    ray_cluster: Any, tmp_path: Path
) -> None:
    import ray

    # The kill lands where the runtime reports that rollout rank 0 is collecting the iteration (its
    # first env message arrived), never after a sleep: on a fast idle machine an iteration of 2048
    # env steps can be over before a timer fires, and on a loaded one not started yet.
    config = ppo_config(total_steps=8192, log_interval=2048)
    config["cluster"] = placement()
    config["algorithm"]["rollout_steps"] = 512
    config["env"]["num_envs"] = 4
    victims = {1: "rollout", 3: "env"}  # iteration -> the component killed in mid-collection
    killed: list[tuple[int, str]] = []

    def on_collecting(run: Any, k: int) -> None:
        if k in victims and all(k != done for done, _ in killed):
            component = victims[k]
            killed.append((k, component))
            ray.kill(run.groups[component].actors[0], no_restart=True)

    summary = run_training(config, run_dir=tmp_path, callbacks={"on_collecting": on_collecting})
    assert killed == [(1, "rollout"), (3, "env")]
    assert summary["restarts"] == 2 and summary["dropped_batches"] == 2
    assert summary["total_env_steps"] == 8192 and summary["iterations"] == 4  # dropped ones ran again
    events = "\n".join(summary["events"])
    assert events.count("dropped its partial batch") == 2
    assert "restarted rollout rank(s) [0]" in events and "restarted env rank(s) [0]" in events
    assert [int(r["step"]) for r in rows(tmp_path)] == [2048, 4096, 6144, 8192]


@pytest.mark.extended  # 35 s on CI's 2 cores; the placed runs in CI run these workers
def test_rollout_only_runs_env_and_rollout_workers_without_learning(ray_cluster: Any, tmp_path: Path) -> None:
    config = ppo_config(total_steps=512)
    config["cluster"] = placement(rollout="0:0-1")  # one env worker feeding two rollout workers
    summary = run_training(config, run_dir=tmp_path, rollout_only=True)
    assert summary["rollout_only"] and summary["total_env_steps"] == 512
    assert summary["workers"]["rollout"] == 2 and summary["env_steps_per_s"] > 0
    assert summary["episodes"] > 0
    assert not (tmp_path / "policy.safetensors").exists() and not (tmp_path / "checkpoints").exists()
    assert [int(r["step"]) for r in rows(tmp_path)] == [256, 512]


def grpo_config(env: str = "0:0-1", rollout: str = "0", **runner: Any) -> dict[str, Any]:
    cluster = placement(env=env, rollout=rollout)
    cluster["component_placement"] |= {
        "reward": {"node_group": "node", "placement": "0"},
        "reference": {"node_group": "node", "placement": "0"},
    }
    return {
        "cluster": cluster,
        # groups of 4 over 8 envs: each group's copies sit on both stages of one env worker
        "algorithm": {"name": "grpo", "group_size": 4, "num_groups": 2, "update_epochs": 2, "kl_coef": 0.1},
        "env": {"id": ENV, "num_envs": 8, "max_episode_steps": 25},
        "model": {"hidden_sizes": [16, 16]},
        "rollout": {"pipeline_stages": 2},
        "runner": {"total_steps": 400, "log_interval": 1, "seed": 5, **runner},
    }


@pytest.mark.parametrize(
    ("env", "rollout"),
    [
        ("0:0-1", "0"),  # two env workers feeding one rollout worker (a stage spans both)
        # one env worker feeding two rollout workers, which finish a stage apart (50 s on CI's 2
        # cores: opt-in, -m extended)
        pytest.param("0", "0:0-1", marks=pytest.mark.extended),
    ],
)
def test_grpo_runs_whole_episode_groups_on_reward_and_reference_workers(
    ray_cluster: Any, tmp_path: Path, env: str, rollout: str
) -> None:
    summary = run_training(grpo_config(env, rollout, checkpoint_interval=200), run_dir=tmp_path)
    n_env, n_rollout = (2, 1) if env == "0:0-1" else (1, 2)
    assert summary["workers"] == {
        "env": n_env, "rollout": n_rollout, "actor": 1, "reward": 1, "reference": 1, "pipeline_stages": 2,
    }  # fmt: skip
    assert summary["restarts"] == 0 and summary["dropped_batches"] == 0
    table = rows(tmp_path)
    # an iteration is 8 whole episodes (at most 25 steps each: InvertedPendulum ends early when it falls)
    iterations = summary["iterations"]
    assert summary["episodes"] == 8 * iterations
    steps = [int(r["step"]) for r in table]
    assert steps == sorted(steps) and steps[-1] == summary["total_env_steps"] >= 400
    assert all(0 < b - a <= 8 * 25 for a, b in zip([0, *steps], steps, strict=False))
    assert all(float(r["kl_ref"]) >= 0 and float(r["policy_lag"]) <= 1 for r in table)
    assert float(table[0]["kl_ref"]) < 1e-3  # the first update starts from the reference itself
    ckpt = load_state(latest_checkpoint(tmp_path))
    assert ckpt["algorithm"] == "grpo" and "reference" in ckpt
    # the reference is the initial policy, frozen: the actor has moved away from it
    actor_w = ckpt["actor"]["learner"]["model"]["actor_mean.0.weight"]
    assert not torch.equal(ckpt["reference"]["actor_mean.0.weight"], actor_w)
    module, record = load_policy(tmp_path / "policy.safetensors")
    assert record["algorithm"] == "grpo" and module.predict(torch.zeros(1, 4)).shape == (1, 1)


# a Ray run with a fault: 1-2 minutes on CI's 2 cores; CI kills PPO's rollout and env workers
@pytest.mark.extended
def test_grpo_survives_a_killed_rollout_worker(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    # HalfCheetah never ends early: an iteration is 8 x 400 env steps, long enough that a kill
    # 0.3 s into it lands mid-collection
    config = grpo_config("0", "0", total_steps=3 * 3200, log_interval=1)
    config["env"] = {"id": "HalfCheetah-v5", "num_envs": 8, "max_episode_steps": 400}
    killed: list[int] = []

    def on_iteration(run: Any, k: int) -> None:
        if k == 1 and not killed:
            actor = run.groups["rollout"].actors[0]
            killed.append(k)
            threading.Timer(0.3, lambda: ray.kill(actor, no_restart=True)).start()

    summary = run_training(config, run_dir=tmp_path, callbacks={"on_iteration": on_iteration})
    assert killed == [1] and summary["restarts"] == 1 and summary["dropped_batches"] == 1
    assert summary["total_env_steps"] == 3 * 3200 and summary["iterations"] == 3
    assert "restarted rollout rank(s) [0]" in "\n".join(summary["events"])
    assert [int(r["step"]) for r in rows(tmp_path)] == [3200, 6400, 9600]


# a Ray run with a fault: 1-2 minutes on CI's 2 cores; test_worker_faults kills the LM's
@pytest.mark.extended
def test_grpo_survives_killed_reward_and_reference_workers(ray_cluster: Any, tmp_path: Path) -> None:
    """SIGKILL on the reward worker in iteration 1 and on the reference in iteration 3: each is
    named, restarted in place (the reference freezes the same weights again), the batch its
    learning side lost is dropped and counted, and the run reaches its budget with every row
    once. The reference of the last checkpoint is the one of the first: the frozen policy."""
    import os
    import signal

    config = grpo_config("0", "0", total_steps=600, checkpoint_interval=50)
    victims = {1: "reward", 3: "reference"}
    killed: list[tuple[int, str, int]] = []

    def on_collecting(run: Any, k: int) -> None:
        if k in victims and all(k != done for done, _, _ in killed):
            pid = run.pids[victims[k]][0]
            killed.append((k, victims[k], pid))
            os.kill(pid, signal.SIGKILL)

    summary = run_training(config, run_dir=tmp_path, callbacks={"on_collecting": on_collecting})
    assert [(k, c) for k, c, _ in killed] == [(1, "reward"), (3, "reference")]
    events = "\n".join(summary["events"])
    for _, component, pid in killed:
        assert f"{component} rank 0, pid {pid} failed" in events and "its process died" in events, events
        assert f"restarted {component} rank(s) [0]" in events, events
    assert summary["restarts"] == 2 and summary["dropped_batches"] >= 2 and summary["learner_restarts"] == []
    assert summary["total_env_steps"] >= 600
    steps = [int(r["step"]) for r in rows(tmp_path)]
    assert steps == sorted(set(steps)), steps  # each row once
    ckpts = sorted_checkpoints(tmp_path)
    first, last = load_state(ckpts[0])["reference"], load_state(ckpts[-1])["reference"]
    assert len(ckpts) >= 2 and all(torch.equal(first[k], last[k]) for k in first)


def sorted_checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob("step_*"), key=lambda p: int(p.stem.split("_")[1]))


def test_grpo_config_needs_one_env_per_episode(tmp_path: Path) -> None:
    from rlinf_core.errors import ConfigError

    config = grpo_config()
    config["env"]["num_envs"] = 6
    config["cluster"]["component_placement"].pop("reference")
    with pytest.raises(ConfigError) as err:
        run_training(config, run_dir=tmp_path)
    text = str(err.value)
    assert "env.num_envs" in text and "4 x 2 = 8, got 6" in text
    assert "reference" in text  # every problem at once, with its path
