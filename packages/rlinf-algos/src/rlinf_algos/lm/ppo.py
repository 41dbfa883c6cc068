"""PPO for language policies (``algorithm.name: ppo_lm``): a critic with a value head on a model of
the same architecture, token-level GAE over the generated tokens, clipped policy and value losses.

Seed 003: PPO "handles both LLM policies ... and VLA policies". Everything but the update is
GRPO's pipeline (agents, rollout, reward, reference workers): :class:`PPOLMLearner` is the
actor component of ``ppo_lm`` (named by :attr:`rlinf_algos.lm.config.LMPPOConfig.actor`), with
the same calls as :class:`~rlinf_algos.lm.learner.LMLearner` (``update``, ``get_weights``).

Alignment (``[N, T]`` tensors, as the log-probs): ``values[:, t]`` is the critic's estimate
before token ``t`` is generated (read from the hidden state at ``t - 1``), the reward of a
sequence sits on its last generated token, and GAE runs backwards over the generated tokens only
(text an orchestrator wrote into a context is skipped, not a step).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import CriticConfig, LMModelConfig, LMPPOConfig
from rlinf_algos.lm.learner import LMLearner
from rlinf_algos.lm.model_type import load_lm_model
from rlinf_algos.objectives.advantages import StepRewards, token_gae
from rlinf_algos.ppo import functional as ppo

__all__ = ["PPOLMLearner", "ValueModel", "token_gae"]  # token_gae: rlinf_algos.objectives.advantages


class ValueModel(nn.Module):
    """A causal LM's backbone (its ``base_model``: embeddings, blocks, final norm) and a linear
    value head, zero-initialised so training starts from ``V = 0``."""

    def __init__(self, causal_lm: Any) -> None:
        super().__init__()
        self.backbone = causal_lm.base_model
        hidden = int(causal_lm.config.hidden_size)
        # the head lives with the backbone (and in float32 whatever the backbone's dtype)
        self.head = nn.Linear(hidden, 1, device=next(causal_lm.parameters()).device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.compute = getattr(causal_lm, "rlinf_compute_dtype", None)  # bf16 autocast over fp32 weights

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[N, T]`` values aligned with :func:`~rlinf_algos.lm.hf.sequence_log_probs`."""
        with torch.autocast(input_ids.device.type, dtype=self.compute, enabled=self.compute is not None):
            h = self.backbone(input_ids=input_ids, use_cache=False).last_hidden_state
        v = self.head(h.float()).squeeze(-1)
        return F.pad(v[:, :-1], (1, 0))


