"""ManiSkill3 tasks as one batched gymnasium vector env (:class:`ManiSkillVectorEnv`).

ManiSkill batches its own sub-environments: ``gym.make(task, num_envs=N)`` on the GPU
simulator (``sim_backend="gpu"``, PhysX on CUDA) is one env holding N scenes, stepped with one
``[N, A]`` tensor. Its CPU simulator refuses ``num_envs > 1`` ("Cannot set the sim backend to
'cpu' and have multiple environments"), so with ``sim_backend="cpu"`` this class holds N
ManiSkill envs of one scene each, in this process, and stacks them; the interface is the same,
and nothing else changes between the two.

What rlinf's runtime gets (gymnasium's ``VectorEnv`` contract with ``AutoresetMode.SAME_STEP``,
as :func:`rlinf_algos.envs.make_vector_env` gives it):

- observations as numpy arrays on the CPU: ``state`` ``float32 [N, D]`` (ManiSkill's state
  vector); ``pixels+state`` (alias ``rgb``) ``{"image": uint8 [N, H, W, 3], "state": float32
  [N, D]}`` (``state``: the robot's proprioception and the task's extras, as ManiSkill's own
  ``FlattenRGBDObservationWrapper`` flattens them); ``pixels`` ``{"image"}``. Images come from
  one camera (``camera``; the task's first by default), rendered at ``image_size`` with SAPIEN's
  ``minimal`` shader pack, the right way up. With ``instruction`` set, every observation also
  holds ``"instruction"``: that text, one string per sub-env;
- a sub-env whose episode ended (ManiSkill's success or fail terminates, its time limit
  truncates) is reset in the same step: its row of the returned observation is the new
  episode's first, ``info["final_obs"]`` (an object array ``[N]``, ``info["_final_obs"]`` its
  mask) holds the finished episode's last observation, and ``info["final_info"]`` holds
  ``success`` (ManiSkill's ``info["success"]`` at the last step) and ``success_once`` (success
  at any step of the episode), each with its ``_success`` / ``_success_once`` mask;
- ``ignore_terminations=True`` (RLinf's ManiSkill setting) runs every episode to the time
  limit: success no longer ends it, ``success_once`` says whether it was reached;
- seeding: ``reset(seed=S)`` resets sub-env ``i`` with ``S + i`` (or one seed each from a
  list), and on the CPU simulator every later automatic reset draws its seed from a generator
  seeded by that, so a seed gives the same episodes. The GPU simulator resets finished scenes
  together (``reset(options={"env_idx": ...})``, ManiSkill's partial reset) from its own RNG.

SAPIEN needs a Vulkan device even for state observations: this class points the Vulkan loader
at the lavapipe :mod:`rlinf_algos.vulkan` caches (before SAPIEN is imported), and raises a
one-line :class:`~rlinf_algos.vulkan.VulkanError` naming the setup command when there is none.
"""

from __future__ import annotations

import dataclasses
import difflib
import string
import warnings
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rlinf_algos.vulkan import apply_vulkan_env, check_vulkan_device
from rlinf_core.errors import ConfigError

__all__ = ["INSTRUCTION_SPACE", "OBS_MODES", "SIM_BACKENDS", "ManiSkillVectorEnv", "import_maniskill"]

OBS_MODES = ("state", "pixels", "pixels+state", "rgb")
"""``rgb`` is ``pixels+state``."""
SIM_BACKENDS = ("cpu", "gpu")

# Letters, digits, space and ASCII punctuation (gymnasium's default ``Text`` charset has no space).
INSTRUCTION_SPACE = spaces.Text(
    max_length=256, charset=string.ascii_letters + string.digits + " " + string.punctuation
)


