"""Supervised fine-tuning of a causal language model on prompt-response pairs (``rlinf sft``).

The run YAML has four sections (five with ``tools``): ``model`` (:class:`~rlinf_algos.lm.config.LMModelConfig`: a
model folder, or ``init`` to build one), ``data`` (:class:`SFTDataConfig`: the ``data`` section
of a GRPO run plus ``response_key``), ``train`` (:class:`SFTTrainConfig`) and ``runner``
(:class:`SFTRunnerConfig`). :func:`train_sft` trains and writes ``RUN_DIR``:

- ``config.yaml``: the validated sections, defaults filled in (written before training);
- ``base_model/``: the model ``model.init`` built (its bpe tokenizer trained on the data's
  prompts and responses), when it is used;
- ``metrics.csv``: one row per ``runner.log_interval`` steps (:data:`METRIC_COLUMNS`);
- ``summary.json``: ``val_loss_before``/``_after`` (mean token NLL of the validation responses),
  ``val_exact_match_before``/``_after`` (with ``train.eval_generate``), steps, seconds,
  trainable and total parameters, the seeds, what was filtered;
- ``val_generations.json``: the greedy outputs behind the exact match (with ``train.eval_generate``);
- ``policy/``: a model folder ``AutoModelForCausalLM.from_pretrained`` and
  ``AutoTokenizer.from_pretrained`` load (merged when LoRA); ``adapter/``: the peft adapter
  (``PeftModel.from_pretrained``), when ``model.lora`` is set.

What one example is (:func:`encode_example`): the prompt's tokens, then the response's, then the
tokenizer's eos token; the loss is the next-token NLL of the response tokens and the eos alone
(the prompt is masked). The prompt is the text a GRPO rollout gives the policy: the chat
template's output with its generation prompt when a template applies (``data.apply_chat_template``,
or a prompt of chat messages), so the response completes the assistant turn the way the
template writes it (``<|im_start|>assistant\\n`` + response + ``<|im_end|>`` for ChatML); the
prompt text as is otherwise (the response is appended without a separator). Prompt and response
are encoded separately, exactly as a rollout encodes the prompt and then generates. An example
longer than ``train.max_length`` tokens is left out and counted, never cut.

With ``data.messages_key`` a row is a whole conversation in TRL's format (assistant
``tool_calls``, ``tool`` results; the ``tools`` section's schemas rendered by the template):
:func:`conversation_example` lays it out as a played tool-calling episode is laid out, every
assistant turn trained (through its end-of-turn token), everything else context.

Reproducible from ``runner.seed`` (the model ``init``, LoRA's initial weights, dropout) and
``data.seed`` (the order of the examples: a fresh permutation every epoch, drawn from both seeds).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlinf_algos.lm.config import require_wandb
from rlinf_algos.lm.data import DataConfig, Sample, load_dataset, lookup
from rlinf_algos.lm.sft_config import (
    SFTDataConfig,
    SFTRunConfig,
    SFTRunnerConfig,
    SFTTrainConfig,
    load_sft_config,
)
from rlinf_core.errors import ConfigError

__all__ = [
    "METRIC_COLUMNS",
    "Example",
    "ExampleSet",
    "SFTDataConfig",
    "SFTResult",
    "SFTRunConfig",
    "SFTRunnerConfig",
    "SFTTrainConfig",
    "conversation_example",
    "encode_example",
    "load_examples",
    "load_sft_config",
    "lr_at",
    "token_nll",
    "tool_schemas",
    "train_sft",
]

METRIC_COLUMNS = ("step", "loss", "lr", "tokens", "grad_norm", "wall_s", "val_loss", "val_exact_match")
"""``metrics.csv``: ``loss`` is the mean response-token NLL since the previous row, ``tokens``
the response tokens trained on so far, ``val_loss`` is set on the rows of
``train.eval_interval`` (empty otherwise), ``val_exact_match`` on those rows when
``train.stop_at_exact_match`` is set."""


# -- examples ------------------------------------------------------------------------------------


@dataclass
class Example:
    """One training sequence: ``ids`` (prompt, response, eos) and ``mask`` (1 on the response and
    eos tokens, the ones the loss covers)."""

    ids: list[int]
    mask: list[int]
    source: str
    response: str
    prompt_len: int
    turns: list[tuple[int, int]] = field(default_factory=list)
    """A conversation's assistant turns as ``(start, end)`` spans of ``ids`` (empty for a
    prompt-response row): what the exact match checks turn by turn."""


@dataclass
class ExampleSet:
    """The encoded examples of one split and what was left out (by reason, with ``file:N``)."""

    examples: list[Example]
    split: str
    rows: int = 0
    filtered: int = 0
    filter_reasons: dict[str, int] = field(default_factory=dict)
    filtered_sources: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.examples)


def encode_example(
    prompt_text: str, response: str, tok: Any, bos: bool = False, eos: bool = True
) -> tuple[list[int], list[int]]:
    """``(ids, mask)`` of one example: ``tok.encode(prompt_text)`` (with the bos token first when
    ``bos``), then ``tok.encode(response)`` and, when ``eos``, ``tok.eos_id`` (not added twice
    when the response already ends with it). ``mask`` is 1 on the response and eos tokens;
    position 0 is always 0 (nothing predicts the first token)."""
    ids, mask, _ = _encode(prompt_text, response, tok, bos, eos)
    return ids, mask


def _encode(
    prompt_text: str, response: str, tok: Any, bos: bool, eos: bool = True
) -> tuple[list[int], list[int], int]:
    p = tok.encode(prompt_text)
    if bos and tok.bos_id is not None and (not p or p[0] != tok.bos_id):
        p.insert(0, tok.bos_id)
    r = tok.encode(response)
    if eos and (not r or r[-1] != tok.eos_id):
        r.append(tok.eos_id)
    mask = [0] * len(p) + [1] * len(r)
    mask[0] = 0
    return p + r, mask, len(p)


def wants_bos(tok: Any) -> bool:
    """Whether the tokenizer's post-processor adds a bos token to text (Llama-style), as a GRPO
    rollout's prompt encoding does then."""
    backend = tok.backend
    if tok.bos_id is None:
        return False
    if hasattr(backend, "encode_batch"):
        return bool(backend.encode("", add_special_tokens=True).ids)
    return bool(backend.build_inputs_with_special_tokens([]))


