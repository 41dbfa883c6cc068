"""The search example's world played by a lead and its subagents (WideSeek-R1's shape, seed 003):
warm-start traces for one policy in both roles (*light*: no torch).

The questions, the corpus and the verifier are :mod:`~rlinf_algos.lm.agentic.multihop`'s. Here
the lead does not search: it splits a two-hop question into two one-hop questions and hands each
to a subagent (``ask``), which searches in a context of its own and answers::

    lead      user: In which city was the founder of Veltrix born?
              assistant: ask(question="Who founded Veltrix?")
              tool: The answer is Ada Morn.                       <- a subagent's final answer
              assistant: ask(question="Where was Ada Morn born?")
              tool: The answer is Lyonford.
              assistant: The answer is Lyonford.
    subagent  user: Who founded Veltrix?
              assistant: search(query="founder of Veltrix")
              tool: [d12] Veltrix is a company founded by Ada Morn. ...
              assistant: The answer is Ada Morn.

:func:`write_wideseek` writes those traces in TRL's conversational format, each row with the
tool schemas its agent sees (a ``tools`` column: the lead's ``ask`` as
:func:`~rlinf_algos.lm.agentic.subagents.ask_schema` writes it, the subagent's ``search``), so
``rlinf sft`` with ``data.tools_key: tools`` warm-starts one policy on both roles, each turn laid
out as a played episode lays it out. A careless lead (``slip``) answers after its first
subagent with that subagent's answer (the founder, or the city the company is based in): a
plausible, always wrong shortcut that GRPO's exact-match reward teaches the policy to drop.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlinf_algos.lm.agentic.multihop import DATA_SOURCES, Question, make_world
from rlinf_core.io import atomic_write_jsonl

__all__ = ["lead_trace", "sub_questions", "subagent_trace", "write_wideseek"]

_SUB_QUESTIONS = {
    "birth": ("Who founded {c}?", "Where was {b} born?"),
    "country": ("Where is {c} based?", "Which country is {b} in?"),
}


def sub_questions(q: Question) -> tuple[str, str]:
    """The lead's two questions for its subagents: the company's hop, then the bridge's."""
    first, second = _SUB_QUESTIONS[q.kind]
    return first.format(c=q.company), second.format(b=q.bridge)


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _answer(text: str) -> str:
    return f"The answer is {text}."


def subagent_trace(
    question: str, query: str, answer: str, search: Callable[[str], str]
) -> list[dict[str, Any]]:
    """A subagent's conversation: the question, one ``search`` (its real results), the answer."""
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [_call("search", {"query": query})]},
        {"role": "tool", "name": "search", "content": search(query)},
        {"role": "assistant", "content": _answer(answer)},
    ]


def lead_trace(q: Question, tool: str = "ask", slip: bool = False) -> list[dict[str, Any]]:
    """The lead's conversation for ``q``: ask the company's hop, ask the bridge's, answer (what
    its subagents answer is :func:`subagent_trace`'s last turn); ``slip``: answer the first
    subagent's answer after it instead (always wrong)."""
    first, second = sub_questions(q)
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": q.text},
        {"role": "assistant", "content": "", "tool_calls": [_call(tool, {"question": first})]},
        {"role": "tool", "name": tool, "content": _answer(q.bridge)},
    ]
    if slip:
        return [*msgs, {"role": "assistant", "content": _answer(q.bridge)}]
    return [
        *msgs,
        {"role": "assistant", "content": "", "tool_calls": [_call(tool, {"question": second})]},
        {"role": "tool", "name": tool, "content": _answer(q.answer)},
        {"role": "assistant", "content": _answer(q.answer)},
    ]


def write_wideseek(
    out: str | Path,
    seed: int = 0,
    slip: float = 0.5,
    top_k: int = 3,
    max_passage_chars: int = 500,
    tool: str = "ask",
    **sizes: int,
) -> dict[str, Any]:
    """Write the lead-and-subagents example's files into ``out`` and return what was written:

    - ``corpus.jsonl``, ``train.jsonl``, ``val.jsonl``: the multi-hop world's, byte for byte what
      :func:`~rlinf_algos.lm.agentic.multihop.write_dataset` writes for the same arguments (the
      GRPO prompts and held-out set are the single agent's);
    - ``wideseek_sft_train.jsonl``: per training question a lead trace (a careless one with
      probability ``slip``) and its subagents' traces; ``wideseek_sft_val.jsonl``: a careful
      lead's traces of the held-out questions and their subagents'. Each row: ``messages``,
      ``tools`` (the schemas its agent sees), ``agent`` (``lead`` or ``sub``), ``data_source``.

    The subagents' traces hold the real results of the ``search`` tool over ``corpus.jsonl`` with
    ``top_k`` and ``max_passage_chars`` (keep the run's tools section equal); ``tool`` is the
    lead's subagent tool (``algorithm.subagents.tool``, its description the default)."""
    from rlinf_algos.lm.agentic.subagents import ask_schema
    from rlinf_algos.tools import load_tools
    from rlinf_algos.tools.search import Search

    out = Path(out)
    world = make_world(seed, top_k=top_k, **sizes)
    atomic_write_jsonl(out / "corpus.jsonl", world.documents)
    searcher = Search(str(out / "corpus.jsonl"), top_k=top_k, max_passage_chars=max_passage_chars)
    entry = {"name": "search", "kwargs": {"corpus": str(out / "corpus.jsonl"), "top_k": top_k}}
    lead_tools, sub_tools = [ask_schema(tool)], load_tools([entry]).schemas
    teacher = random.Random(f"rlinf-wideseek-teacher:{seed}")

    def rows(q: Question, slip_it: bool) -> list[dict[str, Any]]:
        src = DATA_SOURCES[q.kind]
        lead = {
            "messages": lead_trace(q, tool, slip_it),
            "tools": lead_tools,
            "agent": "lead",
            "data_source": src,
        }
        hops = list(zip(sub_questions(q), q.queries, (q.bridge, q.answer), strict=True))
        subs = [
            {
                "messages": subagent_trace(text, query, answer, searcher.search),
                "tools": sub_tools,
                "agent": "sub",
                "data_source": src,
            }
            for text, query, answer in hops[: 1 if slip_it else 2]
        ]
        return [lead, *subs]

    counts: dict[str, Any] = {
        "documents": len(world.documents),
        "train": atomic_write_jsonl(
            out / "train.jsonl", (q.row("train", i) for i, q in enumerate(world.train))
        ),
        "val": atomic_write_jsonl(out / "val.jsonl", (q.row("val", i) for i, q in enumerate(world.heldout))),
    }
    slips = [teacher.random() < slip for _ in world.train]
    counts["sft_train"] = atomic_write_jsonl(
        out / "wideseek_sft_train.jsonl",
        (r for q, s in zip(world.train, slips, strict=True) for r in rows(q, s)),
    )
    counts["sft_val"] = atomic_write_jsonl(
        out / "wideseek_sft_val.jsonl", (r for q in world.heldout for r in rows(q, False))
    )
    counts["slipped"] = sum(slips)
    counts["dropped"] = dict(world.dropped)
    return counts
