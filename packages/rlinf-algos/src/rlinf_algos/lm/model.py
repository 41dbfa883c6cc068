"""A small causal transformer language model with KV-cached batched sampling.

Pre-norm blocks (LayerNorm, multi-head attention with rotary position embeddings, GELU MLP), no
biases, output head tied to the token embedding. Three entry points:

- :meth:`TinyLM.forward` over right-padded sequences (training, log-probs);
- :func:`generate`: batched sampling (temperature, top-p, greedy at temperature 0) from
  left-padded prompts with a preallocated KV cache, per-sequence done masks, stop tokens, and
  compaction of the cache as sequences finish, all under ``torch.inference_mode``;
- :func:`sequence_log_probs`: per-token log-probs of given sequences (the actor's and the
  reference's view of a rollout batch).

:func:`save_policy` writes a checkpoint atomically (temp file in the same directory, then
``os.replace``); :func:`load_policy` rebuilds the model and its tokenizer from it.

Shapes: ``B`` sequences, ``T`` tokens, ``H`` heads, ``Dh`` head size, ``V`` vocabulary.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlinf_algos.lm.config import LMModelConfig
from rlinf_algos.lm.tokenizer import CharTokenizer
from rlinf_core.errors import RlinfError
from rlinf_core.io import atomic_open

__all__ = [
    "GenerationOutput",
    "KVCache",
    "TinyLM",
    "generate",
    "load_policy",
    "save_policy",
    "sequence_log_probs",
]


def _rope_tables(max_len: int, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)  # [max_len, Dh/2]
    return ang.cos(), ang.sin()


def _apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``[B, H, T, Dh]`` by ``cos``/``sin`` ``[B, 1, T, Dh/2]`` (half-split pairs)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class KVCache:
    """Preallocated keys and values of every layer, ``[B, H, T_max, Dh]`` each, plus which key
    positions are real (``key_valid`` ``[B, T_max]``; left padding is not)."""

    def __init__(
        self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int, dtype: torch.dtype
    ):
        self.k = [torch.zeros(batch, n_heads, max_len, head_dim, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(batch, n_heads, max_len, head_dim, dtype=dtype) for _ in range(n_layers)]
        self.key_valid = torch.zeros(batch, max_len, dtype=torch.bool)
        self.length = 0

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows`` (a compaction when sequences have finished)."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.key_valid = self.key_valid.index_select(0, rows)


class _Block(nn.Module):
    def __init__(self, cfg: LMModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d, bias=False)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d, bias=False)
        ff = cfg.d_ff or 4 * d
        self.fc = nn.Linear(d, ff, bias=False)
        self.fc2 = nn.Linear(ff, d, bias=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.dropout = cfg.dropout

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None,
        cache: KVCache | None,
        layer: int,
    ) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        if cache is not None:
            start = cache.length
            cache.k[layer][:, :, start : start + t] = k
            cache.v[layer][:, :, start : start + t] = v
            k = cache.k[layer][:, :, : start + t]
            v = cache.v[layer][:, :, : start + t]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=attn_mask is None and cache is None,
            dropout_p=self.dropout if self.training else 0.0,
        )
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc(self.ln2(x)))))


class TinyLM(nn.Module):
    """The policy: token ids ``[B, T]`` -> next-token logits ``[B, T, V]``."""

    def __init__(self, cfg: LMModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        cos, sin = _rope_tables(cfg.max_seq_len, cfg.d_model // cfg.n_heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)
        for blk in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
            nn.init.normal_(blk.fc2.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits ``[B, T, V]``.

        Args:
            input_ids: ``[B, T]``.
            positions: ``[B, T]`` position of every token (default ``0..T-1``, right padding).
            attn_mask: ``[B, 1, T, T_keys]`` bool, True where a query may attend; ``None`` means
                plain causal attention (no cache) or every cached key (decoding one token).
            cache: written at ``cache.length`` and advanced by ``T``.
        """
        t = input_ids.shape[1]
        if positions is None:
            if t > self.cfg.max_seq_len:
                raise RlinfError(
                    f"sequence of {t} tokens is longer than model.max_seq_len={self.cfg.max_seq_len}"
                )
            cos = self.rope_cos[:t].unsqueeze(0).unsqueeze(0)
            sin = self.rope_sin[:t].unsqueeze(0).unsqueeze(0)
        else:
            cos = self.rope_cos[positions].unsqueeze(1)
            sin = self.rope_sin[positions].unsqueeze(1)
        x = self.embed(input_ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, attn_mask, cache, i)
        if cache is not None:
            cache.length += t
        return F.linear(self.ln_f(x), self.embed.weight)


@dataclass
class GenerationOutput:
    """What :func:`generate` returns.

    Attributes:
        tokens: per prompt, the generated ids (the stop token included when one was produced).
        finished: per prompt, whether it stopped on a stop token (else it hit ``max_new_tokens``
            or the model's context).
        num_tokens: generated tokens in all.
        seconds: wall time of the call.
    """

    tokens: list[list[int]]
    finished: list[bool]
    num_tokens: int = 0
    seconds: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)


