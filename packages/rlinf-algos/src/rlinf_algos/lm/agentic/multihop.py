"""A made-up world for search agents: a corpus, two-hop questions, a verifier and a teacher's
tool-calling traces (*light*: no torch). What ``examples/search_agent`` trains on.

Every name is invented (seeded), so no model can know an answer: it has to search. The world has
companies, the people who founded them, cities and countries; each is one short document::

    Velo Labs is a company founded by Tade Nile. It is based in Kesh Harbor.
    Tade Nile is a baker who was born in Lyon Falls.
    Kesh Harbor is a city in Dravia.

A name is two words: a company word and a kind (``Labs``, ``Foods``...), a first name and a
surname, a city word and a kind (``Harbor``, ``Falls``...). The words come from pools of a few
hundred each, so every word recurs across the training traces, as the names a pretrained model
knows do, and a tokenizer trained on the traces spells it in one or two pieces; the names are
fresh combinations, and the held-out questions' names never appear in a training question. What
a search agent must learn is what a real one does: copy the names from the question and the
documents into its queries and its answer.

A question needs two searches: its first hop finds the company's document, which names the
*bridge* (the founder, or the city the company is based in); the second finds the bridge's
document, which holds the answer::

    In which city was the founder of Velo Labs born?  "founder of Velo Labs" -> Tade Nile;    "birthplace of Tade Nile" -> Lyon Falls
    In which country is Velo Labs based?             "location of Velo Labs" -> Kesh Harbor; "country of Kesh Harbor" -> Dravia

:func:`make_world` checks this with the ``search`` tool's own BM25 index and keeps only the
questions for which it holds: the question's text alone retrieves no document holding the
answer (within the tool's ``top_k``), the first search retrieves the company's document and the
second the document that states the answer. Held-out questions are about companies,
founders and cities of their own (none of them appears in a training question), so a held-out
answer is never a training answer: success there is searching and reading, not recall.

:func:`teacher_trace` writes a conversation in TRL's format (assistant ``tool_calls``, ``tool``
messages holding the real results of the search tool over the corpus). A careless teacher
(``slip``) sometimes answers after the first search with the city the company's document names:
a plausible, wrong shortcut, which a warm start imitates and the verifier's reward
(:func:`answer_matches`: the answer sentence's answer, exact match after SQuAD's normalisation)
teaches the policy to drop.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinf_algos.lm.rewards import ExactMatchReward, normalize_answer

__all__ = [
    "ANSWER_PATTERN",
    "DATA_SOURCES",
    "Question",
    "World",
    "answer_matches",
    "make_world",
    "teacher_trace",
    "two_hop_problem",
    "write_dataset",
]

DATA_SOURCES = {"birth": "rlinf/multihop_birth_city", "country": "rlinf/multihop_country"}
"""The ``data_source`` of each question kind (``rlinf eval`` reports per data source)."""

_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")
"""The 70 syllables the world's name words are made of (two each: ``Tade``, ``Nile``)."""
_COMPANY_KINDS = (
    "Labs",
    "Foods",
    "Motors",
    "Systems",
    "Media",
    "Works",
    "Bank",
    "Energy",
    "Airways",
    "Pharma",
)
_CITY_KINDS = ("Falls", "Harbor", "Springs", "Hills", "Bay", "Ridge", "Valley", "Port")
_COUNTRY_SUFFIXES = ("ia", "land", "stan", "ria")
_JOBS = ("baker", "painter", "pilot", "teacher", "farmer", "doctor", "writer", "sailor", "chemist", "tailor")
_COMPANY_DOCS = (
    "{c} is a company founded by {p}. It is based in {city}.",
    "{c} is a company based in {city}. It was founded by {p}.",
)
_PERSON_DOCS = ("{p} is a {job} who was born in {city}.", "{p} was born in {city} and works as a {job}.")
_CITY_DOC = "{city} is a city in {country}."
_QUERIES = {
    "birth": ("founder of {c}", "birthplace of {b}"),
    "country": ("location of {c}", "country of {b}"),
}
"""The teacher's two searches per question kind: an entity's name after a word, so the name is
written as the question and the documents write it (after a space; a tokenizer spells a word's
first piece differently after a space or a quote, which a small model copies poorly)."""
ANSWER_PATTERN = r"answer is (.+)"
"""The answer sentence the teacher ends with (``The answer is Lyon Falls.``), for the verifier
(``exact_match`` with ``pattern`` and ``normalize``)."""
_QUESTIONS = {
    "birth": ("In which city was the founder of {c} born?", "Where was the person who founded {c} born?"),
    "country": ("In which country is {c} based?", "Which country is {c} located in?"),
}


