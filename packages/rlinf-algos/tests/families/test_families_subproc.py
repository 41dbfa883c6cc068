"""A simulator in a child process (:mod:`rlinf_algos.families.subproc`): gymnasium's SAME_STEP
contract, success at the end and at some step, fixed initial states, and faults that are named
and survived: a simulator that dies, hangs or raises.

The simulator is the test's own backend (``toy_backend.py``, numpy only) run by the real
``child/server.py`` in this interpreter, as MetaWorld's runs in its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from rlinf_algos.families import SimulatorError
from rlinf_algos.families.subproc import RemoteVectorEnv
from rlinf_algos.families.venvs import family_python

TOY = Path(__file__).with_name("toy_backend.py")


def make(n: int = 2, python: str | None = None, timeout: float = 20.0, **spec) -> RemoteVectorEnv:
    import sys

    return RemoteVectorEnv(
        "toy",
        python or sys.executable,
        TOY,
        {"tasks": ["right"] * n, **spec},
        timeout=timeout,
        start_timeout=30.0,
    )


def test_same_step_autoreset_final_obs_and_the_two_success_signals() -> None:
    env = make(2, max_episode_steps=8)
    try:
        assert env.single_observation_space.shape == (2,) and env.single_action_space.shape == (1,)
        obs, _ = env.reset(seed=0, options={"init": [0, 2]})  # x = 0 and x = -1
        assert obs.tolist() == [[0.0, 1.0], [-1.0, 1.0]]
        # copy 0 reaches x = 1 after 4 steps then backs away; copy 1 never gets there
        plan = [1, 1, 1, 1, -1, -1, -1, -1]
        seen_success = []
        for t, a in enumerate(plan):
            obs, _rew, term, trunc, info = env.step(np.array([[a], [0.0]], np.float32))
            seen_success.append(info["success"].tolist())
            if t < 7:
                assert "final_obs" not in info
        assert trunc.tolist() == [True, True] and term.tolist() == [False, False]
        assert seen_success[3] == [True, False]
        assert info["_final_obs"].tolist() == [True, True]
        assert np.allclose(info["final_obs"][0], [0.0, 1.0]) and np.allclose(
            info["final_obs"][1], [-1.0, 1.0]
        )
        final = info["final_info"]
        assert final["success"].tolist() == [False, False]  # at the last step
        assert final["success_once"].tolist() == [True, False]  # at some step
        # the returned observations are the next episodes' first (drawn from each copy's generator)
        assert not np.allclose(obs[:, 0], [0.0, -1.0])
    finally:
        env.close()


def test_the_same_seeds_give_the_same_episodes() -> None:
    runs = []
    for _ in range(2):
        env = make(3)
        try:
            obs, _ = env.reset(seed=[5, 6, 7])
            steps = [env.step(np.full((3, 1), 0.3, np.float32))[0] for _ in range(10)]
            runs.append(np.concatenate([obs, *steps]))
        finally:
            env.close()
    assert np.array_equal(runs[0], runs[1])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True


def test_a_simulator_that_dies_is_named_with_its_last_words_then_started_again() -> None:
    env = make(2, die_at=3)
    try:
        env.reset(seed=0)
        pid = env.proc.pid
        env.step(np.zeros((2, 1), np.float32))
        env.step(np.zeros((2, 1), np.float32))
        with pytest.raises(SimulatorError) as err:
            env.step(np.zeros((2, 1), np.float32))
        msg = str(err.value)
        assert f"the toy simulator (pid {pid}" in msg and "died during 'step'" in msg and "(exit 3)" in msg
        assert "crashed on purpose" in msg
        with pytest.raises(SimulatorError, match="reset the env to start a new one"):
            env.step(np.zeros((2, 1), np.float32))
        obs, _ = env.reset(seed=1)  # a new process
        assert env.restarts == 1 and env.proc.pid != pid and obs.shape == (2, 2)
        env.step(np.zeros((2, 1), np.float32))
    finally:
        env.close()


def test_a_simulator_that_hangs_is_killed_after_its_timeout_and_named() -> None:
    env = make(2, hang_at=2, timeout=1.5)
    try:
        env.reset(seed=0)
        pid = env.proc.pid
        env.step(np.zeros((2, 1), np.float32))
        started = time.monotonic()
        with pytest.raises(
            SimulatorError, match=r"did not answer 'step' within 2 s \(env.timeout_s\); it was killed"
        ):
            env.step(np.zeros((2, 1), np.float32))
        assert time.monotonic() - started < 10
        assert _gone(pid)
    finally:
        env.close()


def test_an_exception_in_the_simulator_names_its_file_and_line_and_the_process_goes_on() -> None:
    env = make(1, raise_at=1)
    try:
        env.reset(seed=0)
        with pytest.raises(SimulatorError) as err:
            env.step(np.zeros((1, 1), np.float32))
        assert "toy_backend.py:" in str(err.value) and "ValueError: toy: a bad action on purpose" in str(
            err.value
        )
        env.step(np.zeros((1, 1), np.float32))  # the simulator itself is still there
    finally:
        env.close()


def test_close_ends_the_process_and_a_missing_interpreter_is_one_line() -> None:
    env = make(1)
    pid = env.proc.pid
    env.close()
    assert _gone(pid)
    with pytest.raises(SimulatorError, match="cannot start its interpreter /nonexistent/python"):
        make(1, python="/nonexistent/python")


def test_an_interpreter_that_is_not_there_is_a_config_error_naming_env_python() -> None:
    from rlinf_algos.families.metaworld import MetaWorldFamily
    from rlinf_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        family_python(MetaWorldFamily(), "/nonexistent/python")
    assert err.value.problems[0].path == "env.python"
    assert "rlinf env setup metaworld" in err.value.problems[0].message


def test_dict_observations_cross_with_their_text_and_final_rows() -> None:
    env = make(2, max_episode_steps=3, dict_obs=True)
    try:
        obs, _ = env.reset(seed=0, options={"init": [0, 2]})
        assert obs["state"].tolist() == [[0.0, 1.0], [-1.0, 1.0]]
        assert obs["instruction"] == ("go to right, step 0",) * 2
        obs, _, _, _, info = env.step(np.ones((2, 1), np.float32))
        assert obs["instruction"] == ("go to right, step 1",) * 2 and "final_obs" not in info
        for _ in range(2):
            obs, _, _, trunc, info = env.step(np.ones((2, 1), np.float32))
        assert trunc.tolist() == [True, True]
        assert obs["instruction"] == ("go to right, step 0",) * 2  # the next episodes' first
        last = info["final_obs"][1]
        assert last["instruction"] == "go to right, step 3" and np.allclose(last["state"], [-0.25, 1.0])
        assert np.allclose(info["final_obs"][0]["state"], [0.75, 1.0])
    finally:
        env.close()


def test_a_step_is_one_8_byte_frame_each_way_and_gives_arrays_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = make(3)
    try:
        env.reset(seed=0)
        first = env.step(np.full((3, 1), 0.5, np.float32))
        written, got = [], []
        real_write, real_writev, real_read = os.write, os.writev, os.read

        def write(fd: int, data: bytes) -> int:
            written.append(memoryview(data).nbytes)
            return real_write(fd, data)

        def writev(fd: int, buffers: list) -> int:
            written.append(sum(memoryview(b).nbytes for b in buffers))
            return real_writev(fd, buffers)

        def read(fd: int, n: int) -> bytes:
            out = real_read(fd, n)
            got.append(len(out))
            return out

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "writev", writev)
        monkeypatch.setattr(os, "read", read)
        second = env.step(np.full((3, 1), -0.5, np.float32))
        monkeypatch.undo()
        assert written == [8] and sum(got) == 8  # the arrays stayed in the shared block
        # what a step returns is the caller's: the next step does not change it
        assert not np.shares_memory(first[0], env.proc.views["obs/"])
        assert np.allclose(second[0][:, 0] - first[0][:, 0], -0.125)
    finally:
        env.close()


def _blocks() -> int:
    """This process's open descriptors of simulator blocks."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += "rlinf-sim-block" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return n


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the block is a memfd on Linux only")
def test_a_simulator_killed_by_sigkill_is_named_and_its_shared_block_goes_with_it() -> None:
    import signal
    import sys

    before = _blocks()
    env = make(2)
    try:
        env.reset(seed=0)
        assert _blocks() > before  # its file and its mapping (mmap holds a descriptor too)
        pid = env.proc.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SimulatorError) as err:
            env.step(np.zeros((2, 1), np.float32))
        msg = str(err.value)
        assert f"the toy simulator (pid {pid}, {sys.executable})" in msg and "(exit -9)" in msg
        assert _blocks() == before
        env.reset(seed=1)  # a new process with a new block
        assert _blocks() > before
        env.step(np.zeros((2, 1), np.float32))
    finally:
        env.close()
    assert _blocks() == before


def test_an_observation_space_without_a_layout_is_named_and_leaves_nothing_open() -> None:
    before = _blocks() if os.path.isdir("/proc/self/fd") else 0
    with pytest.raises(
        SimulatorError,
        match=r"the toy simulator \(pid \d+.*its observation space has a leaf of kind 'discrete'",
    ):
        make(1, odd_obs=True)
    if os.path.isdir("/proc/self/fd"):
        assert _blocks() == before
