"""Supervised fine-tuning of a causal language model on prompt-response pairs (``rlinf sft``).

The run YAML has four sections: ``model`` (:class:`~rlinf_algos.lm.config.LMModelConfig`: a
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

from pydantic import BaseModel, Field, SerializeAsAny, model_validator

from rlinf_algos.lm.config import LMModelConfig, Loggers, require_wandb
from rlinf_algos.lm.data import DataConfig, Sample, load_dataset, lookup
from rlinf_algos.models import validate_model_section
from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = [
    "METRIC_COLUMNS",
    "Example",
    "ExampleSet",
    "SFTDataConfig",
    "SFTResult",
    "SFTRunConfig",
    "SFTRunnerConfig",
    "SFTTrainConfig",
    "encode_example",
    "load_examples",
    "load_sft_config",
    "lr_at",
    "token_nll",
    "train_sft",
]

METRIC_COLUMNS = ("step", "loss", "lr", "tokens", "grad_norm", "wall_s", "val_loss", "val_exact_match")
"""``metrics.csv``: ``loss`` is the mean response-token NLL since the previous row, ``tokens``
the response tokens trained on so far, ``val_loss`` is set on the rows of
``train.eval_interval`` (empty otherwise), ``val_exact_match`` on those rows when
``train.stop_at_exact_match`` is set."""


# -- configuration -------------------------------------------------------------------------------


class SFTDataConfig(DataConfig):
    """``data`` section of ``rlinf sft``: the files and keys of a GRPO run's ``data`` section
    (verl's parquet and RLinf's JSON lines load unchanged) and where each row's target response is.

    ``data.answer_key`` is read only when ``response_key`` is null; ``shuffle`` and ``seed`` give
    the order of the examples, ``max_prompt_length`` filters on the prompt alone (see also
    ``train.max_length``)."""

    response_key: str | None = Field(
        "response",
        min_length=1,
        description="dotted path to the target response (a string) of each row; null: train on "
        "the reference answer (data.answer_key), for data sets whose answers are the whole response",
    )
    append_eos: bool = Field(
        True,
        description="end every response with the tokenizer's eos token (not twice when it already ends "
        "with it); false: train on each response exactly as written, for responses that end their turn "
        "with a marker of their own (a tool call, a hand-over) rather than eos",
    )


class SFTTrainConfig(ConfigSection):
    """``train`` section of ``rlinf sft``: AdamW, linear warm-up then cosine decay, loss on the
    response tokens only."""

    epochs: int | None = Field(
        None, ge=1, description="passes over the training examples; null: 1 unless steps is set"
    )
    steps: int | None = Field(None, ge=1, description="gradient steps (instead of epochs)")
    batch_size: int = Field(32, ge=1, description="examples per gradient step")
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="examples per forward/backward pass (gradients are accumulated over the batch; "
        "the loss is the same); null: the whole batch at once",
    )
    lr: float = Field(1e-4, gt=0.0, description="peak AdamW learning rate")
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW's (beta1, beta2), each in [0, 1)"
    )
    warmup_steps: int = Field(10, ge=0, description="steps of linear warm-up from 0 to lr")
    min_lr_ratio: float = Field(
        0.1, ge=0.0, le=1.0, description="the cosine decay ends at lr * min_lr_ratio on the last step"
    )
    weight_decay: float = Field(
        0.0, ge=0.0, description="AdamW decoupled weight decay (matrices only; not biases or norms)"
    )
    max_length: int | None = Field(
        None,
        ge=2,
        description="leave out (and count) examples longer than this many tokens (prompt + response "
        "+ eos), never cut; null: model.max_seq_len, else the model's context",
    )
    grad_clip: float | None = Field(1.0, gt=0.0, description="clip the gradient norm; null: no clipping")
    eval_batch_size: int = Field(32, ge=1, description="examples per forward pass of the validation loss")
    eval_interval: int = Field(
        0, ge=0, description="steps between validation losses in metrics.csv; 0: before and after only"
    )
    eval_generate: int = Field(
        0,
        ge=0,
        description="greedy-decode the first N validation prompts before and after training and report "
        "the fraction whose output equals the response (whitespace stripped); 0 turns it off",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="tokens eval_generate may generate; null: the longest response + 8"
    )
    stop_at_exact_match: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="stop early once the greedy exact match on the eval_generate validation prompts "
        "reaches this fraction, checked every eval_interval steps (needs both); null: train every step",
    )

    @model_validator(mode="after")
    def _one_budget(self) -> SFTTrainConfig:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("set train.epochs or train.steps, not both")
        if any(not 0.0 <= b < 1.0 for b in self.adam_betas):
            raise ValueError(f"train.adam_betas must each be in [0, 1), got {list(self.adam_betas)}")
        if self.stop_at_exact_match is not None and not (self.eval_generate and self.eval_interval):
            raise ValueError(
                "train.stop_at_exact_match needs train.eval_generate (validation prompts to decode) and "
                "train.eval_interval (steps between checks) above 0"
            )
        return self


class SFTRunnerConfig(ConfigSection):
    """``runner`` section of ``rlinf sft``."""

    seed: int = Field(
        0, ge=0, description="seeds the model init, LoRA's initial weights, dropout and the order"
    )
    torch_threads: int = Field(2, ge=1, description="torch CPU threads")
    log_interval: int = Field(10, ge=1, description="steps between metrics rows and log lines")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the model trains; auto: cuda when available, else cpu"
    )
    loggers: Loggers = Field(
        default_factory=lambda: ["csv", "tensorboard"],
        description="metrics backends: csv (metrics.csv), tensorboard (RUN_DIR/tensorboard), wandb "
        "(needs the wandb package; WANDB_MODE=offline works without a network); the same scalars go to each",
    )


class SFTRunConfig(BaseModel):
    """The validated sections of an ``rlinf sft`` YAML."""

    model: SerializeAsAny[LMModelConfig]
    data: SFTDataConfig
    train: SFTTrainConfig
    runner: SFTRunnerConfig


_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("model", LMModelConfig),
    ("data", SFTDataConfig),
    ("train", SFTTrainConfig),
    ("runner", SFTRunnerConfig),
)


def load_sft_config(data: Mapping[str, Any]) -> SFTRunConfig:
    """Validate an ``rlinf sft`` YAML (a mapping of sections; ``model`` by the model of its
    ``model.type``, :func:`~rlinf_algos.models.validate_model_section`). ``model`` and ``data`` are
    required; ``train`` and ``runner`` take their defaults when absent. Every problem of every
    section is reported in one :class:`ConfigError`, each with its YAML path."""
    problems: list[ConfigProblem] = []
    out: dict[str, BaseModel] = {}
    known = {name for name, _ in _SECTIONS}
    for key in data:
        if key not in known:
            problems.append(
                ConfigProblem(str(key), f"unknown section; rlinf sft reads {', '.join(sorted(known))}")
            )
    for name, model in _SECTIONS:
        section = data.get(name)
        if section is None:
            if name in ("model", "data"):
                what = "model.path (a model folder) or model.init" if name == "model" else "data.train_files"
                problems.append(ConfigProblem(name, f"missing section (needs at least {what})"))
                continue
            section = {}
        try:
            if name == "model":
                out[name] = validate_model_section(section, LMModelConfig, prefix=name)
            else:
                out[name] = validate_model(model, section, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return SFTRunConfig(**out)  # type: ignore[arg-type]


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


def read_texts(cfg: SFTDataConfig, split: Literal["train", "val"]) -> list[tuple[str, str]]:
    """``(prompt text, response)`` of every row of a split, without a tokenizer (no chat template,
    no length filter): checks the files and keys, and is the corpus of a ``model.init`` bpe
    tokenizer."""
    ds = load_dataset(_reading_config(cfg, plain=True), split)
    return [(s.prompt_text, _response_of(cfg, s)) for s in ds]


def load_examples(
    cfg: SFTDataConfig,
    split: Literal["train", "val"],
    tok: Any,
    hf_tokenizer: Any,
    max_length: int,
) -> ExampleSet:
    """The encoded examples of a split (:func:`encode_example`); prompts longer than
    ``data.max_prompt_length`` and examples longer than ``max_length`` are left out and counted.

    Raises:
        ConfigError: a file, row, prompt or response problem (path = the YAML key, message = the
            file and row), or no training example left (path ``train.max_length``).
    """
    ds = load_dataset(_reading_config(cfg, plain=False), split, hf_tokenizer)
    out = ExampleSet([], split, rows=ds.rows, filtered=ds.filtered)
    out.filter_reasons.update(ds.filter_reasons)
    out.filtered_sources.extend(ds.filtered_sources)
    bos = wants_bos(tok)
    too_long = f"longer than train.max_length={max_length} tokens (prompt + response + eos)"
    shortest = None
    for s in ds:
        response = _response_of(cfg, s)
        ids, mask, plen = _encode(s.prompt_text, response, tok, bos, cfg.append_eos)
        if len(ids) > max_length:
            out.filtered += 1
            out.filter_reasons[too_long] = out.filter_reasons.get(too_long, 0) + 1
            out.filtered_sources.append(s.source)
            shortest = len(ids) if shortest is None else min(shortest, len(ids))
            continue
        out.examples.append(Example(ids, mask, s.source, response, plen))
    if not out.examples and ds.samples:
        raise ConfigError(
            f"every one of the {len(ds)} {split} examples is {too_long} (the shortest has {shortest}); "
            "raise train.max_length (within the model's context) or shorten the data",
            "train.max_length",
        )
    return out


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
    so the turn is right whatever follows it)."""
    from rlinf_algos.lm.hf import generate

    outputs: list[str] = []
    hits = 0
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        res = generate(
            model,
            [e.ids[: e.prompt_len] for e in chunk],
            max_new_tokens,
            [tok.eos_id],
            pad_id=tok.pad_id,
            temperature=0.0,
        )
        for e, ids in zip(chunk, res.tokens, strict=True):
            ids = [int(t) for t in ids]
            target = e.ids[e.prompt_len :]
            hits += ids[: len(target)] == target
            outputs.append(tok.decode([t for t in ids if t != tok.eos_id]))
    return hits / max(len(examples), 1), outputs


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

    texts = read_texts(run.data, "train")
    if run.data.val_files:
        read_texts(run.data, "val")
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
    train_set = load_examples(dcfg, "train", tok, hf_tok, max_length)
    val_set = load_examples(dcfg, "val", tok, hf_tok, max_length) if dcfg.val_files else ExampleSet([], "val")
    # config.yaml marks the directory as a run's: written once nothing but training can fail
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(run.model_dump(mode="json"), sort_keys=False))
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
    max_new = tcfg.max_new_tokens or (max((len(e.ids) - e.prompt_len for e in gen_set), default=0) + 8)
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
