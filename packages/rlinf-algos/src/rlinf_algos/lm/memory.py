"""Memory each role of a language-model run needs, estimated from its config before anything
starts (``rlinf train --dry-run``), and the plans that cannot fit refused.

Parameters ``P`` are counted exactly: the model of ``model.path``'s ``config.json`` (or of the
``model.init`` sizes) is instantiated on the ``meta`` device, which allocates nothing. With
``model.lora`` the adapters ``L`` are counted from the linear layers they wrap (``rank * (in +
out)`` each). ``b`` is the byte size of ``model.dtype``. What :func:`rlinf_algos.lm.hf.load_causal_lm`
allocates, per learner rank:

- full fine-tuning: weights ``4P`` (float32, the master copy when ``model.dtype`` is 16-bit) plus
  ``bP`` for the 16-bit copy autocast computes with; gradients ``4P``; AdamW ``8P`` (two float32
  states per trained parameter). Under ``actor.strategy: fsdp`` over ``n`` ranks all of it is
  divided by ``n`` (FSDP2 shards parameters, gradients and optimiser state); ``ddp`` replicates.
- LoRA: the frozen base ``bP``, the adapters ``4L`` in float32, gradients ``4L``, AdamW ``8L``.
- activations (no checkpointing): ``s`` tokens per micro-batch (``actor.micro_batch_size`` or the
  rank's share of ``algorithm.minibatch_size``, times ``model.max_seq_len`` or the model's
  context: an upper bound) times ``layers * c * (10 H + 4 I)`` bytes per token (``c``: the compute
  dtype's bytes; the attention inputs and output, the residual and norm inputs, and the MLP's
  gate, up and product, saved for the backward; attention by SDPA without an ``s^2`` score
  matrix), plus the logits and their gradient ``2 s V c`` and the float32 log-prob chunk of
  :func:`~rlinf_algos.lm.hf.token_log_probs` (``2 * 4 * LOGIT_CHUNK_ELEMENTS``).
- rollout: weights ``bP`` (plus ``L``), a key/value cache of ``2 * layers * kv_dim * c`` bytes per
  token for all its sequences at full length, and the ``[batch, V]`` float32 logits of a step.
- reference (only when ``algorithm.kl_coef > 0``): weights ``bP``; a no-grad pass holds one
  layer's activations and the logits of its micro-batch.
- critic (``ppo_lm``, on the actor's processes): a second model trained in full (a copy of the
  policy: with LoRA the merged copy trains in ``model.dtype``, AdamW states in that dtype too).

The estimate is compared with what the placement gives a process: the GPU memory (``--gpu-memory``,
else this machine's GPU when it has one) for a role placed on GPUs. Where that is unknown (no
GPU in the plan, a CPU-only embedded run) the estimate is printed and nothing is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf_algos.memory import RoleMemory, place_roles
from rlinf_core.errors import ConfigError

__all__ = [
    "DTYPE_BYTES",
    "config_from_dict",
    "estimate_lm_memory",
    "lm_model_counts",
    "plan_memory",
]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# -- counting ------------------------------------------------------------------------------------
def _hf_config(model: Mapping[str, Any], vocab_size: int | None = None) -> Any:
    """The ``transformers`` config of a ``model`` section: ``model.path``'s ``config.json``, or
    the one :func:`rlinf_algos.lm.hf.new_model_folder` builds from ``model.init``."""
    from transformers import LlamaConfig, Qwen2Config

    path = model.get("path")
    if path:
        file = Path(path) / "config.json"
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read {file} to estimate memory ({err})", "model.path") from None
        return config_from_dict(data)
    init = dict(model.get("init") or {})
    if vocab_size is None:
        vocab_size = _init_vocab(init)
    hidden = int(init.get("hidden_size", 128))
    heads = int(init.get("num_heads", 4))
    common = {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": init.get("intermediate_size") or 4 * hidden,
        "num_hidden_layers": int(init.get("num_layers", 4)),
        "num_attention_heads": heads,
        "num_key_value_heads": init.get("num_kv_heads") or heads,
        "max_position_embeddings": int(init.get("max_position_embeddings", 256)),
        "tie_word_embeddings": True,
    }
    return Qwen2Config(**common) if init.get("architecture", "qwen2") == "qwen2" else LlamaConfig(**common)


def _init_vocab(init: Mapping[str, Any]) -> int:
    if init.get("tokenizer", "arith") == "bpe":
        return int(init.get("vocab_size", 512))  # the most a trained BPE vocabulary holds
    from rlinf_algos.lm.tokens import arith_tokenizer

    return len(arith_tokenizer())


def config_from_dict(data: Mapping[str, Any]) -> Any:
    """A ``transformers`` config from a ``config.json``'s mapping (``model_type`` picks the class)."""
    from transformers import AutoConfig

    data = dict(data)
    kind = data.pop("model_type", None)
    if not kind:
        raise ConfigError("config.json has no model_type: cannot estimate the model's size", "model.path")
    try:
        return AutoConfig.for_model(kind, **data)
    except (ValueError, KeyError) as err:
        raise ConfigError(f"unknown model_type {kind!r} ({err})", "model.path") from None


