"""PPO's learner: GAE, then clipped-surrogate epochs over minibatches (and its side on the actor worker)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rlinf_algos import objectives
from rlinf_algos import obs as obs_tree
from rlinf_algos.channels import traj_key
from rlinf_algos.embodied.recipe import LearnerContext, LearnerSide
from rlinf_algos.models.mlp import GaussianActorCritic, RunningNorm, module_device
from rlinf_algos.objectives.advantages import StepRewards
from rlinf_algos.objectives.losses import LossSettings
from rlinf_algos.optim import LeanAdam, clip_grads_, make_adam
from rlinf_algos.parallel import DataParallel
from rlinf_algos.ppo import functional as F
from rlinf_algos.ppo.config import PPOConfig
from rlinf_algos.stats import RewardScaler
from rlinf_core.errors import ConfigError

__all__ = ["PPOLearner", "PPOLearnerSide", "PPORollout"]


@dataclass
class PPORollout:
    """What the rollout side hands the learner for one PPO iteration, all ``[T, N, ...]`` tensors:
    ``obs`` (normalised, as the policy saw them), ``actions`` (as sampled, before clipping),
    ``log_probs``, ``values``, ``rewards`` (scaled if reward scaling is on), ``terminated``,
    ``truncated``, ``final_values`` (``V(final_obs)`` where truncated, 0 elsewhere) and
    ``last_value`` ``[N]`` (``V`` of the observation after the last step). ``version`` is the
    weight version that produced it. :meth:`to` moves it to the learner's device."""

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

    def to(self, device: torch.device | str) -> PPORollout:
        """This rollout with every tensor on ``device`` (itself when they are there already)."""
        dev = torch.device(device)
        if self.actions.device == dev:
            return self
        moved = {
            f.name: obs_tree.to_device(getattr(self, f.name), dev)
            for f in fields(self)
            if f.name != "version"
        }
        return replace(self, **moved)


