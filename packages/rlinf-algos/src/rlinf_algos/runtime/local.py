"""Single-process training loops for PPO, SAC and GRPO over a gymnasium vector env.

Each algorithm is split the way DESIGN.md section 5 places it, so the distributed runner can put
one piece per worker and move the records between them over channels:

================  ==========================================  ===============================
piece             here                                        worker it becomes
================  ==========================================  ===============================
env side          :class:`~rlinf_algos.envs.VectorEnvStepper`  ``EnvWorker``
rollout side      :class:`PPOCollector`, :class:`SACCollector`, ``RolloutWorker`` (holds a
                  :class:`GRPOCollector` (policy inference)    versioned copy of the weights)
learner           :class:`PPOLearner`, :class:`SACLearner`,    ``ActorWorker``
                  :class:`GRPOLearner`
================  ==========================================  ===============================

The records that cross those boundaries are plain arrays (:class:`PPORollout`,
:class:`~rlinf_algos.replay.ReplayBatch`, :class:`GRPORollout`). :func:`train` ties the pieces
together in one process and writes the run directory:

- ``metrics.csv``: one row per ``runner.log_interval`` env steps (``step``, ``wall_s``,
  ``episode_return_mean``, ... and the learner's losses);
- ``checkpoints/step_<n>.pt`` every ``runner.checkpoint_interval`` env steps (atomic: a temp
  file, then ``os.replace``), holding weights, optimiser, RNG and (SAC) replay-buffer state;
- ``policy.pt``: the final policy (weights and what is needed to rebuild it);
- ``summary.json``: ``total_env_steps``, ``wall_s``, ``env_steps_per_s``,
  ``final_return_mean``, ``best_return_mean``.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlinf_algos import grpo as grpo_math
from rlinf_algos import ppo as ppo_math
from rlinf_algos import sac as sac_math
from rlinf_algos.algorithms import (
    EnvConfig,
    GRPOConfig,
    ModelConfig,
    PPOConfig,
    RunnerConfig,
    SACConfig,
)
from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.models import GaussianActorCritic, SquashedGaussianActor, TwinQ
from rlinf_algos.replay import ReplayBatch, ReplayBuffer
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.io import atomic_open, atomic_write_text

__all__ = [
    "GRPOCollector",
    "GRPOLearner",
    "GRPORollout",
    "PPOCollector",
    "PPOLearner",
    "PPORollout",
    "RewardScaler",
    "SACCollector",
    "SACLearner",
    "atomic_torch_save",
    "build_policy",
    "evaluate_policy",
    "latest_checkpoint",
    "load_policy",
    "make_adam",
    "train",
]

ProgressFn = Callable[[dict[str, float]], None]


# -- shared helpers ----------------------------------------------------------------------------


def make_adam(params: Any, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where this torch has one for the parameters' device (one kernel
    per step instead of one per tensor); the multi-tensor one otherwise."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


class LeanAdam:
    """``optimizer.step()`` and ``zero_grad()`` of a fused :class:`torch.optim.Adam` without their
    per-call Python.

    :meth:`step` runs exactly what ``Adam(fused=True).step()`` runs (``_foreach_add_`` on the
    step counters, then the ``_fused_adam_`` kernel on the optimiser's own state tensors), without
    the grouping, hooks and profiler records around it, which on networks this small cost more
    than the kernel. :meth:`zero_grad` sets the gradients to ``None`` (so the next backward hands
    its fresh buffers over instead of adding them into zeroed ones). The optimiser stays the
    source of truth (``state_dict``, ``param_groups``' ``lr``): call :meth:`refresh` after loading
    its state. Whatever this cannot do directly (a non-fused optimiser, amsgrad, a parameter
    without state or gradient yet) goes through the optimiser as usual.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.opt = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self._lists: list[tuple[Any, ...]] | None = None

    def refresh(self) -> None:
        """Forget the cached state tensors (after ``load_state_dict``)."""
        self._lists = None

    def _build(self) -> None:
        lists = []
        for g in self.opt.param_groups:
            if not g.get("fused") or g.get("amsgrad") or g.get("differentiable") or g.get("capturable"):
                return
            if g.get("decoupled_weight_decay") or g.get("maximize"):
                return
            ps, m1, m2, st = [], [], [], []
            for p in g["params"]:
                state = self.opt.state.get(p)
                if not state or not torch.is_tensor(state.get("step")):
                    return
                ps.append(p)
                m1.append(state["exp_avg"])
                m2.append(state["exp_avg_sq"])
                st.append(state["step"])
            lists.append((g, ps, m1, m2, st))
        self._lists = lists

    def grads(self) -> list[Tensor]:
        """The gradients there are (for clipping)."""
        return [p.grad for p in self.params if p.grad is not None]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        if self._lists is None:
            self.opt.step()
            self._build()
            return
        for g, ps, m1, m2, st in self._lists:
            gs = [p.grad for p in ps]
            if any(x is None for x in gs):  # a parameter without gradient: the optimiser skips it
                self.opt.step()
                return
            beta1, beta2 = g["betas"]
            torch._foreach_add_(st, 1)
            torch._fused_adam_(
                ps,
                gs,
                m1,
                m2,
                [],
                st,
                amsgrad=False,
                lr=float(g["lr"]),
                beta1=float(beta1),
                beta2=float(beta2),
                weight_decay=float(g["weight_decay"]),
                eps=float(g["eps"]),
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )


def _best_of(best: float, final: float) -> float | None:
    """``best_return_mean``: the best of the logged rows and the final return (``None`` if
    neither is known)."""
    vals = [v for v in (best, final) if v is not None and not math.isnan(v) and v != -math.inf]
    return max(vals) if vals else None


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temp file in ``path``'s folder, fsync, then ``os.replace``: a crash
    mid-save never leaves a truncated file at ``path``."""
    with atomic_open(path) as f:
        torch.save(obj, f)


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest ``checkpoints/step_<n>.pt`` of ``run_dir`` (by step), or ``None``."""
    folder = Path(run_dir) / "checkpoints"
    best: tuple[int, Path] | None = None
    for p in folder.glob("step_*.pt"):
        try:
            n = int(p.stem.removeprefix("step_"))
        except ValueError:
            continue
        if best is None or n > best[0]:
            best = (n, p)
    return best[1] if best else None


class RewardScaler:
    """Divide rewards by the running standard deviation of the discounted return (what
    gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize`` do), per vector-env slot; the
    running return restarts where an episode ends. Numpy only, with a ``state_dict``."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Scale ``[N]`` rewards of one step; ``done`` ``[N]`` marks episodes that ended in it."""
        self.returns = self.returns * self.gamma + rewards
        b_mean, b_var, n = float(self.returns.mean()), float(self.returns.var()), self.returns.size
        delta = b_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / total) / total
        self.count = total
        self.returns[done] = 0.0
        scaled = rewards / math.sqrt(self.var + self.eps)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = np.asarray(state["returns"], dtype=np.float64).copy()
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])


def _model_defaults(model: ModelConfig, hidden: list[int], activation: str) -> tuple[list[int], str]:
    return (model.hidden_sizes or hidden, model.activation or activation)


