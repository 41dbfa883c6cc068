"""GRPO's learner on embodied tasks: group-normalised episode returns as every step's advantage, the
clipped ratio over masked steps, a k3 KL to a frozen reference (and its side on the actor worker)."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlinf_algos import objectives
from rlinf_algos.channels import advantage_key, scored_key
from rlinf_algos.embodied.recipe import LearnerContext, LearnerSide
from rlinf_algos.grpo import functional as F
from rlinf_algos.grpo.config import GRPOConfig
from rlinf_algos.models.mlp import GaussianActorCritic, module_device
from rlinf_algos.objectives.losses import LossSettings, aggregation_share
from rlinf_algos.optim import LeanAdam, clip_grad_norm, make_adam
from rlinf_algos.parallel import DataParallel
from rlinf_core.errors import RlinfError

__all__ = ["GRPOLearner", "GRPOLearnerSide", "GRPORollout"]


@dataclass
class GRPORollout:
    """One GRPO iteration: ``num_groups * group_size`` episodes, group ``g`` all started from the
    same seed. Per-step tensors are ``[S, L, ...]`` (``S`` sequences, ``L`` the longest episode),
    ``mask`` ``[S, L]`` marks real steps, ``returns`` ``[S]`` are the episodes' (raw) returns, the
    outcome reward GRPO normalises within each group. :meth:`to` moves it to the learner's
    device."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    mask: Tensor
    returns: Tensor
    lengths: Tensor
    version: int = 0

    def to(self, device: torch.device | str) -> GRPORollout:
        """This rollout with every tensor on ``device`` (itself when they are there already)."""
        dev = torch.device(device)
        if self.actions.device == dev:
            return self
        return replace(
            self, **{f.name: getattr(self, f.name).to(dev) for f in fields(self) if f.name != "version"}
        )