def import_maniskill() -> Any:
    """Import ManiSkill (registering its tasks with gymnasium) after pointing the Vulkan loader
    at rlinf's cached driver, and check SAPIEN finds a device; returns ``mani_skill``. Raises
    :class:`ConfigError` when it is not installed, ``VulkanError`` when no device is usable."""
    apply_vulkan_env()
    try:
        check_vulkan_device()  # imports SAPIEN alone (a second), not ManiSkill (15-30 s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mani_skill
            import mani_skill.envs  # registers the tasks
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in ("mani_skill", "sapien"):
            raise
        raise ConfigError(
            f"ManiSkill is not installed here (no module named {err.name!r}): install rlinf-algos' "
            "maniskill extra (`uv sync --all-packages` in the rlinf workspace, or "
            "`pip install 'rlinf-algos[maniskill]'`)",
            path="env",
        ) from None
    return mani_skill


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _cat(parts: list[Any], dtype: Any) -> np.ndarray:
    """ManiSkill's per-env ``[b]`` tensors as one new numpy array ``[N]`` of ``dtype``."""
    if len(parts) == 1:
        return _to_numpy(parts[0]).reshape(-1).astype(dtype)
    return np.concatenate([_to_numpy(p).reshape(-1) for p in parts]).astype(dtype, copy=False)


def _time_limit(env: Any) -> int | None:
    """The ``max_episode_steps`` of ManiSkill's ``TimeLimitWrapper`` (or gymnasium's) around ``env``."""
    while env is not None:
        limit = getattr(env, "_max_episode_steps", None)
        if limit is not None:
            return int(limit)
        env = getattr(env, "env", None)
    return None


class ManiSkillVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` sub-environments of a ManiSkill3 task, batched (see the module docstring).

    Args:
        task: a ManiSkill task id (``PushCube-v1``, ``PickCube-v1``, ...).
        num_envs: the number of sub-environments.
        obs_mode: ``state``, ``pixels``, ``pixels+state`` or ``rgb`` (= ``pixels+state``).
        sim_backend: ``cpu`` (PhysX on the CPU, one ManiSkill env per sub-env) or ``gpu``
            (PhysX on CUDA, one ManiSkill env of ``num_envs`` scenes).
        render_backend: SAPIEN's render device (``cpu``, ``gpu``, ``none``, or a device name);
            default ``cpu`` with the CPU simulator, ``gpu`` with the GPU one.
        control_mode: ManiSkill's controller (``pd_ee_delta_pose``, ...); default the task's.
        image_size: ``(height, width)`` of the camera images.
        camera: the camera the images come from; default the task's first.
        shader_pack: SAPIEN's shader pack for the cameras (``minimal``: the cheapest).
        max_episode_steps: the time limit; default the task's.
        ignore_terminations: run every episode to the time limit (success does not end it).
        instruction: a text to hand the policy with every observation (``"instruction"``).
        env_kwargs: more keyword arguments for ``gym.make``.
        seed: when given, reset every sub-env with it (as ``reset(seed=seed)``).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        obs_mode: str = "state",
        sim_backend: str = "cpu",
        render_backend: str | None = None,
        control_mode: str | None = None,
        image_size: tuple[int, int] = (64, 64),
        camera: str | None = None,
        shader_pack: str = "minimal",
        max_episode_steps: int | None = None,
        ignore_terminations: bool = False,
        instruction: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        if obs_mode not in OBS_MODES:
            raise ConfigError(
                f"obs_mode {obs_mode!r} is not one of {', '.join(OBS_MODES)}", path="env.obs_mode"
            )
        if sim_backend not in SIM_BACKENDS:
            raise ConfigError(
                f"sim_backend {sim_backend!r} is not one of {', '.join(SIM_BACKENDS)}", path="env.sim_backend"
            )
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}", path="env.num_envs")
        if instruction is not None and not INSTRUCTION_SPACE.contains(instruction):
            raise ConfigError(
                f"instruction {instruction!r} is not 1-{INSTRUCTION_SPACE.max_length} characters of letters, "
                "digits, spaces and ASCII punctuation",
                path="env.instruction",
            )
        self._mode = "pixels+state" if obs_mode == "rgb" else obs_mode
        self._closed = False
        self._envs: list[Any] = []
        mani_skill = import_maniskill()
        self._check_task(task, mani_skill)
        height, width = (int(v) for v in image_size)
        kwargs: dict[str, Any] = {
            "obs_mode": "state" if self._mode == "state" else "rgb",
            "sim_backend": sim_backend,
            "render_backend": render_backend or ("gpu" if sim_backend == "gpu" else "cpu"),
            **({"control_mode": control_mode} if control_mode else {}),
            **({"max_episode_steps": int(max_episode_steps)} if max_episode_steps else {}),
            **dict(env_kwargs or {}),
        }
        if self._mode != "state":
            kwargs.setdefault(
                "sensor_configs", {"shader_pack": shader_pack, "width": width, "height": height}
            )
        batch = num_envs if sim_backend == "gpu" else 1
        try:
            for _ in range(num_envs // batch):
                self._envs.append(self._make(task, batch, kwargs))
        except BaseException:
            self.close()
            raise
        self._batch = batch
        first = self._envs[0]
        self.task = task
        self.num_envs = num_envs
        self.sim_backend = sim_backend
        self.instruction = instruction
        self.ignore_terminations = bool(ignore_terminations)
        self.max_episode_steps = _time_limit(first)
        self.image_size = (height, width)
        self.camera = camera
        self.spec = (
            dataclasses.replace(first.spec, max_episode_steps=self.max_episode_steps) if first.spec else None
        )
        self.render_mode = None
        self.single_action_space = first.unwrapped.single_action_space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._device = first.unwrapped.device
        self._success_once = np.zeros(num_envs, dtype=bool)
        # where the CPU simulator's sub-envs draw their next seed (ManiSkill's unseeded reset
        # draws from torch's global RNG, which no seed given here would control)
        self._seed_rngs = [np.random.default_rng() for _ in range(num_envs)]
        raw = first.unwrapped._init_raw_obs  # the first reset's observation: its layout
        if self._mode != "state":
            sensors = list(raw["sensor_data"])
            if camera is None:
                self.camera = sensors[0]
            elif camera not in sensors:
                self.close()
                raise ConfigError(
                    f"{task!r} has no camera {camera!r}; its cameras: {', '.join(sensors)}", path="env.camera"
                )
        sample = self._convert(raw)
        self.single_observation_space = self._space_of(sample)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        if seed is not None:
            self.reset(seed=seed)

    # -- building ----------------------------------------------------------------------------

    @staticmethod
    def _check_task(task: str, mani_skill: Any) -> None:
        """``ConfigError`` at ``env.id`` for an id ManiSkill does not register, or whose assets
        are not downloaded (ManiSkill would ask on stdin, then fetch them from a hub)."""
        from mani_skill.utils import assets
        from mani_skill.utils.registration import REGISTERED_ENVS

        if task not in REGISTERED_ENVS:
            close = difflib.get_close_matches(task, list(REGISTERED_ENVS), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise ConfigError(
                f"{task!r} is not a ManiSkill {mani_skill.__version__} task ({hint}tasks that build offline "
                "with the bundled robots: PushCube-v1, PickCube-v1, StackCube-v1, PegInsertionSide-v1, PushT-v1)",
                path="env.id",
            )
        missing = []
        for asset_id in REGISTERED_ENVS[task].asset_download_ids or []:
            ids = (
                assets.expand_data_group_into_individual_data_source_ids(asset_id)
                if asset_id in assets.DATA_GROUPS
                else [asset_id]
            )
            missing += [i for i in ids if not assets.is_data_source_downloaded(i)]
        if missing:
            more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
            raise ConfigError(
                f"{task!r} needs ManiSkill assets that are not downloaded here: {', '.join(missing[:3])}{more}; "
                f"fetch them with `python -m mani_skill.utils.download_asset {task}` where a network "
                "reaches them, or pick a task built from the bundled robots (PushCube-v1, PickCube-v1, ...)",
                path="env.id",
            )

    @staticmethod
    def _make(task: str, batch: int, kwargs: dict[str, Any]) -> Any:
        try:
            return gymnasium.make(task, num_envs=batch, **kwargs)
        except (EOFError, SystemExit):  # its asset prompt with no terminal, or its exit() after it
            raise ConfigError(
                f"{task!r} needs ManiSkill assets (a robot's) that are not downloaded here; pick a task "
                "built from the bundled robots (PushCube-v1, PickCube-v1, ...)",
                path="env.id",
            ) from None
        except (TypeError, ValueError, NotImplementedError, AssertionError) as err:
            why = f"{type(err).__name__}: {err}".strip().splitlines()[0][:240]
            raise ConfigError(
                f"cannot create ManiSkill task {task!r} with {kwargs!r}: {why}", path="env.kwargs"
            ) from None

    def _space_of(self, sample: Any) -> spaces.Space:
        if not isinstance(sample, dict):
            return spaces.Box(-np.inf, np.inf, shape=sample.shape[1:], dtype=np.float32)
        out: dict[str, spaces.Space] = {}
        for key, value in sample.items():
            if key == "image":
                out[key] = spaces.Box(0, 255, shape=value.shape[1:], dtype=np.uint8)
            elif key == "instruction":
                out[key] = INSTRUCTION_SPACE
            else:
                out[key] = spaces.Box(-np.inf, np.inf, shape=value.shape[1:], dtype=np.float32)
        return spaces.Dict(out)

    # -- observations ------------------------------------------------------------------------

    def _convert(self, raw: Any) -> Any:
        """One ManiSkill env's batched observation as rlinf's numpy observation ``[b, ...]``."""
        if self._mode == "state":
            return _to_numpy(raw).astype(np.float32, copy=False)
        from mani_skill.utils import common

        out: dict[str, np.ndarray] = {"image": _to_numpy(raw["sensor_data"][self.camera]["rgb"])}
        if self._mode == "pixels+state":
            rest = {k: v for k, v in raw.items() if k not in ("sensor_data", "sensor_param")}
            state = common.flatten_state_dict(rest, use_torch=True, device=self._device)
            out["state"] = _to_numpy(state).astype(np.float32, copy=False)
        if self.instruction is not None:
            out["instruction"] = np.array([self.instruction] * len(out["image"]), dtype=np.str_)
        return out

    @staticmethod
    def _concat(parts: list[Any]) -> Any:
        """The sub-envs' observations stacked (always a new array: the parts may be views of
        ManiSkill's tensors, and autoreset writes rows)."""
        if len(parts) == 1:
            return (
                {k: v.copy() for k, v in parts[0].items()} if isinstance(parts[0], dict) else parts[0].copy()
            )
        if isinstance(parts[0], dict):
            return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return np.concatenate(parts)

    @staticmethod
    def _row(obs: Any, i: int) -> Any:
        if isinstance(obs, dict):
            return {k: v[i].copy() for k, v in obs.items()}
        return obs[i].copy()

    @staticmethod
    def _set_rows(obs: Any, rows: np.ndarray, new: Any, src: np.ndarray | None = None) -> None:
        pick = slice(None) if src is None else src
        if isinstance(obs, dict):
            for k, v in obs.items():
                v[rows] = new[k][pick]
        else:
            obs[rows] = new[pick]

    # -- the VectorEnv API -------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env: ``seed`` an int (sub-env ``i`` gets ``seed + i``), a list (one
        per sub-env) or ``None`` (the next seed of each sub-env's generator on the CPU
        simulator, fresh entropy before any seed; ManiSkill's own RNG on the GPU simulator);
        ``options`` go to ManiSkill's ``reset``. Returns ``(obs, info)``."""
        if seed is None:
            seeds: list[int] | None = None
            if self._batch == 1:
                seeds = [int(rng.integers(2**31)) for rng in self._seed_rngs]
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} sub-envs")
        if seed is not None:
            self._seed_rngs = [np.random.default_rng(s) for s in seeds]
        parts = []
        for k, env in enumerate(self._envs):
            chunk = None if seeds is None else seeds[k * self._batch : (k + 1) * self._batch]
            if chunk is not None and self._batch == 1:
                chunk = chunk[0]
            obs, _ = env.reset(seed=chunk, options=dict(options or {}))
            parts.append(self._convert(obs))
        self._success_once[:] = False
        return self._concat(parts), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with ``actions`` ``[N, A]``; finished ones are reset in the same
        step (see the module docstring)."""
        import torch

        act = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self._device)
        if act.shape != (self.num_envs, *self.single_action_space.shape):
            raise ValueError(
                f"actions of shape {tuple(act.shape)}; expected {(self.num_envs, *self.single_action_space.shape)}"
            )
        if len(self._envs) == 1:  # the GPU simulator, or one sub-env
            outs = [self._envs[0].step(act)]
        else:
            b = self._batch
            outs = [env.step(act[k * b : (k + 1) * b]) for k, env in enumerate(self._envs)]
        next_obs = self._concat([self._convert(out[0]) for out in outs])
        rewards = _cat([out[1] for out in outs], np.float32)
        terminated = _cat([out[2] for out in outs], bool)
        truncated = _cat([out[3] for out in outs], bool)
        has_succ = all("success" in out[4] for out in outs)
        success = (
            _cat([out[4]["success"] for out in outs], bool) if has_succ else np.zeros(self.num_envs, bool)
        )
        if self.ignore_terminations:
            terminated[:] = False
        self._success_once |= success
        infos: dict[str, Any] = {}
        if has_succ:
            infos["success"], infos["_success"] = success, np.ones(self.num_envs, dtype=bool)
        done = terminated | truncated
        if done.any():
            final_obs = np.empty(self.num_envs, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = self._row(next_obs, int(i))
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            final_info: dict[str, Any] = {
                "success_once": self._success_once & done,
                "_success_once": done.copy(),
            }
            if has_succ:
                final_info["success"], final_info["_success"] = success & done, done.copy()
            infos["final_info"], infos["_final_info"] = final_info, done.copy()
            self._autoreset(next_obs, done)
            self._success_once[done] = False
        return next_obs, rewards, terminated, truncated, infos

    def _autoreset(self, next_obs: Any, done: np.ndarray) -> None:
        """Reset the finished sub-envs and write their first observations into ``next_obs``."""
        import torch

        for k, env in enumerate(self._envs):
            local = np.flatnonzero(done[k * self._batch : (k + 1) * self._batch])
            if local.size == 0:
                continue
            rows = local + k * self._batch
            if self._batch == 1:
                obs, _ = env.reset(seed=int(self._seed_rngs[k].integers(2**31)))
            else:
                idx = torch.as_tensor(local, device=self._device)
                obs, _ = env.reset(options={"env_idx": idx})
            self._set_rows(next_obs, rows, self._convert(obs), None if self._batch == 1 else local)

    def close(self, **kwargs: Any) -> None:
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            env.close()
        self._envs = []

    @property
    def maniskill_envs(self) -> list[Any]:
        """The ManiSkill envs underneath: one of ``num_envs`` scenes (GPU simulator) or
        ``num_envs`` of one scene each (CPU simulator), each ``gym.make``'s wrapped env."""
        return list(self._envs)

    @property
    def closed(self) -> bool:  # gymnasium's VectorEnv reads it in __del__
        return self._closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self._closed = bool(value)

    def __repr__(self) -> str:
        return (
            f"ManiSkillVectorEnv({self.task!r}, num_envs={self.num_envs}, sim_backend={self.sim_backend!r})"
        )
