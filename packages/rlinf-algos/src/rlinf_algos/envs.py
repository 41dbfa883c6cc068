"""Seeded gymnasium vector environments with episode statistics (MuJoCo or any registered id).

:func:`make_vector_env` builds ``num_envs`` copies of a gymnasium id (``HalfCheetah-v5``,
``InvertedPendulum-v5``, or an id a plugin registers through ``rlinf_register_envs``), resets
them with ``seed`` (sub-env ``i`` gets ``seed + i``), and wraps them so that:

- sub-environments reset in the *same* step their episode ends (gymnasium's
  ``AutoresetMode.SAME_STEP``): the returned observation is the first of the next episode and
  ``info["final_obs"]`` holds the last one of the finished episode, which a learner needs to
  bootstrap through a truncation (:func:`final_observations`);
- episode returns and lengths are recorded (``RecordEpisodeStatistics``;
  :class:`VectorEnvStepper` collects them), and so is the success of every episode whose env
  reports ``info["is_success"]`` (gymnasium-robotics' convention; ``rlinf/FrankaReach-v0``): its
  value at the episode's last step.

:class:`VectorEnvStepper` is the env side of a rollout: it holds the current observations, clips
actions to the action space, steps, and returns one :class:`EnvStep` record. An ``EnvWorker``
wraps exactly this.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rlinf_algos import obs as obs_tree
from rlinf_algos.env_guard import EnvThread, EnvTimeout, needs_guard, user_place
from rlinf_algos.families import SimulatorError
from rlinf_algos.families.gymnasium import (
    bare_env_id,
    ensure_registered,
    env_kwargs_problems,
    missing_dependency_error,
    probe_spaces,
    resolve_wrappers,
    wrapper_problems,
)
from rlinf_algos.obs import describe_space
from rlinf_core.errors import ConfigError, RlinfError

__all__ = [
    "EnvError",
    "EnvStep",
    "VectorEnvStepper",
    "bare_env_id",
    "batch_obs",
    "ensure_registered",
    "env_call",
    "env_kwargs_problems",
    "final_observations",
    "make_vector_env",
    "missing_dependency_error",
    "nonfinite_rows",
    "probe_spaces",
    "resolve_wrappers",
    "wrapper_problems",
]


class EnvError(RlinfError):
    """The user's env failed (an exception, or ``SystemExit``, in its ``reset`` or ``step``), or
    gave a non-finite observation or reward under ``env.on_nonfinite: stop``: one line naming
    the env, the call and the place in the user's code. Exits 2."""

    exit_code = 2


def _user_place(err: BaseException) -> str:
    """``file:line`` of the user's env in ``err``'s traceback (:func:`~rlinf_algos.env_guard.user_place`)."""
    return user_place(err)


