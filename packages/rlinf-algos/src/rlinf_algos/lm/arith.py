"""The arithmetic task family, its output formats and its exact verifier (pure Python).

A problem is a sum of 2-3 digit numbers. The policy answers with a chain of two-operand steps,
each number zero-padded to the task's step width, then the final answer::

    prompt    <bos>48+317+92=
    response  <step>0048+0317=0365<step>0365+0092=0457<ans>457<eos>

Grouped problems (``mode: multiagent`` and ``mode: flat``) are sums of parenthesised groups,
``(12+34+56)+(78+90+11)=``. In multi-agent mode the lead agent answers in two turns around its
subagents (one per group, each with its own prompt only)::

    lead      <bos>(12+34+56)+(78+90+11)=<call>12+34+56<call>78+90+11<ret>   (turn 1: split)
    subagent  <bos>12+34+56=<step>...<ans>102<eos>                            (isolated contexts)
    subagent  <bos>78+90+11=<step>...<ans>179<eos>
    lead      ...<ret>102+179=<step>0102+0179=0281<ans>281<eos>               (turn 2: combine)

where ``102+179=`` is written into the lead's context by the orchestrator (not generated, so not
trained on). In ``flat`` mode one agent chains through every term of the grouped prompt.

:func:`verify_chain` is the reward: 1.0 for a well-formed chain whose final answer is exactly the
sum, ``format_reward`` (default 0) for a well-formed chain with a wrong answer, 0.0 for anything
malformed (missing ``<eos>``, a truncated step, leading zeros in the answer, stray tokens).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlinf_algos.lm.config import ArithTaskConfig

__all__ = [
    "Problem",
    "ProblemSampler",
    "Verdict",
    "careless_answer",
    "chain_text",
    "combine_prompt",
    "heldout_problems",
    "lead_calls_text",
    "max_response_tokens",
    "parse_calls",
    "prompt_text",
    "sft_example",
    "step_width",
    "teacher_add",
    "verify_chain",
]

_CHAIN_RE = re.compile(r"((?:<step>\d+\+\d+=\d+)+)<ans>(0|[1-9]\d*)<eos>")
_STEP_RE = re.compile(r"<step>(\d+)\+(\d+)=(\d+)")
_EXPR_RE = re.compile(r"(0|[1-9]\d*)(\+(0|[1-9]\d*))+")
_CALLS_RE = re.compile(r"((?:<call>[0-9+]*)+)<ret>")


@dataclass(frozen=True)
class Problem:
    """A sum of ``groups`` (one group for ``mode: single``)."""

    groups: tuple[tuple[int, ...], ...]

    @property
    def terms(self) -> tuple[int, ...]:
        return tuple(t for g in self.groups for t in g)

    @property
    def answer(self) -> int:
        return sum(self.terms)

    @property
    def grouped(self) -> bool:
        return len(self.groups) > 1


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one response."""

    reward: float
    well_formed: bool
    correct: bool
    answer: int | None
    reason: str


def step_width(cfg: ArithTaskConfig) -> int:
    """Digits every number of a step is zero-padded to: those of the largest possible total of
    the task family (so subagent, lead and flat chains share one format)."""
    groups = cfg.num_groups if cfg.mode != "single" else 1
    largest = groups * max(cfg.num_terms) * (10**cfg.max_digits - 1)
    return len(str(largest))


def _draw_group(rng: random.Random, cfg: ArithTaskConfig) -> tuple[int, ...]:
    n = rng.choice(cfg.num_terms)
    out = []
    for _ in range(n):
        digits = rng.randint(cfg.min_digits, cfg.max_digits)
        lo = 10 ** (digits - 1) if digits > 1 else 0
        out.append(rng.randint(lo, 10**digits - 1))
    return tuple(out)


def draw_problem(rng: random.Random, cfg: ArithTaskConfig) -> Problem:
    """One random problem of the task family."""
    if cfg.mode == "single":
        return Problem((_draw_group(rng, cfg),))
    return Problem(tuple(_draw_group(rng, cfg) for _ in range(cfg.num_groups)))


def heldout_problems(cfg: ArithTaskConfig) -> list[Problem]:
    """The held-out evaluation set: ``cfg.eval_size`` distinct problems from ``cfg.eval_seed``
    (the same list on every run and machine)."""
    rng = random.Random(cfg.eval_seed)
    seen: set[Problem] = set()
    out: list[Problem] = []
    while len(out) < cfg.eval_size:
        p = draw_problem(rng, cfg)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


