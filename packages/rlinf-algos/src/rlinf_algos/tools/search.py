"""``search``: a local BM25 index over a document file, no network, no new dependency.

Documents come from a JSONL file (one object per line) or a parquet file, with columns ``id``
and ``text`` and an optional ``title`` (searched too). The index is built in memory when the tool
starts: words are lower-cased ``\\w+`` runs; each posting stores its precomputed Okapi BM25 weight

    idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg_len)),
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5)),

in term-major arrays (numpy), so a query is a few slices summed into one score per document and
a partial sort. 100k short documents index in seconds (``benchmarks/search_index.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError
from rlinf_core.tools import ToolSet

__all__ = ["BM25Index", "Hit", "Search", "load_documents", "words"]

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The index's terms of ``text``: lower-cased ``\\w+`` runs."""
    return _WORD.findall(text.lower())


def load_documents(path: str | Path, key: str = "tools.kwargs.corpus") -> list[dict[str, str]]:
    """Rows ``{id, text, title}`` of a ``.jsonl`` / ``.json`` lines file or a ``.parquet`` file.

    Raises:
        ConfigError: the file is missing or of another kind, a line is not a JSON object, a row
            has no ``id`` or no string ``text``, or an id repeats; naming ``file:row``.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"search corpus not found: {p} (a .jsonl or .parquet file with id and text)", key)
    rows: list[dict[str, Any]]
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as err:
            raise ConfigError(
                f"{p}: not a readable parquet file ({type(err).__name__}: {err})", key
            ) from None
        missing = [c for c in ("id", "text") if c not in table.column_names]
        if missing:
            raise ConfigError(
                f"{p}: no column {', '.join(missing)}; its columns: {', '.join(table.column_names)}", key
            )
        rows = table.to_pylist()
    elif p.suffix in (".jsonl", ".json"):
        rows = []
        with p.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{p}:{n}: not valid JSON ({err.msg})", key) from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{p}:{n}: expected a JSON object with id and text", key)
                row["_row"] = n
                rows.append(row)
    else:
        raise ConfigError(f"{p}: unknown corpus format {p.suffix!r}; use .jsonl or .parquet", key)
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"{p}:{row.get('_row', i + 1)}"
        if row.get("id") is None:
            raise ConfigError(f"{where}: the document has no id", key)
        if not isinstance(row.get("text"), str):
            raise ConfigError(f"{where}: the document's text must be a string", key)
        doc_id = str(row["id"])
        if doc_id in seen:
            raise ConfigError(f"{where}: id {doc_id!r} appears twice", key)
        seen.add(doc_id)
        title = row.get("title")
        out.append({"id": doc_id, "text": row["text"], "title": str(title) if title is not None else ""})
    return out


@dataclass
class Hit:
    """One result: the document's id, title, text and BM25 score."""

    id: str
    title: str
    text: str
    score: float


