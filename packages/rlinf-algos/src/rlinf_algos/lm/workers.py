"""The rollout, reference and actor components of LLM GRPO (the reward one is
:class:`rlinf_algos.lm.reward.RewardWorker`, torch-free).

Each is a :class:`rlinf_core.worker.Worker` with narrow inputs and outputs (token lists, dicts of
tensors, state dicts), so the in-process loop of :mod:`rlinf_algos.lm.trainer` calls them
directly and a distributed runner can place each one from the cluster YAML and move the same
dicts over Channels, the actor's weights over the broadcast:

==========  =======================================  =====================================
component   call                                     in -> out
==========  =======================================  =====================================
rollout     :meth:`RolloutWorker.generate`           prompt ids -> response ids
            :meth:`RolloutWorker.set_weights`        ``(state_dict, version)``
reward      ``RewardWorker.compute``                 response ids, answers -> rewards
reference   :meth:`ReferenceWorker.compute_log_probs` ``input_ids [N, T]`` -> ``ref_log_probs``
actor       :meth:`ActorWorker.update`               the packed batch -> stats
            :meth:`ActorWorker.get_weights`          -> ``(state_dict, version)``
==========  =======================================  =====================================

The packed batch (:func:`pack_batch`): ``input_ids`` ``[N, T]`` long, right-padded;
``loss_mask`` ``[N, T]`` float (1 on generated tokens); ``episode_index`` ``[N]`` long;
``rewards`` ``[E]`` float (one per episode, ``E = P * G`` group after group); optionally
``ref_log_probs`` ``[N, T]``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from rlinf_algos.grpo import functional as grpo
from rlinf_algos.lm.config import LMGRPOConfig, LMModelConfig
from rlinf_algos.lm.model import TinyLM, generate, sequence_log_probs
from rlinf_core.worker import Worker

__all__ = ["ActorWorker", "ReferenceWorker", "RolloutWorker", "pack_batch", "sequence_advantages"]


def pack_batch(
    sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], pad_id: int = 0
) -> dict[str, Tensor]:
    """Right-pad ``N`` sequences into ``input_ids`` ``[N, T]`` and ``loss_mask`` ``[N, T]``."""
    t = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), t), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), t)
    for i, (s, m) in enumerate(zip(sequences, loss_masks, strict=True)):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(m)] = torch.as_tensor(list(m), dtype=torch.float32)
    return {"input_ids": ids, "loss_mask": mask}


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


def _build(model_config: LMModelConfig | dict[str, Any], vocab_size: int) -> TinyLM:
    cfg = (
        model_config
        if isinstance(model_config, LMModelConfig)
        else LMModelConfig.model_validate(model_config)
    )
    return TinyLM(cfg, vocab_size)


def _log_probs_chunked(model: TinyLM, ids: Tensor, temperature: float, chunk: int) -> Tensor:
    out = torch.zeros(ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for i in range(0, ids.shape[0], chunk):
            out[i : i + chunk] = sequence_log_probs(model, ids[i : i + chunk], temperature)
    return out


class RolloutWorker(Worker):
    """Holds a versioned copy of the policy and samples from it.

    Args:
        model_config: the ``model`` section.
        vocab_size: the tokenizer's.
        temperature, top_p: sampling (``temperature=0`` is greedy).
        seed: of its sampling generator.
        pad_id: the tokenizer's ``<pad>``.
    """

    def __init__(
        self,
        model_config: LMModelConfig | dict[str, Any],
        vocab_size: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_id: int = 0,
    ) -> None:
        self.model = _build(model_config, vocab_size)
        self.model.eval()
        self.temperature = temperature
        self.top_p = top_p
        self.pad_id = pad_id
        self.generator = torch.Generator().manual_seed(seed)
        self.version = -1
        self.tokens = 0
        self.seconds = 0.0

    def set_weights(self, state_dict: dict[str, Tensor], version: int) -> None:
        """Load the actor's weights (``version`` increases with every update)."""
        self.model.load_state_dict(state_dict)
        self.version = version

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None = None,
    ) -> list[list[int]]:
        """Responses (ids, the stop token included when reached) to ``prompts``, sampled at this
        worker's temperature and top-p unless ``temperature`` overrides it (0: greedy)."""
        out = generate(
            self.model,
            prompts,
            max_new_tokens,
            stop_ids,
            pad_id=self.pad_id,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            generator=self.generator,
        )
        self.tokens += out.num_tokens
        self.seconds += out.seconds
        return out.tokens

    def generate_batch(self, request: dict[str, Any]) -> dict[str, Any]:
        """:meth:`generate` over a dict (``prompts``, ``max_new_tokens``, ``stop_ids``, optional
        ``temperature``): the form a Channel carries. Returns ``responses`` and ``version``."""
        responses = self.generate(
            request["prompts"],
            int(request["max_new_tokens"]),
            request["stop_ids"],
            request.get("temperature"),
        )
        return {"responses": responses, "version": self.version}


