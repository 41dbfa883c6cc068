"""A user's env that fails ends the run in one line (issue 53, item 3): an exception or
``sys.exit`` in ``reset`` or ``step`` names the env, the call and the user's ``file:line`` (exit
2, no traceback); a NaN or infinite observation or reward stops the run naming the first
(``env.on_nonfinite: stop``, the default), or is replaced by 0 and counted (``zero``).

The env is a module written here (``userenv:Flaky-v0``, gymnasium's ``module:Env`` form), run
by the ``rlinf`` console script with the module on ``PYTHONPATH``, on the local scheduler (and
on Ray workers in the slow test)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ENV = """
import os
import sys
import time

import gymnasium as gym
import numpy as np


class Flaky(gym.Env):
    observation_space = gym.spaces.Box(-10, 10, (3,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, fail="", at=3):
        self.fail, self.at, self.t = fail, at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail == "reset":
            raise RuntimeError("the robot is not homed")
        if self.fail == "hang_reset" and seed:  # seed 0 (the config check's copy) passes
            time.sleep(10**6)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        obs, reward = np.zeros(3, np.float32), 1.0
        if self.t == self.at:
            if self.fail == "raise":
                raise ValueError("joint 3 out of range")
            if self.fail == "exit":
                sys.exit(3)
            if self.fail == "nan_reward":
                reward = float("nan")
            if self.fail == "inf_obs":
                obs[1] = np.inf
            if self.fail == "hang" or (self.fail == "hang_if_marked" and os.path.exists("hang")):
                open("hanging", "w").close()
                time.sleep(10**6)
        return obs, reward, False, self.t >= 20, {}


    def close(self):
        if self.fail == "close_check" or (self.fail == "close" and self.t):  # (the check never steps)
            raise RuntimeError("the gripper is stuck")


gym.register(id="Flaky-v0", entry_point=Flaky)
"""

CONFIG = """
algorithm: {name: ppo, rollout_steps: 16, minibatch_size: 32, update_epochs: 1}
env: {id: "userenv:Flaky-v0", num_envs: 2, kwargs: {fail: FAIL}, timeout_s: TIMEOUT}
model: {hidden_sizes: [8]}
runner: {scheduler: SCHED, total_steps: 64, log_interval: 32, loggers: [csv]}
"""


def _command(
    tmp_path: Path, fail: str, scheduler: str, timeout_s: float, extra: tuple[str, ...]
) -> list[str]:
    """Write the env module and the config; the ``rlinf train`` command line."""
    (tmp_path / "userenv.py").write_text(textwrap.dedent(ENV))
    cfg = tmp_path / "run.yaml"
    text = CONFIG.replace("FAIL", fail).replace("SCHED", scheduler).replace("TIMEOUT", str(timeout_s))
    if scheduler == "ray":
        text += "cluster: {num_nodes: 1, component_placement: {env: {node_group: node, placement: 0}, "
        text += "rollout: {node_group: node, placement: 0}, actor: {node_group: node, placement: 0}}}\n"
    cfg.write_text(text)
    exe = Path(sys.executable).parent / "rlinf"
    return [str(exe), "train", str(cfg), "--run-dir", str(tmp_path / "run"), *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(tmp_path)
    return env


def train(
    tmp_path: Path,
    fail: str,
    scheduler: str = "local",
    *extra: str,
    timeout_s: float = 60.0,
    wait: float = 600,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(tmp_path, fail, scheduler, timeout_s, extra),
        capture_output=True,
        text=True,
        timeout=wait,
        cwd=tmp_path,
        env=_env(tmp_path),
    )


def _error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("fail", "says"),
    [
        ("raise", "env 'userenv:Flaky-v0': step raised ValueError: joint 3 out of range (at "),
        # each a training run in its own process: one in the fast suite, the others slow
        pytest.param(
            "exit", "env 'userenv:Flaky-v0': step raised SystemExit: 3 (at ", marks=pytest.mark.slow
        ),
        pytest.param(
            "reset",
            "env 'userenv:Flaky-v0': reset raised RuntimeError: the robot is not homed (at ",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_failing_env_is_one_line_naming_the_call_and_the_users_line(
    tmp_path: Path, fail: str, says: str
) -> None:
    done = train(tmp_path, fail)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    (line,) = _error_lines(done)
    assert says in line and "userenv.py:" in line, line
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fail", "says"),
    [
        ("nan_reward", "sub-env 0 gave a non-finite reward (nan) at its env step 3"),
        ("inf_obs", "sub-env 0 gave a non-finite observation (holds NaN or inf) at its env step 3"),
    ],
)
def test_a_non_finite_value_stops_the_run_naming_the_first(tmp_path: Path, fail: str, says: str) -> None:
    done = train(tmp_path, fail)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = _error_lines(done)
    assert says in line and "env.on_nonfinite: zero" in line, line


@pytest.mark.slow
def test_on_nonfinite_zero_trains_on_and_saves_finite_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = train(tmp_path, "nan_reward", "local", "env.on_nonfinite=zero")
    assert done.returncode == 0, done.stderr[-2000:]
    import rlinf_algos

    monkeypatch.syspath_prepend(str(tmp_path))
    policy = rlinf_algos.load_policy(tmp_path / "run", trust=True)  # the env is this test's own module
    assert all(np.isfinite(p.detach().numpy()).all() for p in policy.module.parameters())
    # and the saved policy checks what it is given
    from rlinf_core.errors import RlinfError

    assert policy.act(np.zeros(3, np.float32)).shape == (1,)
    for bad, says in [
        (None, "no observation"),
        (np.array([0.0, np.nan, 0.0], np.float32), "holds NaN or inf"),
        (np.float32(1.0), "of shape []; the policy takes [3]"),
        (np.zeros((4, 5), np.float32), "of shape [5]; the policy takes [3]"),
    ]:
        with pytest.raises(RlinfError, match=re.escape(says)):
            policy.act(bad)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fail", "says"),
    [
        ("raise", "step raised ValueError: joint 3 out of range (at "),
        # in the worker's set-up: before, exit 1 and the scheduler's "failed in __init__()" line
        pytest.param(
            "reset",
            "reset raised RuntimeError: the robot is not homed (at ",
            marks=pytest.mark.extended,  # 80 s on CI's 2 cores, as the one above
        ),
    ],
)
def test_on_ray_workers_too(tmp_path: Path, fail: str, says: str) -> None:
    done = train(tmp_path, fail, "ray")
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = _error_lines(done)
    assert says in line and line.startswith("error: env rank 0, pid "), line


@pytest.mark.slow
def test_non_finite_weights_are_never_saved(tmp_path: Path) -> None:
    """``env.on_nonfinite: ignore`` lets NaN rewards through; the learner's weights go NaN and are
    not written (before: exit 0 and a policy with NaN in 9 of its 12 tensors)."""
    done = train(tmp_path, "nan_reward", "local", "env.on_nonfinite=ignore")
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = _error_lines(done)
    assert "not writing policy.safetensors: " in line and "hold NaN or inf (the first: " in line, line
    assert "Traceback" not in done.stderr and not (tmp_path / "run" / "policy.safetensors").exists()


@pytest.mark.slow
def test_a_failing_close_is_one_line(tmp_path: Path) -> None:
    """On the worker, at the run's end (its results are written): one warning line, exit 0; in
    the config check's copy, before anything starts: one line, exit 2. Before: tracebacks."""
    done = train(tmp_path, "close", "local", "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if "the gripper is stuck" in ln]
    assert "env rank 0, pid " in line and "env 'userenv:Flaky-v0': close raised RuntimeError" in line, line
    assert "userenv.py:" in line and "Traceback" not in done.stderr
    check = tmp_path / "check"
    check.mkdir()
    done = train(check, "close_check")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "close raised RuntimeError: the gripper is stuck (at " in done.stderr


# -- env.timeout_s: a reset or step that never returns -------------------------------------------
# (before: nothing printed, SIGTERM ignored, the run never ended on the local scheduler)


def test_a_step_that_never_returns_is_one_line_after_env_timeout_s(tmp_path: Path) -> None:
    done = train(tmp_path, "hang", "local", timeout_s=2, wait=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    (line,) = _error_lines(done)
    says = "env 'userenv:Flaky-v0': step did not return within 2 s (env.timeout_s; blocked at "
    assert says in line and "env rank 0, pid " in line and "userenv.py:" in line, line
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_reset_that_never_returns_is_one_line_after_env_timeout_s(tmp_path: Path) -> None:
    done = train(tmp_path, "hang_reset", "local", timeout_s=2, wait=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    (line,) = _error_lines(done)
    says = "env 'userenv:Flaky-v0': reset did not return within 2 s (env.timeout_s; blocked at "
    assert says in line and "env rank 0, pid " in line and "userenv.py:" in line, line


@pytest.mark.slow
def test_rlinf_eval_bounds_a_step_that_never_returns_too(tmp_path: Path) -> None:
    """``rlinf eval`` plays the env outside the env worker: its steps are bounded by the run's
    ``env.timeout_s`` as well (before: it waited for the step forever)."""
    done = train(tmp_path, "hang_if_marked", "local", "--quiet", timeout_s=2, wait=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "hang").touch()  # from now on the env's third step never returns
    exe = Path(sys.executable).parent / "rlinf"
    done = subprocess.run(
        [str(exe), "eval", str(tmp_path / "run"), "--episodes", "1", "--trust"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = _error_lines(done)
    says = "env 'userenv:Flaky-v0': step did not return within 2 s (env.timeout_s; blocked at "
    assert says in line and "userenv.py:" in line, line


def _stop_while_blocked(
    tmp_path: Path, scheduler: str, sig: int, again_after: float | None = None
) -> tuple[int, str, float]:
    """Start a run whose step blocks (env.timeout_s 600), send ``sig`` 1 s after the step
    started blocking (and again ``again_after`` s later); the exit code, stderr and the seconds
    from the last signal to the exit."""
    import time

    proc = subprocess.Popen(
        _command(tmp_path, "hang", scheduler, 600, ()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "hanging").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(sig)
        if again_after is not None:
            time.sleep(again_after)
            proc.send_signal(sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(15, 143), (2, 130)])
def test_a_stop_does_not_wait_for_a_blocked_step(tmp_path: Path, sig: int, code: int) -> None:
    rc, err, took = _stop_while_blocked(tmp_path, "local", sig)
    assert rc == code, err[-2000:]
    assert "the iteration in flight did not end within 3 s of the request" in err, err[-2000:]
    assert "skipped the interrupt checkpoint, the policy, summary.json and the workers' teardown" in err
    assert took < 60, took  # 3 s of grace, a second of teardown; the rest is a loaded machine


@pytest.mark.slow
def test_a_second_ctrl_c_does_not_wait_for_a_blocked_step_either(tmp_path: Path) -> None:
    """A second Ctrl-C inside the first one's grace (2.2 s after it) aborts at once: before, its
    hard stop waited for the blocked iteration to drain (runner.worker_timeout)."""
    rc, err, took = _stop_while_blocked(tmp_path, "local", 2, again_after=2.2)
    assert rc == 130, err[-2000:]
    assert "skipped the interrupt checkpoint: the iteration in flight did not end within" in err, err[-2000:]
    assert "Traceback" not in err and took < 60, (took, err[-2000:])


@pytest.mark.slow
def test_a_step_that_never_returns_on_ray_workers(tmp_path: Path) -> None:
    done = train(tmp_path, "hang", "ray", timeout_s=5, wait=400)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    says = "step did not return within 5 s (env.timeout_s; blocked at "
    assert any(says in line and "env rank 0" in line for line in _error_lines(done)), done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.extended  # 100 s on CI's 2 cores; the local scheduler's stop runs in CI
def test_a_stop_does_not_wait_for_a_blocked_step_on_ray(tmp_path: Path) -> None:
    rc, err, took = _stop_while_blocked(tmp_path, "ray", 15)
    assert rc == 143, err[-3000:]
    assert "skipped the interrupt checkpoint" in err, err[-3000:]
    assert took < 90, took
