"""Tokenizers of language policies, light enough for agent and reward processes (no torch).

:class:`LMTokenizer` reads a model folder's ``tokenizer.json`` with the ``tokenizers`` library
(what every fast Hugging Face tokenizer is underneath) and its special tokens from
``tokenizer_config.json``, so an agent process encodes prompts and decodes responses without
importing torch or transformers. A folder without ``tokenizer.json`` (a slow, sentencepiece-only
tokenizer) falls back to ``transformers.AutoTokenizer``.

:func:`arith_tokenizer` builds the character vocabulary of the arithmetic task (digits, ``+``,
``=``, parentheses and the task's special tokens ``<bos>``, ``<eos>``, ``<step>``, ``<ans>``,
``<call>``, ``<ret>``) as a ``transformers`` fast tokenizer, so an arithmetic model folder is an
ordinary Hugging Face folder.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlinf_core.errors import RlinfError

__all__ = [
    "ARITH_CHARS",
    "ARITH_MARKERS",
    "ARITH_SPECIALS",
    "LMTokenizer",
    "TokenizerError",
    "arith_tokenizer",
    "bpe_tokenizer",
    "chatml_text",
]

ARITH_SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<step>", "<ans>", "<call>", "<ret>")
ARITH_CHARS = "0123456789+=()"
ARITH_MARKERS: tuple[str, ...] = ARITH_SPECIALS[3:]
"""The markers the arithmetic task writes inside a response; each must be one token."""


class TokenizerError(RlinfError, ValueError):
    """Text the vocabulary cannot encode, or an id outside it."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class LMTokenizer:
    """Encode and decode with a model folder's tokenizer.

    Args:
        backend: a ``tokenizers.Tokenizer`` or a ``transformers`` tokenizer.
        specials: ``bos``/``eos``/``pad`` token texts (``None`` when the tokenizer has none).
        source: where it came from (for messages).
    """

    def __init__(self, backend: Any, specials: dict[str, str | None], source: str = "") -> None:
        self.backend = backend
        self.source = source
        self._fast = hasattr(backend, "encode_batch")  # a tokenizers.Tokenizer
        self.bos_id = self._id_of(specials.get("bos"))
        self.eos_id = self._id_of(specials.get("eos"))
        if self.eos_id is None:
            raise TokenizerError(f"tokenizer {source}: no eos_token (generation could never stop)")
        pad = self._id_of(specials.get("pad"))
        self.pad_id = self.eos_id if pad is None else pad
        self._specials = specials
        self._aliases: tuple[tuple[str, str], ...] = ()

    def arith_view(self) -> LMTokenizer:
        """This tokenizer as the arithmetic task uses it. The task's texts spell the sequence
        ends ``<bos>`` and ``<eos>``; :meth:`encode` turns them into this tokenizer's own bos
        and eos tokens (``<bos>`` into nothing when it has no bos token, as Qwen's has not),
        and :meth:`decode` writes the eos token back as ``<eos>``. The arithmetic tokenizer's
        own view is itself."""
        view = copy.copy(self)
        view._aliases = tuple(
            (mark, self._specials.get(key) or "")
            for mark, key in (("<bos>", "bos"), ("<eos>", "eos"))
            if self._specials.get(key) != mark
        )
        return view

    @classmethod
    def arith(cls) -> LMTokenizer:
        """The arithmetic task's character tokenizer (:func:`arith_tokenizer`), in memory."""
        return cls(
            arith_tokenizer().backend_tokenizer, {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"}, "arith"
        )

    @classmethod
    def from_folder(cls, path: str | Path, trust_remote_code: bool = False) -> LMTokenizer:
        """The tokenizer of the model folder ``path``, as ``transformers`` reads it.

        ``AutoTokenizer`` loads it and rlinf encodes with that tokenizer's own backend: a class
        may rebuild parts of ``tokenizer.json`` (``Qwen2Tokenizer`` replaces its normaliser and
        pre-tokenizer with Qwen2's), and reading the file directly would then split text
        differently from a user's script, TRL or vLLM. Only when transformers cannot load the
        folder is its ``tokenizer.json`` read as it is."""
        path = Path(path)
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        except Exception as err:
            if not (path / "tokenizer.json").is_file():
                raise TokenizerError(f"{path}: no tokenizer could be loaded ({err})") from None
            return cls._from_tokenizer_json(path)
        specials = {k: _token_text(getattr(tok, f"{k}_token", None)) for k in ("bos", "eos", "pad")}
        backend = getattr(tok, "backend_tokenizer", None)  # what a fast tokenizer encodes with
        return cls(tok if backend is None else backend, specials, str(path))

    @classmethod
    def _from_tokenizer_json(cls, path: Path) -> LMTokenizer:
        """``path/tokenizer.json`` read by the ``tokenizers`` library, with the special tokens
        ``tokenizer_config.json`` names."""
        cfg: dict[str, Any] = {}
        cfg_file = path / "tokenizer_config.json"
        if cfg_file.is_file():
            try:
                cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise TokenizerError(f"{cfg_file}: unreadable ({err})") from None
        specials = {k: _token_text(cfg.get(f"{k}_token")) for k in ("bos", "eos", "pad")}
        from tokenizers import Tokenizer

        try:
            backend = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as err:  # a damaged file
            raise TokenizerError(f"{path / 'tokenizer.json'}: cannot be read ({err})") from None
        return cls(backend, specials, str(path))

    def _id_of(self, text: str | None) -> int | None:
        if text is None:
            return None
        tid = self.backend.token_to_id(text) if self._fast else self.backend.convert_tokens_to_ids(text)
        return None if tid is None or (not self._fast and tid == self.backend.unk_token_id) else int(tid)

    def has_token(self, text: str) -> bool:
        """Whether ``text`` is one token of the vocabulary."""
        return self._id_of(text) is not None

    def token_id(self, text: str) -> int:
        """The id of the single token ``text`` (a special token such as ``<ret>``)."""
        tid = self._id_of(text)
        if tid is None:
            raise TokenizerError(f"tokenizer {self.source} has no token {text!r}")
        return tid

    @property
    def ret_id(self) -> int:
        """``<ret>``: where a lead agent hands control to its subagents (arithmetic task)."""
        return self.token_id("<ret>")

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size() if self._fast else len(self.backend))

    def spell(self, text: str) -> str:
        """``text`` as this tokenizer's own folder spells it: in an :meth:`arith_view`, the task's
        ``<bos>``/``<eos>`` marks replaced by the folder's bos and eos token texts (so the folder's
        tokenizer encodes the result as :meth:`encode` encodes ``text``); ``text`` itself otherwise."""
        for mark, own in self._aliases:
            text = text.replace(mark, own)
        return text

    def encode(self, text: str, bos: bool = False) -> list[int]:
        """Ids of ``text`` (no special tokens added), with the bos token first if ``bos``."""
        text = self.spell(text)
        try:
            if self._fast:
                enc = self.backend.encode(text, add_special_tokens=False)
                ids = list(enc.ids)
            else:
                ids = list(self.backend.encode(text, add_special_tokens=False))
        except Exception as err:
            raise TokenizerError(f"tokenizer {self.source} cannot encode {text[:60]!r}: {err}") from None
        if self._fast:
            self._check_covered(text, ids)
        if bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def _check_covered(self, text: str, ids: Sequence[int]) -> None:
        """Refuse text the vocabulary cannot represent: a vocabulary without an unknown token
        silently drops what it lacks (as the arithmetic folders' character vocabulary does for a
        letter). Checked by round-tripping the ids (decode and compare with the text as the
        tokenizer's normaliser sees it, whitespace aside), not by the backend's offsets, which some
        tokenizers report oddly; a character that comes back as the unknown token is accepted, as
        transformers accepts it."""
        decoded = self.backend.decode(list(ids), skip_special_tokens=False)
        seen = text
        normalizer = getattr(self.backend, "normalizer", None)
        if normalizer is not None:
            try:
                seen = normalizer.normalize_str(text)
            except Exception:
                seen = text
        if seen == decoded:
            return
        kept = set(decoded) | set(decoded.casefold())
        missing = sorted({c for c in seen if not c.isspace() and c not in kept})
        if missing and self._unk_id() is not None and self._unk_id() in ids:
            return
        if missing:
            raise TokenizerError(
                f"tokenizer {self.source} cannot encode {''.join(missing)!r} (in {text[:60]!r}): not in its "
                "vocabulary, and it has no unknown token"
            )

    def _unk_id(self) -> int | None:
        model = getattr(self.backend, "model", None)
        unk = getattr(model, "unk_token", None)
        return self._id_of(unk) if isinstance(unk, str) else None

    def decode(self, ids: Iterable[int], skip_pad: bool = True) -> str:
        """Text of ``ids`` (special tokens kept as text, the pad token dropped if ``skip_pad``)."""
        ids = [int(t) for t in ids]
        n = self.vocab_size
        bad = [t for t in ids if not 0 <= t < n]
        if bad:
            raise TokenizerError(f"token id {bad[0]} is outside the vocabulary (0..{n - 1})")
        if skip_pad and self.pad_id != self.eos_id:
            ids = [t for t in ids if t != self.pad_id]
        if self._fast:
            text = self.backend.decode(ids, skip_special_tokens=False)
        else:
            text = self.backend.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        for mark, own in self._aliases:
            if own:
                text = text.replace(own, mark)
        return text