class GRPOLearner:
    """The learner side of GRPO: group-normalised episode returns as every step's advantage, the
    clipped-ratio loss over masked steps, and a k3 KL to a frozen reference copy of the initial
    policy (the ``ReferenceWorker``'s job, done here in the same process; ``reference=False``
    when a reference worker supplies the log-probabilities to :meth:`update`)."""

    def __init__(
        self,
        model: GaussianActorCritic,
        cfg: GRPOConfig,
        seed: int = 0,
        reference: bool = True,
        dp: DataParallel | None = None,
    ) -> None:
        self.model, self.cfg = model, cfg
        self.dp = dp if dp is not None else DataParallel()
        self.device = module_device(model)  # where the update runs; rollouts are moved there
        self.reference = copy.deepcopy(model).requires_grad_(False) if reference else None
        self.params = model.policy_parameters()
        self.optimizer = make_adam(self.params, cfg.lr, cfg.adam_eps)
        self.adam = LeanAdam(self.optimizer)
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0
        # the registered functions the section names (rlinf_algos.objectives)
        self.estimator = objectives.estimator(cfg.adv_estimator)
        self.loss_fn = objectives.loss_function(cfg.policy_loss)
        self.aggregation = objectives.resolve_aggregation(cfg)
        self.loss_settings = LossSettings(
            cfg.clip_low, cfg.clip_high, cfg.kl_coef, self.aggregation, cfg.loss_norm_length
        )

    def update(
        self,
        r: GRPORollout,
        advantages: Tensor | None = None,
        ref_log_probs: Tensor | None = None,
        keep: Tensor | None = None,
    ) -> dict[str, float]:
        """One update on ``r``. ``advantages`` ``[S]`` (the reward worker's) default to the
        registered estimator's (``algorithm.adv_estimator``) of ``r.returns`` (groups of
        consecutive sequences); ``keep`` ``[S]`` (the reward worker's) to the groups inside
        ``algorithm.success_band`` (every group without one); ``ref_log_probs`` ``[S, L]`` (the
        reference worker's) to this learner's frozen copy's. Everything is moved to the
        learner's device first (no-ops on the CPU); the permutations are drawn on the host, so
        a seed gives the same minibatches on any device. Returns the mean loss, KL, clip
        fraction, gradient norm and ``kept_groups``."""
        cfg, dev = self.cfg, self.device
        r = r.to(dev)
        if advantages is not None:
            advantages = advantages.to(dev)
        if ref_log_probs is not None:
            ref_log_probs = ref_log_probs.to(dev)
        if advantages is None:
            ids = torch.arange(r.returns.shape[0], device=dev) // cfg.group_size
            advantages, keep = F.score_episodes(self.estimator, cfg, r.returns, ids, r.lengths)
        adv = advantages
        kept_groups = float(r.returns.shape[0] // cfg.group_size)
        if keep is not None and not bool(keep.all()):  # the success band left groups out
            keep = keep.to(dev)
            kept_groups = float(int(keep.sum()) // cfg.group_size)
            if not bool(keep.any()):
                self.version += 1
                zero = {"policy_loss": 0.0, "kl_ref": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
                return {**zero, "kept_groups": 0.0}
            r = replace(r, **{f.name: getattr(r, f.name)[keep] for f in fields(r) if f.name != "version"})
            adv = adv[keep]
            ref_log_probs = ref_log_probs[keep] if ref_log_probs is not None else None
        if cfg.loss_norm_length is None:  # Dr. GRPO's constant: the longest episode
            self.loss_settings.norm_length = int(r.mask.shape[1])
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
        sums = torch.zeros(4, device=dev)
        n = 0
        dp = self.dp
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(S, generator=self.generator, device="cpu").to(dev)
            for start in range(0, S, mb):
                idx = perm[start : start + mb]
                # a learner group splits the minibatch's sequences; each part's loss counts by
                # its share of the loss's denominator (see rlinf_algos.parallel)
                pieces = dp.micro_spans(*dp.span(len(idx)))
                plain = not dp.distributed and len(pieces) == 1
                self.optimizer.zero_grad(set_to_none=True)
                for j, (u, v) in enumerate(pieces):
                    sub = idx[u:v]
                    logp, _, _ = self.model.evaluate(r.obs[sub], r.actions[sub])
                    loss, stats = self.loss_fn(
                        logp,
                        r.log_probs[sub],
                        adv[sub],
                        r.mask[sub],
                        self.loss_settings,
                        ref_log_prob=ref_logp[sub] if ref_logp is not None else None,
                    )
                    share = 1.0 if plain else aggregation_share(r.mask[sub], r.mask[idx], self.aggregation)
                    if plain:
                        loss.backward()
                    else:
                        dp.backward(loss, share, last=j == len(pieces) - 1)
                    # the KL and clip statistics are token means whatever the loss aggregates
                    tokens = 1.0 if plain else aggregation_share(r.mask[sub], r.mask[idx])
                    sums[:3] += torch.stack(
                        [loss.detach() * share, stats["kl"] * tokens, stats["clip_fraction"] * tokens]
                    )
                if not plain:
                    dp.sync_grads(self.params)
                if cfg.max_grad_norm is None:
                    gn = torch.zeros((), device=dev)
                elif plain:
                    gn = clip_grad_norm(self.params, cfg.max_grad_norm)
                else:
                    gn = dp.clip_grad_norm(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                sums[3] += gn
                n += 1
        self.version += 1
        if dp.distributed:  # each rank summed its parts' shares
            sums[:3] = dp.mean(sums[:3]) * dp.world
        s = (sums / max(n, 1)).tolist()
        return {
            "policy_loss": s[0],
            "kl_ref": s[1],
            "clip_fraction": s[2],
            "grad_norm": s[3],
            "kept_groups": kept_groups,
        }

    def state_dict(self) -> dict[str, Any]:
        """The single-process format whatever the learner group (gathered with FSDP)."""
        return {
            "model": self.dp.state_dict(self.model),
            "reference": self.reference.state_dict() if self.reference is not None else None,
            "optimizer": self.dp.optim_state_dict(self.model, self.optimizer),
            "generator": self.generator.get_state(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dp.load_state_dict(self.model, state["model"])
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
        self.dp.load_optim_state_dict(self.model, self.optimizer, state["optimizer"])
        self.generator.set_state(state["generator"])
        self.version = int(state["version"])


class GRPOLearnerSide(LearnerSide):
    """GRPO on the actor worker: takes every rollout rank's sequences (with the reference
    worker's log-probabilities) and the reward worker's advantages, updates, folds in the
    observation statistics. The frozen reference lives on the reference worker."""

    def __init__(
        self, model: Any, cfg: GRPOConfig, ctx: LearnerContext, freeze_obs_stats: bool = False
    ) -> None:
        self.model, self.cfg, self.ctx = model, cfg, ctx
        self.freeze_obs_stats = freeze_obs_stats  # a warm start's statistics, kept (warm_starts.py)
        self.learner = GRPOLearner(model, cfg, seed=ctx.seed, reference=False, dp=ctx.dp)

    @property
    def version(self) -> int:
        return self.learner.version

    def publish_module(self) -> Any:
        return self.model

    def train(self, gen: int | str, **kwargs: Any) -> dict[str, Any]:
        ctx = self.ctx
        t0 = time.perf_counter()
        got = ctx.take([scored_key(gen, r) for r in range(ctx.rollout_world)] + [advantage_key(gen)])
        if got is None:
            return {"aborted": True}
        *items, scored = got
        t1 = time.perf_counter()
        L = max(it["mask"].shape[1] for it in items)

        def cat(key: str) -> torch.Tensor:
            parts = []
            for it in items:
                x = it[key]
                if x.shape[1] < L:
                    x = np.concatenate([x, np.zeros((x.shape[0], L - x.shape[1], *x.shape[2:]), x.dtype)], 1)
                parts.append(x)
            return torch.from_numpy(np.concatenate(parts))

        rollout = GRPORollout(
            obs=cat("obs"),
            actions=cat("actions"),
            log_probs=cat("log_probs"),
            mask=cat("mask"),
            returns=torch.from_numpy(scored["returns"]),
            lengths=cat("mask").sum(1),
            version=min(it["version"] for it in items),
        )
        ref = cat("ref_log_probs") if self.cfg.kl_coef > 0 else None
        adv = torch.from_numpy(np.concatenate(scored["advantages"])).float()
        keep = torch.from_numpy(np.concatenate(scored["keep"])) if "keep" in scored else None
        metrics: dict[str, Any] = self.learner.update(rollout, advantages=adv, ref_log_probs=ref, keep=keep)
        for it in items if not self.freeze_obs_stats else ():
            m = it["moments"]
            self.model.fold_obs_moments(m["mean"], m["var"], m["count"])
        metrics["group_return_mean"] = float(rollout.returns.mean())
        metrics["update_s"] = time.perf_counter() - t1
        metrics["wait_s"] = t1 - t0
        metrics["policy_lag"] = float(self.learner.version - 1 - rollout.version)
        metrics["aborted"] = False
        return metrics

    def state(self) -> dict[str, Any]:
        return {"learner": self.learner.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])

    def final_state_dict(self) -> dict[str, Any]:
        return self.ctx.dp.state_dict(self.model)
