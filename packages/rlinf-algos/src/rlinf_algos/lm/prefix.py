"""Per-token log-probs of sequences that share their prompts, each prompt run through the model once.

A GRPO batch holds ``group_size`` completions of every prompt, and a prompt is usually several
times longer than its completion: a plain forward over the packed ``[prompt, completion]`` rows
computes every prompt ``group_size`` times. :func:`shared_prefix_log_probs` runs each distinct
prefix once, keeps its key/value cache, repeats the cache rows for the completions that follow
that prefix, and runs only the completions' tokens on top. The result is the log-probs
:func:`~rlinf_algos.lm.hf.sequence_log_probs` computes (equal up to float rounding, tested), and
it is differentiable: the gradient flows through the cache into the prefix's forward, so the
loss trains the prompt's keys and values exactly as the plain forward does.

What counts as a row's prefix is what precedes its first trained token (``mask > 0``): the
prompt of a single-turn completion, everything before the first generated turn of a multi-turn
one. Rows group by their prefix's tokens, so the function needs no group bookkeeping and is
correct for any batch; when sharing would save little (fewer than ``min_share`` rows per distinct
prefix on average) it falls back to the plain forward.

TRL's ``GRPOTrainer`` and verl run the packed rows whole; the saving here is the prompt share of
the update's tokens (about ``(G - 1) / G`` of the prompt tokens for groups of ``G``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlinf_algos.lm.hf import compute_autocast, last_logits_kwargs, sequence_log_probs, token_log_probs

__all__ = ["log_probs_of", "prefix_groups", "shared_prefix_log_probs"]


def prefix_groups(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, list[int]] | None:
    """``(start [B], group [B], firsts [G])``: each row's prefix length (the index of its first
    trained token), the index of its distinct prefix, and a row holding each prefix; ``None``
    when a row has no trained token or no prefix (nothing to share)."""
    trained = mask > 0
    if not bool(trained.any(1).all()):
        return None
    start = trained.to(torch.int8).argmax(1)
    if int(start.min()) < 1:
        return None
    seen: dict[tuple[int, ...], int] = {}
    group: list[int] = []
    firsts: list[int] = []
    rows = ids.tolist()
    for i, s in enumerate(start.tolist()):
        key = tuple(rows[i][:s])
        g = seen.get(key)
        if g is None:
            g = seen[key] = len(firsts)
            firsts.append(i)
        group.append(g)
    return start, torch.tensor(group, device="cpu"), firsts  # from host lists; moved at use


def shared_prefix_log_probs(
    model: Any, ids: Tensor, mask: Tensor, temperature: float = 1.0, min_share: float = 1.5
) -> Tensor:
    """Per-token log-probs of right-padded ``ids`` ``[B, T]`` with the layout of
    :func:`~rlinf_algos.lm.hf.sequence_log_probs` (``out[:, t] = log p(x_t | x_<t)``, ``0`` on
    prefix positions), each distinct prefix (before the row's first token with ``mask > 0``)
    computed once. Falls back to the plain forward when rows share too little (see the module
    docstring). Differentiable unless called under ``torch.no_grad``."""
    groups = prefix_groups(ids, mask)
    if groups is None or ids.shape[0] < min_share * len(groups[2]):
        return sequence_log_probs(model, ids, temperature)
    with compute_autocast(model):  # bf16 compute over float32 master weights, when the model has them
        return _shared_prefix_log_probs(model, ids, mask, temperature, groups)


def _shared_prefix_log_probs(
    model: Any, ids: Tensor, mask: Tensor, temperature: float, groups: Any
) -> Tensor:
    from transformers import DynamicCache

    start, group, firsts = groups
    b, t = ids.shape
    device = ids.device
    g_n, p_len = len(firsts), int(start.max())
    # the distinct prefixes, left-padded (the attention mask and positions skip the padding)
    prefix = torch.zeros(g_n, p_len, dtype=torch.long, device=device)
    p_mask = torch.zeros(g_n, p_len, dtype=torch.long, device=device)
    for g, i in enumerate(firsts):
        s = int(start[i])
        prefix[g, p_len - s :] = ids[i, :s]
        p_mask[g, p_len - s :] = 1
    cache = DynamicCache(config=getattr(model, "config", None))
    out = model(
        input_ids=prefix,
        attention_mask=p_mask,
        position_ids=(p_mask.cumsum(1) - 1).clamp(min=0),
        past_key_values=cache,
        use_cache=True,
        **last_logits_kwargs(model),
    )
    group = group.to(device)
    first_logits = out.logits[:, -1][group]  # [B, V]: predicts each row's first trained token
    # each row's tail from its first trained token, right-padded to the longest
    tail = t - int(start.min())
    cols = start.to(device)[:, None] + torch.arange(tail, device=device)[None]  # [B, tail]
    valid = cols < t
    tokens = ids.gather(1, cols.clamp(max=t - 1)) * valid
    logits = first_logits[:, None]
    if tail > 1:
        cache = out.past_key_values
        cache.reorder_cache(group)  # prefix rows -> one per sequence (differentiable index_select)
        ones = torch.ones(b, tail - 1, dtype=torch.long, device=device)
        rest = model(
            input_ids=tokens[:, :-1],
            attention_mask=torch.cat([p_mask[group], ones], 1),
            position_ids=cols[:, :-1],
            past_key_values=cache,
            use_cache=True,
        ).logits
        logits = torch.cat([logits, rest], 1)
    lp = token_log_probs(logits, tokens, temperature)  # chunked: no full float32 log-softmax
    # back to the packed layout: row i's tail starts at column start[i]
    full = torch.zeros(b, t + tail, dtype=lp.dtype, device=device).scatter(1, cols, lp * valid)
    return full[:, :t]


def log_probs_of(model: Any, ids: Tensor, mask: Tensor | None, temperature: float) -> Tensor:
    """:func:`shared_prefix_log_probs` given the loss ``mask``, the plain forward without one."""
    if mask is not None:
        return shared_prefix_log_probs(model, ids, mask, temperature)
    return sequence_log_probs(model, ids, temperature)