def sac_policy_spec(
    model: ModelConfig, obs_dim: int, act_dim: int, action_low: Sequence[float], action_high: Sequence[float]
) -> dict[str, Any]:
    """The ``spec`` of SAC's actor (what :func:`build_policy` builds and ``policy.pt`` records)
    from the ``model`` section; :func:`sac_critic` builds the matching critics from it."""
    hidden, activation = _model_defaults(model, [256, 256], "relu")
    return {
        "cls": "SquashedGaussianActor",
        "obs_dim": obs_dim,
        "act_dim": act_dim,
        "action_low": [float(x) for x in action_low],
        "action_high": [float(x) for x in action_high],
        "hidden": hidden,
        "activation": activation,
        "log_std_bound": model.log_std_bound,
        "ortho_init": model.ortho_init,
        "squash_eps": model.squash_eps,
    }


def sac_critic(spec: dict[str, Any]) -> TwinQ:
    """SAC's twin critics for the actor ``spec`` of :func:`sac_policy_spec`."""
    return TwinQ(
        spec["obs_dim"],
        spec["act_dim"],
        spec["hidden"],
        spec["activation"],
        ortho_init=spec.get("ortho_init", True),
    )


# -- PPO ---------------------------------------------------------------------------------------


@dataclass
class PPORollout:
    """What the rollout side hands the learner for one PPO iteration, all ``[T, N, ...]`` tensors:
    ``obs`` (normalised, as the policy saw them), ``actions`` (as sampled, before clipping),
    ``log_probs``, ``values``, ``rewards`` (scaled if reward scaling is on), ``terminated``,
    ``truncated``, ``final_values`` (``V(final_obs)`` where truncated, 0 elsewhere) and
    ``last_value`` ``[N]`` (``V`` of the observation after the last step). ``version`` is the
    weight version that produced it."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    values: Tensor
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    final_values: Tensor
    last_value: Tensor
    version: int = 0


class PPOCollector:
    """The rollout side of PPO: runs the policy on a :class:`VectorEnvStepper` for
    ``rollout_steps`` steps and records a :class:`PPORollout`. It updates the policy's observation
    statistics with every observation it sees (``update_obs_norm``)."""

    def __init__(
        self,
        stepper: VectorEnvStepper,
        model: GaussianActorCritic,
        rollout_steps: int,
        reward_scaler: RewardScaler | None = None,
        update_obs_norm: bool = True,
    ) -> None:
        self.stepper, self.model, self.rollout_steps = stepper, model, rollout_steps
        self.reward_scaler = reward_scaler
        self.update_obs_norm = update_obs_norm and hasattr(model.obs_norm, "update")
        self.version = 0

    @torch.no_grad()
    def collect(self) -> PPORollout:
        T, N, D, A = self.rollout_steps, self.stepper.num_envs, self.stepper.obs_dim, self.stepper.act_dim
        obs_buf = torch.empty(T, N, D)
        act_buf = torch.empty(T, N, A)
        logp_buf, val_buf, rew_buf, fv_buf = (torch.zeros(T, N) for _ in range(4))
        term_buf = torch.zeros(T, N, dtype=torch.bool)
        trunc_buf = torch.zeros(T, N, dtype=torch.bool)
        model = self.model
        for t in range(T):
            raw = torch.from_numpy(self.stepper.obs)
            if self.update_obs_norm:
                model.obs_norm.update(raw)
            obs = model.obs_norm(raw)
            action, logp, value = model.act(obs)
            step = self.stepper.step(action.numpy())
            rewards = step.rewards
            if self.reward_scaler is not None:
                rewards = self.reward_scaler(rewards, step.done)
            obs_buf[t] = obs
            act_buf[t] = action
            logp_buf[t] = logp
            val_buf[t] = value
            rew_buf[t] = torch.from_numpy(rewards)
            term_buf[t] = torch.from_numpy(step.terminated)
            trunc_buf[t] = torch.from_numpy(step.truncated)
            if step.truncated.any():  # bootstrap from the real final observation
                idx = np.flatnonzero(step.truncated)
                final = model.obs_norm(torch.from_numpy(step.final_obs[idx]))
                fv_buf[t, torch.from_numpy(idx)] = model.value(final)
        last_value = model.value(model.obs_norm(torch.from_numpy(self.stepper.obs)))
        return PPORollout(
            obs_buf,
            act_buf,
            logp_buf,
            val_buf,
            rew_buf,
            term_buf,
            trunc_buf,
            fv_buf,
            last_value,
            self.version,
        )


class PPOLearner:
    """The learner side of PPO: GAE, then ``update_epochs`` passes of minibatch updates of the
    clipped surrogate, clipped value loss and entropy bonus, with gradient clipping and an
    approx-KL early stop. One optimiser over actor and critic, one backward per minibatch."""

    def __init__(self, model: GaussianActorCritic, cfg: PPOConfig, seed: int = 0) -> None:
        self.model, self.cfg = model, cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_adam(self.params, cfg.lr, cfg.adam_eps)
        self.adam = LeanAdam(self.optimizer)
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0

    def set_lr_fraction(self, frac: float) -> None:
        """Set the learning rate to ``frac * cfg.lr`` (linear annealing)."""
        for group in self.optimizer.param_groups:
            group["lr"] = frac * self.cfg.lr

    def advantages(self, r: PPORollout) -> tuple[Tensor, Tensor]:
        """``(advantages, returns)`` ``[T, N]`` of a rollout (GAE, bootstrapping on truncation)."""
        done = r.terminated | r.truncated
        next_values = ppo_math.next_values_with_bootstrap(r.values, r.last_value, done, r.final_values)
        return ppo_math.gae(
            r.rewards, r.values, next_values, r.terminated, r.truncated, self.cfg.gamma, self.cfg.gae_lambda
        )

    def update(self, r: PPORollout) -> dict[str, float]:
        """``update_epochs`` passes over the rollout in minibatches (the last partial one dropped),
        each a fresh permutation; stops after an epoch whose last minibatch's approx-KL passed
        ``target_kl``. Lean on purpose (a minibatch step of these tiny networks is mostly per-call
        overhead): each epoch gathers its permutation once and normalises the advantages of all
        its minibatches in one pass; minibatches are views; the optimiser step is
        :class:`LeanAdam`; metrics stay tensors until the end (no host sync per step)."""
        cfg = self.cfg
        adv, ret = self.advantages(r)
        b_obs = r.obs.reshape(-1, r.obs.shape[-1])
        b_act = r.actions.reshape(-1, r.actions.shape[-1])
        b_logp, b_val = r.log_probs.reshape(-1), r.values.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        B, mb = b_obs.shape[0], min(cfg.minibatch_size, b_obs.shape[0])
        M = B // mb  # minibatches per epoch
        model, adam = self.model, self.adam
        adam.refresh()
        stats = torch.zeros(cfg.update_epochs * M, 4)  # pg, vf, -entropy, grad norm
        ratios = torch.zeros(cfg.update_epochs * M, mb)  # log-ratios, for KL and clip fraction
        n_mb = 0
        epochs = 0
        for _ in range(cfg.update_epochs):
            used = torch.randperm(B, generator=self.generator)[: M * mb]
            e_obs, e_act = b_obs[used], b_act[used]
            e_logp, e_val, e_ret = b_logp[used], b_val[used], b_ret[used]
            e_adv = b_adv[used].view(M, mb)
            if cfg.normalize_advantages:
                e_adv = ppo_math.normalize_advantages(e_adv, dim=1)
            for i in range(M):
                a, b = i * mb, (i + 1) * mb
                logp, entropy, value = model.evaluate(e_obs[a:b], e_act[a:b])
                log_ratio = logp - e_logp[a:b]
                pg = ppo_math.policy_loss(log_ratio, e_adv[i], cfg.clip_low, cfg.clip_high, cfg.dual_clip)
                vf = ppo_math.value_loss(value, e_ret[a:b], e_val[a:b], cfg.value_clip)
                loss = pg + cfg.vf_coef * vf
                ent = ppo_math.entropy_loss(entropy)
                if cfg.ent_coef:
                    loss = loss + cfg.ent_coef * ent
                adam.zero_grad()
                loss.backward()
                with torch.no_grad():
                    if cfg.max_grad_norm is not None:
                        gn = ppo_math.clip_grads_(adam.grads(), cfg.max_grad_norm)
                    else:
                        gn = torch.zeros(())
                    adam.step()
                    ratios[n_mb] = log_ratio
                    torch.stack([pg, vf, ent, gn], out=stats[n_mb])
                n_mb += 1
            epochs += 1
            if cfg.target_kl is not None and float(ppo_math.approx_kl(ratios[n_mb - 1])) > cfg.target_kl:
                break
        self.version += 1
        with torch.no_grad():
            s = stats[:n_mb].mean(0).tolist() if n_mb else [0.0] * 4
            kl = float(ppo_math.approx_kl(ratios[n_mb - 1])) if n_mb else 0.0
            cf = float(ppo_math.clip_fraction(ratios[:n_mb], cfg.clip_low, cfg.clip_high)) if n_mb else 0.0
        y, yhat = b_ret, b_val
        var_y = float(y.var())
        explained = float("nan") if var_y == 0 else 1.0 - float((y - yhat).var()) / var_y
        return {
            "policy_loss": s[0],
            "value_loss": s[1],
            "entropy": -s[2],
            "clip_fraction": cf,
            "grad_norm": s[3],
            "approx_kl": kl,
            "epochs": float(epochs),
            "explained_variance": explained,
            "lr": self.optimizer.param_groups[0]["lr"],
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.adam.refresh()
        self.generator.set_state(state["generator"])
        self.version = int(state["version"])


# -- SAC ---------------------------------------------------------------------------------------


class SACLearner:
    """The learner side of SAC: twin critics with Polyak-averaged targets, a squashed Gaussian
    actor, and a temperature learnt towards ``target_entropy``. :meth:`update` does one gradient
    step on a :class:`ReplayBatch`.

    ``cfg.update_order`` picks which critic the actor step sees. ``sequential`` (CleanRL, SB3):
    the critic as updated by this step's critic step. ``simultaneous`` (the SAC authors'
    softlearning, rlkit): the critic as it was when the step began, so neither step waits for the
    other and the actor and temperature step runs on a second thread while the critic step runs
    on the caller's; each reads a snapshot of the other's networks taken at the start, and the
    second thread draws its noise from a generator of its own (saved in :meth:`state_dict`), so
    runs stay reproducible. ``pipelined``: as ``simultaneous``, but update ``k``'s critic step
    uses the actor (and temperature) after actor step ``k - 2`` and its actor step the critic
    after critic step ``k - 2``, one update older; the two threads then only wait for each
    other when one falls a whole update behind (see :class:`_SACPipeline`), and results do not
    depend on their timing.

    Whoever acts with the policy reads it through :meth:`policy` (version :attr:`version`): in
    ``pipelined`` mode the live actor belongs to the second thread.
    """

    def __init__(
        self, actor: SquashedGaussianActor, critic: TwinQ, cfg: SACConfig, device: str | torch.device = "cpu"
    ) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.actor = actor.to(self.device)
        self.critic = critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = (
            cfg.target_entropy
            if cfg.target_entropy is not None
            else sac_math.default_target_entropy(actor.act_dim)
        )
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        self._actor_adam, self._critic_adam, self._alpha_adam = (
            LeanAdam(o) for o in (self.actor_opt, self.critic_opt, self.alpha_opt)
        )
        self._critic_params = list(self.critic.parameters())
        self.simultaneous = cfg.update_order == "simultaneous"
        self.pipelined = cfg.update_order == "pipelined"
        if self.simultaneous or self.pipelined:  # the actor step's thread draws its own noise
            self.side_generator = torch.Generator(self.device)
            self.side_generator.manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        if self.simultaneous:
            # snapshots: the actor for the critic target, the critic for the actor loss
            self._actor_view = copy.deepcopy(self.actor).requires_grad_(False)
            self._critic_view = copy.deepcopy(self.critic).requires_grad_(False)
            self._actor_pairs = (list(self._actor_view.parameters()), list(self.actor.parameters()))
            self._critic_pairs = (list(self._critic_view.parameters()), self._critic_params)
            self._side: ThreadPoolExecutor | None = None  # the actor step's thread, started on first use
        if self.pipelined:
            self._pipe = _SACPipeline(self)
        self.updates = 0
        self._version = 0

    @property
    def alpha(self) -> Tensor:
        return self.log_alpha.detach().exp()

    @property
    def version(self) -> int:
        """The version of :meth:`policy`: actor steps taken (``pipelined``: the newest actor the
        pipeline has promised, one update behind)."""
        return max(self.updates - 1, 0) if self.pipelined else self._version

    def policy(self) -> SquashedGaussianActor:
        """The actor at :attr:`version`, to act with or publish. ``pipelined``: a copy, taken
        (after waiting for its actor step if it is still running) from the pipeline."""
        return self._pipe.policy() if self.pipelined else self.actor

    def sync(self) -> None:
        """Wait for an actor step still running (``pipelined``), so :attr:`actor` is the newest."""
        if self.pipelined:
            self._pipe.drain()

    def _tensors(self, batch: ReplayBatch) -> tuple[Tensor, ...]:
        dev = self.device
        return (
            torch.from_numpy(batch.obs).to(dev, torch.float32),
            torch.from_numpy(batch.actions).to(dev),
            torch.from_numpy(batch.rewards).to(dev),
            torch.from_numpy(batch.next_obs).to(dev, torch.float32),
            torch.from_numpy(batch.terminated).to(dev),
        )

    def _critic_step(
        self, t: tuple[Tensor, ...], alpha: Tensor, actor: SquashedGaussianActor
    ) -> dict[str, Tensor]:
        obs, actions, rewards, next_obs, terminated = t
        with torch.no_grad():
            next_a, next_logp = actor.sample(next_obs)
            next_q = self.critic_target(next_obs, next_a)
            target = sac_math.critic_target(
                rewards, terminated, next_q[0], next_q[1], next_logp, alpha, self.cfg.gamma
            )
        q = self.critic(obs, actions)
        q_loss = sac_math.critic_loss(q[0], q[1], target)
        self._critic_adam.zero_grad()
        q_loss.backward()
        self._critic_adam.step()
        return {"critic_loss": q_loss.detach(), "q_mean": q.detach().mean()}

    def _actor_step(
        self, obs: Tensor, alpha: Tensor, critic: TwinQ, generator: torch.Generator | None
    ) -> dict[str, Tensor]:
        """The actor step against ``critic`` (the live critic, frozen meanwhile, or a snapshot
        without gradient), then the temperature step."""
        live = critic is self.critic
        if live:
            for p in self._critic_params:
                p.requires_grad_(False)
        a, logp = self.actor.sample(obs, generator)
        q_pi = critic(obs, a)
        a_loss = sac_math.actor_loss(q_pi[0], q_pi[1], logp, alpha)
        self._actor_adam.zero_grad()
        a_loss.backward()
        self._actor_adam.step()
        if live:
            for p in self._critic_params:
                p.requires_grad_(True)
        out = {"actor_loss": a_loss.detach(), "entropy": -logp.detach().mean()}
        if self.cfg.autotune:
            t_loss = sac_math.temperature_loss(self.log_alpha, logp, self.target_entropy)
            self._alpha_adam.zero_grad()
            t_loss.backward()
            self._alpha_adam.step()
            out["alpha_loss"] = t_loss.detach()
        return out

    def update(self, batch: ReplayBatch) -> dict[str, Tensor]:
        """One critic step (and, every ``actor_update_interval`` updates, one actor and one
        temperature step); returns detached scalar tensors (no host sync)."""
        cfg = self.cfg
        t = self._tensors(batch)
        if self.pipelined:
            out = self._pipe.update(t)
            self.updates += 1
        else:
            out = self._steps_in_lockstep(t)
        if self.updates % cfg.target_update_interval == 0:
            sac_math.polyak_update(self.critic_target.parameters(), self._critic_params, cfg.tau)
        if self.pipelined:
            self._pipe.critic_done(self.updates)
        return out

    def _steps_in_lockstep(self, t: tuple[Tensor, ...]) -> dict[str, Tensor]:
        """The critic step and, on actor turns, the actor step of ``sequential`` and
        ``simultaneous`` (both done when this returns)."""
        cfg = self.cfg
        alpha = self.alpha
        self.updates += 1
        actor_turn = self.updates % cfg.actor_update_interval == 0
        if actor_turn and self.simultaneous:
            with torch.no_grad():
                torch._foreach_copy_(*self._actor_pairs)
                torch._foreach_copy_(*self._critic_pairs)
            if self._side is None:
                threads = torch.get_num_threads()  # OpenMP's thread count is per thread
                self._side = ThreadPoolExecutor(1, "sac-actor-step", lambda: torch.set_num_threads(threads))
            job = self._side.submit(self._actor_step, t[0], alpha, self._critic_view, self.side_generator)
            try:
                out = self._critic_step(t, alpha, self._actor_view)
            finally:
                try:
                    actor_out = job.result(timeout=600.0)
                except FutureTimeout:
                    raise RlinfError("SAC: the actor step gave no result in 600 s") from None
            out.update(actor_out)
        else:
            out = self._critic_step(t, alpha, self.actor)
            if actor_turn:
                out.update(self._actor_step(t[0], alpha, self.critic, None))
        if actor_turn:
            self._version += 1
        out["alpha"] = alpha
        return out

    def close(self) -> None:
        """Stop the second thread (``simultaneous``, ``pipelined``); the learner still works
        after (it starts a new one)."""
        if self.simultaneous and self._side is not None:
            self._side.shutdown(wait=True)
            self._side = None
        if self.pipelined:
            self._pipe.close()

    def state_dict(self) -> dict[str, Any]:
        if self.pipelined:
            self._pipe.drain()
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "updates": self.updates,
            "version": self.version,
            **({"side_rng": self.side_generator.get_state()} if self.simultaneous or self.pipelined else {}),
            **({"pipeline": self._pipe.state_dict()} if self.pipelined else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        for adam in (self._actor_adam, self._critic_adam, self._alpha_adam):
            adam.refresh()
        self.updates = int(state["updates"])
        self._version = int(state["version"])
        if (self.simultaneous or self.pipelined) and "side_rng" in state:
            self.side_generator.set_state(state["side_rng"])
        if self.pipelined:
            self._pipe.load_state_dict(state.get("pipeline"))


class _SACPipeline:
    """The two threads of ``update_order: pipelined``.

    Update ``k``: the caller's thread runs the critic step against the actor and temperature
    after actor step ``k - 2``; a second thread runs actor step ``k`` (and the temperature
    step) against the critic after critic step ``k - 2``. Each thread copies its networks into
    a ring of ``RING`` snapshots after its step, so the other reads a copy nobody writes. The
    caller waits only for actor step ``k - 2`` before critic step ``k``, the second thread only
    for critic step ``k - 2`` before actor step ``k``: either may run a whole update ahead of
    the other before it waits. With at most one update between them, the slots in use are
    ``k - 2 .. k + 2`` of whichever ``k`` the caller is on, hence a ring of 6 (5 would do).
    """

    RING = 6
    TIMEOUT_S = 600.0

    def __init__(self, learner: SACLearner) -> None:
        self.learner = learner
        self.actors = [copy.deepcopy(learner.actor).requires_grad_(False) for _ in range(self.RING)]
        self.critics = [copy.deepcopy(learner.critic).requires_grad_(False) for _ in range(self.RING)]
        self.alphas = [learner.alpha.clone() for _ in range(self.RING)]
        self._actor_slots = [list(a.parameters()) for a in self.actors]
        self._critic_slots = [list(c.parameters()) for c in self.critics]
        self._actor_params = list(learner.actor.parameters())
        self._policy = copy.deepcopy(learner.actor).requires_grad_(False)  # what policy() hands out
        self._cv = threading.Condition()
        self._jobs: queue.SimpleQueue[tuple[int, Tensor] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._actor_out: dict[str, Tensor] = {}
        self.actor_k = 0  # actor steps done (the second thread's progress)
        self.critic_k = 0  # critic steps done (the caller's)

    def _slot(self, k: int) -> int:
        return max(k, 0) % self.RING

    def _wait(self, side: str, k: int) -> None:
        """Wait until ``side`` (``"actor"`` or ``"critic"``) step ``k`` is done."""
        with self._cv:
            done = self._cv.wait_for(
                lambda: getattr(self, f"{side}_k") >= k or self._error is not None, timeout=self.TIMEOUT_S
            )
            if self._error is not None:
                raise RlinfError(
                    f"SAC (pipelined): the actor-step thread failed: {self._error!r}"
                ) from self._error
            if not done:
                raise RlinfError(f"SAC (pipelined): {side} step {k} did not finish in {self.TIMEOUT_S:.0f} s")

    def _start(self) -> None:
        threads = torch.get_num_threads()  # OpenMP's thread count is per thread
        self._thread = threading.Thread(
            target=self._actor_loop, args=(threads,), name="sac-actor-step", daemon=True
        )
        self._thread.start()

    def _actor_loop(self, threads: int) -> None:
        torch.set_num_threads(threads)
        learner = self.learner
        while (job := self._jobs.get()) is not None:
            k, obs = job
            try:
                self._wait("critic", k - 2)
                out = learner._actor_step(
                    obs, learner.alpha, self.critics[self._slot(k - 2)], learner.side_generator
                )
                with self._cv, torch.no_grad():
                    torch._foreach_copy_(self._actor_slots[self._slot(k)], self._actor_params)
                    self.alphas[self._slot(k)] = learner.alpha.clone()
                    self._actor_out, self.actor_k = out, k
                    self._cv.notify_all()
            except BaseException as err:  # handed to the caller's thread, which raises it
                with self._cv:
                    self._error = err
                    self._cv.notify_all()
                return

    def update(self, t: tuple[Tensor, ...]) -> dict[str, Tensor]:
        """Critic step ``k`` (actor step ``k`` handed to the second thread); the caller then
        Polyak-updates and calls :meth:`critic_done`."""
        if self._thread is None:
            self._start()
        k = self.critic_k + 1
        self._jobs.put((k, t[0]))
        self._wait("actor", k - 2)
        i = self._slot(k - 2)
        out = self.learner._critic_step(t, self.alphas[i], self.actors[i])
        with self._cv:
            out.update(self._actor_out)  # the newest actor step's losses
        out["alpha"] = self.alphas[i]
        return out

    def critic_done(self, k: int) -> None:
        with self._cv, torch.no_grad():
            torch._foreach_copy_(self._critic_slots[self._slot(k)], self.learner._critic_params)
            self.critic_k = k
            self._cv.notify_all()

    def policy(self) -> SquashedGaussianActor:
        """A copy of the actor after actor step ``critic_k - 1``."""
        k = self.critic_k - 1
        self._wait("actor", k)
        with torch.no_grad():
            torch._foreach_copy_(list(self._policy.parameters()), self._actor_slots[self._slot(k)])
        return self._policy

    def drain(self) -> None:
        """Wait for the actor step of the last update (the live networks are then all current)."""
        self._wait("actor", self.critic_k)

    def state_dict(self) -> dict[str, Any]:
        """The snapshots the next update reads that the live networks no longer hold (those of
        the update before the last); call after :meth:`drain`."""
        i = self._slot(self.critic_k - 1)
        return {
            "actor": self.actors[i].state_dict(),
            "critic": self.critics[i].state_dict(),
            "alpha": self.alphas[i].clone(),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restart the ring at the learner's loaded update count: its slot holds the live
        networks, the slot before it the saved snapshots (none: the live networks)."""
        self.close()
        learner = self.learner
        k = learner.updates
        with torch.no_grad():
            for j in range(self.RING):
                torch._foreach_copy_(self._actor_slots[j], self._actor_params)
                torch._foreach_copy_(self._critic_slots[j], learner._critic_params)
                self.alphas[j] = learner.alpha.clone()
            if state is not None and k > 0:
                i = self._slot(k - 1)
                self.actors[i].load_state_dict(state["actor"])
                self.critics[i].load_state_dict(state["critic"])
                self.alphas[i] = state["alpha"].clone()
        self.actor_k = self.critic_k = k

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=self.TIMEOUT_S)
            self._thread = None


