"""What a language-model GRPO run trains on: a task turns problems into prompt ids and scores the
responses (pure Python, no torch, so agents and the reward component stay light processes).

Three tasks share one interface, :class:`LMTask`:

- :class:`ArithTask` (``task`` section): the generated arithmetic family with its exact verifier,
  single-agent, multi-agent (lead + subagents) or flat;
- :class:`DatasetTask` (``data`` and ``reward`` sections): prompts from JSONL or parquet files
  (RLinf's and verl's layouts) scored by a reward function (a built-in, a plugin's, or the
  user's ``compute_score`` file);
- :class:`ToolTask` (``data``, ``reward`` and ``tools`` sections): the same prompts played as
  multi-turn tool-calling episodes (:class:`~rlinf_algos.lm.agents.ToolAgent`).

A problem crosses process boundaries as itself (an arithmetic :class:`~rlinf_algos.lm.arith.Problem`)
or as a :class:`SampleRef` (split and row); each process holding the task resolves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rlinf_algos.lm.arith import (
    Problem,
    ProblemSampler,
    heldout_problems,
    max_response_tokens,
    prompt_text,
    verify_chain,
)
from rlinf_algos.lm.tokens import ARITH_MARKERS, LMTokenizer
from rlinf_core.errors import RlinfError

__all__ = [
    "ArithTask",
    "DatasetTask",
    "LMTask",
    "SampleRef",
    "ToolTask",
    "is_arith",
    "make_task",
    "task_tokenizer",
]


class LMTask(Protocol):
    """The interface the agents, the reward component and the loop use."""

    mode: str
    """``single``, ``multiagent`` or ``flat`` (datasets are ``single``; with tools ``tools``)."""

    def heldout(self) -> list[Any]:
        """The evaluation problems (fixed across runs)."""

    def sampler(self, seed: int) -> Any:
        """An object with ``sample(n) -> list[problem]`` drawing training problems."""

    def prompt_ids(self, problem: Any) -> list[int]:
        """The prompt of ``problem`` as token ids."""

    def answer_of(self, problem: Any) -> Any:
        """What the reward needs besides the response (sent with every episode)."""

    def score(self, responses: Sequence[Sequence[int]], answers: Sequence[Any]) -> dict[str, Any]:
        """``rewards`` ``float32 [E]``, ``correct`` and ``well_formed`` ``bool [E]``, ``reasons``."""

    def max_new_tokens(self) -> int:
        """Tokens a response may have."""

    def describe(self, problem: Any) -> dict[str, Any]:
        """``prompt`` and ``answer`` of ``problem`` for the evaluation files."""


class ArithTask:
    """The arithmetic family of the ``task`` section, scored by the exact verifier."""

    def __init__(self, run: Any, tok: LMTokenizer) -> None:
        self.run, self.cfg, self.tok = run, run.task, tok
        self.mode = self.cfg.mode
        missing = [t for t in ARITH_MARKERS if not tok.has_token(t)]
        if missing:
            raise RlinfError(
                f"model.path {run.model.path}: its tokenizer has no {', '.join(missing)} token(s), which the "
                "arith task writes; rlinf train adds them (resolve_model), or add them as special tokens"
            )
        self._heldout = heldout_problems(self.cfg)

    def heldout(self) -> list[Problem]:
        return self._heldout

    def sampler(self, seed: int) -> ProblemSampler:
        return ProblemSampler(self.cfg, seed=seed, exclude=self._heldout)

    def prompt_ids(self, problem: Problem) -> list[int]:
        return self.tok.encode(prompt_text(problem), bos=True)

    def answer_of(self, problem: Problem) -> int:
        return problem.answer

    def score(self, responses: Sequence[Sequence[int]], answers: Sequence[Any]) -> dict[str, Any]:
        if len(responses) != len(answers):
            raise ValueError(f"{len(responses)} responses but {len(answers)} answers")
        rewards = np.zeros(len(answers), dtype=np.float32)
        correct = np.zeros(len(answers), dtype=bool)
        formed = np.zeros(len(answers), dtype=bool)
        reasons = []
        for i, (ids, ans) in enumerate(zip(responses, answers, strict=True)):
            v = verify_chain(self.tok.decode(list(ids)), int(ans), self.cfg.format_reward)
            rewards[i], correct[i], formed[i] = v.reward, v.correct, v.well_formed
            reasons.append(v.reason)
        return {"rewards": rewards, "correct": correct, "well_formed": formed, "reasons": reasons}

    def max_new_tokens(self) -> int:
        return max_response_tokens(self.run, self.tok)

    def describe(self, problem: Problem) -> dict[str, Any]:
        return {"prompt": prompt_text(problem), "answer": problem.answer}


@dataclass(frozen=True)
class SampleRef:
    """A row of a data set split: what travels between processes instead of the row."""

    split: str
    index: int


class _RowSampler:
    """Training rows in a seeded order: a fresh permutation every epoch."""

    def __init__(self, n: int, seed: int, shuffle: bool = True) -> None:
        self.n, self.shuffle = n, shuffle
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []

    def sample(self, k: int) -> list[SampleRef]:
        out = []
        while len(out) < k:
            if not self.order:
                self.order = (self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)).tolist()
            out.append(SampleRef("train", int(self.order.pop(0))))
        return out

    def state(self) -> dict[str, Any]:
        """The data position: the generator's state and what is left of this epoch's order."""
        return {"rng": self.rng.bit_generator.state, "order": list(self.order)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state`."""
        self.rng.bit_generator.state = dict(state["rng"])
        self.order = [int(i) for i in state["order"]]


