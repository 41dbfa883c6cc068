"""The language-model learner and the frozen reference model, the objects the actor and
reference roles hold (the rollout engine is :mod:`rlinf_algos.lm.engines`, the verifier
:mod:`rlinf_algos.lm.reward`). They are plain objects with narrow inputs and outputs (token
lists, dicts of tensors, state dicts), so the in-process flow calls them directly and the role
bodies of :mod:`rlinf_algos.lm.roles` hold the same objects in placed workers:

==========  ===========================================  =====================================
object      call                                         in -> out
==========  ===========================================  =====================================
rollout     :meth:`~rlinf_algos.lm.engines.HFEngine.generate`  prompt ids -> response ids
            ``HFEngine.set_weights``                     ``(state_dict, version)``
reward      ``Verifier.compute``                         response ids, answers -> rewards
reference   :meth:`ReferenceModel.compute_log_probs`     ``input_ids [N, T]`` -> ``ref_log_probs``
actor       :meth:`LMLearner.update`                     the packed batch -> stats
            :meth:`LMLearner.get_weights`                -> ``(state_dict, version)``
==========  ===========================================  =====================================

The packed batch (:func:`pack_batch`): ``input_ids`` ``[N, T]`` long, right-padded;
``loss_mask`` ``[N, T]`` float (1 on generated tokens); ``episode_index`` ``[N]`` long;
``rewards`` ``[E]`` float (one per episode, ``E = P * G`` group after group); optionally
``ref_log_probs`` ``[N, T]``. An asynchronous run's batch (``rollout.max_staleness: k > 0``)
also has ``versions`` ``[N]`` long (the weight version that generated each sequence; ``-1``:
unknown) and ``behaviour_log_probs`` ``[N, T]`` (the rollout's log-probs of the generated tokens
at generation time): :meth:`LMLearner.update` drops the sequences more than ``k`` versions behind
its own (``stale_dropped``) and trains the others with decoupled PPO
(:mod:`rlinf_algos.objectives.losses`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from rlinf_algos import objectives
from rlinf_algos.grpo import functional as grpo
from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMGRPOConfig, LMModelConfig
from rlinf_algos.lm.model_type import load_lm_model
from rlinf_algos.lm.prefix import log_probs_of
from rlinf_algos.objectives.advantages import Outcomes
from rlinf_algos.objectives.losses import LossSettings, aggregation_share
from rlinf_algos.objectives.shaping import episode_tokens, overlong_penalty, uniform_groups
from rlinf_algos.parallel import DataParallel
from rlinf_core.errors import RlinfError

__all__ = [
    "LMLearner",
    "ReferenceModel",
    "concat_batches",
    "log_probs_chunked",
    "make_learner",
    "pack_batch",
    "sequence_advantages",
]


def pack_batch(
    sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], pad_id: int = 0
) -> dict[str, Tensor]:
    """Right-pad ``N`` sequences into ``input_ids`` ``[N, T]`` and ``loss_mask`` ``[N, T]``."""
    t = max(len(s) for s in sequences)
    # built on the host from token lists (the channels carry it); the learner moves it
    ids = torch.full((len(sequences), t), pad_id, dtype=torch.long, device="cpu")
    mask = torch.zeros(len(sequences), t, device="cpu")
    for i, (s, m) in enumerate(zip(sequences, loss_masks, strict=True)):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long, device="cpu")
        mask[i, : len(m)] = torch.as_tensor(list(m), dtype=torch.float32, device="cpu")
    return {"input_ids": ids, "loss_mask": mask}


def concat_batches(parts: Sequence[dict[str, Tensor]], pad_id: int = 0) -> dict[str, Tensor]:
    """One packed batch of several (:func:`pack_batch`'s keys, ``episode_index``, ``rewards``,
    and ``ref_log_probs`` when every part has them): rows right-padded to the longest, each
    part's episodes numbered after the previous parts'."""
    if len(parts) == 1:
        return dict(parts[0])
    t = max(int(p["input_ids"].shape[1]) for p in parts)

    def padded(x: Tensor, value: float) -> Tensor:
        return torch.nn.functional.pad(x, (0, t - x.shape[1]), value=value)

    out: dict[str, Tensor] = {
        "input_ids": torch.cat([padded(p["input_ids"], pad_id) for p in parts]),
        "loss_mask": torch.cat([padded(p["loss_mask"], 0.0) for p in parts]),
        "rewards": torch.cat([p["rewards"] for p in parts]),
    }
    offsets, off = [], 0
    for p in parts:
        offsets.append(off)
        off += int(p["rewards"].shape[0])
    out["episode_index"] = torch.cat([p["episode_index"] + o for p, o in zip(parts, offsets, strict=True)])
    if all("ref_log_probs" in p for p in parts):
        out["ref_log_probs"] = torch.cat([padded(p["ref_log_probs"], 0.0) for p in parts])
    return out


def select_groups(batch: dict[str, Tensor], groups: Tensor, group_size: int) -> dict[str, Tensor]:
    """The part of ``batch`` holding the episodes of ``groups`` (``[K]`` group numbers, in
    order) and their sequences, episodes renumbered group after group."""
    dev = batch["episode_index"].device  # the host batch's
    episodes = (groups.to(dev).unsqueeze(1) * group_size + torch.arange(group_size, device=dev)).reshape(-1)
    new_index = torch.full((int(batch["rewards"].shape[0]),), -1, dtype=torch.long, device=dev)
    new_index[episodes] = torch.arange(len(episodes), device=dev)
    mapped = new_index[batch["episode_index"]]
    rows = (mapped >= 0).nonzero().flatten()
    out = {
        "input_ids": batch["input_ids"][rows],
        "loss_mask": batch["loss_mask"][rows],
        "episode_index": mapped[rows],
        "rewards": batch["rewards"][episodes],
    }
    if "ref_log_probs" in batch:
        out["ref_log_probs"] = batch["ref_log_probs"][rows]
    return out


def sequence_advantages(
    rewards: Tensor, episode_index: Tensor, group_size: int, scale: bool = True
) -> tuple[Tensor, Tensor]:
    """GRPO advantages per sequence: the group advantage of each episode's outcome
    (:func:`rlinf_algos.grpo.functional.group_advantages`) given to every sequence of that episode (in
    multi-agent mode, the lead's and every subagent's).

    Args:
        rewards: ``[E]`` episode rewards, group after group (``E = P * group_size``).
        episode_index: ``[N]`` the episode of each sequence.

    Returns:
        ``(advantages [N], uniform [N])`` where ``uniform`` marks sequences of a group whose
        rewards are all equal (zero advantage, no policy-gradient signal).
    """
    adv_e = grpo.group_advantages(rewards.float(), group_size, scale=scale)
    g = rewards.view(-1, group_size)
    uniform_e = (g == g[:, :1]).all(dim=1).repeat_interleave(group_size)
    return adv_e[episode_index], uniform_e[episode_index]


def _spec(model_config: LMModelConfig | dict[str, Any]) -> LMModelConfig:
    return (
        model_config
        if isinstance(model_config, LMModelConfig)
        else LMModelConfig.model_validate(model_config)
    )


def log_probs_chunked(
    model: Any, ids: Tensor, temperature: float, chunk: int, mask: Tensor | None = None
) -> Tensor:
    """:func:`~rlinf_algos.lm.hf.sequence_log_probs` of ``ids`` in chunks of ``chunk`` rows, no
    gradient; with the loss ``mask``, each chunk's shared prompts run once
    (:func:`~rlinf_algos.lm.prefix.shared_prefix_log_probs`). The result lives where ``ids``
    does (the model's device)."""
    out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    with torch.no_grad():
        for i in range(0, ids.shape[0], chunk):
            m = None if mask is None else mask[i : i + chunk]
            out[i : i + chunk] = log_probs_of(model, ids[i : i + chunk], m, temperature)
    return out


class ReferenceModel:
    """The frozen reference policy: log-probs for the KL term.

    Without LoRA it is a frozen copy of the warm-started weights; with LoRA it is the base model
    with the adapter disabled (:func:`~rlinf_algos.lm.hf.reference_mode`). In one process, pass
    the actor's LoRA model as ``model``: the reference then shares its weights (no second copy).

    Args:
        model_config: the ``model`` section (loaded when ``model`` is not given).
        state_dict: the reference weights as a publish carries them (version 0), or ``None``.
        model: an already built model to use (the actor's, with LoRA).
        temperature: the rollout's (log-probs are taken at the sampling temperature).
        chunk: sequences per forward.
        device: where a model it loads lives (``None``: the CPU); the batches it is given
            move there and the log-probs come back on the batch's device.
    """

    def __init__(
        self,
        model_config: LMModelConfig | dict[str, Any] | None = None,
        state_dict: dict[str, Tensor] | None = None,
        model: Any = None,
        temperature: float = 1.0,
        chunk: int = 256,
        device: torch.device | str | None = None,
    ) -> None:
        if model is None:
            if model_config is None:
                raise ValueError("ReferenceModel needs model_config or model")
            model = load_lm_model(model_config, trainable=False)
            if state_dict is not None:
                hf.load_sync_state(model, state_dict)
            if device is not None:
                model = model.to(device)
        self.model = model
        self.temperature = temperature
        self.chunk = chunk

    def compute_log_probs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"ref_log_probs": [N, T]}`` for ``batch["input_ids"]`` ``[N, T]``; with a
        ``loss_mask`` in the batch, shared prompts run once and their positions hold 0 (the KL
        reads the masked tokens only)."""
        was_training = self.model.training
        self.model.eval()
        ids = batch["input_ids"]
        dev = next(self.model.parameters()).device
        mask = batch.get("loss_mask")
        try:
            with hf.reference_mode(self.model) as ref:
                lp = log_probs_chunked(
                    ref, ids.to(dev), self.temperature, self.chunk, None if mask is None else mask.to(dev)
                )
        finally:
            self.model.train(was_training)
        return {"ref_log_probs": lp.to(ids.device)}


class LMLearner:
    """Holds the trained policy and its optimiser; runs the GRPO update.

    Args:
        model: the (warm-started) policy; the actor trains it in place (its LoRA adapter only,
            when it has one).
        cfg: the ``algorithm`` section.
        seed: of its minibatch shuffling.
    """

    stat_columns: ClassVar[tuple[str, ...]] = (
        "loss",
        "kl",
        "clip_fraction",
        "grad_norm",
        "trained_sequences",
    )
    """What :meth:`update` returns (the learner's columns of ``metrics.csv``)."""

    def __init__(self, model: Any, cfg: LMGRPOConfig, seed: int = 0, dp: DataParallel | None = None) -> None:
        # without a learner group the actor computes where the model lives
        self.dp = dp if dp is not None else DataParallel(device=next(model.parameters()).device)
        self.model = model
        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
        self.publish_bytes = 0
        self.generator = torch.Generator().manual_seed(seed)  # the minibatch order: drawn on the host
        self.version = 0
        # the registered functions the section names (rlinf_algos.objectives)
        self.estimator = objectives.estimator(cfg.adv_estimator)
        self.loss_fn = objectives.loss_function(cfg.policy_loss)
        self.aggregation = objectives.resolve_aggregation(cfg)
        self.loss_settings = LossSettings(
            cfg.clip_low, cfg.clip_high, cfg.kl_coef, self.aggregation, cfg.loss_norm_length,
            behaviour_cap=float(getattr(cfg, "behaviour_weight_cap", 5.0)),
        )  # fmt: skip
        self.max_staleness = 0  # rollout.max_staleness: how many versions a sample may lag
        self.held: list[dict[str, Tensor]] = []  # dynamic sampling: groups kept from earlier draws
        self.draws = 0

    @classmethod
    def build(cls, model: Any, run: Any, dp: DataParallel | None = None) -> LMLearner:
        """The actor of a validated run (``run.algorithm``, ``run.runner.seed``...); ``dp``: its
        learner group, with ``model`` already wrapped by it."""
        learner = cls(model, run.algorithm, seed=run.runner.seed, dp=dp)
        learner.max_staleness = int(run.rollout.max_staleness)
        return learner

    def get_weights(self) -> tuple[dict[str, Tensor], int]:
        """A copy of what a publish carries (the LoRA adapter alone when the model has one,
        every weight otherwise) and its version; ``publish_bytes`` records its size. On a
        learner group with FSDP the full weights are gathered first, or with LoRA the adapter's
        alone (every rank calls; rank 0 gets them, the others an empty dict)."""
        only = (lambda name: "lora_" in name) if hf.is_lora(self.model) else None
        full = self.dp.state_dict(self.model, only) if self.dp.distributed else None
        state = hf.sync_state(self.model, full) if full is None or full else {}
        self.publish_bytes = hf.state_bytes(state)
        return state, self.version

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the actor (:mod:`rlinf_algos.lm.flow`): ``weights``
        (as :meth:`get_weights` publishes them: the adapter alone with LoRA), ``optimizer``,
        ``version`` (the update count, which the learning-rate warm-up reads) and the minibatch
        order's ``generator``. On a learner group every rank calls; rank 0's is complete."""
        weights, _ = self.get_weights()
        return {
            "weights": weights,
            "optimizer": self.dp.optim_state_dict(self.model, self.opt),
            "version": int(self.version),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (every rank of a learner group calls with it)."""
        weights = dict(state["weights"])
        if self.dp.sharded:
            if hf.is_lora(self.model):
                raise RlinfError(
                    "resuming a LoRA actor on an fsdp learner group is not supported yet: "
                    "use actor.strategy: ddp, or one actor process"
                )
            embed = next((v for k, v in weights.items() if k.endswith("embed_tokens.weight")), None)
            for k in self.model.state_dict():  # a tied head is stored once
                if k not in weights and k.endswith("lm_head.weight") and embed is not None:
                    weights[k] = embed
            self.dp.load_state_dict(self.model, weights)
        else:
            with torch.no_grad():
                hf.load_sync_state(self.model, {k: v.to(self.dp.device) for k, v in weights.items()})
        self.dp.load_optim_state_dict(self.model, self.opt, state["optimizer"])
        self.version = int(state["version"])
        self.generator.set_state(state["generator"])

    @property
    def share_prefix(self) -> bool:
        """Whether the forwards run shared prompts once (``algorithm.share_prefix``; never under
        FSDP, whose hooks expect one forward per backward)."""
        return bool(getattr(self.cfg, "share_prefix", True)) and not (self.dp.sharded)

    def compute_log_probs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"log_probs": [N, T]}`` of every token under the current policy, no gradient (on
        the batch's device)."""
        ids = batch["input_ids"]
        lp = log_probs_chunked(
            self.model, ids.to(self.dp.device), self.cfg.temperature, self.cfg.minibatch_size
        )
        return {"log_probs": lp.to(ids.device)}

    def rewards(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """``(rewards [E], penalty [E] or None)``: the episodes' rewards the update learns from,
        with DAPO's overlong penalty (``algorithm.overlong``) added to the verifier's."""
        rewards = batch["rewards"].float()
        over = self.cfg.overlong
        if over is None:
            return rewards, None
        n = episode_tokens(batch["loss_mask"], batch["episode_index"], rewards.shape[0])
        pen = overlong_penalty(n, over.max_length, over.cache, over.penalty)
        return rewards + pen, pen

    def uniform(self, rewards: Tensor, episode_index: Tensor) -> Tensor:
        """``[N]`` bool: the sequences of groups whose ``rewards`` are all equal."""
        g = self.cfg.group_size
        return uniform_groups(rewards, g).repeat_interleave(g)[episode_index]

    def advantages(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Per-sequence advantages of ``batch`` by the section's registered estimator
        (``algorithm.adv_estimator``; every sequence of an episode gets its episode's, in
        multi-agent mode the lead's and every subagent's) and uniform-group flags (see
        :func:`sequence_advantages`)."""
        rewards, _ = self.rewards(batch)
        idx = batch["episode_index"]
        if rewards.numel() == 0:  # dynamic sampling found no group to learn from
            return torch.zeros(idx.shape, device=idx.device), torch.ones(
                idx.shape, dtype=torch.bool, device=idx.device
            )
        mask = batch.get("loss_mask")
        lengths = None if mask is None else episode_tokens(mask, batch["episode_index"], rewards.shape[0])
        adv_e = self.estimator(Outcomes.consecutive(rewards, self.cfg.group_size, lengths), self.cfg)
        return adv_e[idx], self.uniform(rewards, idx)

    def hold(self, batch: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """DAPO's dynamic sampling (``algorithm.dynamic_sampling``): keep the groups of
        ``batch`` whose rewards differ; ``None`` while fewer than ``prompts_per_iter`` are held
        and another draw is allowed (the run then samples more prompts), else the batch to
        train on: ``prompts_per_iter`` held groups (all of them, after the last draw)."""
        cfg = self.cfg
        rewards, _ = self.rewards(batch)
        keep = (~uniform_groups(rewards, cfg.group_size)).nonzero().flatten()
        if len(keep):
            self.held.append(select_groups(batch, keep, cfg.group_size))
        held = sum(int(p["rewards"].shape[0]) for p in self.held) // cfg.group_size
        if held < cfg.prompts_per_iter and self.draws < cfg.dynamic_sampling.max_draws:
            self.draws += 1
            return None
        if not self.held:
            return select_groups(batch, keep, cfg.group_size)  # nothing to learn from
        out = concat_batches(self.held)
        if held > cfg.prompts_per_iter:
            out = select_groups(out, torch.arange(cfg.prompts_per_iter, device="cpu"), cfg.group_size)
        self.held = []
        return out

    def old_log_probs(self, ids: Tensor, mask: Tensor | None = None) -> Tensor | None:
        """The sampling policy's log-probs of ``ids``, computed before the first step; ``None``
        when the update is a single step over the whole batch (one epoch, one minibatch): the
        weights are then still the sampling policy's and the training forward's own log-probs,
        detached, are exact (the forward TRL skips too)."""
        cfg = self.cfg
        if cfg.update_epochs == 1 and ids.shape[0] <= cfg.minibatch_size:
            return None
        return log_probs_chunked(
            self.model, ids, cfg.temperature, cfg.minibatch_size, mask if self.share_prefix else None
        )

    def policy_step(
        self,
        ids: Tensor,
        old: Tensor | None,
        adv: Tensor,
        mask: Tensor,
        ref: Tensor | None,
        stats: dict[str, float],
        behav: Tensor | None = None,
    ) -> None:
        """One gradient step of the clipped policy loss (with the k3 KL when ``kl_coef > 0``) on a
        minibatch (``adv``: per sequence ``[B]`` or per token ``[B, T]``; ``old``: ``None`` when
        the weights are the sampling policy's, see :meth:`old_log_probs`); adds its loss, KL,
        clip fraction and gradient norm to ``stats``. ``behav``: the behaviour policy's log-probs of
        an asynchronous run's tokens (decoupled PPO; ``stats`` gets the mean ``behaviour_weight``)."""
        cfg, dp = self.cfg, self.dp
        # a learner group splits the minibatch's sequences (in micro-batches); each part's loss
        # counts by its share of the loss's denominator (see rlinf_algos.parallel)
        pieces = dp.micro_spans(*dp.span(ids.shape[0]))
        plain = not dp.distributed and len(pieces) == 1
        self.opt.zero_grad(set_to_none=True)
        for j, (u, v) in enumerate(pieces):
            lp = log_probs_of(self.model, ids[u:v], mask[u:v] if self.share_prefix else None, cfg.temperature)
            loss, st = self.loss_fn(
                lp,
                lp.detach() if old is None else old[u:v],
                adv[u:v],
                mask[u:v],
                self.loss_settings,
                ref_log_prob=ref[u:v] if ref is not None else None,
                **({"behaviour_log_prob": behav[u:v]} if behav is not None else {}),
            )
            share = 1.0 if plain else aggregation_share(mask[u:v], mask, self.aggregation)
            if plain:
                loss.backward()
            else:
                dp.backward(loss, share, last=j == len(pieces) - 1)
            # the KL and clip statistics are token means whatever the loss aggregates
            tokens = 1.0 if plain else aggregation_share(mask[u:v], mask)
            stats["loss"] += float(loss.detach()) * share
            stats["kl"] += float(st["kl"]) * tokens
            stats["clip_fraction"] += float(st["clip_fraction"]) * tokens
            if behav is not None:
                stats["behaviour_weight"] = (
                    stats.get("behaviour_weight", 0.0) + float(st["behaviour_weight"]) * tokens
                )
        if not plain:
            dp.sync_grads(self.params)
        if cfg.max_grad_norm is not None:
            gn = (
                torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                if plain
                else dp.clip_grad_norm(self.params, cfg.max_grad_norm)
            )
            stats["grad_norm"] += float(gn)
        self.opt.step()

    def update(self, batch: dict[str, Tensor]) -> dict[str, float]:
        """One GRPO update on a packed batch: advantages from the episode rewards (the registered
        ``algorithm.adv_estimator``), the sampling policy's log-probs recomputed once (``old``),
        then ``update_epochs`` passes of ``minibatch_size`` sequences through the registered
        ``algorithm.policy_loss``. Returns the mean loss, KL, clip fraction, gradient norm and
        how many sequences were trained on; with ``algorithm.dynamic_sampling`` also ``draws``
        (the extra draws this update waited for) and ``kept_groups``, or ``deferred: 1`` (no
        step: the run draws more prompts first); with ``algorithm.overlong`` the mean
        ``overlong_penalty``."""
        cfg = self.cfg
        extra: dict[str, float] = {}
        if cfg.overlong is not None:
            extra["overlong_penalty"] = float(self.rewards(batch)[1].mean())
        if cfg.dynamic_sampling is not None:
            held = self.hold(batch)
            if held is None:
                self.version += 1
                return {k: 0.0 for k in ("loss", "kl", "clip_fraction", "grad_norm", "trained_sequences")} | {
                    "deferred": 1.0,
                    **extra,
                }
            batch = held
            extra["draws"] = float(self.draws)
            extra["kept_groups"] = float(batch["rewards"].shape[0] // cfg.group_size)
            self.draws = 0
        adv, uniform = self.advantages(batch)
        keep = ~uniform if cfg.skip_uniform_groups else torch.ones_like(uniform)
        versions = batch.get("versions")
        if versions is not None:  # an asynchronous run: leave out what is too stale
            keep, extra = self.fresh(versions, keep, extra)
        idx = keep.nonzero().flatten()
        stats = {
            "loss": 0.0,
            "kl": 0.0,
            "clip_fraction": 0.0,
            "grad_norm": 0.0,
            "trained_sequences": float(len(idx)),
            **extra,
        }
        behav = batch.get("behaviour_log_probs") if versions is not None else None
        if behav is not None:
            stats["behaviour_weight"] = 0.0
        self.version += 1
        if len(idx) == 0:
            return stats
        if cfg.loss_norm_length is None:  # Dr. GRPO's constant: this iteration's padded length
            self.loss_settings.norm_length = int(batch["loss_mask"].shape[1])
        warm = min(1.0, self.version / cfg.lr_warmup_iters) if cfg.lr_warmup_iters else 1.0
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr * warm
        dev = self.dp.device
        ids = batch["input_ids"][idx].to(dev)
        mask = batch["loss_mask"][idx].to(dev)
        adv = adv[idx].to(dev)
        ref = batch.get("ref_log_probs")
        ref = ref[idx].to(dev) if ref is not None else None
        old = self.old_log_probs(ids, mask)
        behav = behav[idx].to(dev) if behav is not None else None
        lengths = (mask > 0).long().cumsum(1).argmax(1) + 1  # last trained token + 1
        n_steps = 0
        self.model.train()
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(len(idx), generator=self.generator, device="cpu")
            for i in range(0, len(idx), cfg.minibatch_size):
                mb = perm[i : i + cfg.minibatch_size]
                t = int(lengths[mb].max())
                self.policy_step(
                    ids[mb, :t],
                    old[mb, :t] if old is not None else None,
                    adv[mb],
                    mask[mb, :t],
                    ref[mb, :t] if ref is not None else None,
                    stats,
                    behav[mb, :t] if behav is not None else None,
                )
                n_steps += 1
        if self.dp.distributed:  # each rank summed its parts' shares
            keys = ("loss", "kl", "clip_fraction", *(("behaviour_weight",) if behav is not None else ()))
            total = self.dp.mean(torch.tensor([stats[k] for k in keys], dtype=torch.float64, device="cpu"))
            total = total * self.dp.world
            stats.update(zip(keys, total.tolist(), strict=True))
        for k in ("loss", "kl", "clip_fraction", "grad_norm", "behaviour_weight"):
            if k in stats:
                stats[k] /= max(n_steps, 1)
        return stats

    def fresh(
        self, versions: Tensor, keep: Tensor, extra: dict[str, float]
    ) -> tuple[Tensor, dict[str, float]]:
        """``keep`` less the sequences generated more than ``max_staleness`` versions before the
        learner's own version (or by an unknown one, ``-1``), and the figures of what is left:
        ``stale_dropped`` (sequences left out), ``staleness_mean`` and ``staleness_max`` (versions
        behind, over the sequences kept). The group advantages were computed with the dropped
        sequences' rewards (the groups stay whole)."""
        lag = self.version - versions.to(keep.device).long()
        ok = (versions.to(keep.device) >= 0) & (lag <= self.max_staleness)
        kept = keep & ok
        trained = lag[kept].float()
        return kept, {
            **extra,
            "stale_dropped": float((~ok).sum()),
            "staleness_mean": float(trained.mean()) if trained.numel() else 0.0,
            "staleness_max": float(trained.max()) if trained.numel() else 0.0,
        }


def make_learner(model: Any, run: Any, dp: DataParallel | None = None) -> LMLearner:
    """The actor component the ``algorithm`` section names (its ``actor`` class path: GRPO's
    :class:`LMLearner`, PPO's :class:`~rlinf_algos.lm.ppo.PPOLMLearner`), built for ``run``
    (``dp``: its learner group, ``model`` wrapped by it)."""
    import importlib

    module, _, name = run.algorithm.actor.partition(":")
    return getattr(importlib.import_module(module), name).build(model, run, dp=dp)