def _response_of(cfg: SFTDataConfig, s: Sample) -> str:
    if cfg.response_key is None:
        return s.answer
    value = lookup(s.columns, cfg.response_key, _MISSING)
    if value is _MISSING:
        have = ", ".join([cfg.prompt_key, *s.columns]) or "no columns"
        raise ConfigError(
            f"{s.source}: no {cfg.response_key!r} in this row (it has {have}); set data.response_key to "
            "the (dotted) column holding the target response, or null to train on the answer "
            "(data.answer_key)",
            "data.response_key",
        )
    if value is None:
        raise ConfigError(f"{s.source}: the response {cfg.response_key!r} is null", "data.response_key")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(
            f"{s.source}: the response {cfg.response_key!r} must be text, got {type(value).__name__}",
            "data.response_key",
        )
    return str(value)


_MISSING = object()


def _reading_config(cfg: SFTDataConfig, *, plain: bool) -> DataConfig:
    """The :class:`DataConfig` that :func:`load_dataset` reads with. With a ``response_key`` the
    answer is not needed: ``answer_key`` then points at the prompt column, which every row that
    passes the prompt check has (``Sample.answer`` is unused), so a data set without answers loads."""
    update: dict[str, Any] = {}
    if cfg.response_key is not None:
        update["answer_key"] = cfg.prompt_key
    if plain:
        update.update(apply_chat_template=False, max_prompt_length=None)
    fields = {k: v for k, v in cfg.model_dump().items() if k in DataConfig.model_fields}
    return DataConfig.model_validate({**fields, **update})