@dataclass(frozen=True)
class ModelCounts:
    """What the estimate needs of a model: parameters, LoRA adapter parameters and the shape."""

    params: int
    lora_params: int
    hidden: int
    intermediate: int
    layers: int
    kv_dim: int
    vocab: int
    context: int


def lm_model_counts(config: Any, lora: Mapping[str, Any] | None = None) -> ModelCounts:
    """Exact counts of a ``transformers`` config's causal LM, built on the ``meta`` device
    (nothing allocated); ``lora``: a ``model.lora`` mapping (``rank``, ``target_modules``)."""
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    adapters = 0
    if lora:
        rank = int(lora.get("rank", 8))
        targets = lora.get("target_modules", "all-linear")
        out_head = model.get_output_embeddings()
        for name, mod in model.named_modules():
            if not isinstance(mod, nn.Linear) or mod is out_head:
                continue
            if targets != "all-linear" and not any(
                name == t or name.endswith("." + t) for t in (targets or [])
            ):
                continue
            adapters += rank * (mod.in_features + mod.out_features)
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    return ModelCounts(
        params=params,
        lora_params=adapters,
        hidden=hidden,
        intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
        layers=int(config.num_hidden_layers),
        kv_dim=kv * head_dim,
        vocab=int(config.vocab_size),
        context=int(getattr(config, "max_position_embeddings", 2048) or 2048),
    )


# -- the estimate --------------------------------------------------------------------------------
def _train_state(
    est: RoleMemory, counts: ModelCounts, dtype: str, lora: bool, shards: int, master: bool = True
) -> None:
    """Weights, gradients and AdamW state of a trained model, added to ``est`` (see the module)."""
    p, b = counts.params, DTYPE_BYTES[dtype]
    if lora:
        est.weights += b * p + 4 * counts.lora_params
        est.gradients += 4 * counts.lora_params
        est.optimizer += 8 * counts.lora_params
        return
    pb = 4 if (master or dtype == "float32") else b  # the trained weights' bytes
    copy = b if pb == 4 and b != 4 else 0  # autocast's 16-bit copy of float32 master weights
    est.weights += math.ceil((pb + copy) * p / shards)
    est.gradients += math.ceil(pb * p / shards)
    est.optimizer += math.ceil(2 * pb * p / shards)


def _activations(counts: ModelCounts, tokens: int, c: int, logits: bool, grad: bool) -> int:
    from rlinf_algos.lm.hf import LOGIT_CHUNK_ELEMENTS

    per_token = counts.layers * c * (10 * counts.hidden + 4 * counts.intermediate)
    if not grad:  # a no-grad pass keeps one layer at a time
        per_token = c * (4 * counts.hidden + 2 * counts.intermediate)
    out = tokens * per_token
    if logits:
        out += (2 if grad else 1) * tokens * counts.vocab * c
        out += 2 * 4 * min(LOGIT_CHUNK_ELEMENTS, tokens * counts.vocab)
    return out