class SACCollector:
    """The rollout side of SAC: one vector step with the actor (uniform random actions before
    ``learning_starts``), stored in the replay buffer with the true final observation as
    ``next_obs`` and terminated/truncated kept apart."""

    def __init__(
        self,
        stepper: VectorEnvStepper,
        actor: SquashedGaussianActor,
        buffer: ReplayBuffer,
        learning_starts: int,
    ) -> None:
        self.stepper, self.actor, self.buffer, self.learning_starts = stepper, actor, buffer, learning_starts

    @torch.no_grad()
    def step(self) -> None:
        obs = self.stepper.obs
        if self.stepper.steps < self.learning_starts:
            actions = self.stepper.random_actions()
        else:
            actions = self.actor.predict(torch.from_numpy(obs), deterministic=False).numpy()
        step = self.stepper.step(actions)
        self.buffer.add(obs, actions, step.rewards, step.final_obs, step.terminated, step.truncated)


# -- GRPO --------------------------------------------------------------------------------------


@dataclass
class GRPORollout:
    """One GRPO iteration: ``num_groups * group_size`` episodes, group ``g`` all started from the
    same seed. Per-step tensors are ``[S, L, ...]`` (``S`` sequences, ``L`` the longest episode),
    ``mask`` ``[S, L]`` marks real steps, ``returns`` ``[S]`` are the episodes' (raw) returns, the
    outcome reward GRPO normalises within each group."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    mask: Tensor
    returns: Tensor
    lengths: Tensor
    version: int = 0


class GRPOCollector:
    """The rollout side of GRPO on an embodied task: every iteration resets each group's
    ``group_size`` copies with one shared seed (so they start from the same state), runs the
    policy until every copy has finished one episode, and records the episodes as masked
    sequences. Needs a finite time limit."""

    def __init__(
        self,
        stepper: VectorEnvStepper,
        model: GaussianActorCritic,
        group_size: int,
        seed: int,
        max_steps: int,
    ) -> None:
        self.stepper, self.model, self.group_size = stepper, model, group_size
        self.num_groups = stepper.num_envs // group_size
        self.seed, self.max_steps = seed, max_steps
        self.iteration = 0
        self.version = 0

    @torch.no_grad()
    def collect(self) -> GRPORollout:
        st, model = self.stepper, self.model
        N, G = st.num_envs, self.group_size
        base = self.seed + self.iteration * self.num_groups
        seeds = [base + i // G for i in range(N)]
        obs_np, _ = st.envs.reset(seed=seeds)
        st.obs = obs_np.astype(np.float32, copy=False)
        self.iteration += 1
        active = np.ones(N, dtype=bool)
        returns = np.zeros(N, dtype=np.float64)
        lengths = np.zeros(N, dtype=np.int64)
        obs_l, act_l, logp_l, mask_l = [], [], [], []
        for _ in range(self.max_steps):
            raw = torch.from_numpy(st.obs)
            if hasattr(model.obs_norm, "update"):
                model.obs_norm.update(raw[torch.from_numpy(active)])
            obs = model.obs_norm(raw)
            action, logp, _ = model.act(obs)
            step = st.step(action.numpy())
            obs_l.append(obs)
            act_l.append(action)
            logp_l.append(logp)
            mask_l.append(torch.from_numpy(active.copy()))
            returns += np.where(active, step.rewards, 0.0)
            lengths += active
            active &= ~step.done
            if not active.any():
                break
        else:
            raise RlinfError(
                f"GRPO: some episodes of {st.env_id!r} did not end within {self.max_steps} steps; "
                "set env.max_episode_steps"
            )
        return GRPORollout(
            obs=torch.stack(obs_l, 1),
            actions=torch.stack(act_l, 1),
            log_probs=torch.stack(logp_l, 1),
            mask=torch.stack(mask_l, 1),
            returns=torch.from_numpy(returns).float(),
            lengths=torch.from_numpy(lengths),
            version=self.version,
        )


class GRPOLearner:
    """The learner side of GRPO: group-normalised episode returns as every step's advantage, the
    clipped-ratio loss over masked steps, and a k3 KL to a frozen reference copy of the initial
    policy (the ``ReferenceWorker``'s job, done here in the same process; ``reference=False``
    when a reference worker supplies the log-probabilities to :meth:`update`)."""

    def __init__(
        self, model: GaussianActorCritic, cfg: GRPOConfig, seed: int = 0, reference: bool = True
    ) -> None:
        self.model, self.cfg = model, cfg
        self.reference = copy.deepcopy(model).requires_grad_(False) if reference else None
        self.params = [p for p in model.actor_mean.parameters()] + [model.actor_log_std]
        self.optimizer = make_adam(self.params, cfg.lr, cfg.adam_eps)
        self.adam = LeanAdam(self.optimizer)
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0

    def update(
        self, r: GRPORollout, advantages: Tensor | None = None, ref_log_probs: Tensor | None = None
    ) -> dict[str, float]:
        """One update on ``r``. ``advantages`` ``[S]`` (the reward worker's) default to the group
        advantages of ``r.returns`` (groups of consecutive sequences); ``ref_log_probs``
        ``[S, L]`` (the reference worker's) to this learner's frozen copy's."""
        cfg = self.cfg
        adv = (
            advantages
            if advantages is not None
            else grpo_math.group_advantages(r.returns, cfg.group_size, scale=cfg.scale_advantages)
        )
        S = r.obs.shape[0]
        ref_logp = ref_log_probs
        if ref_logp is None and cfg.kl_coef > 0:
            if self.reference is None:
                raise RlinfError(
                    "GRPO with kl_coef > 0 needs reference log-probabilities (no reference here)"
                )
            with torch.no_grad():
                ref_logp = self.reference.evaluate(r.obs, r.actions)[0]
        # minibatches of whole sequences holding about ``minibatch_size`` valid steps each
        n_minibatches = max(1, min(S, round(float(r.mask.sum()) / cfg.minibatch_size)))
        mb = math.ceil(S / n_minibatches)
        sums = torch.zeros(4)
        n = 0
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(S, generator=self.generator)
            for start in range(0, S, mb):
                idx = perm[start : start + mb]
                logp, _, _ = self.model.evaluate(r.obs[idx], r.actions[idx])
                loss, stats = grpo_math.policy_loss(
                    logp,
                    r.log_probs[idx],
                    adv[idx],
                    r.mask[idx],
                    cfg.clip_low,
                    cfg.clip_high,
                    ref_log_prob=ref_logp[idx] if ref_logp is not None else None,
                    kl_coef=cfg.kl_coef,
                    aggregation=cfg.aggregation,
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                gn = (
                    ppo_math.clip_grad_norm(self.params, cfg.max_grad_norm)
                    if cfg.max_grad_norm is not None
                    else torch.zeros(())
                )
                self.optimizer.step()
                sums += torch.stack([loss.detach(), stats["kl"], stats["clip_fraction"], gn])
                n += 1
        self.version += 1
        s = (sums / max(n, 1)).tolist()
        return {"policy_loss": s[0], "kl_ref": s[1], "clip_fraction": s[2], "grad_norm": s[3]}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "reference": self.reference.state_dict() if self.reference is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.version = int(state["version"])


# -- the loop ----------------------------------------------------------------------------------


BASE_COLUMNS = ("step", "wall_s", "episode_return_mean", "episode_length_mean", "episodes", "env_steps_per_s")
LEARNER_COLUMNS: dict[str, tuple[str, ...]] = {
    "ppo": (
        "policy_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
        "grad_norm",
        "approx_kl",
        "epochs",
        "explained_variance",
        "lr",
        "rollout_s",
        "update_s",
    ),
    "sac": ("critic_loss", "q_mean", "actor_loss", "entropy", "alpha_loss", "alpha", "updates"),
    "grpo": ("policy_loss", "kl_ref", "clip_fraction", "grad_norm", "group_return_mean"),
}


class _MetricsLog:
    """``metrics.csv`` with a fixed header: :data:`BASE_COLUMNS` then the algorithm's
    :data:`LEARNER_COLUMNS` (empty cells where a row has no value, e.g. before SAC learns)."""

    def __init__(self, path: Path, columns: tuple[str, ...], append: bool) -> None:
        self.path = path
        self.columns = list(columns)
        self._file = None
        self.append = append and path.exists() and path.stat().st_size > 0

    def write(self, row: dict[str, float]) -> None:
        if self._file is None:
            self._file = self.path.open("a" if self.append else "w", newline="", encoding="utf-8")
            if not self.append:
                csv.writer(self._file).writerow(self.columns)
        csv.writer(self._file).writerow([_fmt(row.get(c, "")) for c in self.columns])
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _fmt(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v


class _Run:
    """Bookkeeping shared by the three loops: steps, wall time, logging, checkpoints, summary."""

    def __init__(
        self,
        name: str,
        run_dir: Path,
        runner: RunnerConfig,
        stepper: VectorEnvStepper,
        progress: ProgressFn | None,
        resume: bool,
    ) -> None:
        self.name, self.run_dir, self.runner, self.stepper, self.progress = (
            name,
            run_dir,
            runner,
            stepper,
            progress,
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = _MetricsLog(
            run_dir / "metrics.csv", BASE_COLUMNS + LEARNER_COLUMNS[name] + ("success_rate",), append=resume
        )
        self.t0 = time.perf_counter()
        self.wall_offset = 0.0
        self.best = -math.inf
        self.last_log_step = 0
        self.last_ckpt_step = 0
        self.last_log_time = self.t0
        self.start_steps = 0

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.perf_counter() - self.t0

    def return_mean(self) -> float:
        r = self.stepper.recent_returns
        return float(np.mean(r)) if r else float("nan")

    def maybe_log(self, extra: dict[str, float], force: bool = False) -> None:
        steps = self.stepper.steps
        if not force and steps - self.last_log_step < self.runner.log_interval:
            return
        now = time.perf_counter()
        sps = (steps - self.last_log_step) / max(now - self.last_log_time, 1e-9)
        ret = self.return_mean()
        if not math.isnan(ret):
            self.best = max(self.best, ret)
        lengths = self.stepper.recent_lengths
        row = {
            "step": steps,
            "wall_s": round(self.wall_s, 3),
            "episode_return_mean": ret,
            "episode_length_mean": float(np.mean(lengths)) if lengths else float("nan"),
            "episodes": self.stepper.episodes,
            "env_steps_per_s": sps,
            **extra,
        }
        if self.stepper.recent_successes:  # envs that report info["is_success"]
            row["success_rate"] = float(np.mean(self.stepper.recent_successes))
        self.log.write(row)
        if self.progress is not None:
            self.progress(row)
        self.last_log_step, self.last_log_time = steps, now

    def run_state(self) -> dict[str, Any]:
        return {
            "steps": self.stepper.steps,
            "episodes": self.stepper.episodes,
            "recent_returns": list(self.stepper.recent_returns),
            "recent_lengths": list(self.stepper.recent_lengths),
            "recent_successes": list(self.stepper.recent_successes),
            "wall_s": self.wall_s,
            "best": self.best,
            "torch_rng": torch.get_rng_state(),
        }

    def load_run_state(self, s: dict[str, Any]) -> None:
        self.stepper.steps = int(s["steps"])
        self.stepper.episodes = int(s["episodes"])
        self.stepper.recent_returns.extend(s["recent_returns"])
        self.stepper.recent_lengths.extend(s["recent_lengths"])
        self.stepper.recent_successes.extend(s.get("recent_successes", ()))
        self.wall_offset = float(s["wall_s"])
        self.best = float(s["best"])
        torch.set_rng_state(s["torch_rng"])
        self.last_log_step = self.last_ckpt_step = self.start_steps = self.stepper.steps

    def maybe_checkpoint(self, state_fn: Callable[[], dict[str, Any]], force: bool = False) -> Path | None:
        interval = self.runner.checkpoint_interval
        steps = self.stepper.steps
        if not force and (interval == 0 or steps - self.last_ckpt_step < interval):
            return None
        path = self.run_dir / "checkpoints" / f"step_{steps:010d}.pt"
        atomic_torch_save({"algorithm": self.name, "run": self.run_state(), **state_fn()}, path)
        self.last_ckpt_step = steps
        return path

    def finish(self, policy: dict[str, Any], interrupted: bool = False) -> dict[str, Any]:
        self.log.close()
        # `rlinf eval` builds the same env (e.g. FrankaReach's obs_mode: flat)
        policy = {
            "env_kwargs": dict(self.stepper.env_kwargs),
            "max_episode_steps": self.stepper.max_episode_steps,
            **policy,
        }
        atomic_torch_save(policy, self.run_dir / "policy.pt")
        wall = self.wall_s
        steps = self.stepper.steps
        summary = {
            "algorithm": self.name,
            "env_id": self.stepper.env_id,
            "total_env_steps": steps,
            "wall_s": round(wall, 3),
            "env_steps_per_s": steps / wall if wall > 0 else 0.0,
            "final_return_mean": _none_if_nan(self.return_mean()),
            "best_return_mean": _best_of(self.best, self.return_mean()),
            "success_rate": float(np.mean(self.stepper.recent_successes))
            if self.stepper.recent_successes
            else None,
            "episodes": self.stepper.episodes,
            "interrupted": interrupted,
        }
        _atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary


def _none_if_nan(x: float) -> float | None:
    return None if math.isnan(x) else x


def _stepper(env: EnvConfig, seed: int) -> VectorEnvStepper:
    return VectorEnvStepper(
        env.id,
        env.num_envs,
        seed,
        vectorization=env.vectorization,
        env_kwargs=env.kwargs,
        max_episode_steps=env.max_episode_steps,
    )


def _load_resume(run_dir: Path, name: str) -> dict[str, Any] | None:
    path = latest_checkpoint(run_dir)
    if path is None:
        raise RlinfError(f"nothing to resume in {run_dir}: no checkpoints/step_*.pt there")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("algorithm") != name:
        raise RlinfError(f"{path} is a {state.get('algorithm')!r} checkpoint, not {name!r}")
    return state


def train(
    algo: PPOConfig | SACConfig | GRPOConfig,
    env: EnvConfig,
    model: ModelConfig,
    runner: RunnerConfig,
    run_dir: Path,
    *,
    progress: ProgressFn | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``algo`` in this process until ``runner.total_steps`` env steps; returns the summary
    (also written to ``run_dir/summary.json``).

    ``resume`` continues from the newest checkpoint of ``run_dir``: weights, optimiser state,
    RNG state, observation/reward statistics and (SAC) the replay buffer are restored; the
    environments are re-created and reset with a seed derived from the step count (simulator
    state is not checkpointed). ``progress`` is called with every metrics row. Ctrl-C writes a
    checkpoint, the final policy and the summary (``"interrupted": true``), then re-raises.
    """
    torch.set_num_threads(runner.torch_threads)
    run_dir = Path(run_dir)
    state = _load_resume(run_dir, algo.name) if resume else None
    seed = runner.seed + (state["run"]["steps"] if state else 0)
    torch.manual_seed(runner.seed)
    if isinstance(algo, PPOConfig):
        return _train_ppo(algo, env, model, runner, run_dir, progress, state, seed)
    if isinstance(algo, SACConfig):
        return _train_sac(algo, env, model, runner, run_dir, progress, state, seed)
    if isinstance(algo, GRPOConfig):
        return _train_grpo(algo, env, model, runner, run_dir, progress, state, seed)
    raise TypeError(f"train: unknown algorithm config {type(algo).__name__}")


def _loop(
    run: _Run,
    body: Callable[[], dict[str, float]],
    state_fn: Callable[[], dict[str, Any]],
    policy_fn: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    total = run.runner.total_steps
    extra: dict[str, float] = {}
    try:
        while run.stepper.steps < total:
            extra = body() or extra
            run.maybe_log(extra)
            run.maybe_checkpoint(state_fn)
    except KeyboardInterrupt:
        run.maybe_checkpoint(state_fn, force=True)
        run.finish(policy_fn(), interrupted=True)
        run.stepper.close()
        raise
    if run.stepper.steps != run.last_log_step:
        run.maybe_log(extra, force=True)
    if run.runner.checkpoint_interval and run.stepper.steps != run.last_ckpt_step:
        run.maybe_checkpoint(state_fn, force=True)
    run.stepper.close()
    return run.finish(policy_fn())


def _train_ppo(
    cfg: PPOConfig,
    env_cfg: EnvConfig,
    model_cfg: ModelConfig,
    runner: RunnerConfig,
    run_dir: Path,
    progress: ProgressFn | None,
    state: dict[str, Any] | None,
    seed: int,
) -> dict[str, Any]:
    stepper = _stepper(env_cfg, seed)
    hidden, activation = _model_defaults(model_cfg, [64, 64], "tanh")
    spec = {
        "cls": "GaussianActorCritic",
        "obs_dim": stepper.obs_dim,
        "act_dim": stepper.act_dim,
        "hidden": hidden,
        "activation": activation,
        "log_std_init": model_cfg.log_std_init,
        "normalize_obs": cfg.normalize_obs,
        "ortho_init": model_cfg.ortho_init,
    }
    model = build_policy(spec)
    scaler = RewardScaler(stepper.num_envs, cfg.gamma) if cfg.normalize_reward else None
    collector = PPOCollector(stepper, model, cfg.rollout_steps, scaler)
    learner = PPOLearner(model, cfg, seed=runner.seed)
    run = _Run("ppo", run_dir, runner, stepper, progress, resume=state is not None)
    if state is not None:
        learner.load_state_dict(state["learner"])
        if scaler is not None and state.get("reward_scaler"):
            scaler.load_state_dict(state["reward_scaler"])
        run.load_run_state(state["run"])
    batch = cfg.rollout_steps * stepper.num_envs
    iterations = max(1, math.ceil(runner.total_steps / batch))

    def body() -> dict[str, float]:
        it = stepper.steps // batch
        if cfg.anneal_lr:
            learner.set_lr_fraction(1.0 - it / iterations)
        t0 = time.perf_counter()
        rollout = collector.collect()
        t1 = time.perf_counter()
        metrics = learner.update(rollout)
        collector.version = learner.version
        metrics["rollout_s"] = t1 - t0
        metrics["update_s"] = time.perf_counter() - t1
        return metrics

    def state_fn() -> dict[str, Any]:
        return {"learner": learner.state_dict(), "reward_scaler": scaler.state_dict() if scaler else None}

    def policy_fn() -> dict[str, Any]:
        return {"algorithm": "ppo", "env_id": env_cfg.id, "spec": spec, "state_dict": model.state_dict()}

    return _loop(run, body, state_fn, policy_fn)


def _train_sac(
    cfg: SACConfig,
    env_cfg: EnvConfig,
    model_cfg: ModelConfig,
    runner: RunnerConfig,
    run_dir: Path,
    progress: ProgressFn | None,
    state: dict[str, Any] | None,
    seed: int,
) -> dict[str, Any]:
    stepper = _stepper(env_cfg, seed)
    spec = sac_policy_spec(
        model_cfg, stepper.obs_dim, stepper.act_dim, stepper.action_low.tolist(), stepper.action_high.tolist()
    )
    actor = build_policy(spec)
    critic = sac_critic(spec)
    learner = SACLearner(actor, critic, cfg, runner.device)
    # np.zeros pages are only committed when written, so a large buffer_size costs what is used
    buffer = ReplayBuffer(cfg.buffer_size, (stepper.obs_dim,), (stepper.act_dim,), seed=runner.seed)
    collector = SACCollector(stepper, learner.actor, buffer, cfg.learning_starts)
    run = _Run("sac", run_dir, runner, stepper, progress, resume=state is not None)
    debt = 0.0
    if state is not None:
        learner.load_state_dict(state["learner"])
        buffer.load_state_dict(state["buffer"])
        debt = float(state["update_debt"])
        run.load_run_state(state["run"])
    sums: dict[str, Tensor] = {}
    counts = 0

    def body() -> dict[str, float] | None:
        nonlocal debt, sums, counts
        collector.actor = learner.policy()
        collector.step()
        if stepper.steps < cfg.learning_starts or len(buffer) < cfg.batch_size:
            return None
        debt += stepper.num_envs * cfg.updates_per_step
        while debt >= 1.0:
            out = learner.update(buffer.sample(cfg.batch_size))
            for k, v in out.items():
                sums[k] = sums[k] + v if k in sums else v
            counts += 1
            debt -= 1.0
        if stepper.steps - run.last_log_step >= runner.log_interval or stepper.steps >= runner.total_steps:
            row = {k: float(v) / counts for k, v in sums.items()}
            row["updates"] = float(learner.updates)
            sums, counts = {}, 0
            return row
        return None

    def state_fn() -> dict[str, Any]:
        return {"learner": learner.state_dict(), "buffer": buffer.state_dict(), "update_debt": debt}

    def policy_fn() -> dict[str, Any]:
        learner.sync()
        return {
            "algorithm": "sac",
            "env_id": env_cfg.id,
            "spec": spec,
            "state_dict": learner.actor.state_dict(),
        }

    try:
        return _loop(run, body, state_fn, policy_fn)
    finally:
        learner.close()  # the second thread of simultaneous / pipelined


def _train_grpo(
    cfg: GRPOConfig,
    env_cfg: EnvConfig,
    model_cfg: ModelConfig,
    runner: RunnerConfig,
    run_dir: Path,
    progress: ProgressFn | None,
    state: dict[str, Any] | None,
    seed: int,
) -> dict[str, Any]:
    need = cfg.group_size * cfg.num_groups
    if env_cfg.num_envs != need:
        raise ConfigError(
            f"GRPO runs one group per {cfg.group_size} envs and {cfg.num_groups} groups per iteration, "
            f"so it needs num_envs = algorithm.group_size * algorithm.num_groups = {need}, got {env_cfg.num_envs}",
            path="env.num_envs",
        )
    stepper = _stepper(env_cfg, seed)
    spec_limit = getattr(getattr(stepper.envs, "spec", None), "max_episode_steps", None)
    max_steps = env_cfg.max_episode_steps or spec_limit
    if not max_steps:
        stepper.close()
        raise ConfigError(
            f"{env_cfg.id!r} has no time limit; GRPO needs whole episodes: set env.max_episode_steps",
            path="env.max_episode_steps",
        )
    hidden, activation = _model_defaults(model_cfg, [64, 64], "tanh")
    spec = {
        "cls": "GaussianActorCritic",
        "obs_dim": stepper.obs_dim,
        "act_dim": stepper.act_dim,
        "hidden": hidden,
        "activation": activation,
        "log_std_init": model_cfg.log_std_init,
        "normalize_obs": True,
        "ortho_init": model_cfg.ortho_init,
    }
    model = build_policy(spec)
    collector = GRPOCollector(stepper, model, cfg.group_size, seed, int(max_steps))
    learner = GRPOLearner(model, cfg, seed=runner.seed)
    run = _Run("grpo", run_dir, runner, stepper, progress, resume=state is not None)
    if state is not None:
        learner.load_state_dict(state["learner"])
        collector.iteration = int(state["collector_iteration"])
        run.load_run_state(state["run"])

    def body() -> dict[str, float]:
        rollout = collector.collect()
        metrics = learner.update(rollout)
        collector.version = learner.version
        metrics["group_return_mean"] = float(rollout.returns.mean())
        return metrics

    def state_fn() -> dict[str, Any]:
        return {"learner": learner.state_dict(), "collector_iteration": collector.iteration}

    def policy_fn() -> dict[str, Any]:
        return {"algorithm": "grpo", "env_id": env_cfg.id, "spec": spec, "state_dict": model.state_dict()}

    return _loop(run, body, state_fn, policy_fn)


# -- saved policies ----------------------------------------------------------------------------


def build_policy(spec: dict[str, Any]) -> torch.nn.Module:
    """A fresh policy module from a ``spec`` (``cls`` plus constructor arguments), as saved in
    ``policy.pt`` and sent to the distributed runner's workers. Extra keys are ignored."""
    cls = spec["cls"]
    if cls == "GaussianActorCritic":
        return GaussianActorCritic(
            spec["obs_dim"],
            spec["act_dim"],
            spec["hidden"],
            spec["activation"],
            spec["log_std_init"],
            spec["normalize_obs"],
            spec.get("ortho_init", True),
        )
    if cls == "SquashedGaussianActor":
        return SquashedGaussianActor(
            spec["obs_dim"],
            spec["act_dim"],
            spec["action_low"],
            spec["action_high"],
            spec["hidden"],
            spec["activation"],
            log_std_bound=spec.get("log_std_bound", "tanh"),
            ortho_init=spec.get("ortho_init", True),
            squash_eps=spec.get("squash_eps", 0.0),
        )
    raise RlinfError(f"unknown policy class {cls!r}")


def load_policy(path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild the policy saved as ``policy.pt`` by :func:`train`: ``(module, record)``; the
    module's ``predict(raw_obs, deterministic)`` maps ``[B, D]`` observations to actions."""
    path = Path(path)
    if not path.is_file():
        raise RlinfError(
            f"no saved policy at {path} (a finished or interrupted run writes RUN_DIR/policy.pt)"
        )
    record = torch.load(path, map_location="cpu", weights_only=False)
    try:
        module = build_policy(dict(record["spec"]))
    except RlinfError as err:
        raise RlinfError(f"{path}: {err}") from None
    module.load_state_dict(record["state_dict"])
    module.eval()
    return module, record


def evaluate_policy(
    path: Path, episodes: int = 10, seed: int = 10_000, num_envs: int = 1, deterministic: bool = True
) -> dict[str, Any]:
    """Run the saved policy for ``episodes`` whole episodes in the env it was trained on (its
    id, ``env.kwargs`` and ``env.max_episode_steps``); returns ``mean``, ``std`` and the list of
    ``returns`` (raw environment rewards), and ``success_rate`` (the fraction of episodes whose
    last step had ``info["is_success"]``; ``None`` if the env does not report it)."""
    if episodes < 1:
        raise ValueError("evaluate_policy: episodes must be at least 1")
    module, record = load_policy(path)
    stepper = VectorEnvStepper(
        record["env_id"],
        min(num_envs, episodes),
        seed,
        env_kwargs=record.get("env_kwargs"),
        max_episode_steps=record.get("max_episode_steps"),
    )
    returns: list[float] = []
    successes: list[float] = []
    try:
        with torch.no_grad():
            while len(returns) < episodes:
                actions = module.predict(torch.from_numpy(stepper.obs), deterministic)  # type: ignore[operator]
                step = stepper.step(actions.numpy())
                returns.extend(step.episode_returns)
                successes.extend(step.episode_successes)
    finally:
        stepper.close()
    returns = returns[:episodes]
    successes = successes[:episodes]
    return {
        "episodes": episodes,
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "returns": returns,
        "success_rate": float(np.mean(successes)) if len(successes) == episodes else None,
    }