def tool_schemas(run: SFTRunConfig) -> list[dict[str, Any]] | None:
    """The JSON schemas of the ``tools`` section (``None`` without one); a tool file or name
    that does not load is a :class:`ConfigError` at ``tools[i]``."""
    if run.tools is None:
        return None
    from rlinf_algos.tools import load_run_tools

    return load_run_tools(run.tools.entries).schemas


def read_texts(
    cfg: SFTDataConfig, split: Literal["train", "val"], schemas: Sequence[dict[str, Any]] | None = None
) -> list[tuple[str, str]]:
    """``(prompt text, response)`` of every row of a split, without a tokenizer (no chat template,
    no length filter): checks the files and keys, and is the corpus of a ``model.init`` bpe
    tokenizer. A conversation (``data.messages_key``) gives ``(its rendering, "")``: the text
    a :func:`~rlinf_algos.lm.tokens.bpe_tokenizer`'s template writes for it with ``schemas``."""
    if cfg.messages_key:
        from rlinf_algos.lm.data import load_conversations, row_tool_schemas
        from rlinf_algos.lm.tokens import chatml_text

        convs, _ = load_conversations(cfg, split, cfg.messages_key)
        groups: dict[str, tuple[Any, list[int]]] = {}  # rendered per set of tool schemas, in row order
        for i, c in enumerate(convs):
            own = row_tool_schemas(c, cfg.tools_key, schemas)
            groups.setdefault(json.dumps(own, sort_keys=True), (own, []))[1].append(i)
        texts = [""] * len(convs)
        for own, idx in groups.values():
            for i, text in zip(idx, chatml_text([convs[i].messages for i in idx], own), strict=True):
                texts[i] = text
        return [(t, "") for t in texts]
    ds = load_dataset(_reading_config(cfg, plain=True), split)
    return [(s.prompt_text, _response_of(cfg, s)) for s in ds]


def load_examples(
    cfg: SFTDataConfig,
    split: Literal["train", "val"],
    tok: Any,
    hf_tokenizer: Any,
    max_length: int,
    schemas: Sequence[dict[str, Any]] | None = None,
) -> ExampleSet:
    """The encoded examples of a split (:func:`encode_example`; a conversation as
    :func:`conversation_example` lays it out); prompts longer than ``data.max_prompt_length``
    and examples longer than ``max_length`` are left out and counted.

    Raises:
        ConfigError: a file, row, prompt or response problem (path = the YAML key, message = the
            file and row), or no training example left (path ``train.max_length``).
    """
    too_long = f"longer than train.max_length={max_length} tokens"
    if cfg.messages_key:
        from rlinf_algos.lm.data import load_conversations, row_tool_schemas

        chats: dict[str, Any] = {}  # one chat format per set of tool schemas

        def chat_of(c: Any) -> Any:
            own = row_tool_schemas(c, cfg.tools_key, schemas)
            key = json.dumps(own, sort_keys=True)
            if key not in chats:
                chats[key] = _chat_format(hf_tokenizer, own)
            return chats[key]

        convs, rows = load_conversations(cfg, split, cfg.messages_key)
        out = ExampleSet([], split, rows=rows)
        encoded = [
            (conversation_example(chat_of(c), c.messages, c.source, cfg.assistant_only_loss), c.source)
            for c in convs
        ]
    else:
        ds = load_dataset(_reading_config(cfg, plain=False), split, hf_tokenizer)
        out = ExampleSet([], split, rows=ds.rows, filtered=ds.filtered)
        out.filter_reasons.update(ds.filter_reasons)
        out.filtered_sources.extend(ds.filtered_sources)
        bos = wants_bos(tok)
        too_long += " (prompt + response + eos)"
        encoded = []
        for s in ds:
            response = _response_of(cfg, s)
            ids, mask, plen = _encode(s.prompt_text, response, tok, bos, cfg.append_eos)
            encoded.append((Example(ids, mask, s.source, response, plen), s.source))
    shortest = None
    for ex, source in encoded:
        if len(ex.ids) > max_length:
            out.filtered += 1
            out.filter_reasons[too_long] = out.filter_reasons.get(too_long, 0) + 1
            out.filtered_sources.append(source)
            shortest = len(ex.ids) if shortest is None else min(shortest, len(ex.ids))
            continue
        out.examples.append(ex)
    if not out.examples and encoded:
        raise ConfigError(
            f"every one of the {len(encoded)} {split} examples is {too_long} (the shortest has {shortest}); "
            "raise train.max_length (within the model's context) or shorten the data",
            "train.max_length",
        )
    return out