class ProblemSampler:
    """Training problems from ``seed``, never one of ``exclude`` (the held-out set)."""

    def __init__(self, cfg: ArithTaskConfig, seed: int, exclude: Iterable[Problem] = ()) -> None:
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.exclude = set(exclude)

    def sample(self, n: int) -> list[Problem]:
        out = []
        while len(out) < n:
            p = draw_problem(self.rng, self.cfg)
            if p not in self.exclude:
                out.append(p)
        return out

    def state(self) -> dict[str, Any]:
        """Where the sampler is (its generator's state): what a checkpoint stores."""
        return {"rng": self.rng.getstate()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state`."""
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def _expr(terms: Sequence[int]) -> str:
    return "+".join(str(t) for t in terms)


def prompt_text(problem: Problem) -> str:
    """``48+317+92=`` or, grouped, ``(12+34)+(56+78)=`` (without ``<bos>``)."""
    if not problem.grouped:
        return _expr(problem.terms) + "="
    return "+".join(f"({_expr(g)})" for g in problem.groups) + "="


def _num(x: int, width: int, reverse: bool) -> str:
    s = f"{x:0{width}d}"
    return s[::-1] if reverse else s


def teacher_add(a: int, b: int, carry_drop: float = 0.0, rng: random.Random | None = None) -> int:
    """``a + b`` the way a demonstrating teacher writes it, digit by digit from the least
    significant: with ``carry_drop > 0`` each carry is forgotten with that probability (``rng``
    decides), so the teacher's demonstrations are sometimes wrong in a systematic way."""
    if carry_drop <= 0.0:
        return a + b
    if rng is None:
        raise ValueError("teacher_add: carry_drop > 0 needs an rng")
    out, place, carry = 0, 1, 0
    while a or b or carry:
        s = a % 10 + b % 10 + carry
        out += (s % 10) * place
        carry = 1 if s >= 10 and rng.random() >= carry_drop else 0
        a, b, place = a // 10, b // 10, place * 10
    return out


def chain_text(
    terms: Sequence[int],
    width: int,
    reverse: bool = True,
    carry_drop: float = 0.0,
    rng: random.Random | None = None,
) -> str:
    """The reference solution of ``sum(terms)``: running sums as steps, every number zero-padded
    to ``width`` digits and, when ``reverse``, written least-significant digit first; then the
    answer, written normally. With ``carry_drop > 0`` the running sums are a careless teacher's
    (:func:`teacher_add`), and so is the answer."""
    if len(terms) < 2:
        raise ValueError("chain_text needs at least two terms")
    parts = []
    acc = terms[0]
    for t in terms[1:]:
        nxt = teacher_add(acc, t, carry_drop, rng)
        parts.append(
            f"<step>{_num(acc, width, reverse)}+{_num(t, width, reverse)}={_num(nxt, width, reverse)}"
        )
        acc = nxt
    return "".join(parts) + f"<ans>{acc}<eos>"


def lead_calls_text(problem: Problem) -> str:
    """The lead's reference turn 1: one ``<call>`` per group, then ``<ret>``."""
    return "".join(f"<call>{_expr(g)}" for g in problem.groups) + "<ret>"


def combine_prompt(results: Sequence[int]) -> str:
    """What the orchestrator writes into the lead's context after ``<ret>``: the subagents'
    answers as a sum to finish, ``102+179=``."""
    return _expr(results) + "="


def parse_calls(text: str, max_calls: int) -> tuple[list[str] | None, str]:
    """The sub-task expressions of a lead's turn-1 ``text`` (``<call>a+b<call>c+d<ret>``), or
    ``(None, reason)`` when it is malformed: no ``<ret>`` at the end, an empty or non-sum call,
    fewer than two calls or more than ``max_calls``."""
    m = _CALLS_RE.fullmatch(text)
    if m is None:
        return None, "turn 1 is not <call>EXPR...<ret>"
    calls = m.group(1).split("<call>")[1:]
    if len(calls) < 2:
        return None, "fewer than two calls"
    if len(calls) > max_calls:
        return None, f"{len(calls)} calls, more than max_calls={max_calls}"
    for c in calls:
        if _EXPR_RE.fullmatch(c) is None:
            return None, f"call {c!r} is not a sum of numbers"
    return calls, "ok"


def verify_chain(response: str, answer: int, format_reward: float = 0.0) -> Verdict:
    """Score a chain-format ``response`` (the generated text after the prompt, ``<eos>``
    included) against the exact ``answer``.

    Returns 1.0 when the response is ``(<step>A+B=C)+<ans>N<eos>`` with ``N == answer`` (written
    without leading zeros); ``format_reward`` when well-formed with a different ``N``; 0.0 when
    malformed. Intermediate steps are format-checked only: the outcome is what is rewarded.
    """
    m = _CHAIN_RE.fullmatch(response)
    if m is None:
        if "<eos>" not in response:
            why = "no <eos> (truncated or unfinished)"
        elif "<ans>" not in response:
            why = "no <ans>"
        else:
            why = "not (<step>A+B=C)+<ans>N<eos>"
        return Verdict(0.0, False, False, None, why)
    got = int(m.group(2))
    if got == answer:
        return Verdict(1.0, True, True, got, "exact")
    return Verdict(float(format_reward), True, False, got, f"wrong answer {got} != {answer}")


def final_answer(response: str) -> int | None:
    """The answer of a well-formed chain, else ``None`` (what a subagent hands its lead)."""
    m = _CHAIN_RE.fullmatch(response)
    return int(m.group(2)) if m else None


def careless_answer(chain: str) -> str:
    """``chain`` with its ``<ans>`` replaced by the last running sum copied as the scratchpad
    writes it (least-significant digit first, leading zeros dropped): the slip of a teacher who
    forgets to turn the answer back around. ``<step>...=0102<ans>201<eos>`` becomes
    ``...<ans>102<eos>``."""
    steps = _STEP_RE.findall(chain)
    if not steps or "<ans>" not in chain:
        raise ValueError(f"careless_answer: not a chain: {chain!r}")
    return chain[: chain.index("<ans>")] + f"<ans>{int(steps[-1][2])}<eos>"


def sft_example(
    problem: Problem,
    mode: str,
    width: int,
    carry_drop: float = 0.0,
    rng: random.Random | None = None,
    answer_slip: float = 0.0,
    slip_scope: str = "final",
) -> list[tuple[str, list[tuple[str, bool]]]]:
    """Supervised sequences for one problem: a list of ``(kind, segments)`` where segments are
    ``(text, trained)`` pieces; the first piece is the prompt (``<bos>`` included).

    ``single``/``flat``: one chain over every term. ``multiagent``: the lead's whole trace (both
    turns trained, the orchestrator's ``combine_prompt`` not) and one subagent chain per group.
    ``carry_drop``/``rng``: the demonstrations of a careless teacher (:func:`teacher_add`);
    ``answer_slip``: the probability (``rng`` decides) that a chain's answer is
    :func:`careless_answer`'s, on the final chain (the one the verifier reads: the lead's last turn
    in multi-agent mode) or, with ``slip_scope="every"``, on every chain (the subagents' too).
    """
    if slip_scope not in ("final", "every"):
        raise ValueError(f"sft_example: slip_scope must be 'final' or 'every', got {slip_scope!r}")

    def chain_of(terms: Sequence[int], final: bool = True) -> str:
        chain = chain_text(terms, width, True, carry_drop, rng)
        if answer_slip > 0.0 and (final or slip_scope == "every"):
            if rng is None:
                raise ValueError("sft_example: answer_slip > 0 needs an rng")
            if rng.random() < answer_slip:
                chain = careless_answer(chain)
        return chain

    prompt = "<bos>" + prompt_text(problem)
    if mode in ("single", "flat"):
        return [("agent", [(prompt, False), (chain_of(problem.terms), True)])]
    subs = []
    sums = []
    for g in problem.groups:
        chain = chain_of(g, final=False)
        sums.append(int(chain[chain.index("<ans>") + 5 : -5]))
        subs.append(("sub", [("<bos>" + _expr(g) + "=", False), (chain, True)]))
    lead = [
        (prompt, False),
        (lead_calls_text(problem), True),
        (combine_prompt(sums), False),
        (chain_of(sums), True),
    ]
    return [("lead", lead), *subs]


def max_response_tokens(run: Any, tokenizer: Any) -> int:
    """``algorithm.max_new_tokens``, or when null the longest reference turn of the task family
    plus 8 tokens of slack (``run``: the validated sections, ``tokenizer``: a
    :class:`~rlinf_algos.lm.tokens.LMTokenizer`)."""
    if run.algorithm.max_new_tokens is not None:
        return run.algorithm.max_new_tokens
    t = run.task
    width = step_width(t)
    big = 10**t.max_digits - 1
    group = tuple([big] * max(t.num_terms))
    if t.mode == "single":
        longest = len(tokenizer.encode(chain_text(group, width)))
    else:
        p = Problem(tuple(group for _ in range(t.num_groups)))
        if t.mode == "flat":
            longest = len(tokenizer.encode(chain_text(p.terms, width)))
        else:
            sums = [sum(g) for g in p.groups]
            longest = max(
                len(tokenizer.encode(lead_calls_text(p))),
                len(tokenizer.encode(chain_text(group, width))),
                len(tokenizer.encode(chain_text(sums, width))),
            )
    return longest + 8