def env_call(
    env_id: str,
    call: str,
    fn: Any,
    *args: Any,
    guard: EnvThread | None = None,
    timeout: float = 60.0,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` (a vector env's ``reset`` or ``step``), with what the user's env
    raises, ``SystemExit`` included, turned into one :class:`EnvError` line naming the env, the
    call and the user's ``file:line``. rlinf's own errors and Ctrl-C pass through. With
    ``guard`` (:class:`~rlinf_algos.env_guard.EnvThread`) the call runs on its thread and a call
    that has not returned after ``timeout`` s (``env.timeout_s``) is an :class:`EnvError` too."""
    try:
        if guard is not None:
            return guard.call(call, timeout, fn, *args, **kwargs)
        return fn(*args, **kwargs)
    except (RlinfError, KeyboardInterrupt):
        raise
    except EnvTimeout as err:
        if err.earlier:
            raise EnvError(
                f"env {env_id!r}: its {err.call} never returned (blocked at {err.place} for {err.waited:.0f} s); "
                f"it cannot take a {call}"
            ) from None
        raise EnvError(
            f"env {env_id!r}: {call} did not return within {err.waited:g} s (env.timeout_s; blocked at "
            f"{err.place}); raise env.timeout_s if a {call} may take longer"
        ) from None
    except BaseException as err:
        what = (
            f"{type(err).__name__}: {err}".strip().splitlines()[0][:300] if str(err) else type(err).__name__
        )
        raise EnvError(f"env {env_id!r}: {call} raised {what} (at {_user_place(err)})") from None


def _reraise(err: BaseException) -> None:
    raise err


def nonfinite_rows(values: Any) -> np.ndarray:
    """``[N]`` bool: the sub-envs whose float entries in ``values`` (an array ``[N, ...]`` or a
    dict of them) hold a NaN or an infinity."""
    arrays = list(values.values()) if isinstance(values, dict) else [values]
    bad = None
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind != "f" or a.ndim == 0:
            continue
        rows = ~np.isfinite(a.reshape(a.shape[0], -1)).all(1)
        bad = rows if bad is None else bad | rows
    return bad if bad is not None else np.zeros(0, bool)


def make_vector_env(
    env_id: str,
    num_envs: int = 1,
    seed: int = 0,
    *,
    vectorization: Literal["sync", "async"] = "sync",
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    stats_window: int = 100,
    obs_mode: str = "state",
    image_size: tuple[int, int] = (64, 64),
    wrappers: Any = None,
    family: str = "gymnasium",
    options: Mapping[str, Any] | None = None,
    python: str | None = None,
    timeout_s: float = 60.0,
    tasks: list[str] | None = None,
    render: bool = False,
    guard: EnvThread | None = None,
) -> tuple[Any, Any]:
    """Build, seed and reset a vector env of an env family (``env.family``; :mod:`rlinf_algos.families`).

    Args:
        env_id: ``env.id``: a gymnasium id for the ``gymnasium`` family, a task or a suite
            for the others (``reach-v3``, ``MT10``, ``PushCube-v1``...).
        num_envs: the number of sub-environments.
        seed: sub-env ``i`` is reset with ``seed + i``; the action space is seeded with ``seed``.
        vectorization: ``"sync"`` steps the copies in this process (best for cheap MuJoCo
            tasks); ``"async"`` runs one subprocess per copy (``gymnasium`` family).
        env_kwargs: keyword arguments for ``gymnasium.make`` (``gymnasium`` family).
        max_episode_steps: override the id's time limit.
        stats_window: how many recent episodes ``return_queue`` / ``length_queue`` keep.
        obs_mode: ``state`` (the env's own observations), ``pixels`` (``{"image"}``) or
            ``pixels+state`` (``{"image", "state"}``): see :mod:`rlinf_algos.pixels`.
        image_size: ``(height, width)`` of the camera images of the pixel modes.
        wrappers: ``env.wrappers``: gymnasium wrappers (import paths, with kwargs) applied to
            every copy in order, before the pixel observation wrapper (``gymnasium`` family).
        family, options, python, timeout_s: ``env.family``, ``env.options``, ``env.python``
            and ``env.timeout_s``.
        tasks: the task of each sub-env, for a family with task suites (default: from ``env_id``).
        render: build the simulators with a camera for ``envs.render()`` (families other than
            ``gymnasium``, whose envs render through ``env_kwargs``).
        guard: build and reset the env on this :class:`~rlinf_algos.env_guard.EnvThread`
            (the reset bounded by ``timeout_s``; building by ``max(300, timeout_s)``); the
            caller then makes every call of the env through it.

    Every copy whose action space is not a flat ``Box`` (discrete, multi-discrete,
    multi-binary, dict or tuple) takes flat float actions (:class:`~rlinf_algos.action_spaces.
    FlatActions`, the outermost wrapper): ``single_action_space`` is then a ``Box`` ``[A]``.

    Returns:
        ``(envs, obs)``: the ``RecordEpisodeStatistics``-wrapped vector env and its first
        observations (``[num_envs, *obs_shape]``, or a dict of such arrays).
    """
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    from rlinf_algos.families import EnvRequest, get_family

    request = EnvRequest(
        id=env_id,
        num_envs=num_envs,
        seed=seed,
        vectorization=vectorization,
        kwargs=dict(env_kwargs or {}),
        max_episode_steps=max_episode_steps,
        obs_mode=obs_mode,
        image_size=(int(image_size[0]), int(image_size[1])),
        wrappers=list(wrappers or []),
        options=dict(options or {}),
        python=python,
        timeout_s=timeout_s,
        tasks=list(tasks) if tasks is not None else None,
        render=render,
    )

    def build() -> Any:
        return RecordEpisodeStatistics(get_family(family).make_vector(request), buffer_length=stats_window)

    envs = env_call(env_id, "make", build, guard=guard, timeout=max(300.0, timeout_s))
    try:
        obs, _ = env_call(env_id, "reset", envs.reset, seed=seed, guard=guard, timeout=timeout_s)
    except EnvError:
        if guard is None:
            envs.close()
        else:
            guard.close(envs.close)
        raise
    envs.action_space.seed(seed)
    return envs, obs


def batch_obs(obs: Any) -> Any:
    """A vector env's observations as rlinf carries them: float vectors as ``float32``; of a dict,
    every leaf an array (images keep their ``uint8``, a ``Text`` leaf's tuple of strings becomes
    a string array)."""
    if isinstance(obs, dict):
        return {
            k: np.asarray(v) if not isinstance(v, tuple) else np.array(v, dtype=np.str_)
            for k, v in obs.items()
        }
    return np.asarray(obs).astype(np.float32, copy=False)


def final_observations(next_obs: Any, info: dict[str, Any], done: np.ndarray) -> Any:
    """The true successor observations of a SAME_STEP-autoreset step: ``next_obs`` (an array
    ``[N, ...]`` or a dict of them) with the rows of finished episodes (``done`` ``[N]``)
    replaced by ``info["final_obs"]``. Returns ``next_obs`` itself when nothing finished (no
    copy)."""
    if not done.any():
        return next_obs
    final = info.get("final_obs")
    mask = info.get("_final_obs", done)
    if final is None:
        raise RuntimeError("an episode ended but the env gave no info['final_obs'] (is autoreset SAME_STEP?)")
    out = obs_tree.tree_map(np.copy, next_obs)
    for i in np.flatnonzero(mask):
        if isinstance(out, dict):
            for k, v in out.items():
                v[i] = final[i][k]
        else:
            out[i] = final[i]
    return out


@dataclass
class EnvStep:
    """One vector step, as the env side reports it.

    ``obs`` ``[N, D]`` float32 (or a dict of ``[N, ...]`` arrays, :mod:`rlinf_algos.obs`): the
    observations to act on next (first of a new episode where one ended); ``rewards`` ``[N]``
    float32; ``terminated``/``truncated`` ``[N]`` bool; ``final_obs`` (as ``obs``): the true
    successor observation (equal to ``obs`` where nothing ended);
    ``episode_returns`` / ``episode_lengths``: the episodes that ended in this step;
    ``episode_successes``: ``info["is_success"]`` at the last step of those of them whose env
    reports it (1.0 or 0.0; empty for envs without it); ``episode_index`` / ``success_index``:
    the sub-env of each entry of ``episode_returns`` / ``episode_successes``.
    """

    obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Any
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_successes: list[float] = field(default_factory=list)
    episode_index: list[int] = field(default_factory=list)
    success_index: list[int] = field(default_factory=list)

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


class VectorEnvStepper:
    """The env side of a rollout: a seeded vector env, its current observations, and counters.

    Args: as :func:`make_vector_env`; ``clip_actions`` clips actions to the action-space bounds
    before stepping (Gaussian policies sample outside them).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        seed: int = 0,
        *,
        vectorization: Literal["sync", "async"] = "sync",
        env_kwargs: dict[str, Any] | None = None,
        max_episode_steps: int | None = None,
        clip_actions: bool = True,
        stats_window: int = 100,
        obs_mode: str = "state",
        image_size: tuple[int, int] = (64, 64),
        wrappers: Any = None,
        family: str = "gymnasium",
        options: Mapping[str, Any] | None = None,
        python: str | None = None,
        timeout_s: float = 60.0,
        on_nonfinite: Literal["stop", "zero", "ignore"] = "stop",
    ) -> None:

        self.on_nonfinite = on_nonfinite
        self.nonfinite = 0  # sub-env steps whose observation or reward was not finite
        self.timeout_s = float(timeout_s)
        self.envs, obs = open_vector_env(
            env_id,
            num_envs,
            seed,
            vectorization=vectorization,
            env_kwargs=env_kwargs,
            max_episode_steps=max_episode_steps,
            stats_window=stats_window,
            obs_mode=obs_mode,
            image_size=image_size,
            wrappers=wrappers,
            family=family,
            options=options,
            python=python,
            timeout_s=timeout_s,
        )
        self.restarts = 0  # simulator processes started again after a failure
        space = self.envs.single_observation_space
        try:
            self.obs_space = describe_space(space)
        except ValueError as err:
            self.close()
            raise ConfigError(f"{env_id!r}: {err}", path="env.id") from None
        if self.obs_space["kind"] == "box" and len(self.obs_space["shape"]) != 1:
            self.close()
            raise ConfigError(
                f"{env_id!r} has observation space {space}; rlinf takes a flat Box (a vector) or a flat "
                "Dict (image, state, instruction); for images set env.obs_mode: pixels or pixels+state",
                path="env.id",
            )
        from rlinf_algos.action_spaces import action_spec_of

        aspace = self.envs.single_action_space
        try:
            self.action_space = action_spec_of(aspace)
        except ValueError as err:
            self.close()
            raise ConfigError(f"{env_id!r}: {err}", path="env.id") from None
        self.env_id = env_id
        self.num_envs = num_envs
        self.seed = seed
        self.env_kwargs = dict(env_kwargs or {})
        self.max_episode_steps = max_episode_steps
        self.wrappers = list(wrappers or [])
        self.obs_mode = obs_mode
        self.image_size = tuple(image_size)
        state = self.obs_space if self.obs_space["kind"] == "box" else self.obs_space["keys"].get("state")
        self.obs_dim = int(state["shape"][0]) if state else 0  # the vector part (0: none)
        self.act_dim = int(aspace.shape[0])
        self.action_low = np.asarray(aspace.low, dtype=np.float32)
        self.action_high = np.asarray(aspace.high, dtype=np.float32)
        self.clip_actions = clip_actions
        self.obs = batch_obs(obs)
        self.steps = 0  # env steps taken, summed over sub-envs
        self.episodes = 0
        self.recent_returns: deque[float] = deque(maxlen=stats_window)
        self.recent_lengths: deque[int] = deque(maxlen=stats_window)
        self.recent_successes: deque[float] = deque(maxlen=stats_window)

    def spaces(self) -> dict[str, Any]:
        """Sizes and bounds of the env's spaces and its time limit (what a recipe builds a policy
        from): ``obs_dim`` (the vector part; 0 for images alone), ``obs_space``
        (:func:`~rlinf_algos.obs.describe_space`), ``act_dim`` (of the flat action form),
        ``action_space`` (:func:`~rlinf_algos.action_spaces.action_space_spec`), ``action_low``,
        ``action_high`` and ``max_episode_steps`` (``env.max_episode_steps``, else the id's own,
        else ``None``)."""
        return {
            "obs_dim": self.obs_dim,
            "obs_space": self.obs_space,
            "act_dim": self.act_dim,
            "action_space": self.action_space,
            "action_low": self.action_low.tolist(),
            "action_high": self.action_high.tolist(),
            "max_episode_steps": self.max_episode_steps
            or getattr(getattr(self.envs, "spec", None), "max_episode_steps", None),
        }

    def reset(self, seed: int | list[int]) -> Any:
        """Reset every sub-env (``seed``: the first's, the others ``seed + i``; or one per
        sub-env) and return the new observations (also :attr:`obs`)."""
        obs, _ = self.envs.reset(seed=seed)
        self.obs = batch_obs(obs)
        return self.obs

    def random_actions(self) -> np.ndarray:
        """``[N, A]`` uniform samples from the (seeded) action space."""
        return np.asarray(self.envs.action_space.sample(), dtype=np.float32)

    def step(self, actions: np.ndarray) -> EnvStep:
        """Step every sub-env with ``actions`` ``[N, A]``; updates :attr:`obs` and the counters."""
        if self.clip_actions:
            actions = np.clip(actions, self.action_low, self.action_high)
        try:
            next_obs, rewards, terminated, truncated, info = self.envs.step(actions)
        except SimulatorError as err:
            # a simulator process died or hung: start a new one from fresh seeds (the episodes in
            # flight are lost) and let the caller drop this batch
            self.restarts += 1
            self.reset(self.seed + 100_003 * self.restarts)
            raise SimulatorError(
                f"{err}; started it again (restart {self.restarts}), this batch is dropped"
            ) from None
        next_obs = batch_obs(next_obs)
        rewards = np.asarray(rewards, dtype=np.float32)
        if self.on_nonfinite != "ignore":
            next_obs, rewards = self._finite(next_obs, rewards)
        done = terminated | truncated
        final = final_observations(next_obs, info, done)
        out = EnvStep(
            obs=next_obs,
            rewards=np.asarray(rewards, dtype=np.float32),
            terminated=np.asarray(terminated, dtype=bool),
            truncated=np.asarray(truncated, dtype=bool),
            final_obs=final,
        )
        if "_episode" in info:
            final_info = info.get("final_info") or {}
            key = "is_success" if "is_success" in final_info else "success"
            success, has_success = final_info.get(key), final_info.get(f"_{key}")
            for i in np.flatnonzero(info["_episode"]):
                r, n = float(info["episode"]["r"][i]), int(info["episode"]["l"][i])
                out.episode_returns.append(r)
                out.episode_lengths.append(n)
                out.episode_index.append(int(i))
                if success is not None and (has_success is None or has_success[i]):
                    out.episode_successes.append(float(bool(success[i])))
                    out.success_index.append(int(i))
            self.recent_returns.extend(out.episode_returns)
            self.recent_lengths.extend(out.episode_lengths)
            self.recent_successes.extend(out.episode_successes)
            self.episodes += len(out.episode_returns)
        self.obs = next_obs
        self.steps += self.num_envs
        return out

    def _finite(self, obs: Any, rewards: np.ndarray) -> tuple[Any, np.ndarray]:
        """Count (and under ``zero`` replace by 0) the non-finite observations and rewards of a
        step; under ``stop`` the first is an :class:`EnvError` naming the sub-env and step."""
        bad_obs, bad_rew = nonfinite_rows(obs), ~np.isfinite(rewards)
        bad = bad_rew | (bad_obs if bad_obs.size else False)
        if not bad.any():
            return obs, rewards
        self.nonfinite += int(bad.sum())
        if self.on_nonfinite == "stop":
            i = int(np.flatnonzero(bad)[0])
            what = "reward" if bad_rew[i] else "observation"
            value = rewards[i] if bad_rew[i] else "holds NaN or inf"
            raise EnvError(
                f"env {self.env_id!r}: sub-env {i} gave a non-finite {what} ({value}) at its env step "
                f"{self.steps // max(1, self.num_envs) + 1}; fix the env, or set env.on_nonfinite: zero "
                "(replace by 0 and count) or ignore"
            )
        rewards = np.where(np.isfinite(rewards), rewards, 0.0).astype(np.float32)
        obs = obs_tree.tree_map(
            lambda a: (
                np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0) if np.asarray(a).dtype.kind == "f" else a
            ),
            obs,
        )
        return obs, rewards

    def close(self) -> str | None:
        """Close the env; returns what was skipped (``None``: nothing): an env whose call never
        returned is not closed (:meth:`~rlinf_algos.env_guard.EnvThread.close`)."""
        return self.envs.close()


class GuardedVectorEnv:
    """A vector env from :func:`make_vector_env` whose ``reset``, ``step``, ``render`` and
    ``close`` go through :func:`env_call`: a user's env that raises is one :class:`EnvError`
    line, and one whose call does not return within ``timeout_s`` (``env.timeout_s``) is too,
    when it runs on an :class:`~rlinf_algos.env_guard.EnvThread` (``guard``; ``None`` for envs
    that cannot block, stepped directly). For the loops that play an env outside a run's env
    worker: ``rlinf eval``, suite evaluation and the demonstration recorder. Every other
    attribute is the wrapped env's."""

    def __init__(self, envs: Any, env_id: str, guard: EnvThread | None, timeout_s: float) -> None:
        self.vector_env, self.env_id, self.guard, self.timeout_s = envs, env_id, guard, float(timeout_s)

    def _call(self, call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return env_call(self.env_id, call, fn, *args, guard=self.guard, timeout=self.timeout_s, **kwargs)

    def reset(self, **kwargs: Any) -> Any:
        return self._call("reset", self.vector_env.reset, **kwargs)

    def step(self, actions: Any) -> Any:
        return self._call("step", self.vector_env.step, actions)

    def render(self) -> Any:
        return self._call("render", self.vector_env.render)

    def close(self) -> str | None:
        """Close the env; returns what was skipped (``None``: nothing): an env whose call never
        returned is not closed (:meth:`~rlinf_algos.env_guard.EnvThread.close`; a warning says
        so)."""
        if self.guard is None:
            env_call(self.env_id, "close", self.vector_env.close)
            return None
        try:
            skipped = self.guard.close(self.vector_env.close, timeout=self.timeout_s)
        except Exception as err:  # what the user's close raised: one line
            env_call(self.env_id, "close", _reraise, err)
            raise
        if skipped:
            import logging

            logging.getLogger("rlinf.env").warning("env %r: skipped %s", self.env_id, skipped)
        return skipped

    def __getattr__(self, name: str) -> Any:
        if name == "vector_env":  # not set yet (a copy being built)
            raise AttributeError(name)
        return getattr(self.vector_env, name)


def open_vector_env(
    env_id: str, num_envs: int = 1, seed: int = 0, **kwargs: Any
) -> tuple[GuardedVectorEnv, Any]:
    """:func:`make_vector_env` (same arguments), its env a :class:`GuardedVectorEnv`: every call
    bounded by ``timeout_s`` where the env runs in rlinf's process and could block
    (:func:`~rlinf_algos.env_guard.needs_guard`)."""
    from rlinf_algos.families import get_family

    timeout_s = float(kwargs.get("timeout_s", 60.0))
    family = kwargs.get("family", "gymnasium")
    guard = (
        EnvThread(f"rlinf-env-{bare_env_id(env_id)}")
        if needs_guard(get_family(family), env_id, kwargs.get("wrappers"))
        else None
    )
    try:
        envs, obs = make_vector_env(env_id, num_envs, seed, guard=guard, **kwargs)
    except BaseException:
        if guard is not None:
            guard.close()
        raise
    return GuardedVectorEnv(envs, env_id, guard, timeout_s), obs