class ReferenceWorker(Worker):
    """A frozen copy of the warm-started policy: log-probs for the KL term.

    Args:
        model_config, vocab_size: as for the rollout worker.
        state_dict: the reference weights (the warm-started policy's).
        temperature: the rollout's (log-probs are taken at the sampling temperature).
        chunk: sequences per forward.
    """

    def __init__(
        self,
        model_config: LMModelConfig | dict[str, Any],
        vocab_size: int,
        state_dict: dict[str, Tensor],
        temperature: float = 1.0,
        chunk: int = 256,
    ) -> None:
        self.model = _build(model_config, vocab_size)
        self.model.load_state_dict(state_dict)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.temperature = temperature
        self.chunk = chunk

    def compute_log_probs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"ref_log_probs": [N, T]}`` for ``batch["input_ids"]`` ``[N, T]``."""
        return {
            "ref_log_probs": _log_probs_chunked(self.model, batch["input_ids"], self.temperature, self.chunk)
        }


class ActorWorker(Worker):
    """Holds the trained policy and its optimiser; runs the GRPO update.

    Args:
        model: the (warm-started) policy; the actor trains it in place.
        cfg: the ``algorithm`` section.
        seed: of its minibatch shuffling.
    """

    def __init__(self, model: TinyLM, cfg: LMGRPOConfig, seed: int = 0) -> None:
        self.model = model
        self.cfg = cfg
        self.opt = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99)
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0

    def get_weights(self) -> tuple[dict[str, Tensor], int]:
        """A copy of the current weights and their version (what the broadcast sends)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}, self.version

    def compute_log_probs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``{"log_probs": [N, T]}`` under the current policy, no gradient."""
        return {
            "log_probs": _log_probs_chunked(
                self.model, batch["input_ids"], self.cfg.temperature, self.cfg.minibatch_size
            )
        }

    def advantages(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Per-sequence advantages and uniform-group flags of ``batch`` (see
        :func:`sequence_advantages`)."""
        return sequence_advantages(
            batch["rewards"], batch["episode_index"], self.cfg.group_size, self.cfg.scale_advantages
        )

    def update(self, batch: dict[str, Tensor]) -> dict[str, float]:
        """One GRPO update on a packed batch: advantages from the episode rewards, the sampling
        policy's log-probs recomputed once (``old``), then ``update_epochs`` passes of
        ``minibatch_size`` sequences through :func:`rlinf_algos.grpo.functional.policy_loss`. Returns the
        mean loss, KL, clip fraction, gradient norm and how many sequences were trained on."""
        cfg = self.cfg
        adv, uniform = self.advantages(batch)
        keep = ~uniform if cfg.skip_uniform_groups else torch.ones_like(uniform)
        idx = keep.nonzero().flatten()
        stats = {
            "loss": 0.0,
            "kl": 0.0,
            "clip_fraction": 0.0,
            "grad_norm": 0.0,
            "trained_sequences": float(len(idx)),
        }
        self.version += 1
        if len(idx) == 0:
            return stats
        warm = min(1.0, self.version / cfg.lr_warmup_iters) if cfg.lr_warmup_iters else 1.0
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr * warm
        ids = batch["input_ids"][idx]
        mask = batch["loss_mask"][idx]
        adv = adv[idx]
        ref = batch.get("ref_log_probs")
        ref = ref[idx] if ref is not None else None
        old = _log_probs_chunked(self.model, ids, cfg.temperature, cfg.minibatch_size)
        lengths = (mask > 0).long().cumsum(1).argmax(1) + 1  # last trained token + 1
        n_steps = 0
        self.model.train()
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(len(idx), generator=self.generator)
            for i in range(0, len(idx), cfg.minibatch_size):
                mb = perm[i : i + cfg.minibatch_size]
                t = int(lengths[mb].max())
                lp = sequence_log_probs(self.model, ids[mb, :t], cfg.temperature)
                loss, st = grpo.policy_loss(
                    lp,
                    old[mb, :t],
                    adv[mb],
                    mask[mb, :t],
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    ref_log_prob=ref[mb, :t] if ref is not None else None,
                    kl_coef=cfg.kl_coef,
                    aggregation=cfg.aggregation,
                )
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.max_grad_norm is not None:
                    gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                    stats["grad_norm"] += float(gn)
                self.opt.step()
                stats["loss"] += float(loss.detach())
                stats["kl"] += float(st["kl"])
                stats["clip_fraction"] += float(st["clip_fraction"])
                n_steps += 1
        for k in ("loss", "kl", "clip_fraction", "grad_norm"):
            stats[k] /= max(n_steps, 1)
        return stats

    def frozen_copy(self) -> TinyLM:
        """A deep copy of the current policy (what the reference starts from)."""
        return copy.deepcopy(self.model)