class BM25Index:
    """Okapi BM25 over documents (see the module doc).

    Args:
        documents: rows with ``id``, ``text`` and optionally ``title``.
        k1, b: the BM25 parameters.
    """

    def __init__(self, documents: Sequence[dict[str, str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.documents = list(documents)
        self.k1, self.b = float(k1), float(b)
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        doc_ids: list[int] = []
        lengths = np.zeros(len(self.documents), dtype=np.float32)
        for d, doc in enumerate(self.documents):
            terms = words(f"{doc.get('title', '')} {doc['text']}")
            lengths[d] = len(terms)
            ids = [vocab.setdefault(t, len(vocab)) for t in terms]
            term_ids.extend(ids)
            doc_ids.extend([d] * len(ids))
        self.vocab = vocab
        n = len(self.documents)
        t = np.asarray(term_ids, dtype=np.int64)
        dd = np.asarray(doc_ids, dtype=np.int64)
        # unique (term, doc) pairs with their counts, term-major
        pair = np.unique(t * max(n, 1) + dd, return_counts=True)
        keys, tf = pair[0], pair[1].astype(np.float32)
        pt, pd = keys // max(n, 1), keys % max(n, 1)
        df = np.bincount(pt, minlength=len(vocab)).astype(np.float32)
        self.indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        avg = float(lengths.mean()) if n else 0.0
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * lengths[pd] / (avg or 1.0))
        self.postings_doc = pd.astype(np.int32)
        self.postings_weight = (idf[pt] * tf * (self.k1 + 1) / (tf + norm)).astype(np.float32)

    def __len__(self) -> int:
        return len(self.documents)

    def scores(self, query: str) -> np.ndarray:
        """One BM25 score per document (float32, shape ``(N,)``)."""
        out = np.zeros(len(self.documents), dtype=np.float32)
        for term in words(query):
            tid = self.vocab.get(term)
            if tid is None:
                continue
            lo, hi = self.indptr[tid], self.indptr[tid + 1]
            out[self.postings_doc[lo:hi]] += self.postings_weight[lo:hi]
        return out

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` best documents with a positive score, best first (ties: file order)."""
        s = self.scores(query)
        k = max(0, min(int(k), len(s)))
        if k == 0:
            return []
        top = np.argpartition(-s, k - 1)[:k] if k < len(s) else np.arange(len(s))
        top = sorted(top.tolist(), key=lambda i: (-float(s[i]), i))
        return [
            Hit(
                self.documents[i]["id"],
                self.documents[i].get("title", ""),
                self.documents[i]["text"],
                float(s[i]),
            )
            for i in top
            if s[i] > 0
        ]


def format_hits(hits: Iterable[Hit], max_chars: int) -> str:
    lines = []
    for h in hits:
        text = h.text if len(h.text) <= max_chars else h.text[:max_chars] + "..."
        lines.append(f"[{h.id}] {h.title + ': ' if h.title else ''}{text}")
    return "\n".join(lines) if lines else "no results"


class SearchConfig(ConfigSection):
    """The ``search`` tool's ``kwargs``."""

    corpus: str = Field(description="A .jsonl or .parquet file of documents (id, text, title).")
    top_k: int = Field(3, ge=1, le=1000, description="Passages returned per query.")
    max_passage_chars: int = Field(500, ge=1, le=1 << 20, description="Each passage is cut to this.")
    k1: float = Field(1.5, ge=0, le=100, description="BM25 term-frequency saturation.")
    b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation.")

    @field_validator("corpus")
    @classmethod
    def _exists(cls, value: str) -> str:
        if not Path(value).expanduser().is_file():
            raise ValueError(f"search corpus not found: {value} (a .jsonl or .parquet file with id and text)")
        return value


class Search(ToolSet):
    """The built-in ``search`` tool: BM25 over a corpus file, one index per process.

    Args:
        corpus: a ``.jsonl`` or ``.parquet`` file of documents (``id``, ``text``, ``title``).
        top_k: passages returned per query.
        max_passage_chars: each passage is cut to this many characters.
        k1, b: BM25 parameters.
    """

    PLUGIN_NAME: ClassVar[str] = "search"
    per_episode: ClassVar[bool] = False
    config_model: ClassVar[type[ConfigSection]] = SearchConfig

    def __init__(
        self, corpus: str, top_k: int = 3, max_passage_chars: int = 500, k1: float = 1.5, b: float = 0.75
    ) -> None:
        validate_model(
            SearchConfig,
            {"corpus": corpus, "top_k": top_k, "max_passage_chars": max_passage_chars, "k1": k1, "b": b},
            prefix="search",
        )
        self.index = BM25Index(load_documents(corpus), k1=k1, b=b)
        self.top_k = int(top_k)
        self.max_passage_chars = int(max_passage_chars)

    def search(self, query: str) -> str:
        """Search the document collection and return the best matching passages with their ids.

        Args:
            query: words to look for, for example a name or a question.
        """
        return format_hits(self.index.search(query, self.top_k), self.max_passage_chars)
