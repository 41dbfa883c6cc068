"""A third-party env family is one package with one entry point: a ``toy`` family written here
as an installed-looking distribution (a ``*.dist-info`` with an ``rlinf`` entry point on
``sys.path``), whose simulator runs in a child process (the tests' ``toy_backend.py``). It is
listed, validated with its YAML paths, trained on in process, and survives its simulator dying
in the middle of a run."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlinf_algos
from rlinf_algos.config.prepare import prepare_run
from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.families import SimulatorError
from rlinf_core.errors import ConfigError
from rlinf_core.plugins import load_plugins

PLUGIN = '''
"""A test env family: ``toy``, a point that must reach +1, in a child process."""

import sys
from pathlib import Path

from rlinf_core.envs import EnvFamily, TaskInfo
from rlinf_core.errors import ConfigProblem
from rlinf_core.plugins import hookimpl

BACKEND = Path(BACKEND_PATH)


class ToyFamily(EnvFamily):
    PLUGIN_NAME = "toy"
    description = "a point on a line (tests)"

    def suites(self):
        return {"both": ["right", "far-right"]}

    def tasks(self, request):
        names = self.suites().get(request.id) or [request.id]
        return [TaskInfo(n, f"go {n}", 3) for n in names]

    def problems(self, env):
        if env.get("id") not in ("right", "far-right", "both"):
            return [ConfigProblem("env.id", f"{env.get('id')!r} is no toy task (right, far-right; suite: both)")]
        return []

    def make_vector(self, request):
        from rlinf_algos.families import suite_tasks
        from rlinf_algos.families.subproc import RemoteVectorEnv

        spec = {"tasks": request.tasks or suite_tasks(self, request.id, request.num_envs), "seed": request.seed,
                "max_episode_steps": request.max_episode_steps, **request.options}
        return RemoteVectorEnv("toy", sys.executable, BACKEND, spec, timeout=request.timeout_s)


@hookimpl
def rlinf_register_env_families():
    return [ToyFamily]
'''

RUN: dict[str, Any] = {
    "algorithm": {"name": "ppo", "rollout_steps": 16, "minibatch_size": 32, "update_epochs": 1},
    "env": {"family": "toy", "id": "both", "num_envs": 2, "max_episode_steps": 8},
    "model": {"hidden_sizes": [8]},
    "runner": {"scheduler": "local", "total_steps": 64, "log_interval": 32, "loggers": ["csv"]},
}
"""Two PPO iterations (2 envs x 16 steps) on the toy family, in process."""


@pytest.fixture
def toy_plugin(install_plugin: Any) -> Iterator[Any]:
    backend = Path(__file__).with_name("toy_backend.py")
    plugin = textwrap.dedent(PLUGIN).replace("BACKEND_PATH", repr(str(backend)))
    install_plugin("toyfamily", "rlinf_toyfamily", {"rlinf_toyfamily.py": plugin})
    try:
        yield load_plugins()
    finally:
        sys.modules.pop("rlinf_toyfamily", None)


def test_the_family_is_registered_and_listed(toy_plugin: Any, invoke: Any) -> None:
    assert "toy" in toy_plugin.env_families.names()
    assert toy_plugin.env_families.owner("toy").distribution == "rlinf-toyfamily"
    out = invoke(toy_plugin, "env", "list")
    assert (
        out.exit_code == 0 and "toy: a point on a line (tests)" in out.output and "suites: both" in out.output
    )


def test_its_settings_are_checked_with_their_yaml_paths(toy_plugin: Any) -> None:
    with pytest.raises(ConfigError) as err:
        prepare_run({**RUN, "env": {**RUN["env"], "id": "left"}}, host=toy_plugin)
    assert {p.path: p.message for p in err.value.problems}["env.id"].startswith("'left' is no toy task")
    with pytest.raises(ConfigError) as err:
        prepare_run({**RUN, "env": {**RUN["env"], "family": "toyy"}}, host=toy_plugin)
    problem = {p.path: p.message for p in err.value.problems}["env.family"]
    assert "unknown env family 'toyy'" in problem and "toy" in problem and "gymnasium" in problem


def test_ppo_trains_on_it_in_process_and_the_policy_records_the_family(
    toy_plugin: Any, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    summary = rlinf_algos.train(RUN, run_dir, host=toy_plugin)
    assert summary["total_env_steps"] == 64
    policy = rlinf_algos.load_policy(run_dir)
    assert policy.record["env_family"] == "toy"
    assert policy.act(np.array([0.0, 1.0], np.float32)).shape == (1,)


def test_the_stepper_starts_a_dead_simulator_again_and_drops_the_batch(toy_plugin: Any) -> None:
    stepper = VectorEnvStepper("right", 2, 0, family="toy", options={"die_at": 3}, max_episode_steps=8)
    try:
        stepper.step(np.zeros((2, 1), np.float32))
        stepper.step(np.zeros((2, 1), np.float32))
        with pytest.raises(SimulatorError, match="started it again \\(restart 1\\), this batch is dropped"):
            stepper.step(np.zeros((2, 1), np.float32))
        assert stepper.restarts == 1 and stepper.obs.shape == (2, 2)
        for _ in range(10):  # the new process (a fresh count: it would die at its step 3 again)
            try:
                stepper.step(np.zeros((2, 1), np.float32))
            except SimulatorError:
                break
        assert stepper.restarts == 2
    finally:
        stepper.close()


def test_a_local_run_survives_its_simulator_dying_and_drops_the_batch(
    toy_plugin: Any, tmp_path: Path
) -> None:
    run = {**RUN, "env": {**RUN["env"], "options": {"die_at": 20}}}
    summary = rlinf_algos.train(run, tmp_path / "run", host=toy_plugin)
    assert summary["total_env_steps"] >= 64 and summary["dropped_batches"] >= 1
    assert any("died during 'step'" in e and "started it again" in e for e in summary["events"]), summary[
        "events"
    ]