class DatasetTask:
    """Prompts of the ``data`` section scored by the ``reward`` section's function.

    Args:
        run: the validated sections (``data``, ``reward``, ``algorithm``, ``model``).
        tok: the model's tokenizer (prompts are encoded with it).
        hf_tokenizer: a ``transformers`` tokenizer for chat templates (``None``: loaded from
            ``model.path`` when ``data.apply_chat_template`` needs it).
    """

    mode = "single"

    def __init__(self, run: Any, tok: LMTokenizer, hf_tokenizer: Any = None, reward_log: Any = None) -> None:
        from rlinf_algos.lm.data import load_dataset
        from rlinf_algos.lm.reward_host import contain_reward
        from rlinf_algos.lm.rewards import load_reward

        self.run, self.tok = run, tok
        if hf_tokenizer is None:
            hf_tokenizer = _hf_tokenizer(run)
        self.splits = {"train": load_dataset(run.data, "train", hf_tokenizer)}
        if run.data.val_files:
            self.splits["val"] = load_dataset(run.data, "val", hf_tokenizer)
        self.reward = contain_reward(load_reward(run.reward), reward_log)
        """A reward the user brings runs in a killable child process, each call within
        ``reward.timeout_s`` (:mod:`rlinf_algos.lm.reward_host`); its output goes to ``reward_log``."""
        self._prompts: dict[SampleRef, list[int]] = {}

    def sample(self, ref: SampleRef) -> Any:
        return self.splits[ref.split][ref.index]

    @property
    def reward_failures(self) -> int:
        """Samples scored 0 so far because the reward failed (``reward.on_error: zero``)."""
        return int(getattr(self.reward, "failures", 0))

    def data_report(self) -> dict[str, Any]:
        """Per split: the rows read, the prompts kept, and those left out (too long for
        ``data.max_prompt_length``...) with their reasons and first ``file:row`` sources: what
        ``summary.json`` records under ``data`` and the run's log says."""
        return {
            split: {
                "rows": ds.rows,
                "kept": len(ds),
                "filtered": ds.filtered,
                "filter_reasons": dict(ds.filter_reasons),
                "filtered_sources": ds.filtered_sources[:20],
            }
            for split, ds in self.splits.items()
        }

    def heldout(self) -> list[SampleRef]:
        val = self.splits.get("val")
        return [SampleRef("val", i) for i in range(len(val))] if val is not None else []

    def sampler(self, seed: int) -> _RowSampler:
        return _RowSampler(len(self.splits["train"]), seed, self.run.data.shuffle)

    def prompt_ids(self, problem: SampleRef) -> list[int]:
        ids = self._prompts.get(problem)
        if ids is None:
            text = self.sample(problem).prompt_text
            ids = self.tok.encode(text)
            if (
                self.tok.bos_id is not None
                and (not ids or ids[0] != self.tok.bos_id)
                and _wants_bos(self.tok)
            ):
                ids.insert(0, self.tok.bos_id)
            self._prompts[problem] = ids
        return ids

    def answer_of(self, problem: SampleRef) -> SampleRef:
        return problem

    def score(self, responses: Sequence[Sequence[int]], answers: Sequence[Any]) -> dict[str, Any]:
        refs = [
            a if isinstance(a, SampleRef) else SampleRef(**a) if isinstance(a, dict) else SampleRef(*a)
            for a in answers
        ]
        texts = [self.tok.decode([t for t in r if t != self.tok.eos_id]) for r in responses]
        scores = np.asarray(self.reward(texts, [self.sample(r) for r in refs]), dtype=np.float32)
        formed = np.asarray([bool(r) and r[-1] == self.tok.eos_id for r in responses], dtype=bool)
        return {
            "rewards": scores,
            "correct": scores >= 1.0,
            "well_formed": formed,
            "reasons": ["" for _ in refs],
            "failures": self.reward_failures,
        }

    def max_new_tokens(self) -> int:
        return self.run.algorithm.max_new_tokens or 256

    def describe(self, problem: SampleRef) -> dict[str, Any]:
        s = self.sample(problem)
        return {"prompt": s.prompt_text, "answer": s.answer, "source": s.source}


