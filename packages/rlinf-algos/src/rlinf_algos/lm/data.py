"""Prompt data sets for language-model RL: the ``data`` section, JSONL and parquet files, chat
templates and reproducible prompt batches.

Pure Python (pyarrow is imported only to read parquet); no torch, so the driver and CPU-only
nodes can load and check a data set. Both layouts users bring load unchanged:

- RLinf's JSON lines, ``{"prompt": "...", "answer": "..."}`` (other keys via ``data.prompt_key`` /
  ``data.answer_key``);
- verl's parquet, ``data_source``, ``prompt`` (a list of ``{role, content}`` messages),
  ``ability``, ``reward_model`` (``{style, ground_truth}``) and ``extra_info``; the default
  ``answer_key`` finds ``reward_model.ground_truth``.

Every row becomes a :class:`Sample`: the prompt text the policy sees (the chat template applied
when there is one to apply), the messages, the reference answer as text, the row's other columns
and where it came from (``file:N``). Prompts longer than ``data.max_prompt_length`` tokens are
left out and counted (:attr:`PromptDataset.filtered`), never cut. Every problem with a file or a
row is a :class:`~rlinf_core.errors.ConfigError` whose path is the YAML key involved
(``data.train_files``, ``data.prompt_key``...) and whose message names the file and the row.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlinf_core.errors import ConfigError, RlinfError

__all__ = [
    "Conversation",
    "DataConfig",
    "PromptDataset",
    "Sample",
    "check_data_files",
    "check_messages",
    "detect_conversations",
    "load_conversations",
    "load_dataset",
    "lookup",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

DEFAULT_ANSWER_KEYS = ("reward_model.ground_truth", "answer")
"""What ``data.answer_key: null`` looks for in each row, in this order."""

_SUFFIXES = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".parquet": "parquet"}
_MISSING = object()


class DataConfig(BaseModel):
    """``data`` section: the prompt files of a language-model run and how to read them."""

    model_config = _STRICT

    train_files: list[str] = Field(
        min_length=1,
        description="training prompts: a path or a list of paths, JSON lines (.jsonl, .json) or "
        "parquet (.parquet), read in order; relative paths are resolved against the working directory",
    )
    val_files: list[str] = Field(
        default_factory=list,
        description="validation prompts (same formats); empty: no validation score",
    )
    prompt_key: str = Field(
        "prompt",
        min_length=1,
        description="the column holding the prompt: a string, or a list of chat messages {role, content}",
    )
    answer_key: str | None = Field(
        None,
        min_length=1,
        description="dotted path to the reference answer (reward_model.ground_truth); null: "
        "reward_model.ground_truth where a row has it, else answer",
    )
    apply_chat_template: bool | None = Field(
        None,
        strict=True,
        description="format prompts with the tokenizer's chat template (a string prompt becomes one "
        "user message); null: when the prompt is a list of messages",
    )
    max_prompt_length: int | None = Field(
        None,
        ge=1,
        strict=True,
        description="leave out (and count) prompts longer than this many tokens; null: keep all",
    )
    shuffle: bool = Field(True, strict=True, description="a fresh order of the training prompts every epoch")
    seed: int = Field(0, ge=0, strict=True, description="seed of the prompt order")
    max_samples: int | None = Field(
        None,
        ge=1,
        strict=True,
        description="read at most this many rows per split (the first ones, before filtering); null: all",
    )

    @field_validator("train_files", "val_files", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("train_files", "val_files")
    @classmethod
    def _non_empty_paths(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item.strip():
                raise ValueError("a file path must not be empty")
            if Path(item).suffix.lower() not in _SUFFIXES:
                raise ValueError(f"{item!r}: unknown file type; use .jsonl or .json (JSON lines) or .parquet")
        return value


@dataclass
class Sample:
    """One prompt of a data set.

    Attributes:
        prompt_text: what the policy is given: the chat template's output (generation prompt
            included) when the template applies, else the prompt string (or, for messages without
            a template, their contents joined by blank lines).
        messages: the chat messages (a string prompt becomes one user message); ``None`` when
            the prompt was a string and no chat template was applied.
        answer: the reference answer as text (numbers as written by ``str``, lists and mappings
            as JSON).
        columns: every column of the row but the prompt column (``data_source``,
            ``extra_info``, ``reward_model``, ``answer``...), as plain Python values.
        source: ``file:N``: N is the line number (from 1) in a JSON-lines file, the row index
            (from 0, as pandas and pyarrow count) in a parquet file or a ``.json`` file holding
            one array of rows.
        ground_truth: the answer as stored (not converted to text): what verl's
            ``compute_score`` gets as ``ground_truth``.
    """

    prompt_text: str
    messages: list[dict[str, Any]] | None
    answer: str
    columns: dict[str, Any]
    source: str
    ground_truth: Any = None


@dataclass
class PromptDataset(Sequence[Sample]):
    """The samples of one split, in file order, and what was left out.

    Attributes:
        samples: the kept samples.
        split: ``train`` or ``val``.
        files: the files read, resolved.
        seed, shuffle: the order of :meth:`batches` (from ``data.seed`` / ``data.shuffle``).
        rows: rows read (after ``data.max_samples``).
        filtered: rows left out.
        filter_reasons: rows left out, by reason.
        filtered_sources: ``file:N`` of each row left out, in order.
    """

    samples: list[Sample]
    split: str
    files: list[Path]
    seed: int = 0
    shuffle: bool = True
    rows: int = 0
    filtered: int = 0
    filter_reasons: dict[str, int] = field(default_factory=dict)
    filtered_sources: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: Any) -> Any:
        return self.samples[index]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def epoch_order(self, epoch: int, seed: int | None = None) -> list[int]:
        """The sample indices of ``epoch`` (from 0): a permutation drawn from ``seed`` (default
        :attr:`seed`) and the epoch number alone, so any epoch can be recomputed without
        replaying the ones before it; file order when :attr:`shuffle` is false."""
        order = list(range(len(self.samples)))
        if self.shuffle:
            random.Random(f"rlinf-data:{self.seed if seed is None else seed}:{epoch}").shuffle(order)
        return order

    def batches(self, n: int, seed: int | None = None, start: int = 0) -> Iterator[list[Sample]]:
        """Batches of ``n`` prompts, one per iteration, forever: epoch after epoch, each in the
        order of :meth:`epoch_order`. A batch that crosses an epoch's end takes the rest from the
        next epoch, so every batch has ``n`` samples and each epoch visits every sample once.

        Args:
            n: prompts per batch (``algorithm.prompts_per_iter``).
            seed: the order's seed; default :attr:`seed`. The same seed gives the same batches
                on any machine.
            start: index of the first batch to yield; ``start=k`` resumes where a run that took
                ``k`` batches stopped, without drawing them.

        Raises:
            RlinfError: ``n < 1`` or an empty data set.
        """
        if n < 1:
            raise RlinfError(f"batches: n must be at least 1, got {n}")
        if not self.samples:
            raise RlinfError(f"the {self.split} data set is empty: there are no prompts to draw")
        size = len(self.samples)
        cached: dict[int, list[int]] = {}
        pos = start * n
        while True:
            batch = []
            for p in range(pos, pos + n):
                epoch, offset = divmod(p, size)
                if epoch not in cached:
                    if len(cached) > 2:
                        cached.clear()
                    cached[epoch] = self.epoch_order(epoch, seed)
                batch.append(self.samples[cached[epoch][offset]])
            pos += n
            yield batch


def lookup(row: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """The value at the dotted ``path`` of ``row`` (``reward_model.ground_truth``), or
    ``default`` when absent; a key that holds the whole dotted name wins over nesting."""
    if path in row:
        return row[path]
    node: Any = row
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return default
    return node


def load_dataset(
    cfg: DataConfig,
    split: Literal["train", "val"] = "train",
    tokenizer: Any = None,
    *,
    root: str | Path | None = None,
) -> PromptDataset:
    """Read the files of one split into a :class:`PromptDataset`.

    Args:
        cfg: the validated ``data`` section.
        split: ``train`` (``data.train_files``) or ``val`` (``data.val_files``; no files gives an
            empty data set).
        tokenizer: a Hugging Face tokenizer; needed when a chat template is applied and when
            ``data.max_prompt_length`` is set. Prompt length is counted as
            ``tokenizer(prompt_text, add_special_tokens=not templated)``: a templated prompt
            already holds its special tokens.
        root: the directory relative paths are resolved against (the run YAML's directory);
            default the current directory.

    Returns:
        The kept samples in file order, with the count and reasons of those left out.

    Raises:
        ConfigError: path = the YAML key (``data.train_files``, ``data.prompt_key``,
            ``data.answer_key``, ``data.apply_chat_template``, ``data.max_prompt_length``), and
            a message naming the file and row: a missing or unreadable file, an invalid JSON
            line, a row without the prompt or answer, a prompt that is neither a string nor a
            list of ``{role, content}`` messages, a chat template to apply with a tokenizer that
            has none, or no prompt left.
        RlinfError: a chat template or length check is needed but no tokenizer was given.
    """
    if split not in ("train", "val"):
        raise RlinfError(f"load_dataset: split must be 'train' or 'val', got {split!r}")
    key = f"data.{split}_files"
    base = Path(root) if root is not None else Path.cwd()
    files = [_resolve(base, f) for f in (cfg.train_files if split == "train" else cfg.val_files)]
    out = PromptDataset([], split, files, seed=cfg.seed, shuffle=cfg.shuffle)
    if not files:
        return out

    raw: list[tuple[dict[str, Any], str]] = []
    for i, path in enumerate(files):
        where = f"{key}[{i}]" if len(files) > 1 else key
        for row, source in _read_rows(path, where):
            raw.append((row, source))
            if cfg.max_samples is not None and len(raw) >= cfg.max_samples:
                break
        if cfg.max_samples is not None and len(raw) >= cfg.max_samples:
            break
    out.rows = len(raw)
    if not raw:
        raise ConfigError(f"no rows in {', '.join(map(str, files))}; the {split} split needs prompts", key)

    samples = [_sample(cfg, row, source, tokenizer) for row, source in raw]

    if cfg.max_prompt_length is not None:
        _need_tokenizer(tokenizer, "data.max_prompt_length is set")
        templated = [_templated(cfg, s) for s in samples]
        lengths = _token_lengths(tokenizer, samples, templated)
        reason = f"longer than data.max_prompt_length={cfg.max_prompt_length} tokens"
        kept = []
        for s, n in zip(samples, lengths, strict=True):
            if n > cfg.max_prompt_length:
                out.filtered += 1
                out.filtered_sources.append(s.source)
            else:
                kept.append(s)
        if out.filtered:
            out.filter_reasons[reason] = out.filtered
        if not kept:
            raise ConfigError(
                f"every one of the {len(samples)} prompts of {', '.join(map(str, files))} is {reason} "
                f"(the shortest has {min(lengths)}); raise data.max_prompt_length or shorten the prompts",
                "data.max_prompt_length",
            )
        samples = kept
    out.samples = samples
    return out


def check_data_files(cfg: DataConfig, split: Literal["train", "val"], sample_rows: int = 64) -> None:
    """What ``rlinf train --dry-run`` checks of one split, with the readers :func:`load_dataset`
    uses: every file opens and parses (a corrupt parquet, a JSON line that is not an object:
    the file and row), and the first ``sample_rows`` rows have the prompt and answer keys.
    Chat templates and prompt lengths (which need the model's tokenizer) are left to the run.

    Raises:
        ConfigError: as :func:`load_dataset`, at the YAML key with the file and row.
    """
    key = f"data.{split}_files"
    files = [_resolve(Path.cwd(), f) for f in (cfg.train_files if split == "train" else cfg.val_files)]
    plain = cfg.model_copy(update={"apply_chat_template": False})
    seen = 0
    for i, path in enumerate(files):
        where = f"{key}[{i}]" if len(files) > 1 else key
        for row, source in _read_rows(path, where):
            if seen < sample_rows:
                _sample(plain, row, source, None)
            seen += 1
            if cfg.max_samples is not None and seen >= cfg.max_samples:
                return
    if files and not seen:
        raise ConfigError(f"no rows in {', '.join(map(str, files))}; the {split} split needs prompts", key)


# -- conversations ------------------------------------------------------------------------------


@dataclass
class Conversation:
    """One row of a conversational data set (TRL's format): its checked ``messages``, the row's
    other columns and where it came from (``file:N``, as :attr:`Sample.source`)."""

    messages: list[dict[str, Any]]
    columns: dict[str, Any]
    source: str


def load_conversations(
    cfg: DataConfig, split: Literal["train", "val"], messages_key: str, *, root: str | Path | None = None
) -> tuple[list[Conversation], int]:
    """The conversations of one split (the column ``messages_key`` of each row, checked by
    :func:`check_messages`) and the rows read; ``data.max_samples`` applies.

    Raises:
        ConfigError: at ``data.<split>_files`` for a file problem, at ``data.messages_key`` for
            a row without the column or with messages that are not a conversation (the file and
            row named).
    """
    key = f"data.{split}_files"
    base = Path(root) if root is not None else Path.cwd()
    files = [_resolve(base, f) for f in (cfg.train_files if split == "train" else cfg.val_files)]
    out: list[Conversation] = []
    rows = 0
    for i, path in enumerate(files):
        where = f"{key}[{i}]" if len(files) > 1 else key
        for row, source in _read_rows(path, where):
            if cfg.max_samples is not None and rows >= cfg.max_samples:
                break
            rows += 1
            value = lookup(row, messages_key, _MISSING)
            if value is _MISSING:
                raise ConfigError(
                    f"{source}: no {messages_key!r} in this row (it has {_keys(row)}); set data.messages_key to "
                    "the column holding the conversation",
                    "data.messages_key",
                )
            msgs = check_messages(value, source)
            out.append(Conversation(msgs, {k: v for k, v in row.items() if k != messages_key}, source))
    if files and not rows:
        raise ConfigError(
            f"no rows in {', '.join(map(str, files))}; the {split} split needs conversations", key
        )
    return out, rows


TRL_MESSAGES = "messages"
"""The column TRL reads whole conversations from (``is_conversational``)."""
TRL_TOOLS = "tools"
"""The column TRL reads a conversation's own tool schemas from."""


def detect_conversations(cfg: Any, *, root: str | Path | None = None) -> dict[str, str]:
    """What TRL would detect in the first row of ``cfg.train_files`` that ``cfg`` does not set:
    ``{"messages_key": "messages"}`` when the row has TRL's ``messages`` column holding chat
    messages (a list of ``{role, content}`` objects, ``trl.data_utils.is_conversational``) and no
    ``response_key`` column; ``{"tools_key": "tools"}`` with conversations (detected or set) when
    the row has a ``tools`` column. An explicit ``data.messages_key`` / ``data.tools_key`` is kept;
    a file that cannot be read gives nothing here (its own check names the problem)."""
    messages_key = getattr(cfg, "messages_key", None)
    tools_key = getattr(cfg, "tools_key", None)
    if (messages_key and tools_key) or not cfg.train_files:
        return {}
    base = Path(root) if root is not None else Path.cwd()
    try:
        row = next(iter(_read_rows(_resolve(base, cfg.train_files[0]), "data.train_files")), (None, ""))[0]
    except (ConfigError, OSError, ValueError):
        return {}
    if not isinstance(row, Mapping):
        return {}
    out: dict[str, str] = {}
    value = row.get(TRL_MESSAGES)
    response_key = getattr(cfg, "response_key", None)
    if (
        messages_key is None
        and isinstance(value, list)
        and value
        and isinstance(value[0], Mapping)
        and "role" in value[0]
        and "content" in value[0]
        and (response_key is None or lookup(row, response_key, _MISSING) is _MISSING)
    ):
        out["messages_key"] = messages_key = TRL_MESSAGES
    if messages_key and tools_key is None and TRL_TOOLS in row and messages_key != TRL_TOOLS:
        out["tools_key"] = TRL_TOOLS
    return out


def row_tool_schemas(
    conv: Conversation, key: str | None, default: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """The tool schemas a conversation is rendered with: its own (the column ``key``, TRL's
    ``tools`` column) when it has them, else ``default`` (the tools section's).

    Raises:
        ConfigError: at ``data.tools_key``, naming the row, when the column is not a list of
            ``{type: function, function: {name, ...}}`` objects.
    """
    value = conv.columns.get(key, _MISSING) if key else _MISSING
    if value is _MISSING or value is None:
        return [dict(t) for t in default] if default else None
    ok = isinstance(value, list) and all(
        isinstance(t, Mapping)
        and isinstance(t.get("function"), Mapping)
        and isinstance(t["function"].get("name"), str)
        for t in value
    )
    if not ok:
        raise ConfigError(
            f"{conv.source}: {key!r} must be a list of tool schemas ({{type: function, function: {{name, "
            f"description, parameters}}}}), got {_short(value)}",
            "data.tools_key",
        )
    return [dict(t) for t in value]


def check_messages(value: Any, source: str, key: str = "data.messages_key") -> list[dict[str, Any]]:
    """``value`` as a conversation in TRL's format, or a :class:`ConfigError` at ``key`` naming
    ``source`` and the message: a non-empty list of ``{role, content}`` objects; an assistant
    message may have ``tool_calls`` (``[{type: function, function: {name, arguments}}]``, the
    arguments an object or a JSON string of one) and then no content; a ``tool`` message holds
    its result as ``content`` (and may have a ``name``); at least one assistant message, after
    at least one other."""

    def bad(i: int | None, why: str) -> ConfigError:
        at = f"message {i}: " if i is not None else ""
        return ConfigError(f"{source}: {at}{why}", key)

    if not isinstance(value, list) or not value:
        raise bad(None, f"a conversation must be a non-empty list of messages, got {_short(value)}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, Mapping):
            raise bad(i, f"must be an object with role and content, got {_short(m)}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise bad(i, f"no role string (got {_short(role)}); roles are system, user, assistant, tool")
        msg = dict(m)
        calls = msg.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise bad(i, f"only assistant messages have tool_calls, not {role!r} ones")
            if not isinstance(calls, list) or not calls:
                raise bad(i, f"tool_calls must be a non-empty list, got {_short(calls)}")
            msg["tool_calls"] = [_check_call(c, lambda why, i=i: bad(i, why)) for c in calls]
        content = msg.get("content")
        if content is None and calls is not None:
            msg["content"] = ""
        elif not isinstance(content, str):
            raise bad(i, f"content must be a string, got {_short(content)}")
        if role == "tool" and "name" in msg and not isinstance(msg["name"], str):
            raise bad(i, f"a tool message's name must be a string, got {_short(msg['name'])}")
        out.append(msg)
    roles = [m["role"] for m in out]
    if "assistant" not in roles:
        raise bad(None, "the conversation has no assistant message to train on")
    if roles[0] == "assistant":
        raise bad(0, "the conversation starts with an assistant message; it needs a prompt before it")
    return out


def _check_call(call: Any, bad: Any) -> dict[str, Any]:
    fn = call.get("function", call) if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad(
            f"a tool call must be {{type: function, function: {{name, arguments}}}}, got {_short(call)}"
        )
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as err:
            raise bad(f"the arguments of tool call {fn['name']!r} are not valid JSON ({err.msg})") from None
    if not isinstance(args, Mapping):
        raise bad(f"the arguments of tool call {fn['name']!r} must be an object, got {_short(args)}")
    return {"type": "function", "function": {"name": fn["name"], "arguments": dict(args)}}


# -- reading files ------------------------------------------------------------------------------


def _resolve(base: Path, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else base / p


def _read_rows(path: Path, key: str) -> Iterator[tuple[dict[str, Any], str]]:
    if not path.exists():
        raise ConfigError(f"file not found: {path}", key)
    if not path.is_file():
        raise ConfigError(f"{path} is not a file", key)
    kind = _SUFFIXES.get(path.suffix.lower())
    if kind == "parquet":
        yield from _read_parquet(path, key)
    elif kind == "json":
        yield from _read_json(path, key)
    else:
        raise ConfigError(f"{path}: unknown file type; use .jsonl or .json (JSON lines) or .parquet", key)


def _read_json(path: Path, key: str) -> Iterator[tuple[dict[str, Any], str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {path}: {err}", key) from None
    if text.lstrip().startswith("["):  # a .json file holding one array of rows
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"{path}:{err.lineno}: invalid JSON: {err.msg} (column {err.colno})", key
            ) from None
        for i, row in enumerate(rows):
            yield _object(row, f"{path}:{i}", key), f"{path}:{i}"
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        source = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"{source}: invalid JSON: {err.msg} (column {err.colno}); each line must be one JSON object",
                key,
            ) from None
        yield _object(row, source, key), source


def _object(row: Any, source: str, key: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ConfigError(f"{source}: a row must be a JSON object, got {type(row).__name__}", key)
    return row


def _read_parquet(path: Path, key: str) -> Iterator[tuple[dict[str, Any], str]]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except ImportError as err:
        raise ConfigError(
            f"{path}: reading parquet needs pyarrow ({err}); pip install pyarrow", key
        ) from None
    except Exception as err:
        raise ConfigError(f"{path}: cannot read parquet: {type(err).__name__}: {err}", key) from None
    offset = 0
    for batch in table.to_batches():
        for i, row in enumerate(batch.to_pylist()):
            yield row, f"{path}:{offset + i}"
        offset += batch.num_rows


# -- rows -> samples ----------------------------------------------------------------------------


def _sample(cfg: DataConfig, row: dict[str, Any], source: str, tokenizer: Any) -> Sample:
    prompt = lookup(row, cfg.prompt_key, _MISSING)
    if prompt is _MISSING:
        raise ConfigError(
            f"{source}: no {cfg.prompt_key!r} in this row (it has {_keys(row)}); set data.prompt_key "
            "to the column holding the prompt",
            "data.prompt_key",
        )
    messages = _messages(prompt, source, cfg.prompt_key)
    truth = _answer(cfg, row, source)
    columns = {k: v for k, v in row.items() if k != cfg.prompt_key}
    sample = Sample("", messages, _as_text(truth), columns, source, truth)
    if _templated(cfg, sample):
        _need_tokenizer(tokenizer, "a chat template is to be applied")
        if getattr(tokenizer, "chat_template", None) is None:
            why = (
                "data.apply_chat_template is true"
                if cfg.apply_chat_template
                else "the prompts are chat messages (data.apply_chat_template: null applies the template then)"
            )
            raise ConfigError(
                f"{why}, but the tokenizer has no chat template (tokenizer.chat_template is None; first "
                f"prompt: {source}). Use a model folder whose tokenizer has one (tokenizer_config.json "
                "'chat_template' or chat_template.jinja), or set data.apply_chat_template: false to give "
                "the policy the prompt text as is (messages' contents joined by blank lines)",
                "data.apply_chat_template",
            )
        msgs = messages if messages is not None else [{"role": "user", "content": prompt}]
        sample.messages = msgs
        try:
            text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        except Exception as err:
            raise ConfigError(
                f"{source}: the tokenizer's chat template failed on this prompt: {type(err).__name__}: {err}",
                "data.apply_chat_template",
            ) from None
        if not isinstance(text, str):
            raise RlinfError(
                f"{source}: tokenizer.apply_chat_template(tokenize=False) returned {type(text).__name__}, not text"
            )
        sample.prompt_text = text
    elif messages is not None:
        sample.prompt_text = "\n\n".join(m["content"] for m in messages)
    else:
        sample.prompt_text = prompt
    return sample


def _templated(cfg: DataConfig, sample: Sample) -> bool:
    if cfg.apply_chat_template is None:
        return sample.messages is not None
    return cfg.apply_chat_template


def _messages(prompt: Any, source: str, key: str) -> list[dict[str, Any]] | None:
    if isinstance(prompt, str):
        return None
    valid = isinstance(prompt, list) and bool(prompt)
    if valid:
        for m in prompt:
            if not (
                isinstance(m, Mapping)
                and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str)
            ):
                valid = False
                break
    if not valid:
        raise ConfigError(
            f"{source}: the prompt ({key!r}) must be a string or a non-empty list of chat messages "
            f"{{role, content}} with string values, got {_short(prompt)}",
            "data.prompt_key",
        )
    return [dict(m) for m in prompt]


def _answer(cfg: DataConfig, row: dict[str, Any], source: str) -> Any:
    keys = (cfg.answer_key,) if cfg.answer_key is not None else DEFAULT_ANSWER_KEYS
    for k in keys:
        value = lookup(row, k, _MISSING)
        if value is _MISSING:
            continue
        if value is None:
            raise ConfigError(f"{source}: the answer {k!r} is null", "data.answer_key")
        return value
    wanted = repr(cfg.answer_key) if cfg.answer_key is not None else "'reward_model.ground_truth' or 'answer'"
    raise ConfigError(
        f"{source}: no {wanted} in this row (it has {_keys(row)}); set data.answer_key to the (dotted) "
        "path of the reference answer",
        "data.answer_key",
    )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _keys(row: Mapping[str, Any]) -> str:
    def walk(node: Mapping[str, Any], prefix: str) -> list[str]:
        out = []
        for k, v in node.items():
            name = f"{prefix}{k}"
            out.append(name)
            if isinstance(v, Mapping) and not prefix:
                out.extend(walk(v, name + "."))
        return out

    return ", ".join(walk(row, "")) or "no columns"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _need_tokenizer(tokenizer: Any, why: str) -> None:
    if tokenizer is None:
        raise RlinfError(f"load_dataset: {why}, which needs the model's tokenizer; pass tokenizer=")


def _token_lengths(tokenizer: Any, samples: list[Sample], templated: list[bool]) -> list[int]:
    lengths = [0] * len(samples)
    for flag in (True, False):
        idx = [i for i, t in enumerate(templated) if t is flag]
        if not idx:
            continue
        enc = tokenizer([samples[i].prompt_text for i in idx], add_special_tokens=not flag)
        for i, ids in zip(idx, enc["input_ids"], strict=True):
            lengths[i] = len(ids)
    return lengths