class PPOLMLearner(LMLearner):
    """The policy and the critic, their optimisers, and the PPO update.

    Args:
        model: the (warm-started) policy.
        cfg: the ``algorithm`` section (:class:`LMPPOConfig`).
        seed: of the minibatch order.
        critic: the ``critic`` section.
        model_spec: the ``model`` section (the critic's backbone loads with its options when
            ``critic.path`` is set).

    Without ``critic.path`` the critic's backbone is a copy of the policy as RL starts (the
    warm-started weights, LoRA adapters merged, every weight trainable), so the value head
    reads the features the policy's own training shaped (PPO's usual critic initialisation;
    ``model.path`` may be a random ``model.init`` folder).
    """

    stat_columns: ClassVar[tuple[str, ...]] = (
        "loss", "value_loss", "kl", "clip_fraction", "grad_norm", "explained_variance", "trained_sequences",
    )  # fmt: skip

    def __init__(
        self,
        model: Any,
        cfg: LMPPOConfig,
        seed: int = 0,
        critic: CriticConfig | None = None,
        model_spec: LMModelConfig | None = None,
        dp: Any = None,
    ) -> None:
        critic = critic or CriticConfig()
        if critic.path is not None:
            spec = (model_spec or LMModelConfig(path=critic.path)).model_copy(
                update={"path": critic.path, "init": None, "lora": None}
            )
            backbone = load_lm_model(spec)
        else:  # copied before the learner group wraps (FSDP shards the policy in place)
            backbone = copy.deepcopy(model)
            if hf.is_lora(backbone):
                backbone = backbone.merge_and_unload()
            backbone.requires_grad_(True)
        super().__init__(model, cfg, seed, dp=dp)
        self.critic_cfg = critic
        # the critic computes where the actor does (a loaded backbone arrives on the CPU)
        self.critic = ValueModel(backbone.to(self.dp.device))
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=critic.lr, betas=(0.9, 0.99))

    @classmethod
    def build(cls, model: Any, run: Any, dp: Any = None) -> PPOLMLearner:
        learner = cls(
            model, run.algorithm, seed=run.runner.seed, critic=run.critic, model_spec=run.model, dp=dp
        )
        learner.max_staleness = int(run.rollout.max_staleness)
        return learner

    def state_dict(self) -> dict[str, Any]:
        """The actor's checkpoint state (:meth:`LMLearner.state_dict`) with the critic and its
        optimiser."""
        return {
            **super().state_dict(),
            "critic": {k: v.detach().to("cpu", copy=True) for k, v in self.critic.state_dict().items()},
            "critic_optimizer": self.critic_opt.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.critic.load_state_dict(state["critic"])  # copies into the critic's device
        self.critic_opt.load_state_dict(state["critic_optimizer"])

    def _values(self, ids: Tensor) -> Tensor:
        out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        with torch.no_grad():
            for i in range(0, ids.shape[0], self.cfg.minibatch_size):
                out[i : i + self.cfg.minibatch_size] = self.critic(ids[i : i + self.cfg.minibatch_size])
        return out

    def update(self, batch: dict[str, Tensor]) -> dict[str, float]:
        """One PPO update: values and GAE, then ``update_epochs`` passes of minibatches through
        the clipped policy loss (with the k3 KL when ``kl_coef > 0``) and the clipped value loss.
        Returns the mean policy loss, value loss, KL, clip fraction, gradient norm, the explained
        variance of the values and how many sequences were trained on."""
        cfg: LMPPOConfig = self.cfg  # type: ignore[assignment]
        dev = self.dp.device
        ids, mask = batch["input_ids"].to(dev), batch["loss_mask"].to(dev)
        shaped, pen = self.rewards(batch)  # with DAPO's overlong penalty when configured
        seq_reward = shaped[batch["episode_index"]].to(dev)
        if cfg.skip_uniform_groups and cfg.group_size > 1:
            kept = ~self.uniform(shaped, batch["episode_index"])
        else:
            kept = torch.ones(ids.shape[0], dtype=torch.bool, device=seq_reward.device)
        extra: dict[str, float] = {}
        versions = batch.get("versions")
        if versions is not None:  # an asynchronous run: leave out what is too stale
            kept, extra = self.fresh(versions, kept, extra)
        keep = kept.nonzero().flatten().to(dev)
        stats = {
            k: 0.0 for k in ("loss", "value_loss", "kl", "clip_fraction", "grad_norm", "explained_variance")
        }
        stats["trained_sequences"] = float(len(keep))
        stats.update(extra)
        if pen is not None:
            stats["overlong_penalty"] = float(pen.mean())
        behav = batch.get("behaviour_log_probs") if versions is not None else None
        if behav is not None:
            stats["behaviour_weight"] = 0.0
        self.version += 1
        if len(keep) == 0:
            return stats
        ids, mask, seq_reward = ids[keep], mask[keep], seq_reward[keep]
        ref = batch.get("ref_log_probs")
        ref = ref.to(dev)[keep] if ref is not None else None
        behav = behav.to(dev)[keep] if behav is not None else None
        lengths = (mask > 0).long().cumsum(1).argmax(1) + 1  # last generated token + 1
        rewards = torch.zeros_like(mask)
        rewards[torch.arange(len(keep), device=dev), lengths - 1] = seq_reward
        values = self._values(ids)
        adv, returns = self.estimator(StepRewards(rewards, values, cfg.gamma, cfg.lam, mask=mask), cfg)
        if cfg.loss_norm_length is None:  # Dr. GRPO's constant: this iteration's padded length
            self.loss_settings.norm_length = int(mask.shape[1])
        if cfg.whiten_advantages:
            m = mask > 0
            a = adv[m]
            adv = torch.where(m, (adv - a.mean()) / (a.std() + 1e-8), torch.zeros_like(adv))
        old = self.old_log_probs(ids, mask)
        warm = min(1.0, self.version / cfg.lr_warmup_iters) if cfg.lr_warmup_iters else 1.0
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr * warm
        train_policy = self.version > self.critic_cfg.warmup_iters
        n_steps = 0
        self.model.train()
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(len(keep), generator=self.generator, device="cpu")  # host order
            for i in range(0, len(keep), cfg.minibatch_size):
                mb = perm[i : i + cfg.minibatch_size]
                t = int(lengths[mb].max())
                mmask = mask[mb, :t]
                sel = mmask > 0
                v = self.critic(ids[mb, :t])
                v_loss = ppo.value_loss(v[sel], returns[mb, :t][sel], values[mb, :t][sel], cfg.value_clip)
                self.critic_opt.zero_grad(set_to_none=True)
                v_loss.backward()
                if cfg.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_opt.step()
                stats["value_loss"] += float(v_loss.detach())
                if train_policy:
                    adv_mb, ref_mb = adv[mb, :t], ref[mb, :t] if ref is not None else None
                    old_mb = old[mb, :t] if old is not None else None
                    behav_mb = behav[mb, :t] if behav is not None else None
                    self.policy_step(ids[mb, :t], old_mb, adv_mb, mmask, ref_mb, stats, behav_mb)
                n_steps += 1
        for k in ("loss", "value_loss", "kl", "clip_fraction", "grad_norm", "behaviour_weight"):
            if k in stats:
                stats[k] /= max(n_steps, 1)
        m = mask > 0
        var = returns[m].var()
        stats["explained_variance"] = float(1.0 - (returns[m] - values[m]).var() / var) if var > 0 else 0.0
        return stats