class ToolTask(DatasetTask):
    """A data set's prompts played as multi-turn tool-calling episodes (``mode: tools``): the run
    has a ``tools`` section. Each prompt (chat messages) is rendered by the model's chat template
    with the tools' schemas; the policy's turns are parsed for tool calls, which run, and their
    results go back as ``tool`` messages, until an answer, ``algorithm.max_turns`` or the token
    budget (:mod:`rlinf_algos.lm.agentic.episode`). The reward scores the last turn's text.

    The tools and the chat format are built when first used, so a reward process that only
    scores never loads the tools (a search index, say).

    Args:
        run: the validated sections (``data``, ``reward``, ``tools``, ``algorithm``, ``model``).
        tok: the model's tokenizer.
        hf_tokenizer: the ``transformers`` tokenizer (its chat template); default: loaded from
            ``model.path``.
        tools: where episodes get their tools (:class:`~rlinf_algos.lm.agentic.ToolProvider`);
            default: a :class:`~rlinf_algos.tools.ToolBox` of the ``tools`` section in this
            process. A runtime that places tool workers passes its client here.

    How a runtime gets episodes from it (the interface placed agent and tool roles keep):
    ``make_task(run)`` returns this task and ``make_agent(task, tok, task.max_new_tokens(),
    run.task.max_calls, context_length(run.model))`` a :class:`~rlinf_algos.lm.agents.ToolAgent`;
    ``agent.run(problems, group_size, generate)`` (blocking) or ``await agent.arun(...)`` plays
    ``group_size`` episodes per problem, where ``generate(contexts, max_new_tokens, stop_ids)``
    returns the sampled ids per context (sync or async: a rollout engine called directly, a
    :class:`~rlinf_algos.lm.remote_generate.ChannelGenerate` over the rollout
    workers in ``lm/placed.py`` and ``lm/roles.py``), and the tools come from ``tools=`` (above)
    or the agent's own ``tools``. It returns an :class:`~rlinf_algos.lm.agents.EpisodeBatch`: one
    training sequence per episode with its loss mask (sampled ids 1, inserted ids 0),
    ``episode_index``, ``final_responses`` (the last turn, what
    :class:`~rlinf_algos.lm.reward.Verifier` scores against ``answers``) and ``metrics`` (per
    episode; :func:`~rlinf_algos.lm.agents.episode_metrics` sums them for a metrics row).
    """

    mode = "tools"

    def __init__(
        self,
        run: Any,
        tok: LMTokenizer,
        hf_tokenizer: Any = None,
        reward_log: Any = None,
        tools: Any = None,
    ) -> None:
        if hf_tokenizer is None:
            from transformers import AutoTokenizer

            hf_tokenizer = AutoTokenizer.from_pretrained(
                run.model.path, trust_remote_code=run.model.trust_remote_code
            )
        super().__init__(run, tok, hf_tokenizer, reward_log)
        self.hf_tokenizer = hf_tokenizer
        self._toolbox = tools
        self._chat: Any = None
        self._subagents: Any = None
        self._messages: dict[SampleRef, list[dict[str, Any]]] = {}

    @property
    def toolbox(self) -> Any:
        """The tools episodes call (loaded from the ``tools`` section on first use)."""
        if self._toolbox is None:
            from rlinf_algos.tools import load_run_tools

            self._toolbox = load_run_tools(self.run.tools.entries)
        return self._toolbox

    @property
    def chat(self) -> Any:
        """The :class:`~rlinf_algos.lm.agentic.ChatFormat` of the model's template and the tools
        (the lead's: its subagent tool and ``lead_tools``, with ``algorithm.subagents``)."""
        if self._chat is None:
            from rlinf_algos.lm.agentic import ChatFormat
            from rlinf_algos.tools import load_run_tools

            box = self._toolbox if hasattr(self._toolbox, "schemas") else None
            schemas = (box or load_run_tools(self.run.tools.entries)).schemas
            sub = self.run.algorithm.subagents
            if sub is not None:
                from rlinf_algos.lm.agentic.subagents import lead_setup
                from rlinf_algos.lm.folder import context_length

                schemas, self._subagents = lead_setup(
                    self.hf_tokenizer,
                    schemas,
                    sub,
                    max_new_tokens=self.max_new_tokens(),
                    max_context=context_length(self.run.model),
                )
            self._chat = ChatFormat(self.hf_tokenizer, schemas)
        return self._chat

    @property
    def subagents(self) -> Any:
        """The :class:`~rlinf_algos.lm.agentic.subagents.SubagentSetup` of ``algorithm.subagents``
        (``None`` without): the lead's episodes call subagents."""
        if self.run.algorithm.subagents is None:
            return None
        self.chat  # noqa: B018 - built with the chat format
        return self._subagents

    def episode_tools(self, provider: Any) -> Any:
        """Where an episode's calls go, given where the run's tools run (``provider``): there,
        or for a lead the subagent tool over them (:class:`~rlinf_algos.lm.agentic.subagents.LeadTools`)."""
        sub = self.subagents
        return provider if sub is None else sub.lead(provider)

    def messages(self, problem: SampleRef) -> list[dict[str, Any]]:
        """The chat messages an episode of ``problem`` starts from."""
        msgs = self._messages.get(problem)
        if msgs is None:
            s = self.sample(problem)
            msgs = s.messages if s.messages is not None else [{"role": "user", "content": s.prompt_text}]
            self._messages[problem] = [dict(m) for m in msgs]
        return self._messages[problem]

    def prompt_ids(self, problem: SampleRef) -> list[int]:
        ids = self._prompts.get(problem)
        if ids is None:
            ids = self._prompts[problem] = self.chat.prompt_ids(self.messages(problem))
        return ids

    def episode_config(self, max_context: int) -> Any:
        """The episodes' limits: ``algorithm.max_turns``, ``max_new_tokens`` per turn,
        ``max_response_tokens`` (default: the context) and the model's context ``max_context``;
        the episodes fail rather than hang when none changes state for ``runner.worker_timeout``
        plus the longest tool timeout (a tool call, placed or here, ends within that)."""
        from rlinf_algos.lm.agentic import EpisodeConfig

        alg = self.run.algorithm
        longest_tool = max((e.timeout_s or 10.0 for e in self.run.tools.entries), default=10.0)
        return EpisodeConfig(
            max_turns=alg.max_turns,
            max_new_tokens=self.max_new_tokens(),
            max_response_tokens=alg.max_response_tokens or max_context,
            stop_ids=self.chat.stop_ids,
            max_sequence_tokens=max_context,
            stall_timeout_s=float(self.run.runner.worker_timeout) + float(longest_tool),
        )

    def score(self, responses: Sequence[Sequence[int]], answers: Sequence[Any]) -> dict[str, Any]:
        """The reward of each episode's last turn (its end-of-turn token dropped); well formed:
        the turn ended with an end-of-turn token (it was not cut)."""
        stops = set(self.chat.stop_ids)
        trimmed = [[t for t in r if t not in stops] for r in responses]
        out = super().score(trimmed, answers)
        out["well_formed"] = np.asarray([bool(r) and r[-1] in stops for r in responses], dtype=bool)
        return out