def arith_tokenizer() -> Any:
    """The arithmetic task's character tokenizer as a ``transformers`` fast tokenizer (one id per
    character and per special token; ``<pad>`` is 0)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate([*ARITH_SPECIALS, *ARITH_CHARS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )
    tok.add_special_tokens({"additional_special_tokens": list(ARITH_SPECIALS[3:])})
    return tok


CHATML_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    '{{- \'\\n</tools>\\nCall a tool as <tool_call>\\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first and tools %}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant' }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls %}{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' }}'
    "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen's ChatML layout: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per message; with tools, Qwen2.5's
tool format (the Hermes one): the tools' JSON schemas in a system turn (after the system message,
if any), an assistant's ``tool_calls`` as ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``
blocks, and consecutive ``tool`` messages as ``<tool_response>`` blocks of one user turn. A
conversation without tools or tool messages renders as plain ChatML."""


def chatml_text(
    conversations: Iterable[Sequence[dict[str, Any]]], tools: Sequence[dict[str, Any]] | None = None
) -> list[str]:
    """``conversations`` rendered by :data:`CHATML_TEMPLATE` (with ``tools``' schemas), as a
    :func:`bpe_tokenizer` folder's tokenizer renders them: the texts its merges are learnt from
    when the training data are conversations."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    bare.chat_template = CHATML_TEMPLATE
    tools = [dict(t) for t in tools] if tools else None
    return [
        str(bare.apply_chat_template([dict(m) for m in conv], tools=tools, tokenize=False))
        for conv in conversations
    ]


def bpe_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer trained here on ``corpus`` (every byte is in the vocabulary, so
    any text encodes), with Qwen's ChatML special tokens and chat template: ``<|im_end|>`` ends a
    turn (the eos token), ``<|endoftext|>`` pads.

    Its normaliser and pre-tokeniser are Qwen2's (NFC; every digit its own piece, then bytes),
    taken from ``transformers``: ``AutoTokenizer`` loads a ``qwen2`` folder with
    ``Qwen2Tokenizer``, which rebuilds those two from its own definition whatever the folder's
    ``tokenizer.json`` says, so any other choice would make transformers (and so vLLM, TRL, a
    user's script) split text differently from what the model was trained on."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.chat_template = CHATML_TEMPLATE
    return tok