def _chat_format(hf_tokenizer: Any, schemas: Sequence[dict[str, Any]] | None) -> Any:
    from rlinf_algos.lm.agentic import ChatFormat
    from rlinf_core.errors import RlinfError

    try:
        return ChatFormat(hf_tokenizer, schemas)
    except RlinfError as err:
        raise ConfigError(
            f"conversations need the model's chat template: {err}", "data.messages_key"
        ) from None


def conversation_example(
    chat: Any, messages: Sequence[Mapping[str, Any]], source: str, assistant_only: bool = True
) -> Example:
    """One conversation as a training example, token for token the layout of a played episode
    (:meth:`~rlinf_algos.lm.agentic.ChatFormat.encode_conversation`): the prompt, then each
    assistant turn (trained: mask 1, through its end-of-turn token) and what the template inserts
    between turns (tool results, turn markers: mask 0; 1 like every token after the first when
    not ``assistant_only``)."""
    from rlinf_core.errors import RlinfError

    try:
        ep = chat.encode_conversation(messages, where=source)
    except RlinfError as err:
        raise ConfigError(str(err), "data.messages_key") from None
    plen = len(ep.prompt_ids)
    turns = [(plen + s, plen + e) for kind, s, e in ep.segments if kind == "sampled"]
    texts = [chat.decode(ep.sequence[s:e]) for s, e in turns]
    mask = [0] * plen + ep.loss_mask if assistant_only else [0] + [1] * (len(ep.sequence) - 1)
    return Example(ep.sequence, mask, source, "\n".join(texts), plen, turns)


# -- maths ---------------------------------------------------------------------------------------


