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

import difflib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rlinf_algos import obs as obs_tree
from rlinf_algos.obs import describe_space
from rlinf_core.config import describe_value
from rlinf_core.errors import ConfigError, ConfigProblem, join_path

__all__ = [
    "EnvStep",
    "VectorEnvStepper",
    "bare_env_id",
    "batch_obs",
    "ensure_registered",
    "env_kwargs_problems",
    "final_observations",
    "make_vector_env",
    "missing_dependency_error",
    "probe_spaces",
    "resolve_wrappers",
    "wrapper_problems",
]


def ensure_registered(env_id: str, path: str = "env.id") -> None:
    """Make sure gymnasium knows ``env_id``: if it does not, register the ids plugins contribute
    (``rlinf_register_envs``) and look again. An unknown id is a :class:`ConfigError` at ``path``
    naming the closest registered ids.

    ``module:EnvName-vN`` (gymnasium's own form) imports ``module`` first, which registers the
    env, as ``gymnasium.make`` does; the module must be importable here (and on every node that
    runs envs)."""
    import gymnasium

    if ":" in env_id:
        module, _, name = env_id.partition(":")
        _import_env_module(module, env_id, path)
        if name in gymnasium.registry:
            return
        close = difflib.get_close_matches(name, list(gymnasium.registry), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(f'{module}:{c}') for c in close)}?" if close else ""
        raise ConfigError(
            f"module {module!r} was imported but registers no env {name!r}{hint} (it should call "
            f"gymnasium.register(id={name!r}, entry_point=...) when imported)",
            path=path,
        )
    if env_id in gymnasium.registry:
        return
    from rlinf_core.envs import register_with_gymnasium
    from rlinf_core.plugins import load_plugins

    register_with_gymnasium(load_plugins().envs.values())
    if env_id in gymnasium.registry:
        return
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"{env_id!r} is not a registered gymnasium environment id{hint} (MuJoCo ids look like "
        f"'HalfCheetah-v5'; plugin ids are registered by installed rlinf plugins)",
        path=path,
    )


def _import_env_module(module: str, env_id: str, path: str) -> None:
    import importlib

    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(
            f"{env_id!r} is not of the form 'module:EnvName-vN' (module: a dotted Python module name)",
            path=path,
        )
    try:
        importlib.import_module(module)
    except Exception as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ConfigError(
            f"cannot import module {module!r} of {env_id!r} ({why}); 'module:EnvName-vN' needs the module "
            "importable (installed, or on PYTHONPATH)",
            path=path,
        ) from None


# gymnasium env families whose dependencies rlinf-algos ships as an optional extra:
# entry-point module prefix -> (what they need, the extra)
_ENV_EXTRAS = {"gymnasium.envs.box2d.": ("Box2D and pygame-ce", "box2d")}


def missing_dependency_error(env_id: str, err: BaseException, path: str = "env.id") -> ConfigError:
    """The one-line :class:`ConfigError` for an env that gymnasium cannot build because a package
    it imports is missing (``gymnasium.error.DependencyNotInstalled``, ``err``): which module is
    missing and what to install (rlinf-algos' extra for the envs it has one for, e.g.
    ``box2d`` for ``LunarLander-v3``)."""
    import gymnasium

    cause = err.__cause__ or err.__context__
    module = getattr(cause, "name", None)
    missing = f"no module named {module!r}" if module else str(err).splitlines()[0][:160]
    try:
        entry = gymnasium.spec(bare_env_id(env_id)).entry_point
    except Exception:
        entry = None
    for prefix, (needs, extra) in _ENV_EXTRAS.items():
        if isinstance(entry, str) and entry.startswith(prefix):
            return ConfigError(
                f"{env_id!r} needs {needs}, which are not installed here ({missing}): install rlinf-algos' "
                f"{extra} extra (`uv sync --all-packages` in the rlinf workspace, or "
                f"`pip install 'rlinf-algos[{extra}]'`)",
                path=path,
            )
    return ConfigError(
        f"{env_id!r} cannot be built here: a package it needs is not installed ({missing}); install it "
        "on every machine that runs envs",
        path=path,
    )


