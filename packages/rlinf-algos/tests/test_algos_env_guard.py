"""``env.timeout_s`` for envs in rlinf's process (:mod:`rlinf_algos.env_guard`): a call that does
not return is reported after the bound, naming where it is blocked, and never holds the caller."""

from __future__ import annotations

import threading
import time

import pytest

from rlinf_algos.env_guard import EnvThread, EnvTimeout, needs_guard
from rlinf_algos.families import get_family


def _block(release: threading.Event) -> None:
    release.wait()  # the line the report names


def test_a_call_that_does_not_return_is_reported_after_its_bound() -> None:
    guard, release = EnvThread("test-env"), threading.Event()
    assert guard.call("step", 5.0, lambda x: x + 1, 1) == 2
    start = time.monotonic()
    with pytest.raises(EnvTimeout) as caught:
        guard.call("step", 0.3, _block, release)
    assert 0.3 <= time.monotonic() - start < 3.0
    assert caught.value.call == "step" and "test_algos_env_guard.py:" in caught.value.place
    # the env is lost: the next call fails at once, its close is skipped and said so
    with pytest.raises(EnvTimeout) as again:
        guard.call("reset", 5.0, lambda: None)
    assert again.value.earlier and again.value.call == "step"
    assert "its close (its step has been blocked at " in (guard.close(lambda: None) or "")
    assert guard.thread.daemon  # never holds the process at exit
    release.set()


def test_what_the_env_raises_reaches_the_caller_with_its_traceback() -> None:
    guard = EnvThread("test-env")

    def bad() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit) as caught:
        guard.call("step", 5.0, bad)
    assert any(f.name == "bad" for f in __import__("traceback").extract_tb(caught.value.__traceback__))
    assert guard.close() is None


def test_which_envs_run_on_a_thread_of_their_own() -> None:
    gym = get_family("gymnasium")
    assert not needs_guard(gym, "CartPole-v1", [])  # gymnasium's own: stepped directly
    assert needs_guard(gym, "CartPole-v1", ["gymnasium.wrappers:ClipReward"])  # a user's wrapper
    assert needs_guard(gym, "mymodule:MyEnv-v0", [])  # a user's module