@dataclass(frozen=True)
class Question:
    """One two-hop question: its text, kind (``birth`` or ``country``), the company it starts
    from, the bridge entity the company's document names, the answer, the city the company's
    document names (the careless teacher's shortcut, always wrong), and the ids of the two
    documents a search agent needs (the company's and the bridge's)."""

    text: str
    kind: str
    company: str
    bridge: str
    answer: str
    shortcut: str
    company_doc: str
    bridge_doc: str

    @property
    def queries(self) -> tuple[str, str]:
        """The teacher's two search queries: the company's, then the bridge's."""
        first, second = _QUERIES[self.kind]
        return first.format(c=self.company), second.format(b=self.bridge)

    def row(self, split: str, index: int) -> dict[str, Any]:
        """The question as a data set row (RLinf's JSON lines, verl's column names): ``prompt``
        (one user message), ``answer``, ``data_source``, ``extra_info``."""
        return {
            "data_source": DATA_SOURCES[self.kind],
            "prompt": [{"role": "user", "content": self.text}],
            "answer": self.answer,
            "extra_info": {
                "split": split,
                "index": index,
                "company": self.company,
                "bridge": self.bridge,
                "shortcut": self.shortcut,
                "documents": [self.company_doc, self.bridge_doc],
            },
        }


@dataclass
class World:
    """The documents (``{id, text}``, in file order) and the questions of each split, with how
    many drafted questions the two-hop check dropped."""

    documents: list[dict[str, str]]
    train: list[Question]
    heldout: list[Question]
    dropped: dict[str, int] = field(default_factory=dict)


_SHARES = {"company": 3, "first": 1, "surname": 1, "city": 1}
"""How the name words are shared out among the pools (half of them for companies)."""


def _pool_size(role: str, words: int) -> int:
    return max(1, words * _SHARES[role] // sum(_SHARES.values()))


def _word_pools(rng: random.Random, words: int) -> dict[str, list[str]]:
    """The world's name words, ``words`` in all, disjoint pools: half for companies, a
    sixth each for first names, surnames and cities. Apart, a word names one kind of entity, so
    the search index never mistakes a founder's name for a company's."""
    seen: set[str] = set()
    pools: dict[str, list[str]] = {}
    for role in _SHARES:
        pools[role] = []
        while len(pools[role]) < _pool_size(role, words):
            word = (rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES)).capitalize()
            if word not in seen:
                seen.add(word)
                pools[role].append(word)
    return pools


def _namer(rng: random.Random, words: int) -> Callable[[str], str]:
    """``name(role)``: a fresh two-word name: a company (``Velo Labs``: a company word and a
    kind), a person (``Tade Nile``: a first name and a surname) or a city (``Kesh Harbor``). The
    words recur across names (a small model knows each of them), the names do not."""
    pools = _word_pools(rng, words)
    parts = {
        "company": (pools["company"], _COMPANY_KINDS),
        "person": (pools["first"], pools["surname"]),
        "city": (pools["city"], _CITY_KINDS),
    }
    used: set[str] = set()

    def name(role: str) -> str:
        first, second = parts[role]
        for _ in range(10_000):
            full = f"{rng.choice(first)} {rng.choice(second)}"
            if full not in used:
                used.add(full)
                return full
        raise RuntimeError(f"ran out of fresh {role} names; raise `words` or lower the world's sizes")

    return name


def answer_matches(response: str, answer: str) -> bool:
    """The verifier: the response's answer (what follows its last ``answer is``) equals the
    answer after :func:`normalize_answer` (lower-cased, punctuation and articles dropped,
    whitespace collapsed): the ``exact_match`` reward with ``pattern: "answer is (.+)"`` and
    ``normalize: true``."""
    return ExactMatchReward(normalize=True, pattern=ANSWER_PATTERN).score(response, answer) == 1.0


