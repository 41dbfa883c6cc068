"""A character-level tokenizer for the arithmetic task family (pure Python, no torch).

Special tokens are single ids written ``<name>`` in text: ``<pad>`` (0), ``<bos>``, ``<eos>``,
``<step>`` (starts a step of the chain), ``<ans>`` (starts the final answer), ``<call>`` (a lead
agent's sub-task) and ``<ret>`` (a lead hands control to its subagents). Every other character
is one id; ``<`` and ``>`` are not ordinary characters, so parsing is unambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlinf_core.errors import RlinfError

__all__ = ["SPECIAL_TOKENS", "CharTokenizer", "TokenizerError"]

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<step>", "<ans>", "<call>", "<ret>")
_CHARS = "0123456789+=()"


class TokenizerError(RlinfError, ValueError):
    """Text holds a character (or a ``<...>`` name) the vocabulary does not have."""


class CharTokenizer:
    """Maps text to ids and back. ``decode(encode(s)) == s`` for every text of the vocabulary."""

    def __init__(self, chars: str = _CHARS, specials: Sequence[str] = SPECIAL_TOKENS) -> None:
        if any(c in "<>" for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("tokenizer chars must be distinct and must not contain '<' or '>'")
        self.specials = tuple(specials)
        self.chars = chars
        self.itos: list[str] = [*self.specials, *chars]
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}
        self.pad_id = self.stoi["<pad>"]
        self.bos_id = self.stoi["<bos>"]
        self.eos_id = self.stoi["<eos>"]
        self.step_id = self.stoi["<step>"]
        self.ans_id = self.stoi["<ans>"]
        self.call_id = self.stoi["<call>"]
        self.ret_id = self.stoi["<ret>"]

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str, bos: bool = False) -> list[int]:
        """Ids of ``text`` (``<name>`` spans are special tokens), with ``<bos>`` first if ``bos``."""
        ids = [self.bos_id] if bos else []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "<":
                j = text.find(">", i)
                name = text[i : j + 1] if j >= 0 else text[i:]
                if name not in self.stoi or name not in self.specials:
                    raise TokenizerError(
                        f"unknown special token {name!r} at offset {i}; known: {', '.join(self.specials)}"
                    )
                ids.append(self.stoi[name])
                i = j + 1
                continue
            tid = self.stoi.get(c)
            if tid is None:
                raise TokenizerError(
                    f"character {c!r} at offset {i} is not in the vocabulary ({self.chars!r} and special tokens)"
                )
            ids.append(tid)
            i += 1
        return ids

    def decode(self, ids: Iterable[int], skip_pad: bool = True) -> str:
        """Text of ``ids``; ``<pad>`` is dropped unless ``skip_pad`` is false. An id outside the
        vocabulary is a :class:`TokenizerError`."""
        out = []
        n = len(self.itos)
        for t in ids:
            t = int(t)
            if not 0 <= t < n:
                raise TokenizerError(f"token id {t} is outside the vocabulary (0..{n - 1})")
            if skip_pad and t == self.pad_id:
                continue
            out.append(self.itos[t])
        return "".join(out)

    def to_dict(self) -> dict[str, object]:
        """What :meth:`from_dict` needs (stored in checkpoints)."""
        return {"chars": self.chars, "specials": list(self.specials)}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> CharTokenizer:
        return cls(chars=str(data["chars"]), specials=tuple(data["specials"]))  # type: ignore[arg-type]
