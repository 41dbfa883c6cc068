"""The examples of ``rlinf sft`` (:mod:`rlinf_algos.lm.finetune`): how a row becomes a training
sequence and its loss mask, the checks made before a run directory is touched, the learning-rate
schedule, the validation loss and the greedy exact match. The run itself is a flow under the one
driver (:mod:`rlinf_algos.lm.sft_flow`).

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
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf_algos.lm.config import require_wandb
from rlinf_algos.lm.data import DataConfig, Sample, load_dataset, lookup
from rlinf_algos.lm.sft_config import SFTDataConfig, SFTRunConfig, SFTTrainConfig
from rlinf_core.errors import ConfigError

__all__ = [
    "Example",
    "ExampleSet",
    "check_sft_sources",
    "conversation_example",
    "encode_example",
    "exact_match",
    "load_examples",
    "lr_at",
    "pack_examples",
    "read_texts",
    "sft_device",
    "token_nll",
    "tool_schemas",
    "wants_bos",
]


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


def pack_examples(examples: Sequence[Example], pad_id: int, device: Any) -> tuple[Any, Any]:
    """``(ids, mask)`` of ``examples`` right-padded with ``pad_id`` to the longest, on ``device``:
    ``[B, T]`` long and ``[B, T]`` float (the loss mask, 0 on the padding)."""
    import torch

    t = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), t), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(examples), t, device=device)
    for i, e in enumerate(examples):
        ids[i, : len(e.ids)] = torch.as_tensor(e.ids, dtype=torch.long, device=device)
        mask[i, : len(e.mask)] = torch.as_tensor(e.mask, dtype=torch.float32, device=device)
    return ids, mask


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
                ids, mask = pack_examples(order[i : i + batch_size], pad_id, device)
                lp = sequence_log_probs(model, ids)
                total += float(-(lp * mask).sum())
                count += int(mask.sum())
    finally:
        model.train(was_training)
    return total / max(count, 1), count


def exact_match(
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
    sft_device(run.runner.device)
    require_wandb(run.runner.loggers)
    return texts


def sft_device(name: str) -> Any:
    """The torch device of ``runner.device`` (``auto``: cuda when available); a
    :class:`ConfigError` at ``runner.device`` for ``cuda`` without one."""
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("no CUDA device is available; use runner.device=cpu or auto", "runner.device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)