def make_world(
    seed: int = 0,
    companies: int = 4000,
    heldout_companies: int = 100,
    cities: int = 1200,
    heldout_cities: int = 60,
    countries: int = 16,
    words: int = 1200,
    top_k: int = 3,
    search: Callable[[Sequence[dict[str, str]]], Callable[[str], list[dict[str, str]]]] | None = None,
) -> World:
    """A world from ``seed`` (the same on every machine): ``companies`` training companies and
    ``heldout_companies`` held-out ones, each with its founder (a person of its own) and a city,
    drawn from ``cities`` and ``heldout_cities`` apart; every city in one of ``countries``. Two
    questions per company (one of each kind), checked with the BM25 index at ``top_k`` (see the
    module docstring); the failures are dropped and counted in :attr:`World.dropped`. ``words``
    name words make every name (see the module docstring); a world too large for them is refused
    with the ``words`` it needs.

    ``search`` builds the retriever from the documents (default: the ``search`` tool's
    :class:`~rlinf_algos.tools.search.BM25Index`): ``search(docs)(query) -> top_k documents``.
    """
    for what, n, role, kinds in (
        ("companies", companies + heldout_companies, "company", _COMPANY_KINDS),
        ("cities", cities + heldout_cities, "city", _CITY_KINDS),
    ):

        def fits(w: int, n: int = n, role: str = role, kinds: tuple[str, ...] = kinds) -> bool:
            return n <= 0.8 * _pool_size(role, w) * len(kinds)  # fresh names stay easy to draw

        if not fits(words):
            need = next(w for w in range(words, 100 * n + 100) if fits(w))
            raise ValueError(f"{n} {what} need at least {need} name words (words), got {words}")
    rng = random.Random(f"rlinf-multihop:{seed}")
    name = _namer(rng, words)
    country_names: list[str] = []
    while len(country_names) < countries:  # one word each, apart from the name words
        country = (
            rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES) + rng.choice(_COUNTRY_SUFFIXES)
        ).capitalize()
        if country not in country_names:
            country_names.append(country)
    docs: list[dict[str, str]] = []
    facts: dict[str, dict[str, str]] = {}  # entity -> its facts

    def add_doc(text: str) -> str:
        doc_id = f"d{len(docs)}"
        docs.append({"id": doc_id, "text": text})
        return doc_id

    def make_cities(n: int) -> list[str]:
        out = []
        for _ in range(n):
            city, country = name("city"), rng.choice(country_names)
            facts[city] = {"country": country, "doc": add_doc(_CITY_DOC.format(city=city, country=country))}
            out.append(city)
        return out

    def make_companies(n: int, city_pool: list[str]) -> list[str]:
        out = []
        for _ in range(n):
            company = name("company")
            person = name("person")
            hq, birth = rng.sample(city_pool, 2)
            job = rng.choice(_JOBS)
            p_doc = add_doc(rng.choice(_PERSON_DOCS).format(p=person, job=job, city=birth))
            c_doc = add_doc(rng.choice(_COMPANY_DOCS).format(c=company, p=person, city=hq))
            facts[person] = {"city": birth, "doc": p_doc}
            facts[company] = {"founder": person, "city": hq, "doc": c_doc}
            out.append(company)
        return out

    train_cities = make_cities(cities)
    held_cities = make_cities(heldout_cities)
    train_companies = make_companies(companies, train_cities)
    held_companies = make_companies(heldout_companies, held_cities)
    rng.shuffle(docs)  # documents of one kind are not adjacent in the file
    retrieve = (search or _bm25_search(top_k))(docs)
    dropped: dict[str, int] = {}

    def draft(company: str) -> list[Question]:
        c = facts[company]
        founder, hq = c["founder"], c["city"]
        out = []
        for kind in ("birth", "country"):
            text = rng.choice(_QUESTIONS[kind]).format(c=company)
            bridge, answer = (
                (founder, facts[founder]["city"]) if kind == "birth" else (hq, facts[hq]["country"])
            )
            q = Question(text, kind, company, bridge, answer, hq, c["doc"], facts[bridge]["doc"])
            why = two_hop_problem(q, retrieve)
            if why:
                dropped[why] = dropped.get(why, 0) + 1
            else:
                out.append(q)
        return out

    train = [q for c in train_companies for q in draft(c)]
    heldout = [q for c in held_companies for q in draft(c)]
    rng.shuffle(train)
    return World(docs, train, heldout, dropped)


def _bm25_search(top_k: int) -> Callable[[Sequence[dict[str, str]]], Callable[[str], list[dict[str, str]]]]:
    def build(docs: Sequence[dict[str, str]]) -> Callable[[str], list[dict[str, str]]]:
        from rlinf_algos.tools.search import BM25Index

        index = BM25Index(docs)
        return lambda query: [{"id": h.id, "text": h.text} for h in index.search(query, top_k)]

    return build