class PPOLearner:
    """The learner side of PPO: the registered estimator (``algorithm.adv_estimator``, GAE),
    then ``update_epochs`` passes of minibatch updates of the registered policy loss
    (``algorithm.policy_loss``, the clipped surrogate ``ppo_clip``), clipped value loss and
    entropy bonus, with gradient clipping and an approx-KL early stop. One optimiser over actor
    and critic, one backward per minibatch.

    ``demos`` (raw states ``[D, obs]``, actions ``[D, A]`` and optional draw weights ``[D]``) with
    ``algorithm.bc_coef > 0`` add ``w * mean ||mu(normalize(s)) - clip(a)||^2`` over
    ``minibatch_size`` demonstrated steps drawn afresh for each minibatch, ``w`` decaying linearly to 0 over ``bc_decay_updates`` policy
    updates (:meth:`bc_weight`); the behaviour-cloning fit's loss (:mod:`rlinf_algos.bc`)."""

    def __init__(
        self,
        model: GaussianActorCritic,
        cfg: PPOConfig,
        seed: int = 0,
        dp: DataParallel | None = None,
        demos: tuple[Any, ...] | None = None,
    ) -> None:
        self.model, self.cfg = model, cfg
        self.demos = None
        self.demo_weights: Tensor | None = None  # per-step draw weights (bc_sampling: per_task)
        if demos is not None and cfg.bc_coef > 0:
            states, actions, *rest = demos
            self.demos = (torch.as_tensor(states).float(), torch.as_tensor(actions).float().clamp(-1.0, 1.0))
            if rest and rest[0] is not None:
                self.demo_weights = torch.as_tensor(rest[0], dtype=torch.float64)
        self.bc_generator = torch.Generator().manual_seed(seed + 1)
        self.dp = dp if dp is not None else DataParallel()
        # algorithm.anchor_coef: a frozen copy of the policy the first update starts from
        self.anchor: nn.Module | None = None
        if cfg.anchor_coef > 0 and (self.dp.sharded or not callable(getattr(model, "action_mean", None))):
            raise ConfigError(
                "algorithm.anchor_coef holds a Gaussian policy's action mean near its start; this learner "
                + (
                    "shards its model (FSDP)"
                    if self.dp.sharded
                    else f"has no action mean ({type(model).__name__})"
                )
                + ": set algorithm.anchor_coef: 0",
                path="algorithm.anchor_coef",
            )
        self.device = module_device(model)  # where the update runs; rollouts are moved there
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_adam(self.params, cfg.lr, cfg.adam_eps)
        self.adam = LeanAdam(self.optimizer)
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0
        # the registered functions the section names (rlinf_algos.objectives); each sample is one
        # step, a [B, 1] row to the loss, whose statistics the update computes from the log-ratios
        self.estimator = objectives.estimator(cfg.adv_estimator)
        self.loss_fn = objectives.loss_function(cfg.policy_loss)
        self.loss_settings = LossSettings(
            cfg.clip_low,
            cfg.clip_high,
            aggregation=objectives.resolve_aggregation(cfg),
            dual_clip=cfg.dual_clip,
            stats=False,
        )

    def set_lr_fraction(self, frac: float) -> None:
        """Set the learning rate to ``frac * cfg.lr`` (linear annealing)."""
        for group in self.optimizer.param_groups:
            group["lr"] = frac * self.cfg.lr

    def bc_weight(self) -> float:
        """The behaviour-cloning term's weight in the next update: 0 during the critic warm-up and
        without demonstrations; ``bc_coef`` decaying linearly to 0 over ``bc_decay_updates`` policy
        updates after it."""
        cfg = self.cfg
        if self.demos is None or self.version < cfg.critic_warmup:
            return 0.0
        if cfg.bc_decay_updates is None:
            return cfg.bc_coef
        return cfg.bc_coef * max(0.0, 1.0 - (self.version - cfg.critic_warmup) / cfg.bc_decay_updates)

    def _anchor(self) -> nn.Module | None:
        """The policy the first update started from (frozen), or ``None`` without
        ``algorithm.anchor_coef``; a resumed run restores it from its checkpoint."""
        if self.cfg.anchor_coef > 0 and self.anchor is None:
            self.anchor = self._frozen_copy()
        return self.anchor

    def _frozen_copy(self) -> nn.Module:
        """A copy of the model that no gradient reaches."""
        return copy.deepcopy(self.model).requires_grad_(False)

    def _anchor_loss(self, obs: Any, anchor: nn.Module) -> Tensor:
        """``mean ||mu(s) - mu_0(s)||^2`` over the rollout's states ``obs``, normalised as the policy
        saw them (with a warm start's frozen statistics, as the starting policy saw them too)."""
        with torch.no_grad():
            target = anchor.action_mean(obs)
        return (self.model.action_mean(obs) - target).pow(2).sum(-1).mean()

    def _bc_loss(self, n: int) -> Tensor:
        """The behaviour-cloning loss on ``n`` demonstrated steps drawn at random."""
        assert self.demos is not None
        states, actions = self.demos
        if self.demo_weights is not None:
            idx = torch.multinomial(self.demo_weights, n, replacement=True, generator=self.bc_generator)
        else:
            idx = torch.randint(len(states), (n,), generator=self.bc_generator, device=states.device)
        model = self.model
        mean = model.action_mean(model.normalize(states[idx].to(self.device)))
        return (mean - actions[idx].to(self.device)).pow(2).sum(-1).mean()

    def advantages(self, r: PPORollout) -> tuple[Tensor, Tensor]:
        """``(advantages, returns)`` ``[T, N]`` of a rollout by the registered critic estimator
        ``algorithm.adv_estimator`` (``gae``: bootstrapping on truncation)."""
        done = r.terminated | r.truncated
        next_values = F.next_values_with_bootstrap(r.values, r.last_value, done, r.final_values)
        steps = StepRewards(
            r.rewards,
            r.values,
            self.cfg.gamma,
            self.cfg.gae_lambda,
            next_values=next_values,
            terminated=r.terminated,
            truncated=r.truncated,
        )
        return self.estimator(steps, self.cfg)

    def update(self, r: PPORollout) -> dict[str, float]:
        """``update_epochs`` passes over the rollout in minibatches (the last partial one dropped),
        each a fresh permutation; stops after an epoch whose last minibatch's approx-KL passed
        ``target_kl``. Lean on purpose (a minibatch step of these tiny networks is mostly per-call
        overhead): each epoch gathers its permutation once and normalises the advantages of all
        its minibatches in one pass; minibatches are views; the optimiser step is
        :class:`LeanAdam`; metrics stay tensors until the end (no host sync per step). ``r`` is
        moved to the learner's device first (a no-op on the CPU); the permutations are drawn on
        the host, so the same seed gives the same minibatches on any device."""
        cfg = self.cfg
        dev = self.device
        r = r.to(dev)
        adv, ret = self.advantages(r)
        per_slot = cfg.normalize_advantages and cfg.norm_scope == "slot"
        if per_slot:  # each slot's [T] advantages on their own, before the minibatches mix slots
            adv = F.normalize_advantages(adv, dim=0)
        b_obs = obs_tree.flatten_lead(r.obs, 2)
        b_act = r.actions.reshape(-1, r.actions.shape[-1])
        b_logp, b_val = r.log_probs.reshape(-1), r.values.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        B = b_act.shape[0]
        mb = min(cfg.minibatch_size, B)
        M = B // mb  # minibatches per epoch
        model, adam, dp = self.model, self.adam, self.dp
        adam.refresh()
        stats = torch.zeros(cfg.update_epochs * M, 4, device=dev)  # pg, vf, -entropy, grad norm
        ones = torch.ones(mb, 1, device=dev)  # every [B, 1] row is a valid step
        ratios = torch.zeros(cfg.update_epochs * M, mb, device=dev)  # log-ratios, for KL and clip fraction
        n_mb = 0
        epochs = 0
        # on a learner group each rank takes its shard of every minibatch (in micro-batches);
        # the gradients summed over ranks are the whole minibatch's (see rlinf_algos.parallel)
        lo, hi = dp.span(mb)
        pieces = dp.micro_spans(lo, hi)
        plain = not dp.distributed and len(pieces) == 1
        # a model with an auxiliary loss (vla's predict_privileged) adds it to each minibatch's
        has_aux = callable(getattr(model, "auxiliary_loss", None)) and bool(getattr(model, "aux_coef", 0))
        aux_sum = torch.zeros((), device=dev)
        # critic warm-up: the first updates fit the value function alone. The parameters only the
        # policy loss reaches get no gradient at all then (not a zero one): Adam would otherwise count those steps and
        # decay their second moments to ~0, so that the first policy steps after the warm-up moved
        # each weight by several learning rates (approx KL 0.24 on MetaWorld MT10's first update)
        warming = self.version < cfg.critic_warmup
        pg_coef = 0.0 if warming else 1.0
        frozen = self._policy_only_params() if warming else []
        bc_w = self.bc_weight()
        bc_sum = torch.zeros((), device=dev)
        anchor = self._anchor() if not warming else None
        anchor_sum = torch.zeros((), device=dev)
        for _ in range(cfg.update_epochs):
            used = torch.randperm(B, generator=self.generator, device="cpu")[: M * mb].to(dev)
            e_obs, e_act = obs_tree.take(b_obs, used), b_act[used]
            e_logp, e_val, e_ret = b_logp[used], b_val[used], b_ret[used]
            e_adv = b_adv[used].view(M, mb)
            if cfg.normalize_advantages and not per_slot:
                e_adv = F.normalize_advantages(e_adv, dim=1)
            for i in range(M):
                adam.zero_grad()
                for j, (u, v) in enumerate(pieces):
                    a, b = i * mb + u, i * mb + v
                    logp, entropy, value = model.evaluate(obs_tree.take(e_obs, slice(a, b)), e_act[a:b])
                    old = e_logp[a:b]
                    log_ratio = logp - old
                    pg, _ = self.loss_fn(
                        logp.unsqueeze(1), old.unsqueeze(1), e_adv[i, u:v], ones[u:v], self.loss_settings
                    )
                    vf = F.value_loss(value, e_ret[a:b], e_val[a:b], cfg.value_clip)
                    loss = pg * pg_coef + cfg.vf_coef * vf
                    if bc_w:
                        bc = self._bc_loss(mb)
                        loss = loss + bc_w * bc
                        bc_sum += bc.detach() * ((v - u) / mb)
                    if anchor is not None:
                        held = self._anchor_loss(obs_tree.take(e_obs, slice(a, b)), anchor)
                        loss = loss + cfg.anchor_coef * held
                        anchor_sum += held.detach() * ((v - u) / mb)
                    aux = model.auxiliary_loss() if has_aux else None
                    if aux is not None:
                        loss = loss + aux
                        aux_sum += aux.detach() * ((v - u) / mb)
                    ent = F.entropy_loss(entropy)
                    if cfg.ent_coef:
                        loss = loss + cfg.ent_coef * ent
                    if plain:
                        loss.backward()
                    else:
                        share = (v - u) / mb
                        dp.backward(loss, share, last=j == len(pieces) - 1)
                        pg, vf, ent = pg.detach() * share, vf.detach() * share, ent.detach() * share
                    with torch.no_grad():
                        ratios[n_mb, u:v] = log_ratio
                        if j == 0:
                            stats[n_mb, :3] = torch.stack([pg, vf, ent])
                        else:
                            stats[n_mb, :3] += torch.stack([pg, vf, ent])
                with torch.no_grad():
                    if not plain:
                        dp.sync_grads(adam.params)
                    for p in frozen:  # Adam skips them: their moments and step count stay as they are
                        if p.grad is not None and not bool(p.grad.any()):
                            p.grad = None
                    if cfg.max_grad_norm is not None:
                        gn = (
                            clip_grads_(adam.grads(), cfg.max_grad_norm)
                            if plain
                            else dp.clip_grad_norm(adam.params, cfg.max_grad_norm)
                        )
                    else:
                        gn = torch.zeros((), device=dev)
                    adam.step()
                    stats[n_mb, 3] = gn
                n_mb += 1
            epochs += 1
            if cfg.target_kl is not None:
                last = ratios[n_mb - 1] if not dp.distributed else dp.mean(ratios[n_mb - 1]) * dp.world
                if float(F.approx_kl(last)) > cfg.target_kl:  # the same on every rank
                    break
        self.version += 1
        if dp.distributed:  # every rank's part of the statistics (each holds its shard's)
            stats[:n_mb, :3] = dp.mean(stats[:n_mb, :3]) * dp.world
            ratios[:n_mb] = dp.mean(ratios[:n_mb]) * dp.world
        with torch.no_grad():
            s = stats[:n_mb].mean(0).tolist() if n_mb else [0.0] * 4
            kl = float(F.approx_kl(ratios[n_mb - 1])) if n_mb else 0.0
            cf = float(F.clip_fraction(ratios[:n_mb], cfg.clip_low, cfg.clip_high)) if n_mb else 0.0
        y, yhat = b_ret, b_val
        var_y = float(y.var())
        explained = float("nan") if var_y == 0 else 1.0 - float((y - yhat).var()) / var_y
        out_aux = {}
        if has_aux:
            total = dp.mean(aux_sum) * dp.world if dp.distributed else aux_sum
            out_aux["aux_loss"] = float(total) / max(n_mb, 1)
        if self.demos is not None:
            total = dp.mean(bc_sum) * dp.world if dp.distributed else bc_sum
            out_aux["bc_loss"] = float(total) / max(n_mb, 1) if bc_w else float("nan")
            out_aux["bc_weight"] = bc_w
        if cfg.anchor_coef > 0:
            total = dp.mean(anchor_sum) * dp.world if dp.distributed else anchor_sum
            out_aux["anchor_loss"] = float(total) / max(n_mb, 1) if anchor is not None else float("nan")
        return {
            **out_aux,
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

    def _policy_only_params(self) -> list[Tensor]:
        """The policy's parameters (those the critic warm-up leaves alone when nothing but the
        policy loss reaches them: a trunk shared with the critic still learns from the value loss)."""
        policy = getattr(self.model, "policy_parameters", None)
        return list(policy()) if callable(policy) else []

    def state_dict(self) -> dict[str, Any]:
        """The single-process format whatever the learner group (gathered with FSDP: every rank
        calls it)."""
        return {
            "model": self.dp.state_dict(self.model),
            "optimizer": self.dp.optim_state_dict(self.model, self.optimizer),
            "generator": self.generator.get_state(),
            "bc_generator": self.bc_generator.get_state(),
            "version": self.version,
            **({"anchor": self.anchor.state_dict()} if self.anchor is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dp.load_state_dict(self.model, state["model"])
        self.dp.load_optim_state_dict(self.model, self.optimizer, state["optimizer"])
        self.adam.refresh()
        self.generator.set_state(state["generator"])
        if "bc_generator" in state:
            self.bc_generator.set_state(state["bc_generator"])
        self.version = int(state["version"])
        if self.cfg.anchor_coef > 0 and "anchor" in state:
            self.anchor = self._frozen_copy()
            self.anchor.load_state_dict(state["anchor"])


class PPOLearnerSide(LearnerSide):
    """PPO on the actor worker: turns the rollout workers'
    trajectories into a :class:`PPORollout` and updates.

    Which weights compute the values: the learner's, when it takes the batch (the weights the
    update starts from). The rollout side needs no critic then, and with ``max_staleness: 0`` the
    values are exactly the collecting policy's; with a stale batch they are the fresher
    estimate, which is what GAE should bootstrap from. Rewards are scaled here too (one running
    return per env slot, in slot order), and the batch's observation moments are folded into the
    policy's statistics after the update, for the next version, unless ``freeze_obs_stats`` (a
    warm start's statistics that RL keeps: :func:`rlinf_algos.warm_starts.obs_stats_frozen`).
    """

    def __init__(
        self,
        model: Any,
        cfg: PPOConfig,
        ctx: LearnerContext,
        num_slots: int,
        freeze_obs_stats: bool = False,
        demos: tuple[Any, ...] | None = None,
    ) -> None:
        self.model, self.cfg, self.ctx = model, cfg, ctx
        self.freeze_obs_stats = freeze_obs_stats
        self.learner = PPOLearner(model, cfg, seed=ctx.seed, dp=ctx.dp, demos=demos)
        self.scaler = (
            RewardScaler(num_slots, cfg.gamma, per_slot=cfg.norm_scope == "slot")
            if cfg.normalize_reward
            else None
        )

    @property
    def version(self) -> int:
        return self.learner.version

    def publish_module(self) -> Any:
        return self.model

    def assemble(self, items: list[dict[str, Any]]) -> PPORollout:
        """One :class:`PPORollout` from the trajectories of every rollout rank (slot order)."""
        cat = {
            k: obs_tree.concat([it[k] for it in items], 1)
            for k in ("obs", "actions", "log_probs", "rewards", "terminated", "truncated")
        }
        last_obs = obs_tree.concat([it["last_obs"] for it in items], 0)
        T, N = cat["rewards"].shape
        # final observations of truncated steps, with slot offsets of each rollout rank
        fidx, fobs, off = [], [], 0
        for it in items:
            if len(it["final_idx"]):
                idx = it["final_idx"].copy()
                idx[:, 1] += off
                fidx.append(idx)
                fobs.append(it["final_obs"])
            off += obs_tree.batch_size(it["last_obs"])
        rewards = cat["rewards"]
        if self.scaler is not None:
            done = cat["terminated"] | cat["truncated"]
            rewards = np.stack([self.scaler(rewards[t].astype(np.float64), done[t]) for t in range(T)])
        model, dev = self.model, self.learner.device

        def on_dev(tree: Any) -> Any:  # the batch goes to the learner's device once, here
            return obs_tree.to_device(obs_tree.to_torch(tree), dev)

        obs_t = on_dev(cat["obs"])
        with torch.no_grad():
            values = model.value(obs_tree.flatten_lead(obs_t, 2)).reshape(T, N)
            last_value = model.value(on_dev(last_obs))
            final_values = torch.zeros(T, N, device=dev)
            if fidx:
                idx = torch.from_numpy(np.concatenate(fidx)).long().to(dev)
                final_values[idx[:, 0], idx[:, 1]] = model.value(on_dev(obs_tree.concat(fobs)))
        return PPORollout(
            obs_t,
            torch.from_numpy(cat["actions"]),
            torch.from_numpy(cat["log_probs"]),
            values,
            torch.from_numpy(np.asarray(rewards, np.float32)),
            torch.from_numpy(cat["terminated"]),
            torch.from_numpy(cat["truncated"]),
            final_values,
            last_value,
            min(int(it["version"]) for it in items),
        ).to(dev)

    def learn(self, items: list[dict[str, Any]], lr_frac: float = 1.0) -> dict[str, Any]:
        """Update on ``items`` (one trajectory per rollout rank), then fold in their observation
        moments (unless frozen); returns the learner's metrics and ``policy_lag``."""
        rollout = self.assemble(items)
        if self.cfg.anneal_lr:
            self.learner.set_lr_fraction(lr_frac)
        metrics: dict[str, Any] = self.learner.update(rollout)
        for it in items:  # observation statistics of this batch, for the next version
            m = it["moments"]
            if m is not None and self._folds_obs_stats():
                self.model.fold_obs_moments(m["mean"], m["var"], m["count"])
        metrics["policy_lag"] = float(self.learner.version - 1 - rollout.version)
        return metrics

    def _folds_obs_stats(self) -> bool:
        """Whether this batch's observation moments go into the statistics: not when a warm start's
        are frozen, nor once they hold ``algorithm.obs_norm_steps`` steps (their count, part of
        the weights, so a resumed run decides as the first did)."""
        if self.freeze_obs_stats:
            return False
        limit = self.cfg.obs_norm_steps
        if limit is None:
            return True
        norm = next((m for m in self.model.modules() if isinstance(m, RunningNorm)), None)
        return norm is None or float(norm.count) < limit

    def train(self, gen: int | str, lr_frac: float = 1.0, **kwargs: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        items = self.ctx.take([traj_key(gen, r) for r in range(self.ctx.rollout_world)])
        if items is None:
            return {"aborted": True}
        t1 = time.perf_counter()
        metrics = self.learn(items, lr_frac)
        metrics["update_s"] = time.perf_counter() - t1
        metrics["wait_s"] = t1 - t0
        metrics["aborted"] = False
        return metrics

    def state(self) -> dict[str, Any]:
        return {
            "learner": self.learner.state_dict(),
            "reward_scaler": self.scaler.state_dict() if self.scaler is not None else None,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        if self.scaler is not None and state.get("reward_scaler"):
            self.scaler.load_state_dict(state["reward_scaler"])

    def final_state_dict(self) -> dict[str, Any]:
        return self.ctx.dp.state_dict(self.model)