def estimate_lm_memory(
    run: Mapping[str, Any],
    ranks: Mapping[str, int] | None = None,
    counts: ModelCounts | None = None,
) -> list[RoleMemory]:
    """Per-process estimates of a language-model run's roles (``run``: the resolved config's
    mapping; ``ranks``: processes per placed component, default one each; ``counts``: the model's,
    else from ``run['model']``)."""
    ranks = dict(ranks or {})
    model = run.get("model") or {}
    algo = run.get("algorithm") or {}
    actor_cfg = run.get("actor") or {}
    dtype = str(model.get("dtype", "float32"))
    lora = model.get("lora")
    if counts is None:
        counts = lm_model_counts(_hf_config(model), lora)
    c = DTYPE_BYTES[dtype]
    seq = int(model.get("max_seq_len") or counts.context)
    n_actor = max(1, int(ranks.get("actor", 1)))
    fsdp = n_actor > 1 and actor_cfg.get("strategy", "ddp") == "fsdp"
    shards = n_actor if fsdp else 1
    micro = actor_cfg.get("micro_batch_size") or math.ceil(int(algo.get("minibatch_size", 256)) / n_actor)
    seqs = int(algo.get("prompts_per_iter", 32)) * int(algo.get("group_size", 8))
    micro = min(int(micro), math.ceil(seqs / n_actor))

    actor = RoleMemory("actor", n_actor)
    _train_state(actor, counts, dtype, bool(lora), shards)
    actor.activations = _activations(counts, micro * seq, c, logits=True, grad=True)
    actor.notes.append(
        f"{counts.params:,} parameters"
        + (f", {counts.lora_params:,} in LoRA adapters" if lora else "")
        + f"; {micro} sequences x {seq} tokens per micro-batch"
        + (f"; fsdp over {n_actor} ranks" if fsdp else (f"; ddp over {n_actor} ranks" if n_actor > 1 else ""))
    )
    knobs = ["algorithm.minibatch_size", "actor.micro_batch_size", "model.max_seq_len"]
    knobs += ["model.lora.rank" if lora else "model.lora", "actor placement size with actor.strategy=fsdp"]
    if dtype == "float32":
        knobs.append("model.dtype=bfloat16")
    if isinstance(run.get("critic"), Mapping):  # the resolved config has it when a critic trains
        # the critic: a copy of the policy (LoRA merged, trained in model.dtype) or critic.path's model
        critic_from_path = bool((run.get("critic") or {}).get("path"))
        _train_state(actor, counts, dtype, False, shards, master=critic_from_path or not lora)
        actor.activations += _activations(counts, micro * seq, c, logits=False, grad=True)
        actor.notes.append("with the critic (a second model trained in full)")
    actor.knobs = tuple(knobs)
    out = [actor]

    n_roll = max(1, int(ranks.get("rollout", 1)))
    batch = math.ceil(seqs / n_roll)
    rollout = RoleMemory(
        "rollout", n_roll, weights=c * counts.params + 4 * (counts.lora_params if lora else 0)
    )
    rollout.activations = batch * seq * 2 * counts.layers * counts.kv_dim * c + batch * counts.vocab * 4
    rollout.notes.append(f"key/value cache of {batch} sequences x {seq} tokens")
    rollout.knobs = (
        "algorithm.prompts_per_iter",
        "algorithm.group_size",
        "model.max_seq_len",
        "rollout placement size",
    )
    out.append(rollout)

    if float(algo.get("kl_coef", 0.0) or 0.0) > 0:
        n_ref = max(1, int(ranks.get("reference", 1)))
        ref = RoleMemory("reference", n_ref, weights=c * counts.params)
        ref.activations = _activations(counts, micro * seq, c, logits=True, grad=False)
        ref.knobs = ("model.dtype", "reference placement size", "algorithm.minibatch_size")
        out.append(ref)
    return out


def _builds_causal_lm(type_name: str) -> bool:
    """Whether the model type ``type_name`` builds a Hugging Face causal language model (its
    registered roles say so), whose memory this module estimates."""
    from rlinf_algos.models import model_type
    from rlinf_core.errors import RlinfError

    try:
        return "AutoModelForCausalLM" in model_type(type_name).roles
    except RlinfError:  # not registered: validation names it
        return False


def plan_memory(
    run: Mapping[str, Any],
    devices: Mapping[str, Sequence[str]],
    gpu_memory_gib: float | None = None,
) -> list[RoleMemory] | None:
    """The estimates of a language-model run (``None`` unless its model is a Hugging Face language model), each with what
    its placement gives a process: ``gpu_memory_gib`` (else this machine's GPU) for a role whose
    processes are on GPUs (``devices``: :func:`rlinf_algos.devices.plan_devices`), unknown
    otherwise."""
    model = run.get("model") or {}
    if not isinstance(model, Mapping) or not _builds_causal_lm(str(model.get("type", "mlp"))):
        return None
    ranks = {name: len(r) for name, r in devices.items()}
    try:
        counts = lm_model_counts(_hf_config(model), model.get("lora"))
    except Exception:  # a folder not there yet, or an architecture transformers cannot build here
        return None
    return place_roles(estimate_lm_memory(run, ranks, counts), devices, gpu_memory_gib)
