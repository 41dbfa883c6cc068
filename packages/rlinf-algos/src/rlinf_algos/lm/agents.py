"""Agents: how episodes are played against a generation function (pure Python, no torch).

An agent turns problems into token sequences for training. It never touches the model: it calls
``generate(prompts, max_new_tokens, stop_ids) -> responses`` (lists of token ids), which in
process is the rollout worker's :meth:`~rlinf_algos.lm.learner.HFEngine.generate` and, in a
distributed run, a request over a Channel to the rollout workers. So agents are light and can
run as many small processes.

- :class:`SingleAgent`: one prompt, one response (``mode: single`` and the ``flat`` baseline).
- :class:`HierarchicalAgent` (WideSeek-R1 style): a lead splits the task into ``<call>``
  sub-tasks, one subagent per call answers it in an isolated context (its own prompt only), the
  lead sums their answers. Every agent samples from the same policy. Every sequence of an
  episode (the lead's and each subagent's) is returned for training with the episode's index, so
  one GRPO loss runs over the whole hierarchical trace.
- :class:`ToolAgent` (``mode: tools``): multi-turn episodes that call tools (search, python, a
  user's) between turns, token in and token out (:mod:`rlinf_algos.lm.agentic`).

The result of both is an :class:`EpisodeBatch`, plain lists that serialise as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlinf_algos.lm.arith import combine_prompt, final_answer, parse_calls
from rlinf_algos.lm.tokens import LMTokenizer

__all__ = [
    "EpisodeBatch",
    "GenerateFn",
    "HierarchicalAgent",
    "SingleAgent",
    "ToolAgent",
    "episode_metrics",
    "make_agent",
]

GenerateFn = Callable[[list[list[int]], int, Sequence[int]], list[list[int]]]
"""``generate(prompts, max_new_tokens, stop_ids) -> responses``: token ids in, token ids out."""


@dataclass
class EpisodeBatch:
    """Episodes of one iteration (``E = P * G``, group after group) and their training sequences.

    Attributes:
        sequences: every sequence to train on (prompt included), ``N >= E`` of them.
        loss_masks: per sequence, 1 on the tokens the policy generated (trained on), 0 on the
            prompt and on text the orchestrator wrote into a context.
        episode_index: per sequence, the episode it belongs to (``0..E-1``).
        agent_kind: per sequence, ``"agent"``, ``"lead"`` or ``"sub"``.
        final_responses: per episode, the ids of the response the verifier scores (empty when
            the episode failed before its final turn).
        answers: per episode, what the reward needs besides the response (the task's
            ``answer_of``: the exact sum, or a data set row reference).
        failures: per episode, why it ended before its final turn (``""`` when it did not).
        generated_tokens: tokens sampled for these episodes.
    """

    sequences: list[list[int]] = field(default_factory=list)
    loss_masks: list[list[int]] = field(default_factory=list)
    episode_index: list[int] = field(default_factory=list)
    agent_kind: list[str] = field(default_factory=list)
    final_responses: list[list[int]] = field(default_factory=list)
    answers: list[Any] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    metrics: list[dict[str, float]] = field(default_factory=list)
    """Per episode, its figures (tool-calling episodes: :meth:`~rlinf_algos.lm.agentic.Episode.metrics`;
    empty for the other agents)."""

    @property
    def num_episodes(self) -> int:
        return len(self.answers)

    def add(self, seq: list[int], mask: list[int], episode: int, kind: str) -> None:
        self.sequences.append(seq)
        self.loss_masks.append(mask)
        self.episode_index.append(episode)
        self.agent_kind.append(kind)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _trim(ids: list[int], pad_id: int) -> list[int]:
    return [t for t in ids if t != pad_id]


class SingleAgent:
    """One agent, one context: the prompt, then the whole chain."""

    def __init__(self, task: Any, tokenizer: LMTokenizer, max_new_tokens: int) -> None:
        self.task = task
        self.tok = tokenizer
        self.max_new_tokens = max_new_tokens

    def run(self, problems: Sequence[Any], group_size: int, generate: GenerateFn) -> EpisodeBatch:
        """Play ``group_size`` episodes of every problem (episodes of one problem adjacent)."""
        out = EpisodeBatch()
        prompts: list[list[int]] = []
        for p in problems:
            ids = self.task.prompt_ids(p)
            answer = self.task.answer_of(p)
            for _ in range(group_size):
                prompts.append(ids)
                out.answers.append(answer)
        responses = generate(prompts, self.max_new_tokens, [self.tok.eos_id])
        for e, (prompt, resp) in enumerate(zip(prompts, responses, strict=True)):
            resp = _trim(resp, self.tok.pad_id)
            out.generated_tokens += len(resp)
            out.add(prompt + resp, [0] * len(prompt) + [1] * len(resp), e, "agent")
            out.final_responses.append(resp)
            out.failures.append("")
        return out


class HierarchicalAgent:
    """A lead agent and its subagents sharing one policy, each with an isolated context.

    Turn 1, the lead sees the grouped problem and writes ``<call>EXPR`` per sub-task, then
    ``<ret>``. Each call becomes a subagent whose context is only ``<bos>EXPR=``; it answers with
    a chain. The orchestrator writes the subagents' answers into the lead's context as
    ``r1+r2+...=`` and the lead (turn 2) answers with a chain: the episode's final response. A
    malformed turn 1 or a subagent without a well-formed answer ends the episode there (reward 0).
    All episodes of a batch advance turn by turn, so each turn is one batched generation.
    """

    def __init__(
        self, task: Any, tokenizer: LMTokenizer, max_new_tokens: int, max_calls: int, max_context: int
    ) -> None:
        self.task = task
        self.tok = tokenizer
        self.max_new_tokens = max_new_tokens
        self.max_calls = max_calls
        self.max_context = max_context

    def run(self, problems: Sequence[Any], group_size: int, generate: GenerateFn) -> EpisodeBatch:
        tok = self.tok
        out = EpisodeBatch()
        lead_prompts: list[list[int]] = []
        for p in problems:
            ids = self.task.prompt_ids(p)
            answer = self.task.answer_of(p)
            for _ in range(group_size):
                lead_prompts.append(ids)
                out.answers.append(answer)
        n = len(lead_prompts)
        out.failures = [""] * n
        out.final_responses = [[] for _ in range(n)]
        # turn 1: the lead splits the task
        turn1 = [
            _trim(r, tok.pad_id)
            for r in generate(lead_prompts, self.max_new_tokens, [tok.ret_id, tok.eos_id])
        ]
        out.generated_tokens += sum(len(r) for r in turn1)
        sub_prompts: list[list[int]] = []
        sub_owner: list[int] = []
        for e, r in enumerate(turn1):
            calls, why = parse_calls(tok.decode(r), self.max_calls)
            if calls is None:
                out.failures[e] = f"lead turn 1: {why}"
                continue
            for c in calls:
                sub_prompts.append(tok.encode(c + "=", bos=True))
                sub_owner.append(e)
        # the subagents, each in its own context
        sub_resp = [_trim(r, tok.pad_id) for r in generate(sub_prompts, self.max_new_tokens, [tok.eos_id])]
        out.generated_tokens += sum(len(r) for r in sub_resp)
        results: dict[int, list[int | None]] = {}
        sub_seqs: dict[int, list[tuple[list[int], list[int]]]] = {}
        for prompt, resp, e in zip(sub_prompts, sub_resp, sub_owner, strict=True):
            results.setdefault(e, []).append(final_answer(tok.decode(resp)))
            sub_seqs.setdefault(e, []).append((prompt + resp, [0] * len(prompt) + [1] * len(resp)))
        # turn 2: the lead combines the answers
        combine_ctx: list[list[int]] = []
        combine_owner: list[int] = []
        inserted: dict[int, list[int]] = {}
        for e, res in results.items():
            if any(r is None for r in res):
                bad = [i for i, r in enumerate(res) if r is None]
                out.failures[e] = f"subagent(s) {bad} gave no well-formed answer"
                continue
            inserted[e] = tok.encode(combine_prompt([int(r) for r in res if r is not None]))
            if len(lead_prompts[e]) + len(turn1[e]) + len(inserted[e]) >= self.max_context:
                out.failures[e] = f"lead context longer than {self.max_context} tokens"
                continue
            combine_ctx.append(lead_prompts[e] + turn1[e] + inserted[e])
            combine_owner.append(e)
        turn2: dict[int, list[int]] = {}
        if combine_ctx:
            for e, r in zip(
                combine_owner, generate(combine_ctx, self.max_new_tokens, [tok.eos_id]), strict=True
            ):
                turn2[e] = _trim(r, tok.pad_id)
                out.generated_tokens += len(turn2[e])
        # the trace: the lead's sequence, then its subagents'
        for e in range(n):
            prompt, t1 = lead_prompts[e], turn1[e]
            seq, mask = prompt + t1, [0] * len(prompt) + [1] * len(t1)
            if e in turn2:
                seq = seq + inserted[e] + turn2[e]
                mask = mask + [0] * len(inserted[e]) + [1] * len(turn2[e])
                out.final_responses[e] = turn2[e]
            out.add(seq, mask, e, "lead")
            for s, m in sub_seqs.get(e, []):
                out.add(s, m, e, "sub")
        return out


class ToolAgent:
    """Multi-turn tool-calling episodes (``mode: tools``, a :class:`~rlinf_algos.lm.tasks.ToolTask`):
    the policy's turns are parsed for tool calls in its chat template's format, the calls run,
    their results are inserted as ``tool`` messages, until an answer, ``algorithm.max_turns`` or
    the token budget (:func:`~rlinf_algos.lm.agentic.run_episodes`). Each episode is one training
    sequence, token in and token out: the sampled ids (mask 1) and the inserted ones (mask 0).
    Its final response is the last turn's ids; :attr:`EpisodeBatch.metrics` holds its turns and
    tool use.

    ``tools`` (here or per :meth:`run` call): where the calls run, any
    :class:`~rlinf_algos.lm.agentic.ToolProvider`; default the task's own in-process
    :class:`~rlinf_algos.tools.ToolBox`.
    """

    def __init__(
        self, task: Any, tokenizer: LMTokenizer, max_new_tokens: int, max_context: int, tools: Any = None
    ) -> None:
        self.task = task
        self.tok = tokenizer
        self.max_new_tokens = max_new_tokens
        self.max_context = max_context
        self.tools = tools

    def run(
        self, problems: Sequence[Any], group_size: int, generate: GenerateFn, tools: Any = None
    ) -> EpisodeBatch:
        """Play ``group_size`` episodes of every problem (episodes of one problem adjacent),
        blocking. Called from a thread whose event loop is running (the driver's loop calling the
        in-process components), the episodes' own loop runs in a helper thread; ``await``
        :meth:`arun` instead to share the caller's loop."""
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(problems, group_size, generate, tools))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="tool-episodes") as pool:
            return pool.submit(asyncio.run, self.arun(problems, group_size, generate, tools)).result()

    async def arun(
        self, problems: Sequence[Any], group_size: int, generate: Any, tools: Any = None
    ) -> EpisodeBatch:
        """:meth:`run` as a coroutine; ``generate`` may be ``async``."""
        import inspect

        from rlinf_algos.lm.agentic import run_episodes

        pad = self.tok.pad_id

        async def gen(contexts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
            out = generate(contexts, n, stop)
            if inspect.isawaitable(out):
                out = await out
            return [_trim(list(r), pad) for r in out]

        out = EpisodeBatch()
        names = [f"tool_calls/{e.name}" for e in self.task.run.tools.entries]  # the run's tools section
        sub = self.task.subagents
        if sub is not None:
            names.append(f"tool_calls/{sub.tool}")
        convs = []
        for p in problems:
            msgs, answer = self.task.messages(p), self.task.answer_of(p)
            for _ in range(group_size):
                convs.append(msgs)
                out.answers.append(answer)
        episodes = await run_episodes(
            convs,
            generate=gen,
            toolbox=self.task.episode_tools(tools or self.tools or self.task.toolbox),
            chat=self.task.chat,
            config=self.task.episode_config(self.max_context),
        )
        for e, ep in enumerate(episodes):
            # a lead's sequence, then its subagents' (each its own context and mask): one episode
            out.add(
                ep.sequence, [0] * len(ep.prompt_ids) + ep.loss_mask, e, "agent" if sub is None else "lead"
            )
            for child in ep.subagents:
                out.add(child.sequence, [0] * len(child.prompt_ids) + child.loss_mask, e, "sub")
                out.generated_tokens += sum(child.loss_mask)
            out.final_responses.append(ep.final_ids)
            out.failures.append("" if ep.stop == "answer" else f"stopped on {ep.stop} after {ep.turns} turns")
            out.generated_tokens += sum(ep.loss_mask)
            # every tool of the run has its column, 0 where this episode did not call it
            row = {**dict.fromkeys(names, 0.0), **ep.metrics()}
            if sub is not None:
                from rlinf_algos.lm.agentic.subagents import subagent_figures

                row.update(subagent_figures(ep, sub.tools))
            out.metrics.append(row)
        return out


def episode_metrics(batch: EpisodeBatch, correct: Sequence[Any] | None = None) -> dict[str, float]:
    """The tool figures of a batch's episodes (empty when they have none): means per episode of
    ``turns``, ``answer_rate``, ``tool_calls`` and ``tool_calls/NAME``; totals of ``tool_errors``,
    ``tool_timeouts``, ``tool_malformed`` and ``tool_unknown``; ``tool_latency_mean_s`` per call;
    and ``success`` (the fraction of ``correct``) when given. A lead's episodes
    (``algorithm.subagents``) add ``subagent_calls`` per lead episode, then per subagent
    ``subagent_turns``, ``subagent_tool_calls`` (and per tool), ``subagent_answer_rate``, and the
    total ``subagent_tool_errors``."""
    rows = batch.metrics
    if not rows:
        return {}
    n = len(rows)
    calls = sum(r["tool_calls"] for r in rows)
    out = {
        "turns": sum(r["turns"] for r in rows) / n,
        "answer_rate": sum(r["answered"] for r in rows) / n,
        "tool_calls": calls / n,
        "tool_errors": sum(r["tool_errors"] for r in rows),
        "tool_timeouts": sum(r["tool_timeouts"] for r in rows),
        "tool_malformed": sum(r["tool_malformed"] for r in rows),
        "tool_unknown": sum(r["tool_unknown"] for r in rows),
        "tool_latency_mean_s": sum(r["tool_latency_s"] for r in rows) / calls if calls else 0.0,
    }
    for name in sorted({k for r in rows for k in r if k.startswith("tool_calls/")}):
        out[name] = sum(r.get(name, 0.0) for r in rows) / n
    if any("subagent_calls" in r for r in rows):  # a lead's episodes: per lead, then per subagent
        subs = sum(r.get("subagent_calls", 0.0) for r in rows)
        out["subagent_calls"] = subs / n
        for key in ("subagent_turns", "subagent_tool_calls"):
            out[key] = sum(r.get(key, 0.0) for r in rows) / subs if subs else 0.0
        out["subagent_answer_rate"] = (
            sum(r.get("subagent_answered", 0.0) for r in rows) / subs if subs else 0.0
        )
        out["subagent_tool_errors"] = sum(r.get("subagent_tool_errors", 0.0) for r in rows)
        for name in sorted({k for r in rows for k in r if k.startswith("subagent_tool_calls/")}):
            out[name] = sum(r.get(name, 0.0) for r in rows) / subs if subs else 0.0
    if correct is not None:
        out["success"] = sum(bool(c) for c in correct) / max(len(correct), 1)
    return out


def make_agent(
    task: Any, tokenizer: LMTokenizer, max_new_tokens: int, max_calls: int, max_context: int
) -> SingleAgent | HierarchicalAgent | ToolAgent:
    """The agent of ``task.mode`` (``task``: an :class:`~rlinf_algos.lm.tasks.LMTask`):
    hierarchical for ``multiagent``, tool-calling for ``tools``, single otherwise;
    ``max_context`` is the longest sequence."""
    if task.mode == "multiagent":
        return HierarchicalAgent(task, tokenizer, max_new_tokens, max_calls, max_context)
    if task.mode == "tools":
        return ToolAgent(task, tokenizer, max_new_tokens, max_context)
    return SingleAgent(task, tokenizer, max_new_tokens)
