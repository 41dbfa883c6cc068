"""Stable-Baselines3 beside rlinf on the same simulator: rlinf's vector env as SB3's ``VecEnv``,
SB3's PPO with an rlinf example's settings, and a callback that records SB3's training curve
and stops it at a wall-time budget (``metaworld_vs_sb3.py``, ``maniskill_vs_sb3.py``). Imports Stable-Baselines3: import this
module only in the process that trains SB3."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

__all__ = ["SameStepVecEnv", "WallCurve", "learn_within", "ppo_like", "sb3_side"]


class SameStepVecEnv(VecEnv):
    """An rlinf vector env (gymnasium's ``VectorEnv`` with ``SAME_STEP`` autoreset,
    ``info["final_obs"]`` and ``info["final_info"]["success"]``, as
    :func:`rlinf_algos.envs.make_vector_env` builds every family's) as SB3's ``VecEnv``: each
    finished sub-env's info holds ``terminal_observation``, ``TimeLimit.truncated``,
    ``is_success`` (SB3's ``ep_success_buffer``) and ``episode`` (return and length, SB3's
    ``ep_info_buffer``). ``reset`` seeds with SB3's ``seed()`` when it was called, else ``seed``."""

    def __init__(self, envs: Any, seed: int) -> None:
        self.envs = envs
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)
        self.actions: np.ndarray | None = None
        self._seed = seed
        self._seeds: int | None = None
        self._returns = np.zeros(self.num_envs)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self) -> np.ndarray:
        obs, _ = self.envs.reset(seed=self._seeds if self._seeds is not None else self._seed)
        self._seeds = None
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return np.asarray(obs, np.float32)

    def step_async(self, actions: np.ndarray) -> None:
        self.actions = actions

    def step_wait(self) -> Any:
        obs, rew, term, trunc, info = self.envs.step(np.asarray(self.actions, np.float32))
        done = np.asarray(term) | np.asarray(trunc)
        self._returns += rew
        self._lengths += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        final = info.get("final_info") or {}
        for i in np.flatnonzero(done):
            infos[i]["terminal_observation"] = np.asarray(info["final_obs"][i], np.float32)
            infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
            if "success" in final:
                infos[i]["is_success"] = bool(final["success"][i])
            infos[i]["episode"] = {"r": float(self._returns[i]), "l": int(self._lengths[i])}
            self._returns[i], self._lengths[i] = 0.0, 0
        return np.asarray(obs, np.float32), np.asarray(rew, np.float32), done, infos

    def close(self) -> None:
        self.envs.close()

    def seed(self, seed: int | None = None) -> list[Any]:
        self._seeds = seed
        return [seed]

    def get_attr(self, name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, name, None)] * self.num_envs

    def set_attr(self, name: str, value: Any, indices: Any = None) -> None:
        setattr(self, name, value)

    def env_method(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [None] * self.num_envs

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs


class WallCurve(BaseCallback):
    """Stops SB3's ``learn`` once ``wall`` seconds passed since :meth:`start` (checked every
    step), and records after each rollout a curve point: env steps, seconds, the success rate
    and mean return of the last 100 finished training episodes (as rlinf's ``metrics.csv``)."""

    def __init__(self, wall: float) -> None:
        super().__init__()
        self.wall = wall
        self.t0 = time.perf_counter()
        self.curve: list[dict[str, Any]] = []

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _on_step(self) -> bool:
        return self.elapsed() < self.wall

    def _on_rollout_end(self) -> None:
        model = self.model
        succ = list(model.ep_success_buffer)
        rets = [e["r"] for e in model.ep_info_buffer]
        self.curve.append(
            {
                "step": int(model.num_timesteps),
                "wall_s": round(self.elapsed(), 3),
                "success_rate": float(np.mean(succ)) if succ else None,
                "episode_return_mean": float(np.mean(rets)) if rets else None,
            }
        )


def learn_within(model: Any, venv: Any, steps: int, wall: float) -> dict[str, Any]:
    """Train SB3's ``model`` on ``venv`` (a ``VecNormalize``) for ``steps`` env steps or ``wall``
    seconds, whichever comes first; then freeze the normalisation statistics. Returns
    ``env_steps``, ``train_s``, ``curve`` (:class:`WallCurve`'s) and ``act``: the deterministic
    action for a raw observation batch, through the frozen statistics."""
    curve = WallCurve(wall)
    curve.start()
    model.learn(total_timesteps=steps, callback=curve)
    trained_s = curve.elapsed()
    venv.training = False

    def act(obs: Any) -> np.ndarray:
        return model.predict(venv.normalize_obs(np.asarray(obs, np.float32)), deterministic=True)[0]

    return {"env_steps": int(model.num_timesteps), "train_s": trained_s, "curve": curve.curve, "act": act}


def ppo_like(envs: Any, s: dict[str, Any], seed: int) -> tuple[Any, Any]:
    """SB3's PPO on ``envs`` (an rlinf vector env, unwrapped) with the settings ``s`` of an
    rlinf example (``_equal_wall.settings``: rlinf's defaults where the YAML says nothing):
    ``n_steps`` = ``rollout_steps``, ``batch_size`` = ``minibatch_size``, ``n_epochs``, lr
    (decayed linearly over the run when ``anneal_lr``), gamma, lambda, clip, value clip,
    advantage normalisation, entropy and value coefficients, gradient clip, the hidden layers and
    activation, ``log_std_init``, orthogonal initialisation, observation and reward
    normalisation (``VecNormalize`` with the same gamma; it updates its statistics throughout,
    SB3 has no ``obs_norm_steps``). Returns ``(model, venv)``, the model with a silent logger."""
    import torch
    from _peers import silent_sb3
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    ppo, model_cfg = s["ppo"], s["model"]
    lr, anneal = float(ppo["lr"]), bool(ppo["anneal_lr"])
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU, "silu": torch.nn.SiLU}
    venv = VecNormalize(
        SameStepVecEnv(envs, seed),
        norm_obs=bool(ppo["normalize_obs"]),
        norm_reward=bool(ppo["normalize_reward"]),
        gamma=float(ppo["gamma"]),
    )
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=int(ppo["rollout_steps"]),
        batch_size=int(ppo["minibatch_size"]),
        n_epochs=int(ppo["update_epochs"]),
        learning_rate=(lambda f: lr * f) if anneal else lr,
        gamma=float(ppo["gamma"]),
        gae_lambda=float(ppo["gae_lambda"]),
        clip_range=float(ppo["clip_low"]),
        clip_range_vf=ppo["value_clip"],
        normalize_advantage=bool(ppo["normalize_advantages"]),
        ent_coef=float(ppo["ent_coef"]),
        vf_coef=float(ppo["vf_coef"]),
        max_grad_norm=float(ppo["max_grad_norm"] or 1e9),
        policy_kwargs={
            "net_arch": list(model_cfg["hidden_sizes"] or [64, 64]),
            "activation_fn": activation[model_cfg["activation"] or "tanh"],
            "log_std_init": float(model_cfg["log_std_init"]),
            "ortho_init": bool(model_cfg["ortho_init"]),
        },
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return silent_sb3(model), venv


def sb3_side(
    envs: Any,
    s: dict[str, Any],
    seed: int,
    steps: int,
    wall: float,
    evaluate: Callable[[Any], dict],
    out: str,
) -> None:
    """The SB3 side of an equal-wall benchmark, in this process (one torch thread): PPO with the
    settings ``s`` (:func:`ppo_like`) on ``envs`` for ``steps`` env steps or ``wall`` seconds,
    then ``evaluate(act)``; writes env steps, training seconds, the curve and the evaluation's
    figures to ``out`` (JSON)."""
    import torch
    from _peers import quiet

    quiet()
    torch.set_num_threads(1)
    model, venv = ppo_like(envs, s, seed)
    res = learn_within(model, venv, steps, wall)
    res.update(evaluate(res.pop("act")))
    venv.close()
    Path(out).write_text(json.dumps(res))
