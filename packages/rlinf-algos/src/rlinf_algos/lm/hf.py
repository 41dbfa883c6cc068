"""Hugging Face causal language models as rlinf policies: load, LoRA, sample, score, sync, save.

Every language policy is a ``transformers`` ``AutoModelForCausalLM`` loaded from a model folder,
the same code path for a user's Qwen folder and for the small models the examples build
(:func:`new_model_folder`), since no weights can be downloaded here.

- :func:`load_causal_lm`: the ``model`` section -> a model (``model.dtype``; ``trust_remote_code``
  off unless set; peft LoRA adapters with ``model.lora``). Errors name the YAML path.
- :func:`generate`: batched sampling with the model's KV cache from left-padded prompts
  (temperature, top-p, greedy at 0, stop ids, per-row done masks, cache compaction as rows
  finish), seeded by a ``torch.Generator`` so a rollout is reproducible.
- :func:`sequence_log_probs`: per-token log-probs of right-padded sequences (actor, reference).
- :func:`sync_state` / :func:`load_sync_state`: what a weight publish carries: the adapter
  alone when LoRA is on (:func:`state_bytes` reports its size), every weight otherwise.
- :func:`reference_mode`: the frozen reference is the base model with the adapter disabled (no
  second copy of the weights).
- :func:`save_model_folder`: ``policy/`` that ``from_pretrained`` loads (merged when LoRA) and
  ``adapter/`` that peft loads; both written to a temporary folder and renamed into place.

Shapes: ``B`` sequences, ``T`` tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlinf_algos.lm.config import LMModelConfig, LoraConfig, ModelInitConfig
from rlinf_algos.lm.folder import check_model_folder
from rlinf_algos.lm.kvcache import preallocated_cache
from rlinf_algos.models.lora import add_adapters
from rlinf_core.errors import ConfigError, RlinfError

__all__ = [
    "GenerationOutput",
    "add_tokens_folder",
    "compute_autocast",
    "generate",
    "is_lora",
    "last_logits_kwargs",
    "load_causal_lm",
    "load_sync_state",
    "new_model_folder",
    "parameter_counts",
    "reference_mode",
    "save_model_folder",
    "sequence_log_probs",
    "state_bytes",
    "sync_state",
    "token_log_probs",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _quiet() -> None:
    """No progress bars or advisory warnings from transformers in a run's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def new_model_folder(
    path: str | Path, init: ModelInitConfig, seed: int = 0, corpus: Iterable[str] | None = None
) -> Path:
    """Build a model from a ``transformers`` config with random weights (seeded) and the
    tokenizer ``init.tokenizer`` names (a ``bpe`` one trained on ``corpus``), and save both as a
    model folder at ``path`` (written next to it and renamed into place). Returns ``path``."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    from rlinf_algos.lm.tokens import arith_tokenizer, bpe_tokenizer

    _quiet()
    if init.tokenizer == "bpe":
        if corpus is None:
            raise ConfigError(
                "a bpe tokenizer is trained on the data section's texts: add a data section",
                path="model.init.tokenizer",
            )
        tok = bpe_tokenizer(corpus, init.vocab_size)
    else:
        tok = arith_tokenizer()
    common = {
        "vocab_size": len(tok),
        "hidden_size": init.hidden_size,
        "intermediate_size": init.intermediate_size or 4 * init.hidden_size,
        "num_hidden_layers": init.num_layers,
        "num_attention_heads": init.num_heads,
        "num_key_value_heads": init.num_kv_heads or init.num_heads,
        "max_position_embeddings": init.max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    config = Qwen2Config(**common) if init.architecture == "qwen2" else LlamaConfig(**common)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    path = Path(path)
    _write_folder(path, lambda tmp: (model.save_pretrained(tmp), _save_tokenizer(tok, tmp)))
    return path


def add_tokens_folder(
    spec: LMModelConfig, path: str | Path, tokens: Sequence[str], seed: int = 0
) -> list[str]:
    """Give the model folder ``spec.path`` the special ``tokens`` its tokenizer lacks and save the
    result as a model folder at ``path`` (atomically). Returns the tokens added; when none is
    missing nothing is written.

    Each added token gets embedding rows (input, and output when untied) drawn around the mean of
    the existing rows (the mean plus a tenth of their per-dimension spread, seeded by ``seed``):
    the model then gives the new tokens about an average token's probability, as Hewitt's
    mean initialisation does, while they stay distinguishable as inputs. A vocabulary padded
    beyond the tokenizer (Qwen's is) keeps its size and the new tokens take padding rows.
    With LoRA the added rows stay at that initialisation (only the adapters train)."""
    from transformers import AutoTokenizer

    _quiet()
    src = check_model_folder(spec.path or "", "model.path")
    tok = AutoTokenizer.from_pretrained(str(src), trust_remote_code=spec.trust_remote_code)
    vocab = tok.get_vocab()
    missing = [t for t in tokens if t not in vocab]
    if not missing:
        return []
    tok.add_tokens(missing, special_tokens=True)
    new_ids = tok.convert_tokens_to_ids(missing)
    model = _from_pretrained(src, dtype=DTYPES[spec.dtype], trust_remote_code=spec.trust_remote_code)
    known = min(new_ids)  # rows below the first new id belong to real tokens
    if max(new_ids) >= model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tok), mean_resizing=False)
    gen = torch.Generator().manual_seed(seed)
    tables = [model.get_input_embeddings().weight]
    out = model.get_output_embeddings()
    if out is not None and out.weight.data_ptr() != tables[0].data_ptr():
        tables.append(out.weight)
    with torch.no_grad():
        for w in tables:
            old = w[:known].float()
            noise = torch.randn(len(new_ids), w.shape[1], generator=gen, device="cpu")  # a folder on the host
            w[new_ids] = (old.mean(0) + 0.1 * old.std(0) * noise).to(w.dtype)
    _write_folder(Path(path), lambda tmp: (model.save_pretrained(tmp), tok.save_pretrained(tmp)))
    return missing


def _from_pretrained(folder: Path, meta: bool = False, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(folder)`` (``meta``: the model of its config.json
    built on the meta device instead, shapes without storage, no weight read); a folder
    transformers cannot load (a config.json that does not match the weights, a damaged file,
    code it would have to run) is a one-line :class:`ConfigError` at ``model.path`` naming the
    folder and transformers' reason."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        if meta:
            remote = bool(kwargs.get("trust_remote_code", False))
            config = AutoConfig.from_pretrained(str(folder), trust_remote_code=remote)
            with torch.device("meta"):
                return AutoModelForCausalLM.from_config(config, **kwargs)
        return AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    except ValueError as err:
        if "trust_remote_code" in str(err):
            raise ConfigError(
                f"{folder} needs code shipped in the folder; set model.trust_remote_code=true if you trust it",
                path="model.trust_remote_code",
            ) from None
        raise ConfigError(
            f"{folder}: transformers cannot load the model ({_reason(err)})", "model.path"
        ) from None
    except (OSError, RuntimeError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(
            f"{folder}: transformers cannot load the model ({_reason(err)})", "model.path"
        ) from None


def _reason(err: BaseException) -> str:
    """The first line of ``err`` that says something (transformers' messages run to many lines:
    a loading report, then 'see the report above')."""
    if "mismatched_sizes" in str(err):
        return "the weights' shapes do not match config.json: a config.json edited, or from another model?"
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = next((ln for ln in lines if "above" not in ln.lower()), lines[0] if lines else type(err).__name__)
    return f"{type(err).__name__}: {text[:300]}"


def _save_tokenizer(tok: Any, folder: Path) -> None:
    """Save ``tok`` with its unk token named in ``tokenizer_config.json``: transformers loads a
    folder with the architecture's tokenizer class (Qwen2Tokenizer...), whose default unk token
    would otherwise be added past the model's vocabulary."""
    tok.save_pretrained(folder)
    cfg_file = Path(folder) / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    cfg.setdefault("unk_token", cfg.get("pad_token"))
    cfg_file.write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def _write_folder(path: Path, write: Any) -> None:
    """Write a folder atomically: into ``.NAME.tmp-PID`` beside it, then rename (an existing
    folder is moved aside first and removed after)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def folder_files(path: str | Path) -> dict[str, bytes]:
    """Every file of the folder ``path`` (a model folder), by its path relative to it."""
    root = Path(path)
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def write_folder_files(path: str | Path, files: dict[str, bytes]) -> Path:
    """Write the folder :func:`folder_files` read at ``path``, atomically (beside it, then
    renamed into place); returns ``path``."""

    def write(tmp: Path) -> None:
        for name, data in files.items():
            dest = tmp / name
            if dest.resolve().parent != tmp.resolve() and tmp.resolve() not in dest.resolve().parents:
                raise RlinfError(f"a model folder file outside its folder: {name!r}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)

    _write_folder(Path(path), write)
    return Path(path)


def load_causal_lm(
    spec: LMModelConfig,
    path: str | Path | None = None,
    *,
    trainable: bool = True,
    device: torch.device | str | None = None,
    meta: bool = False,
) -> Any:
    """The model of the ``model`` section (from ``path`` when given, e.g. a built ``init``
    folder, else ``model.path``), in ``model.dtype``, with LoRA adapters when ``model.lora`` is
    set (then only they require gradients). ``trainable=False`` freezes every parameter.
    ``device``: where it then lives (``None``: the CPU, where it loads). ``meta``: the same
    model on the meta device, its weights not read (what the ranks of a sharded learner build
    before FSDP gives them their shards, :meth:`~rlinf_algos.parallel.DataParallel.wrap_loaded`).

    A trainable model without LoRA in ``bfloat16`` or ``float16`` keeps float32 master weights
    and computes its forward passes under autocast to ``model.dtype``
    (:func:`compute_autocast`): AdamW's small updates are not rounded away in the weights. With
    LoRA the frozen base stays in ``model.dtype`` (peft keeps the adapters in float32)."""

    _quiet()
    folder = check_model_folder(path if path is not None else spec.path or "", "model.path")
    master = trainable and spec.lora is None and spec.dtype != "float32"
    model = _from_pretrained(
        folder,
        meta,
        dtype=torch.float32 if master else DTYPES[spec.dtype],
        trust_remote_code=spec.trust_remote_code,
    )
    model.config.use_cache = True
    if master:
        model.rlinf_compute_dtype = DTYPES[spec.dtype]
    if spec.lora is not None:
        if meta:
            with torch.device("meta"):
                model = apply_lora(model, spec.lora)
        else:
            model = apply_lora(model, spec.lora)
    if not trainable:
        for p in model.parameters():
            p.requires_grad_(False)
    if device is not None:
        model = model.to(device)
    return model


def apply_lora(model: Any, lora: LoraConfig) -> Any:
    """``model`` wrapped in peft LoRA adapters (a ``PeftModel``; only the adapters train), with
    the merged-weight forward when ``model.lora.merged_forward`` (:mod:`rlinf_algos.models.lora`)."""
    return add_adapters(model, lora, task_type="CAUSAL_LM")


def is_lora(model: Any) -> bool:
    """Whether ``model`` carries peft adapters."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def parameter_counts(model: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameters."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


def sync_state(model: Any, state_dict: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """A copy of what a weight publish carries: the LoRA adapter's tensors alone when ``model``
    has one, every weight otherwise (a tied weight, such as an output head sharing the token
    embedding, once). ``state_dict``: the model's full state dict when it is not
    ``model.state_dict()`` (a sharded model's, gathered)."""
    if is_lora(model):
        from peft import get_peft_model_state_dict

        sd = get_peft_model_state_dict(model, state_dict=state_dict)
    else:
        sd, seen = {}, set()
        source = model.state_dict() if state_dict is None else state_dict
        # a gathered state dict holds a tied head as its own copy: leave it out all the same
        tied = state_dict is not None and bool(
            getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        )
        for k, v in source.items():
            if v.data_ptr() in seen or (tied and k.endswith("lm_head.weight")):
                continue
            seen.add(v.data_ptr())
            sd[k] = v
    # one copy to the host: ``.cpu().clone()`` copied a GPU tensor twice (device -> host, then
    # host -> host); ``to("cpu", copy=True)`` copies once from either device
    return {k: v.detach().to("cpu", copy=True) for k, v in sd.items()}


def load_sync_state(model: Any, state: dict[str, Tensor]) -> None:
    """Load a :func:`sync_state` into ``model`` (adapter only, or every weight); a key that
    does not match is an error, never a silent partial load."""
    if is_lora(model):
        from peft import set_peft_model_state_dict

        res = set_peft_model_state_dict(model, state)
        unexpected = list(getattr(res, "unexpected_keys", []) or [])
        if unexpected:
            raise RlinfError(f"weight sync: adapter keys this model does not have: {unexpected[:3]}")
        return
    res = model.load_state_dict(state, strict=False)
    loaded = {t.data_ptr() for k, t in model.state_dict().items() if k in state}
    full = model.state_dict()
    missing = [k for k in res.missing_keys if full[k].data_ptr() not in loaded]  # tied ones are loaded
    if missing or res.unexpected_keys:
        raise RlinfError(
            f"weight sync: the published weights do not fit this model (missing {missing[:3]}, "
            f"unexpected {list(res.unexpected_keys)[:3]})"
        )


def state_bytes(state: dict[str, Tensor]) -> int:
    """Bytes of a state dict's tensors (what a publish moves)."""
    return sum(t.numel() * t.element_size() for t in state.values())


@contextlib.contextmanager
def reference_mode(model: Any) -> Iterator[Any]:
    """``model`` as the frozen reference: with the LoRA adapter disabled (the base weights), or
    as it is when it has none."""
    if is_lora(model):
        with model.disable_adapter():
            yield model
    else:
        yield model


LOGIT_CHUNK_ELEMENTS = 1 << 26
"""Logits (rows times vocabulary) turned to float32 at once by :func:`token_log_probs`: 256 MB."""


def _chunk_log_probs(logits: Tensor, targets: Tensor, temperature: float) -> Tensor:
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


def token_log_probs(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, chunk_elements: int = LOGIT_CHUNK_ELEMENTS
) -> Tensor:
    """``log softmax(logits / temperature)[targets]`` for logits ``[..., V]`` and ``targets``
    ``[...]``, as the chosen logit minus the log-sum-exp, in float32 a chunk of rows at a time
    (``chunk_elements`` logits at most): never a float32 ``[..., V]`` log-softmax of the whole
    batch. With gradients each chunk is recomputed in the backward
    (``torch.utils.checkpoint``), so its float32 copy is not kept either."""
    shape = targets.shape
    v = logits.shape[-1]
    flat, tgt = logits.reshape(-1, v), targets.reshape(-1)
    rows = max(1, chunk_elements // max(v, 1))
    if flat.shape[0] <= rows:
        return _chunk_log_probs(flat, tgt, temperature).view(shape)
    grad = torch.is_grad_enabled() and flat.requires_grad
    parts = []
    for i in range(0, flat.shape[0], rows):
        a, b = flat[i : i + rows], tgt[i : i + rows]
        if grad:
            from torch.utils.checkpoint import checkpoint

            parts.append(checkpoint(_chunk_log_probs, a, b, temperature, use_reentrant=False))
        else:
            parts.append(_chunk_log_probs(a, b, temperature))
    return torch.cat(parts).view(shape)


def compute_autocast(model: Any) -> contextlib.AbstractContextManager[Any]:
    """Autocast to the model's compute dtype when it holds float32 master weights for a
    ``bfloat16``/``float16`` ``model.dtype`` (:func:`load_causal_lm`), on its device; nothing
    otherwise."""
    dtype = getattr(model, "rlinf_compute_dtype", None)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=dtype)


def sequence_log_probs(
    model: Any,
    input_ids: Tensor,
    temperature: float = 1.0,
    attention_mask: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Per-token log-probs of right-padded ``input_ids`` ``[B, T]``: ``out[:, t] = log p(x_t |
    x_<t)`` for ``t >= 1`` and ``out[:, 0] = 0``, so it lines up with a ``[B, T]`` mask. Logits
    are divided by ``temperature`` (the rollout's), as the sampler did. Differentiable unless
    called under ``torch.no_grad``. Right padding needs no mask for a causal model (a pad only
    follows the tokens it could affect).

    With the loss ``mask`` (``[B, T]``), only the positions from the earliest trained token on
    are projected onto the vocabulary (``logits_to_keep``) and the earlier ones hold 0. The
    log-probs come from :func:`token_log_probs` (chunked; no full float32 log-softmax)."""
    kwargs: dict[str, Any] = {"use_cache": False}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask[:, :-1]
    t = input_ids.shape[1]
    first = 1
    if mask is not None and last_logits_kwargs(model):
        trained = mask[:, 1:] > 0
        if bool(trained.any()):
            first = 1 + int(trained.any(0).to(torch.int8).argmax())
            kwargs["logits_to_keep"] = t - first
    with compute_autocast(model):
        logits = model(input_ids=input_ids[:, :-1], **kwargs).logits
    lp = token_log_probs(logits[:, -(t - first) :], input_ids[:, first:], temperature)
    return F.pad(lp, (first, 0))


@dataclass
class GenerationOutput:
    """What :func:`generate` returns.

    Attributes:
        tokens: per prompt, the generated ids (the stop token included when one was produced).
        finished: per prompt, whether it stopped on a stop token (else it hit ``max_new_tokens``
            or the model's context).
        num_tokens: generated tokens in all.
        seconds: wall time of the call.
        log_probs: with ``generate(..., log_probs=True)``, per prompt the log-probability of each
            generated id under the distribution it was sampled from (``log softmax(logits /
            temperature)``, before top-p; ``None`` otherwise).
    """

    tokens: list[list[int]]
    finished: list[bool]
    num_tokens: int = 0
    seconds: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    log_probs: list[list[float]] | None = None


def _sample(logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> Tensor:
    """Next tokens ``[B]`` (on the logits' device) from logits ``[B, V]``: argmax at temperature
    0, else softmax sampling restricted to the smallest set of tokens whose probability reaches
    ``top_p``. A ``generator`` on another device than the logits (a CPU one for GPU logits)
    draws there: the probabilities travel to it, the tokens come back."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    home = probs.device
    if generator is not None and generator.device != home:
        probs = probs.to(generator.device)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        keep = sp.cumsum(dim=-1) - sp < top_p  # the top token always stays
        choice = torch.multinomial(sp * keep, 1, generator=generator)
        return si.gather(-1, choice).squeeze(-1).to(home)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(home)


def max_context(model: Any) -> int:
    """The model's longest sequence (``max_position_embeddings``)."""
    cfg = getattr(model, "config", None)
    return int(getattr(cfg, "max_position_embeddings", None) or 2048)


def last_logits_kwargs(model: Any) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` when the model's forward takes it (transformers' causal LMs
    do): a forward given them projects only the last position onto the vocabulary (generation's
    prefill, the shared prompts' forward of :mod:`rlinf_algos.lm.prefix`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        params = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    max_len: int | None = None,
    compact_below: float = 0.5,
    log_probs: bool = False,
) -> GenerationOutput:
    """Sample continuations of ``prompts`` in one batch.

    Prompts are left-padded (attention mask and position ids skip the padding) and prefilled in
    one forward, each distinct prompt once (its cache row then serves every copy of it), projecting
    only the last position onto the vocabulary; then one token per step
    for every unfinished row, reusing the KV cache, whose buffers hold the longest sequence from
    the start (:mod:`rlinf_algos.lm.kvcache`).
    A row is done when it emits one of ``stop_ids`` or reaches ``max_new_tokens`` (or
    ``max_len``, default the model's context). When the unfinished fraction of rows falls below
    ``compact_below``, finished rows leave the cache.

    ``log_probs``: also return each generated id's log-probability under the logits it was
    drawn from, divided by ``temperature`` (by 1 when greedy) as :func:`token_log_probs`
    computes the learner's: an asynchronous run's behaviour log-probs, at no extra forward.
    They agree with a forward over the whole sequence to float rounding (the KV cache adds in
    another order), not bit for bit.
    """
    t0 = time.perf_counter()
    if not prompts:
        return GenerationOutput([], [], 0, 0.0, log_probs=[] if log_probs else None)
    n = len(prompts)
    plens = [len(p) for p in prompts]
    if min(plens) < 1:
        raise RlinfError("generate: every prompt needs at least one token")
    lp = max(plens)
    limit = max_len or max_context(model)
    if lp >= limit:
        raise RlinfError(f"generate: a prompt of {lp} tokens leaves no room under the context of {limit}")
    steps = min(max_new_tokens, limit - lp)
    # everything the loop touches lives on the model's device; the host sees one [B] row of
    # token ids per step (the logits never leave the device)
    device = next(model.parameters()).device
    host = torch.full((n, lp), pad_id, dtype=torch.long, device="cpu")  # built row by row, then moved once
    for i, p in enumerate(prompts):
        host[i, lp - len(p) :] = torch.as_tensor(list(p), dtype=torch.long, device="cpu")
    ids = host.to(device)
    mask = (torch.arange(lp, device=device)[None] >= lp - torch.tensor(plens, device=device)[:, None]).long()
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    out: list[list[int]] = [[] for _ in range(n)]
    out_lp: list[list[float]] | None = [[] for _ in range(n)] if log_probs else None
    lp_temperature = temperature if temperature > 0.0 else 1.0
    finished = [False] * n
    total = 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            # each distinct prompt is prefilled once; its cache row is then repeated for every
            # sample of it (a GRPO batch holds group_size copies of each prompt)
            first: dict[tuple[int, ...], int] = {}
            inverse = [first.setdefault(tuple(p), i) for i, p in enumerate(prompts)]
            distinct = sorted(first.values())
            d_idx = torch.tensor(distinct, dtype=torch.long, device=device)
            cache = preallocated_cache(model, lp + steps)
            res = model(
                input_ids=ids[d_idx],
                attention_mask=mask[d_idx],
                position_ids=positions[d_idx],
                past_key_values=cache,
                use_cache=True,
                **last_logits_kwargs(model),
            )
            cache = res.past_key_values
            logits = res.logits[:, -1]
            if len(distinct) < n:
                row_of = {d: j for j, d in enumerate(distinct)}  # prompt index -> its row in `distinct`
                sel = torch.tensor([row_of[k] for k in inverse], dtype=torch.long, device=device)
                cache.batch_select_indices(sel)
                logits = logits[sel]
            rows = list(range(n))  # original index of each cache row
            next_pos = torch.tensor(plens, dtype=torch.long, device=device)
            active = torch.ones(n, dtype=torch.bool, device=device)
            for _ in range(steps):
                tok = _sample(logits, temperature, top_p, generator)
                hit = torch.isin(tok, stop) & active
                # the one transfer per step: the tokens, the rows still running, the rows that stopped
                tok_list, act_list, hit_list = torch.stack([tok, active.long(), hit.long()]).tolist()
                for j, r in enumerate(rows):
                    if act_list[j]:
                        out[r].append(tok_list[j])
                    if hit_list[j]:
                        finished[r] = True
                if out_lp is not None:  # the sampled ids' log-probs, from the logits at hand
                    lp_list = token_log_probs(logits, tok, lp_temperature).tolist()
                    for j, r in enumerate(rows):
                        if act_list[j]:
                            out_lp[r].append(lp_list[j])
                total += sum(act_list)
                active &= ~hit
                n_active = sum(act_list) - sum(hit_list)
                if n_active == 0:
                    break
                if n_active < compact_below * len(rows) and len(rows) > 4:
                    keep_list = [j for j in range(len(rows)) if act_list[j] and not hit_list[j]]
                    keep = torch.tensor(keep_list, dtype=torch.long, device=device)
                    cache.batch_select_indices(keep)
                    rows = [rows[j] for j in keep_list]
                    tok, next_pos, mask = tok[keep], next_pos[keep], mask[keep]
                    active = torch.ones(len(keep_list), dtype=torch.bool, device=device)
                tok = torch.where(active, tok, torch.full_like(tok, pad_id))
                mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.long, device=device)], dim=1)
                res = model(
                    input_ids=tok.unsqueeze(1),
                    attention_mask=mask,
                    position_ids=next_pos.unsqueeze(1),
                    past_key_values=cache,
                    use_cache=True,
                )
                cache = res.past_key_values
                logits = res.logits[:, -1]
                next_pos = next_pos + 1
    finally:
        model.train(was_training)
    return GenerationOutput(out, finished, total, time.perf_counter() - t0, log_probs=out_lp)


def save_model_folder(
    model: Any, tokenizer_dir: str | Path, path: str | Path, adapter_path: str | Path | None = None
) -> Path:
    """Write ``model`` as a model folder at ``path`` that ``AutoModelForCausalLM`` and
    ``AutoTokenizer`` load (the tokenizer files copied from ``tokenizer_dir``): merged into the
    base weights when it has LoRA adapters, whose peft folder then goes to ``adapter_path``
    (loadable with ``PeftModel.from_pretrained``). Each folder is written beside its place and
    renamed into it."""
    path = Path(path)
    tok_files = [
        f
        for f in Path(tokenizer_dir).iterdir()
        if f.is_file()
        and (
            "token" in f.name
            or f.name.endswith((".model", ".jinja"))
            or f.name in ("vocab.json", "merges.txt")
        )
    ]

    def copy_tokenizer(dst: Path) -> None:
        for f in tok_files:
            shutil.copy2(f, dst / f.name)

    if is_lora(model):
        if adapter_path is not None:
            _write_folder(Path(adapter_path), lambda tmp: (model.save_pretrained(tmp), copy_tokenizer(tmp)))
        merged = copy.deepcopy(model).merge_and_unload()
        _write_folder(path, lambda tmp: (merged.save_pretrained(tmp), copy_tokenizer(tmp)))
    else:
        _write_folder(path, lambda tmp: (model.save_pretrained(tmp), copy_tokenizer(tmp)))
    return path