def bare_env_id(env_id: str) -> str:
    """``EnvName-vN`` of ``module:EnvName-vN`` (the id gymnasium registered); other ids as they are."""
    return env_id.partition(":")[2] if ":" in env_id else env_id


# -- env.wrappers --------------------------------------------------------------------------------


def _wrapper_entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """``(import path, kwargs)`` of one ``env.wrappers`` entry (a string, or ``{path, kwargs}``,
    a dict or the config model)."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict):
        return str(entry.get("path")), dict(entry.get("kwargs") or {})
    return str(entry.path), dict(entry.kwargs or {})


def _load_wrapper(path: str, where: str) -> Any:
    """The object ``module:Name`` (or ``module.Name``) names: a per-env gymnasium wrapper (a
    class or a callable ``env -> env``). Raises :class:`ConfigError` at ``where``."""
    import importlib

    import gymnasium

    form = "give 'module:Name' of a gymnasium wrapper, e.g. 'gymnasium.wrappers:ClipReward'"
    if ":" in path:
        module, _, name = path.partition(":")
    else:
        module, _, name = path.rpartition(".")
    if not module or not name or not all(p.isidentifier() for p in [*module.split("."), *name.split(".")]):
        raise ConfigError(f"{describe_value(path)} is not an import path: {form}", path=where)
    try:
        obj: Any = importlib.import_module(module)
    except Exception as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ConfigError(
            f"cannot import module {module!r} of {path!r} ({why}); {form}", path=where
        ) from None
    for attr in name.split("."):
        if not hasattr(obj, attr):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(attr, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"module {module!r} has no {attr!r}{hint} ({form})", path=where)
        obj = getattr(obj, attr)
    if isinstance(obj, type) and issubclass(obj, gymnasium.vector.VectorWrapper):
        raise ConfigError(
            f"{path!r} is a vector wrapper; env.wrappers takes per-env wrappers (gymnasium.wrappers:..., "
            "not gymnasium.wrappers.vector:...)",
            path=where,
        )
    if not callable(obj):
        raise ConfigError(f"{path!r} is not callable ({type(obj).__name__}); {form}", path=where)
    return obj


def wrapper_problems(wrappers: Any, path: str = "env.wrappers") -> list[ConfigProblem]:
    """Every entry of ``env.wrappers`` that does not import, is no per-env wrapper, or whose
    ``kwargs`` its signature does not take (each at its YAML path)."""
    import inspect

    problems: list[ConfigProblem] = []
    for i, entry in enumerate(wrappers or []):
        if isinstance(entry, dict) and not (
            isinstance(entry.get("path"), str) and isinstance(entry.get("kwargs") or {}, dict)
        ):
            continue  # the config model reports its shape
        if not isinstance(entry, (str, dict)) and not hasattr(entry, "path"):
            continue
        target, kwargs = _wrapper_entry(entry)
        where = f"{path}[{i}]" if isinstance(entry, str) else f"{path}[{i}].path"
        try:
            obj = _load_wrapper(target, where)
        except ConfigError as err:
            problems.extend(err.problems)
            continue
        try:
            inspect.signature(obj).bind(None, **kwargs)
        except TypeError as err:
            problems.append(
                ConfigProblem(
                    f"{path}[{i}].kwargs", f"{target!r} does not take {describe_value(kwargs)}: {err}"
                )
            )
        except ValueError:  # no signature (a builtin): its own error will say, when applied
            pass
    return problems


def resolve_wrappers(wrappers: Any, path: str = "env.wrappers") -> list[Any]:
    """``env.wrappers`` as callables ``env -> env`` to apply in order (``functools.partial`` of
    each wrapper with its kwargs: picklable, for async vector envs)."""
    import functools

    problems = wrapper_problems(wrappers, path)
    if problems:
        raise ConfigError(problems)
    out = []
    for i, entry in enumerate(wrappers or []):
        target, kwargs = _wrapper_entry(entry)
        out.append(
            _Wrap(functools.partial(_load_wrapper(target, f"{path}[{i}]"), **kwargs), target, f"{path}[{i}]")
        )
    return out


class _Wrap:
    """One ``env.wrappers`` entry applied to an env: a wrapper that fails on it is a
    :class:`ConfigError` at its YAML path (picklable, for async vector envs)."""

    def __init__(self, fn: Any, target: str, path: str) -> None:
        self.fn, self.target, self.path = fn, target, path

    def __call__(self, env: Any) -> Any:
        try:
            return self.fn(env)
        except Exception as err:
            why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            raise ConfigError(
                f"{self.target!r} failed on {env.spec.id if env.spec else env}: {why}", path=self.path
            ) from None


def probe_spaces(env_id: str, kwargs: Any = None, wrappers: Any = None) -> tuple[Any, Any] | None:
    """``(observation_space, action_space)`` of one copy of ``env_id`` (with ``env.kwargs`` and
    ``env.wrappers``), built and closed here, for the checks before anything starts; ``None``
    where it is not built here: ids of installed plugins (a robot's env may connect to the robot
    when built; the env worker checks those) and any env that fails to build here. Raises
    :class:`ConfigError` for a wrapper that does not import or fails on the env."""
    import json

    try:
        key = json.dumps([env_id, kwargs or {}, [_wrapper_entry(w) for w in wrappers or []]], sort_keys=True)
    except (TypeError, ValueError):  # kwargs that are not plain data: build it every time
        return _probe_spaces(env_id, kwargs, wrappers)
    if key not in _PROBED:
        if len(_PROBED) >= 64:
            _PROBED.clear()
        _PROBED[key] = _probe_spaces(env_id, kwargs, wrappers)
    return _PROBED[key]


_PROBED: dict[str, tuple[Any, Any] | None] = {}
""":func:`probe_spaces` results of this process (validation runs more than once per run)."""


def _probe_spaces(env_id: str, kwargs: Any, wrappers: Any) -> tuple[Any, Any] | None:
    import gymnasium

    try:
        ensure_registered(env_id)
        spec = gymnasium.spec(bare_env_id(env_id))
    except Exception:
        return None
    entry = spec.entry_point
    own = isinstance(entry, str) and entry.startswith("gymnasium.")
    if not (own or ":" in env_id):
        return None
    try:
        env = gymnasium.make(bare_env_id(env_id), **dict(kwargs or {}))
    except gymnasium.error.DependencyNotInstalled as err:
        raise missing_dependency_error(env_id, err) from None
    except (TypeError, ValueError) as err:
        _raise_kwargs_error(env_id, kwargs, err)
        return None
    except Exception:  # unknown keys are reported by env_kwargs_problems
        return None
    try:
        try:  # a value of the wrong type often fails only when the env first uses it
            env.reset(seed=0)
        except (TypeError, ValueError) as err:
            _raise_kwargs_error(env_id, kwargs, err)
        except Exception:
            pass  # not the kwargs' fault as far as can be told here: the env worker reports it
        for wrap in resolve_wrappers(wrappers):  # a wrapper that fails is reported at its YAML path
            env = wrap(env)
        return env.observation_space, env.action_space
    finally:
        env.close()


def _raise_kwargs_error(env_id: str, kwargs: Any, err: BaseException) -> None:
    """A ``ConfigError`` at ``env.kwargs`` when the env, built with them, refused a value
    (a ``TypeError``/``ValueError`` from building or resetting it); nothing without kwargs."""
    if not kwargs:
        return
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    raise ConfigError(
        [
            ConfigProblem(
                "env.kwargs",
                f"{env_id!r} built with {dict(kwargs)!r} fails when built and reset: {type(err).__name__}: {first} "
                "(check each value's type against the env's constructor)",
            )
        ]
    )


def env_kwargs_problems(env_id: str, kwargs: Any, path: str = "env.kwargs") -> list[ConfigProblem]:
    """The keys of ``kwargs`` that the constructor of the registered ``env_id`` does not take
    (with the closest it takes), checked against its signature without building the env. Where
    the constructor takes ``**kwargs``, one of gymnasium's own envs is built once to see (a cheap
    simulation) and its error reported; nothing is reported for other such constructors, or one
    whose module does not import here (it may on the node that runs the env)."""
    import inspect

    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    if not isinstance(kwargs, dict) or not kwargs:
        return []
    try:
        spec = gymnasium.spec(bare_env_id(env_id))
        entry = spec.entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        params = inspect.signature(creator).parameters.values()
    except Exception:  # not importable on this machine, or no signature
        return []
    if creator is None:
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        # the signature does not say; gymnasium's own envs (MuJoCo, classic control) are cheap
        # simulations: build one to see, the way an env worker would
        if not getattr(creator, "__module__", "").startswith("gymnasium."):
            return []
        try:
            gymnasium.make(env_id, **kwargs).close()
        except Exception as err:
            why = f"{type(err).__name__}: {err}".splitlines()[0]
            why = why if len(why) <= 160 else why[:157] + "..."
            return [ConfigProblem(path, f"cannot create {env_id!r} with these kwargs ({why})")]
        return []
    takes = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    takes |= {"max_episode_steps", "disable_env_checker"}  # gymnasium.make's own
    problems = []
    for key in kwargs:
        if key in takes:
            continue
        close = difflib.get_close_matches(str(key), sorted(takes), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            ConfigProblem(
                join_path(path, str(key)),
                f"{env_id!r} takes no keyword argument {describe_value(key)} ({hint}it takes: "
                f"{', '.join(sorted(takes)) or 'none'})",
            )
        )
    return problems


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
) -> tuple[Any, Any]:
    """Build, seed and reset a vector env.

    Args:
        env_id: a gymnasium id.
        num_envs: the number of sub-environments.
        seed: sub-env ``i`` is reset with ``seed + i``; the action space is seeded with ``seed``.
        vectorization: ``"sync"`` steps the copies in this process (best for cheap MuJoCo
            tasks); ``"async"`` runs one subprocess per copy.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        max_episode_steps: override the id's time limit.
        stats_window: how many recent episodes ``return_queue`` / ``length_queue`` keep.
        obs_mode: ``state`` (the env's own observations), ``pixels`` (``{"image"}``) or
            ``pixels+state`` (``{"image", "state"}``): see :mod:`rlinf_algos.pixels`.
        image_size: ``(height, width)`` of the camera images of the pixel modes.
        wrappers: ``env.wrappers``: gymnasium wrappers (import paths, with kwargs) applied to
            every copy in order, before the pixel observation wrapper.

    Every copy whose action space is not a flat ``Box`` (discrete, multi-discrete,
    multi-binary, dict or tuple) takes flat float actions (:class:`~rlinf_algos.action_spaces.
    FlatActions`, the outermost wrapper): ``single_action_space`` is then a ``Box`` ``[A]``.

    Returns:
        ``(envs, obs)``: the ``RecordEpisodeStatistics``-wrapped vector env and its first
        observations (``[num_envs, *obs_shape]``, or a dict of such arrays).
    """
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    from rlinf_algos.action_spaces import wrap_flat_actions

    ensure_registered(env_id)
    user_wrappers = resolve_wrappers(wrappers)
    env_id = bare_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    from rlinf_algos.pixels import PixelObservation, pixel_mode_kwargs, prepare_gl

    prepare_gl()  # before any env can make a GL context (envs that emit images render themselves)
    per_env = list(user_wrappers)
    if obs_mode != "state":
        kwargs = {**pixel_mode_kwargs(env_id, image_size), **kwargs}
        per_env.append(PixelObservation(obs_mode, image_size))
    per_env.append(wrap_flat_actions)
    try:
        envs = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            wrappers=per_env,
            **kwargs,
        )
    except gym.error.DependencyNotInstalled as err:
        raise missing_dependency_error(env_id, err) from None
    except TypeError as err:  # an unknown keyword of the env's constructor
        raise ConfigError(
            f"cannot create {env_id!r} with kwargs {describe_value(kwargs)}: {describe_value(str(err))}",
            path="env.kwargs",
        ) from None
    envs = RecordEpisodeStatistics(envs, buffer_length=stats_window)
    obs, _ = envs.reset(seed=seed)
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
    ) -> None:
        self.envs, obs = make_vector_env(
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
        )
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
        next_obs, rewards, terminated, truncated, info = self.envs.step(actions)
        next_obs = batch_obs(next_obs)
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

    def close(self) -> None:
        self.envs.close()