def _sample(logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> Tensor:
    """Next tokens ``[B]`` from logits ``[B, V]``: argmax at temperature 0, else softmax sampling
    restricted to the smallest set of tokens whose probability reaches ``top_p``."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        keep = sp.cumsum(dim=-1) - sp < top_p  # the top token always stays
        sp = sp * keep
        choice = torch.multinomial(sp, 1, generator=generator)
        return si.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def generate(
    model: TinyLM,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    compact_below: float = 0.5,
) -> GenerationOutput:
    """Sample continuations of ``prompts`` in one batch.

    Prompts are left-padded to a common length and prefilled in one forward; then one token per
    step for every unfinished sequence. A sequence is done when it emits one of ``stop_ids`` or
    reaches ``max_new_tokens`` (or the model's ``max_seq_len``). When the unfinished fraction of
    the cache's rows falls below ``compact_below``, finished rows are dropped from the cache.
    """
    t0 = time.perf_counter()
    if not prompts:
        return GenerationOutput([], [], 0, 0.0)
    n = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    if int(lens.min()) < 1:
        raise RlinfError("generate: every prompt needs at least one token (<bos>)")
    lp = int(lens.max())
    if lp >= model.cfg.max_seq_len:
        raise RlinfError(
            f"generate: a prompt of {lp} tokens leaves no room under max_seq_len={model.cfg.max_seq_len}"
        )
    steps = min(max_new_tokens, model.cfg.max_seq_len - lp)
    ids = torch.full((n, lp), pad_id, dtype=torch.long)
    valid = torch.zeros(n, lp, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, lp - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
        valid[i, lp - len(p) :] = True
    positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
    cfg = model.cfg
    dtype = next(model.parameters()).dtype
    stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long)
    out: list[list[int]] = [[] for _ in range(n)]
    finished = [False] * n
    total = 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            cache = KVCache(cfg.n_layers, n, cfg.n_heads, lp + steps, cfg.d_model // cfg.n_heads, dtype)
            cache.key_valid[:, :lp] = valid
            causal = torch.ones(lp, lp, dtype=torch.bool).tril()
            mask = causal.unsqueeze(0) & valid.unsqueeze(1)
            mask |= torch.eye(lp, dtype=torch.bool).unsqueeze(0)  # pad queries see themselves (no NaN rows)
            logits = model(ids, positions, mask.unsqueeze(1), cache)[:, -1]
            rows = torch.arange(n)  # original index of each cache row
            next_pos = lens.clone()
            active = torch.ones(n, dtype=torch.bool)
            for _ in range(steps):
                tok = _sample(logits, temperature, top_p, generator)
                tok_list = tok.tolist()
                act_list = active.tolist()
                for j, r in enumerate(rows.tolist()):
                    if act_list[j]:
                        out[r].append(tok_list[j])
                total += int(active.sum())
                hit = torch.isin(tok, stop) & active
                for j in hit.nonzero().flatten().tolist():
                    finished[int(rows[j])] = True
                active &= ~hit
                n_active = int(active.sum())
                if n_active == 0:
                    break
                if n_active < compact_below * len(rows) and len(rows) > 4:
                    keep = active.nonzero().flatten()
                    cache.select(keep)
                    rows, tok, next_pos = rows[keep], tok[keep], next_pos[keep]
                    active = torch.ones(len(keep), dtype=torch.bool)
                tok = torch.where(active, tok, torch.full_like(tok, pad_id))
                cache.key_valid[:, cache.length] = True
                kv = cache.key_valid[:, : cache.length + 1]
                logits = model(tok.unsqueeze(1), next_pos.unsqueeze(1), kv[:, None, None, :], cache)[:, -1]
                next_pos = next_pos + 1
    finally:
        model.train(was_training)
    dt = time.perf_counter() - t0
    return GenerationOutput(out, finished, total, dt)


def sequence_log_probs(model: TinyLM, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-token log-probs of right-padded ``input_ids`` ``[B, T]``: ``out[:, t] = log p(x_t |
    x_<t)`` for ``t >= 1`` and ``out[:, 0] = 0``, so it lines up with a ``[B, T]`` mask.
    Logits are divided by ``temperature`` (the rollout's), as the sampler did. Differentiable
    unless called under ``torch.no_grad``."""
    logits = model(input_ids[:, :-1])
    if temperature != 1.0:
        logits = logits / temperature
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return F.pad(lp, (1, 0))


def save_policy(
    path: str | Path, model: TinyLM, tokenizer: CharTokenizer, meta: dict[str, Any] | None = None
) -> Path:
    """Write weights, model config, tokenizer and ``meta`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": "rlinf-tinylm-v1",
        "model_config": model.cfg.model_dump(),
        "vocab_size": model.vocab_size,
        "tokenizer": tokenizer.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "meta": meta or {},
    }
    with atomic_open(path) as f:
        torch.save(payload, f)
    return path


def load_policy(path: str | Path) -> tuple[TinyLM, CharTokenizer, dict[str, Any]]:
    """Rebuild ``(model, tokenizer, meta)`` from a :func:`save_policy` checkpoint."""
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise RlinfError(f"policy checkpoint not found: {path}") from None
    except Exception as err:  # a truncated or foreign file
        raise RlinfError(f"cannot read policy checkpoint {path}: {err}") from None
    if not isinstance(payload, dict) or payload.get("format") != "rlinf-tinylm-v1":
        raise RlinfError(f"{path} is not a TinyLM policy checkpoint (format rlinf-tinylm-v1)")
    cfg = LMModelConfig.model_validate(payload["model_config"])
    model = TinyLM(cfg, int(payload["vocab_size"]))
    model.load_state_dict(payload["state_dict"])
    return model, CharTokenizer.from_dict(payload["tokenizer"]), dict(payload.get("meta", {}))