def lr_at(step: int, total: int, cfg: SFTTrainConfig) -> float:
    """The learning rate of step ``step`` (from 0) of ``total``: linear warm-up over
    ``warmup_steps`` to ``lr``, then a cosine decay to ``lr * min_lr_ratio`` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, total - 1 - cfg.warmup_steps)
    frac = min(max(frac, 0.0), 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac)))


def _pack(examples: Sequence[Example], pad_id: int, device: Any) -> tuple[Any, Any]:
    import torch

    t = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), t), pad_id, dtype=torch.long)
    mask = torch.zeros(len(examples), t)
    for i, e in enumerate(examples):
        ids[i, : len(e.ids)] = torch.as_tensor(e.ids, dtype=torch.long)
        mask[i, : len(e.mask)] = torch.as_tensor(e.mask, dtype=torch.float32)
    return ids.to(device), mask.to(device)


def token_nll(
    model: Any, examples: Sequence[Example], pad_id: int, batch_size: int = 32
) -> tuple[float, int]:
    """``(mean NLL per response token, response tokens)`` of ``model`` on ``examples`` (no
    gradients; examples batched by length to pad little). ``(nan, 0)`` when there are none."""
    import torch

    from rlinf_algos.lm.hf import sequence_log_probs

    if not examples:
        return float("nan"), 0
    device = next(model.parameters()).device
    order = sorted(examples, key=lambda e: len(e.ids))
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for i in range(0, len(order), batch_size):
                ids, mask = _pack(order[i : i + batch_size], pad_id, device)
                lp = sequence_log_probs(model, ids)
                total += float(-(lp * mask).sum())
                count += int(mask.sum())
    finally:
        model.train(was_training)
    return total / max(count, 1), count


def _exact_match(
    model: Any, tok: Any, examples: Sequence[Example], max_new_tokens: int, batch_size: int
) -> tuple[float, list[str]]:
    """Greedy outputs of ``model`` on the prompts of ``examples`` and the fraction that match:
    whose tokens begin with the example's response tokens (which end with eos, so the output
    stopped there too; or, with ``data.append_eos: false``, with the response's own end marker,
    so the turn is right whatever follows it). A conversation matches when every assistant turn
    does, each generated from the conversation up to it (teacher-forced context)."""
    from rlinf_algos.lm.hf import generate

    jobs: list[tuple[int, list[int], list[int]]] = []  # (example, context, target)
    for k, e in enumerate(examples):
        spans = e.turns or [(e.prompt_len, len(e.ids))]
        jobs += [(k, e.ids[:s], e.ids[s:t]) for s, t in spans]
    stops = sorted({tok.eos_id, *(e.ids[t - 1] for e in examples for _, t in e.turns)})
    hit = [True] * len(examples)
    texts: list[list[str]] = [[] for _ in examples]
    # similar lengths pad little; a conversation's turns keep their order (their contexts grow)
    order = sorted(range(len(jobs)), key=lambda j: len(jobs[j][1]))
    for i in range(0, len(order), batch_size):
        chunk = [jobs[j] for j in order[i : i + batch_size]]
        res = generate(
            model, [c for _, c, _ in chunk], max_new_tokens, stops, pad_id=tok.pad_id, temperature=0.0
        )
        for (k, _, target), ids in zip(chunk, res.tokens, strict=True):
            ids = [int(t) for t in ids]
            hit[k] &= ids[: len(target)] == target
            texts[k].append(tok.decode([t for t in ids if t not in stops]))
    outputs = ["\n".join(t) for t in texts]
    return sum(hit) / max(len(examples), 1), outputs


# -- the run -------------------------------------------------------------------------------------


@dataclass
class SFTResult:
    """What :func:`train_sft` returns: the summary (as written to ``summary.json``) and the
    trained model (a ``PeftModel`` when LoRA is on) with its tokenizer
    (:class:`~rlinf_algos.lm.tokens.LMTokenizer`). ``summary["summary_text"]`` is the one-line
    result."""

    summary: dict[str, Any]
    model: Any
    tokenizer: Any


def check_sft_sources(run: SFTRunConfig) -> list[tuple[str, str]]:
    """What ``rlinf sft`` (and its ``--dry-run``) checks before it touches the run directory: the
    data files and keys of both splits (read through), the model folder's weights and tokenizer,
    the device and the loggers. Returns the training split's ``(prompt, response)`` texts."""
    from rlinf_algos.lm.folder import check_model_files, check_model_folder

    schemas = tool_schemas(run)
    texts = read_texts(run.data, "train", schemas)
    if run.data.val_files:
        read_texts(run.data, "val", schemas)
    if run.data.messages_key and run.model.init is not None and run.model.init.tokenizer != "bpe":
        raise ConfigError(
            "conversations are rendered by a chat template, which the arith tokenizer has none of: "
            "use model.init.tokenizer: bpe (ChatML with tool calls) or a model folder (model.path)",
            "model.init.tokenizer",
        )
    if run.model.path is not None:
        check_model_folder(run.model.path, "model.path")
        check_model_files(run.model.path, "model.path", run.model.trust_remote_code)
    _device(run.runner.device)
    require_wandb(run.runner.loggers)
    return texts