def two_hop_problem(q: Question, retrieve: Callable[[str], list[dict[str, str]]]) -> str:
    """Why ``q`` is not a two-hop question under ``retrieve`` (``query -> documents``, the
    search tool's top-k), ``""`` when it is: the question's text alone retrieves a document
    holding the answer, or the company's name does not retrieve the company's document, or the
    bridge's name does not retrieve the document that states the answer."""
    norm = normalize_answer(q.answer)
    if any(norm in normalize_answer(d["text"]) for d in retrieve(q.text)):  # substring: strict
        return "the question alone retrieves the answer"
    first, second = q.queries
    if q.company_doc not in [d["id"] for d in retrieve(first)]:
        return "the first search does not retrieve the company's document"
    if q.bridge_doc not in [d["id"] for d in retrieve(second)]:
        return "the second search does not retrieve the answer's document"
    return ""


def _call(query: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}


def teacher_trace(
    question: Question, search: Callable[[str], str], slip: bool = False
) -> list[dict[str, Any]]:
    """A conversation in TRL's format that answers ``question`` with the ``search`` tool:
    search the company, search the bridge (:attr:`Question.queries`), answer (``The answer is
    X.``); ``slip``: answer the company document's city after the first search instead (the
    careless teacher). ``search(query) -> text`` is the tool
    (its real results go into the ``tool`` messages)."""
    first, second = question.queries
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": question.text},
        {"role": "assistant", "content": "", "tool_calls": [_call(first)]},
        {"role": "tool", "name": "search", "content": search(first)},
    ]
    if slip:
        return [*msgs, {"role": "assistant", "content": f"The answer is {question.shortcut}."}]
    return [
        *msgs,
        {"role": "assistant", "content": "", "tool_calls": [_call(second)]},
        {"role": "tool", "name": "search", "content": search(second)},
        {"role": "assistant", "content": f"The answer is {question.answer}."},
    ]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    from rlinf_core.io import atomic_write_text

    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(lines))
    return len(lines)


def write_dataset(
    out: str | Path,
    seed: int = 0,
    slip: float = 0.5,
    top_k: int = 3,
    max_passage_chars: int = 500,
    **sizes: int,
) -> dict[str, Any]:
    """Write the search example's files into ``out`` and return what was written:

    - ``corpus.jsonl``: the documents (``id``, ``text``), what the ``search`` tool indexes;
    - ``train.jsonl`` / ``val.jsonl``: the training and held-out questions (RLinf's JSON lines:
      ``prompt`` as one user message, ``answer``, ``data_source``, ``extra_info``);
    - ``sft_train.jsonl``: one trace per training question (``messages``, TRL's format), the
      careless teacher's (it answers after one search with probability ``slip``);
    - ``sft_val.jsonl``: a careful teacher's traces of the held-out questions.

    The traces hold the real results of the built-in ``search`` tool over ``corpus.jsonl`` with
    ``top_k`` and ``max_passage_chars``: the run's ``tools`` section must give the same.
    ``sizes``: :func:`make_world`'s sizes. Seeded by ``seed`` alone: the same files on every
    machine."""
    from rlinf_algos.tools.search import Search

    out = Path(out)
    world = make_world(seed, top_k=top_k, **sizes)
    _write_jsonl(out / "corpus.jsonl", world.documents)
    tool = Search(str(out / "corpus.jsonl"), top_k=top_k, max_passage_chars=max_passage_chars)
    teacher = random.Random(f"rlinf-multihop-teacher:{seed}")
    counts = {
        "documents": len(world.documents),
        "train": _write_jsonl(out / "train.jsonl", (q.row("train", i) for i, q in enumerate(world.train))),
        "val": _write_jsonl(out / "val.jsonl", (q.row("val", i) for i, q in enumerate(world.heldout))),
    }
    slips = [teacher.random() < slip for _ in world.train]
    counts["sft_train"] = _write_jsonl(
        out / "sft_train.jsonl",
        (
            {"messages": teacher_trace(q, tool.search, s), "data_source": DATA_SOURCES[q.kind], "slip": s}
            for q, s in zip(world.train, slips, strict=True)
        ),
    )
    counts["sft_val"] = _write_jsonl(
        out / "sft_val.jsonl",
        (
            {"messages": teacher_trace(q, tool.search), "data_source": DATA_SOURCES[q.kind]}
            for q in world.heldout
        ),
    )
    counts["slipped"] = sum(slips)
    counts["dropped"] = dict(world.dropped)
    return counts