def _wants_bos(tok: LMTokenizer) -> bool:
    """Whether the tokenizer's post-processor would add its bos token (Llama-style) to text."""
    backend = tok.backend
    if hasattr(backend, "encode_batch"):
        return bool(backend.encode("", add_special_tokens=True).ids)
    return bool(backend.build_inputs_with_special_tokens([]))


def _hf_tokenizer(run: Any) -> Any:
    if run.data.apply_chat_template is False and run.data.max_prompt_length is None:
        return None  # plain-text prompts: no transformers tokenizer needed (nor torch)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(run.model.path, trust_remote_code=run.model.trust_remote_code)


def is_arith(run: Any) -> bool:
    """Whether ``run`` trains on the arithmetic task (it has no ``data`` section)."""
    return getattr(run, "data", None) is None


def task_tokenizer(run: Any) -> LMTokenizer:
    """The tokenizer of ``model.path`` as the run's task uses it: as it is for a data set, the
    arithmetic task's view (:meth:`~rlinf_algos.lm.tokens.LMTokenizer.arith_view`) otherwise."""
    tok = LMTokenizer.from_folder(run.model.path or "", run.model.trust_remote_code)
    return tok.arith_view() if is_arith(run) else tok


def make_task(run: Any, tok: LMTokenizer, reward_log: Any = None) -> ArithTask | DatasetTask:
    """The task of a validated run: :class:`DatasetTask` when it has a ``data`` section (its
    reward's output going to ``reward_log``, e.g. ``RUN/logs/reward-<worker>.log``),
    :class:`ToolTask` when it also has a ``tools`` section."""
    if is_arith(run):
        return ArithTask(run, tok)
    if getattr(run, "tools", None) is not None:
        return ToolTask(run, tok, reward_log=reward_log)
    return DatasetTask(run, tok, reward_log=reward_log)