def _device(name: str) -> Any:
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("no CUDA device is available; use runner.device=cpu or auto", "runner.device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _write_json(path: Path, data: Any) -> None:
    from rlinf_core.io import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def train_sft(
    run: SFTRunConfig,
    run_dir: str | Path,
    log: Callable[[str], None] | None = print,
    *,
    overwrite: bool = False,
    command: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> SFTResult:
    """Fine-tune ``run.model`` on ``run.data`` and write ``run_dir`` (see the module docstring).

    The data files, keys and the model folder are checked before the run directory is touched,
    and ``config.yaml`` (what makes it a run's) is written once the tokenized examples are
    ready, so a configuration mistake never leaves a run behind that ``--overwrite`` would have
    to move. ``command`` (the command line) is recorded in ``summary.json``; ``progress`` is
    called with every metrics row (and its ``total_steps``). Returns the summary and the trained
    model.

    Raises:
        ConfigError: a problem with the configuration, a model folder, a data file or row (each
            with its YAML path).
        RlinfError: ``run_dir`` holds a run and ``overwrite`` is false.
    """
    import torch
    import yaml

    from rlinf_algos.lm import hf
    from rlinf_algos.lm.folder import folder_context_length
    from rlinf_algos.lm.tokens import LMTokenizer
    from rlinf_algos.rundir import MetricsLog, make_sinks, prepare_run_dir
    from rlinf_core.io import atomic_write_text

    say = log or (lambda _msg: None)
    t_start = time.perf_counter()
    tcfg, rcfg, dcfg = run.train, run.runner, run.data
    texts = check_sft_sources(run)  # everything that can be checked without the run directory
    device = _device(rcfg.device)
    torch.set_num_threads(rcfg.torch_threads)

    run_dir = prepare_run_dir(run_dir, overwrite, say)
    folder = Path(run.model.path) if run.model.path is not None else run_dir / "base_model"
    if run.model.init is not None:
        corpus = [t for pair in texts for t in pair]
        hf.new_model_folder(folder, run.model.init, seed=rcfg.seed, corpus=corpus)
        say(
            f"built a {run.model.init.architecture} model and its {run.model.init.tokenizer} tokenizer in {folder}"
        )

    from transformers import AutoTokenizer

    tok = LMTokenizer.from_folder(folder, run.model.trust_remote_code)
    hf_tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=run.model.trust_remote_code)
    context = folder_context_length(folder)
    max_length = tcfg.max_length or run.model.max_seq_len or context
    if max_length > context:
        key = "train.max_length" if tcfg.max_length else "model.max_seq_len"
        raise ConfigError(f"{max_length} exceeds the model's context of {context} tokens ({folder})", key)
    schemas = tool_schemas(run)
    train_set = load_examples(dcfg, "train", tok, hf_tok, max_length, schemas)
    val_set = (
        load_examples(dcfg, "val", tok, hf_tok, max_length, schemas)
        if dcfg.val_files
        else ExampleSet([], "val")
    )
    # config.yaml marks the directory as a run's: written once nothing but training can fail
    from rlinf_core.compose import mask_secrets  # no ${oc.env:...} value in the run directory

    saved = mask_secrets(run.model_dump(mode="json"))
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(saved, sort_keys=False))
    for ds in (train_set, val_set):
        if ds.filtered:
            say(f"{ds.split}: left out {ds.filtered} of {ds.rows} rows ({'; '.join(ds.filter_reasons)})")

    torch.manual_seed(rcfg.seed)
    random.seed(rcfg.seed)
    model = hf.load_causal_lm(run.model, folder).to(device)
    trainable, total_params = hf.parameter_counts(model)
    n = len(train_set)
    steps = tcfg.steps or math.ceil((tcfg.epochs or 1) * n / tcfg.batch_size)
    budget = None if tcfg.steps else (tcfg.epochs or 1) * n
    say(
        f"sft: {n} training examples, {len(val_set)} validation; {steps} steps of {tcfg.batch_size}; "
        f"{trainable:,} trainable of {total_params:,} parameters{' (LoRA)' if hf.is_lora(model) else ''}"
    )

    val = val_set.examples
    gen_set = [e for e in val if e.prompt_len > 0][: tcfg.eval_generate]
    longest = max((t - s for e in gen_set for s, t in (e.turns or [(e.prompt_len, len(e.ids))])), default=0)
    max_new = tcfg.max_new_tokens or longest + 8
    t_eval = time.perf_counter()
    val_before, val_tokens = token_nll(model, val, tok.pad_id, tcfg.eval_batch_size)
    em_before, out_before = (
        _exact_match(model, tok, gen_set, max_new, tcfg.eval_batch_size) if gen_set else (None, [])
    )
    eval_s = time.perf_counter() - t_eval
    if val:
        say(
            f"validation before: loss {val_before:.4f} on {val_tokens} response tokens"
            + (f", exact match {em_before:.3f} on {len(gen_set)}" if em_before is not None else "")
        )

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    params = decay + no_decay
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": tcfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=tcfg.lr,
        betas=tcfg.adam_betas,
    )
    loggers = rcfg.loggers
    metrics = MetricsLog(run_dir / "metrics.csv", METRIC_COLUMNS, append=False) if "csv" in loggers else None
    sinks = make_sinks([n for n in loggers if n != "csv"], run_dir, run.model_dump(mode="json"))
    micro = tcfg.micro_batch_size or tcfg.batch_size
    t_train = time.perf_counter()
    tokens_seen = 0
    window_loss, window_tokens = 0.0, 0
    last_loss = float("nan")
    pos = 0
    order: list[int] = []
    order_epoch = -1
    done = 0
    stopped_at: float | None = None  # the exact match that stopped the run early
    model.train()
    try:
        from rlinf_algos.lm.hf import sequence_log_probs

        for step in range(steps):
            lr = lr_at(step, steps, tcfg)
            for g in opt.param_groups:
                g["lr"] = lr
            end = pos + tcfg.batch_size if budget is None else min(pos + tcfg.batch_size, budget)
            batch = []
            for p in range(pos, end):
                epoch, offset = divmod(p, n)
                if epoch != order_epoch:
                    order = list(range(n))
                    if dcfg.shuffle:
                        random.Random(f"rlinf-sft:{dcfg.seed}:{rcfg.seed}:{epoch}").shuffle(order)
                    order_epoch = epoch
                batch.append(train_set.examples[order[offset]])
            pos = end
            if micro < len(batch):
                batch.sort(key=lambda e: len(e.ids))
            count = sum(sum(e.mask) for e in batch)
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for i in range(0, len(batch), micro):
                ids, mask = _pack(batch[i : i + micro], tok.pad_id, device)
                nll = -(sequence_log_probs(model, ids) * mask).sum()
                (nll / max(count, 1)).backward()
                step_loss += float(nll.detach())
            norm = torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip or float("inf"))
            opt.step()
            tokens_seen += count
            window_loss += step_loss
            window_tokens += count
            done = step + 1
            val_now = em_now = None
            if tcfg.eval_interval and done % tcfg.eval_interval == 0 and done < steps and val:
                te = time.perf_counter()
                val_now, _ = token_nll(model, val, tok.pad_id, tcfg.eval_batch_size)
                if tcfg.stop_at_exact_match is not None and gen_set:
                    em_now, _ = _exact_match(model, tok, gen_set, max_new, tcfg.eval_batch_size)
                    model.train()
                    if em_now >= tcfg.stop_at_exact_match:
                        stopped_at = em_now
                eval_s += time.perf_counter() - te
            if done % rcfg.log_interval == 0 or done == steps or val_now is not None:
                last_loss = window_loss / max(window_tokens, 1)
                wall = time.perf_counter() - t_start
                row = {
                    "step": done,
                    "loss": last_loss,
                    "lr": lr,
                    "tokens": tokens_seen,
                    "grad_norm": float(norm),
                    "wall_s": wall,
                    "val_loss": "" if val_now is None else val_now,
                    "val_exact_match": "" if em_now is None else em_now,
                }
                if metrics is not None:
                    metrics.write(row)
                sinks.add(row)
                if progress is not None:
                    progress({**row, "total_steps": steps})
                say(
                    f"sft step {done}/{steps}  loss {last_loss:.4f}  lr {lr:.2e}  "
                    + (f"val {val_now:.4f}  " if val_now is not None else "")
                    + (f"exact match {em_now:.3f}  " if em_now is not None else "")
                    + f"({wall:.0f}s)"
                )
                window_loss, window_tokens = 0.0, 0
            if stopped_at is not None:
                say(
                    f"sft: validation exact match {stopped_at:.3f} reached train.stop_at_exact_match="
                    f"{tcfg.stop_at_exact_match} at step {done} of {steps}; stopping"
                )
                break
    finally:
        if metrics is not None:
            metrics.close()
        sinks.close()
    train_s = time.perf_counter() - t_train
    model.eval()

    t_eval = time.perf_counter()
    val_after, _ = token_nll(model, val, tok.pad_id, tcfg.eval_batch_size)
    em_after, out_after = (
        _exact_match(model, tok, gen_set, max_new, tcfg.eval_batch_size) if gen_set else (None, [])
    )
    eval_s += time.perf_counter() - t_eval
    lora = hf.is_lora(model)
    hf.save_model_folder(model, folder, run_dir / "policy", run_dir / "adapter" if lora else None)
    if gen_set:
        _write_json(
            run_dir / "val_generations.json",
            [
                {"source": e.source, "target": e.response, "before": b, "after": a}
                for e, b, a in zip(gen_set, out_before, out_after, strict=True)
            ],
        )

    def num(x: float | None) -> float | None:
        return None if x is None or math.isnan(x) else round(x, 6)

    seconds = time.perf_counter() - t_start
    if val:
        text = f"sft: val loss {val_before:.4f} -> {val_after:.4f}"
        if em_before is not None:
            text += f", exact match {em_before:.3f} -> {em_after:.3f}"
    else:
        text = f"sft: train loss {last_loss:.4f} (no data.val_files)"
    text += f" in {done} steps, {seconds:.0f}s; policy: {run_dir / 'policy'}"
    summary: dict[str, Any] = {
        "command": command,
        "model": str(folder),
        "lora": lora,
        "val_loss_before": num(val_before),
        "val_loss_after": num(val_after),
        "val_tokens": val_tokens,
        "val_exact_match_before": em_before,
        "val_exact_match_after": em_after,
        "val_generate": len(gen_set),
        "train_loss_last": num(last_loss),
        "steps": done,
        "steps_planned": steps,
        "stopped_at_exact_match": stopped_at,
        "epochs": round(min(pos, budget or pos) / max(n, 1), 4),
        "batch_size": tcfg.batch_size,
        "tokens": tokens_seen,
        "train_examples": n,
        "val_examples": len(val),
        "rows": {"train": train_set.rows, "val": val_set.rows},
        "filtered": {"train": train_set.filtered, "val": val_set.filtered},
        "filter_reasons": {"train": train_set.filter_reasons, "val": val_set.filter_reasons},
        "max_length": max_length,
        "seconds": round(seconds, 3),
        "train_seconds": round(train_s, 3),
        "eval_seconds": round(eval_s, 3),
        "tokens_per_s": round(tokens_seen / max(train_s, 1e-9), 1),
        "trainable_params": trainable,
        "total_params": total_params,
        "seeds": {"runner.seed": rcfg.seed, "data.seed": dcfg.seed},
        "device": str(device),
        "torch_threads": rcfg.torch_threads,
        "policy": "policy",
        "adapter": "adapter" if lora else None,
        "summary_text": text,
    }
    from rlinf_algos.rundir import write_summary

    write_summary(run_dir, summary)
    return SFTResult(summary, model, tok)
