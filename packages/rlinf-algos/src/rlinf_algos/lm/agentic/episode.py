"""Multi-turn tool-using episodes, token in and token out (*light*: no torch).

An episode starts from chat messages and the tools' schemas rendered by the tokenizer's own chat
template (``apply_chat_template(messages, tools=schemas, add_generation_prompt=True)``). Each turn
the policy samples ids (``generate``, passed in: the rollout engine in a run, a scripted policy in
a test); the sampled text is parsed for ``<tool_call>`` blocks; the calls run (concurrently, with
the episode's :class:`~rlinf_algos.tools.EpisodeTools`); the results go back as ``tool`` messages.

**Token in, token out.** The sampled ids are kept as they are, never decoded and re-encoded. What
goes between two turns is computed by :meth:`ChatFormat.insertion_ids` as the *difference* of two
renderings of the conversation by the template, with and without the new ``tool`` messages (and
the next generation prompt), preceded by what the template writes after an assistant turn's stop
token (ChatML's ``\\n`` after ``<|im_end|>``): only those inserted characters are encoded. So the
trained sequence is ``prompt + sampled_1 + inserted_1 + sampled_2 + ...`` exactly, the context of
turn ``k`` is that sequence's prefix, and the loss mask is 1 on sampled ids only.

**Batches.** Episodes are played concurrently, each at its own pace; a batch is one ``generate``
call for every episode ready to sample, sent when none is between turns (:class:`_Batcher`).
Without subagents these are the lock-step turns (turn ``k`` of every episode still running). A
tool may play episodes of its own in the same batches (:class:`EpisodeSlot`: a lead's subagents,
:mod:`~rlinf_algos.lm.agentic.subagents`); an episode waiting on them holds no batch back.

An episode stops on a turn without a tool call (``answer``), after ``max_turns`` turns (``max_turns``:
the last turn's calls are not run), when the response (sampled plus inserted ids) would pass
``max_response_tokens`` (``budget``), or on a turn cut by ``max_new_tokens`` without a call
(``length``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlinf_algos.lm.agentic.calls import ToolCall, parse_tool_calls
from rlinf_algos.tools.registry import ToolResult, ToolStats
from rlinf_core.errors import RlinfError

__all__ = [
    "ChatFormat",
    "Episode",
    "EpisodeConfig",
    "EpisodeSlot",
    "EpisodeToolCalls",
    "GenerateFn",
    "ToolProvider",
    "play_episodes",
    "run_episodes",
]


class EpisodeToolCalls(Protocol):
    """What an episode calls its tools through: :class:`~rlinf_algos.tools.EpisodeTools` in
    process, or a client of tool processes placed elsewhere."""

    stats: ToolStats

    async def call(self, name: Any, arguments: Any) -> ToolResult: ...

    def malformed(self, text: str, name: str = "(unparsed)") -> ToolResult: ...


class ToolProvider(Protocol):
    """Where episodes get their tools: a :class:`~rlinf_algos.tools.ToolBox`, or any object whose
    :meth:`episode` gives one :class:`EpisodeToolCalls` per episode (tool sets with episode state
    built and reset), e.g. a client of placed tool workers."""

    def episode(self) -> EpisodeToolCalls: ...


GenerateFn = Callable[[list[list[int]], int, Sequence[int]], "list[list[int]] | Awaitable[list[list[int]]]"]
"""``generate(contexts, max_new_tokens, stop_ids) -> sampled``: ids in, sampled ids out (the
same contract as :data:`rlinf_algos.lm.agents.GenerateFn`; may be ``async``)."""

_MARK = "\u2063RLINF_ASSISTANT_CONTENT\u2063"


class ChatFormat:
    """What a tokenizer's chat template writes around turns, for one set of tool schemas.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tools: the tool schemas (``ToolBox.schemas``) given to every rendering.

    Raises:
        RlinfError: the tokenizer has no chat template, or its template does not render an
            assistant turn after its generation prompt (so turns cannot be joined as ids).
    """

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools] if tools else None
        if not getattr(tokenizer, "chat_template", None):
            raise RlinfError(
                "the tokenizer has no chat_template; tool-using episodes need one that renders 'tool' "
                "messages (set chat_template in the model folder's tokenizer_config.json)"
            )
        user = [{"role": "user", "content": "U"}]
        opened = self.render(user, add_generation_prompt=True)
        full = self.render([*user, {"role": "assistant", "content": _MARK}], add_generation_prompt=False)
        if not full.startswith(opened) or _MARK not in full[len(opened) :]:
            raise RlinfError(
                "the chat template does not render an assistant message right after its generation prompt "
                f"(generation prompt ends {opened[-40:]!r}; the assistant turn renders {full[len(opened) - 40 :][:120]!r}); "
                "tool-using episodes need a template where it does"
            )
        self.closing = full[full.rindex(_MARK) + len(_MARK) :]
        """What the template writes after an assistant message's content (``<|im_end|>\\n``)."""
        stop = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        closing_ids = self.encode(self.closing)
        special = set(getattr(tokenizer, "all_special_ids", []) or []) | set(
            getattr(tokenizer, "added_tokens_decoder", {}) or {}
        )
        if closing_ids and closing_ids[0] in special:
            stop.add(closing_ids[0])
        self.stop_ids: list[int] = sorted(stop)
        self.end_of_turn_id: int | None = (
            closing_ids[0] if closing_ids and closing_ids[0] in stop else tokenizer.eos_token_id
        )
        """The id a policy ends its turn with: the template's end-of-turn token (``<|im_end|>``)
        when its closing starts with one, else the eos token."""

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    list(messages),
                    tools=self.tools,
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                )
            )
        except Exception as err:
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RlinfError(f"the chat template failed on {len(messages)} messages: {detail}") from None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The first context: the messages and tools rendered with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def insertion_ids(
        self,
        history: Sequence[Mapping[str, Any]],
        assistant: Mapping[str, Any],
        new_messages: Sequence[Mapping[str, Any]],
        *,
        stopped_with: int | None,
    ) -> list[int]:
        """The ids between a sampled turn and the next one.

        Args:
            history: the messages before the assistant turn just sampled.
            assistant: that turn as a message (its content is the decoded sampled text; it only
                has to render the same in both renderings).
            new_messages: the ``tool`` messages to insert.
            stopped_with: the stop id the sampled turn ended with, ``None`` if it was cut.

        Returns:
            ``encode(rest_of_closing + with[len(without):])`` where ``without`` renders
            ``history + [assistant]`` and ``with`` also the new messages and the generation
            prompt; ``rest_of_closing`` is what the template writes after the stop token (all of
            the closing when the turn was cut or stopped on a token the template does not write).
        """
        before = [*history, dict(assistant)]
        without = self.render(before, add_generation_prompt=False)
        with_new = self.render([*before, *new_messages], add_generation_prompt=True)
        if not with_new.startswith(without):
            at = next(
                (i for i, (a, b) in enumerate(zip(without, with_new, strict=False)) if a != b), len(without)
            )
            raise RlinfError(
                "the chat template re-renders earlier turns when tool messages are added (first difference at "
                f"character {at}: {without[at : at + 40]!r} became {with_new[at : at + 40]!r}); token-in/token-out "
                "episodes need a template whose rendering of a conversation is a prefix of its rendering with more messages"
            )
        trailer = self.closing
        if stopped_with is not None:
            stop_text = self.decode([stopped_with])
            if stop_text and self.closing.startswith(stop_text):
                trailer = self.closing[len(stop_text) :]
        return self.encode(trailer + with_new[len(without) :])

    def encode_conversation(self, messages: Sequence[Mapping[str, Any]], where: str = "") -> Episode:
        """A whole conversation laid out as a played episode would be: what ``rlinf sft`` trains
        on, so a warm start sees exactly the token layout its episodes will have.

        The prompt is every message before the first assistant turn (rendered with the generation
        prompt); each assistant turn is ``encode(its text) + [end_of_turn_id]``, its text being
        what the template writes for it (its ``tool_calls`` as the template renders them, so the
        policy learns to write calls that :func:`~rlinf_algos.lm.agentic.calls.parse_tool_calls`
        reads back); the messages between two assistant turns are :meth:`insertion_ids`. Messages
        after the last assistant turn are left out (nothing would be trained on them).

        Returns:
            an :class:`Episode` whose ``loss_mask`` is 1 on the assistant turns' ids only.

        Raises:
            RlinfError: no assistant message, nothing before the first one, or a template that
                re-renders earlier turns (``where`` names the conversation).
        """
        msgs = [_renderable(m) for m in messages]
        at = f"{where}: " if where else ""
        first = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), None)
        if first is None:
            raise RlinfError(f"{at}the conversation has no assistant message to train on")
        if first == 0:
            raise RlinfError(
                f"{at}the conversation starts with an assistant message; it needs a prompt before it"
            )
        last = max(i for i, m in enumerate(msgs) if m.get("role") == "assistant")
        history = msgs[:first]
        ep = Episode(prompt_ids=self.prompt_ids(history), messages=[dict(m) for m in msgs[: last + 1]])
        i = first
        while i <= last:
            turn = msgs[i]
            before = self.render(history, add_generation_prompt=True)
            after = self.render([*history, turn], add_generation_prompt=False)
            if not after.startswith(before) or not after.endswith(self.closing):
                raise RlinfError(
                    f"{at}the chat template does not render assistant message {i} as its generation prompt "
                    f"followed by the turn and {self.closing!r}; rlinf sft on conversations needs one that does"
                )
            text = after[len(before) : len(after) - len(self.closing)]
            stop = self.end_of_turn_id
            ep._add("sampled", [*self.encode(text), *([stop] if stop is not None else [])])
            ep.turns += 1
            j = i + 1
            while j <= last and msgs[j].get("role") != "assistant":
                j += 1
            if j <= last:
                try:
                    ins = self.insertion_ids(history, turn, msgs[i + 1 : j], stopped_with=stop)
                except RlinfError as err:
                    raise RlinfError(f"{at}{err}") from None
                ep._add("inserted", ins)
            history = [*history, turn, *msgs[i + 1 : j]]
            i = j
        ep.stop = "answer"
        return ep


def _renderable(message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` with ``content`` set (``""`` for an assistant message of tool calls only):
    templates concatenate it."""
    out = dict(message)
    if out.get("content") is None:
        out["content"] = ""
    return out


@dataclass
class EpisodeConfig:
    """Limits of an episode."""

    max_turns: int = 4
    """Assistant turns at most; the calls of the last allowed turn are not run."""
    max_new_tokens: int = 256
    """Sampled ids per turn at most."""
    max_response_tokens: int = 1024
    """Token budget: sampled plus inserted ids after the prompt, all turns together."""
    stop_ids: Sequence[int] | None = None
    """Ids that end a turn; default the tokenizer's eos and the template's end-of-turn token."""
    max_sequence_tokens: int | None = None
    """Prompt plus response at most (the model's context): an episode's budget is
    ``min(max_response_tokens, max_sequence_tokens - len(prompt))``; ``None``: no such cap."""
    stall_timeout_s: float = 600.0
    """Seconds the episodes may go without any of them changing state (a turn asked for, a tool
    call or a subagent ended) before :func:`run_episodes` raises naming what each waited on; more
    than the longest tool call may take (each has its own timeout), so only a bug trips it."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_new_tokens", "max_response_tokens"):
            if int(getattr(self, name)) < 1:
                raise RlinfError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if not float(self.stall_timeout_s) > 0:
            raise RlinfError(f"stall_timeout_s must be positive, got {self.stall_timeout_s!r}")
        if self.max_sequence_tokens is not None and int(self.max_sequence_tokens) < 2:
            raise RlinfError(f"max_sequence_tokens must be at least 2, got {self.max_sequence_tokens!r}")

    def budget(self, prompt_len: int) -> int:
        """Response ids an episode whose prompt has ``prompt_len`` ids may have."""
        if self.max_sequence_tokens is None:
            return int(self.max_response_tokens)
        return max(0, min(int(self.max_response_tokens), int(self.max_sequence_tokens) - prompt_len))


@dataclass
class Episode:
    """One played episode.

    Attributes:
        prompt_ids: the first context.
        response_ids: every id after the prompt: sampled and inserted, in order.
        loss_mask: per response id, 1 if the policy sampled it, 0 if it was inserted.
        segments: ``(kind, start, end)`` spans of ``response_ids``, ``kind`` ``sampled`` or ``inserted``.
        messages: the conversation (assistant contents decoded, for logs and rewards only).
        turns: assistant turns played.
        stop: ``answer``, ``max_turns``, ``budget`` or ``length``.
        results: every tool result, in order.
        stats: this episode's tool counters.
        subagents: the episodes its subagent tool played, in call order (each in a context of its
            own: :mod:`~rlinf_algos.lm.agentic.subagents`).
        key: where it was played: ``(e,)`` for the ``e``-th episode of :func:`run_episodes`,
            ``(e, j)`` for its ``j``-th subagent.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    segments: list[tuple[str, int, int]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    stop: str = ""
    results: list[ToolResult] = field(default_factory=list)
    stats: ToolStats = field(default_factory=ToolStats)
    subagents: list[Episode] = field(default_factory=list)
    key: tuple[int, ...] = ()

    @property
    def sequence(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def final_text(self) -> str:
        """The last assistant message's content."""
        last = next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)
        return str(last["content"]) if last else ""

    @property
    def final_ids(self) -> list[int]:
        """The ids of the last sampled turn (what a verifier scores), its stop id included."""
        last = next(((s, e) for kind, s, e in reversed(self.segments) if kind == "sampled"), None)
        return self.response_ids[last[0] : last[1]] if last else []

    def metrics(self) -> dict[str, float]:
        """This episode's figures: ``turns``, ``answered`` (1 when it ended on a turn without a
        tool call), ``tool_calls`` and ``tool_calls/NAME``, ``tool_errors``, ``tool_timeouts``,
        ``tool_malformed`` (calls that did not parse or had bad arguments), ``tool_unknown``
        and ``tool_latency_s`` (summed)."""
        st = self.stats
        out = {
            "turns": float(self.turns),
            "answered": 1.0 if self.stop == "answer" else 0.0,
            "tool_calls": float(sum(st.calls.values())),
            "tool_errors": float(sum(st.errors.values())),
            "tool_timeouts": float(sum(st.timeouts.values())),
            "tool_malformed": float(st.malformed),
            "tool_unknown": float(st.unknown),
            "tool_latency_s": float(st.latency_s),
        }
        for name, n in sorted(st.calls.items()):
            out[f"tool_calls/{name}"] = float(n)
        return out

    def _add(self, kind: str, ids: Sequence[int]) -> None:
        start = len(self.response_ids)
        self.response_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([1 if kind == "sampled" else 0] * len(ids))
        self.segments.append((kind, start, len(self.response_ids)))


@dataclass
class _State:
    episode: Episode
    history: list[dict[str, Any]]
    tools: EpisodeToolCalls
    budget: int
    done: bool = False


def _start(
    conversation: Sequence[Mapping[str, Any]], tools: EpisodeToolCalls, chat: ChatFormat, cfg: EpisodeConfig
) -> _State:
    history = [dict(m) for m in conversation]
    ep = Episode(prompt_ids=chat.prompt_ids(history), messages=list(history))
    state = _State(ep, history, tools, cfg.budget(len(ep.prompt_ids)))
    if state.budget < 1:  # the prompt alone fills the context
        state.done, ep.stop = True, "budget"
    return state


async def _run_calls(tools: EpisodeToolCalls, calls: Sequence[ToolCall]) -> list[ToolResult]:
    async def one(call: ToolCall) -> ToolResult:
        if call.error is not None:
            return tools.malformed(call.error, call.name or "(unparsed)")
        return await tools.call(call.name, call.arguments)

    return list(await asyncio.gather(*(one(c) for c in calls)))


class _Batcher:
    """One ``generate`` call for the turns of every episode ready to sample.

    Every episode being played (a lead's, a subagent's) has a key (a tuple: ``(e,)`` for the
    ``e``-th episode of :func:`run_episodes`, ``(e, j)`` for its ``j``-th subagent) and is in one
    of three states: ``running`` (between turns: parsing, calling tools), ``pending`` (its
    context is waiting for a sample) or ``waiting`` (on subagent episodes it started). A batch
    goes out when no episode is running and some are pending: all of them, in key order, so the
    batches (and the sampler's draws) do not depend on how long the tools took. An episode
    waiting on subagents never holds a batch back (no deadlock when every lead waits); one in a
    tool call does (each call has its own timeout), so without subagents the batches are the
    lock-step turns: turn ``k`` of every episode still running. Between batches it waits at
    most ``stall_s`` seconds for an episode to change state, then raises naming each episode's
    state (no bug in a tool or in this class hangs a run).
    """

    def __init__(self, generate: GenerateFn, stop_ids: Sequence[int], stall_s: float = 600.0) -> None:
        self.generate = generate
        self.stop_ids = list(stop_ids)
        self.stall_s = float(stall_s)
        self.calls = 0
        """``generate`` calls made."""
        self._state: dict[tuple[int, ...], str] = {}
        self._waits: dict[tuple[int, ...], int] = {}
        self._requests: dict[tuple[int, ...], tuple[list[int], int, asyncio.Future[list[int]]]] = {}
        self._changed = asyncio.Event()

    def join(self, key: tuple[int, ...]) -> None:
        if key in self._state:
            raise RlinfError(f"episode {key} is already being played")
        self._state[key] = "running"

    def leave(self, key: tuple[int, ...]) -> None:
        self._state.pop(key, None)
        self._changed.set()

    async def sample(self, key: tuple[int, ...], context: list[int], cap: int) -> list[int]:
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._requests[key] = (context, cap, future)
        self._state[key] = "pending"
        self._changed.set()
        return await future

    @contextlib.contextmanager
    def waiting(self, key: tuple[int, ...]) -> Iterator[None]:
        """``key`` waits on episodes it started (they joined before): it holds no batch back."""
        self._waits[key] = self._waits.get(key, 0) + 1
        self._state[key] = "waiting"
        self._changed.set()
        try:
            yield
        finally:
            self._waits[key] -= 1
            if not self._waits[key]:
                del self._waits[key]
                if key in self._state:
                    self._state[key] = "running"
            self._changed.set()

    def _ready(self) -> bool:
        states = set(self._state.values())
        if "running" in states:
            return False
        if "pending" not in states and states:
            waiting = sorted(self._state)
            raise RlinfError(
                f"episodes {waiting} all wait on subagents that are not being played (an internal error: "
                "a subagent episode must join before its lead waits)"
            )
        return "pending" in states

    async def serve(self) -> None:
        """Send batches until every episode has ended."""
        while self._state:
            try:
                await asyncio.wait_for(self._changed.wait(), self.stall_s)
            except TimeoutError:
                raise RlinfError(self._stalled()) from None
            self._changed.clear()
            if not self._ready():
                continue
            for _ in range(2):  # episodes woken in this pass (a lead's other calls) join first
                await asyncio.sleep(0)
            if self._ready():
                await self._flush()

    def _stalled(self) -> str:
        what = {
            "running": "in a tool call",
            "pending": "waiting for a sample",
            "waiting": "waiting on subagents",
        }
        states = "; ".join(f"{k}: {what.get(v, v)}" for k, v in sorted(self._state.items()))
        return (
            f"no episode changed state within {self.stall_s:g} s (EpisodeConfig.stall_timeout_s; in a run "
            f"runner.worker_timeout plus the longest tool timeout_s), so no batch could be sent: {states}"
        )

    async def _flush(self) -> None:
        keys = sorted(k for k, s in self._state.items() if s == "pending")
        reqs = [self._requests.pop(k) for k in keys]
        for k in keys:
            self._state[k] = "running"
        self.calls += 1
        try:
            out = self.generate([r[0] for r in reqs], max(r[1] for r in reqs), self.stop_ids)
            if inspect.isawaitable(out):
                out = await out
            if not isinstance(out, list | tuple) or len(out) != len(reqs):
                raise RlinfError(
                    f"generate returned {type(out).__name__} of length "
                    f"{len(out) if hasattr(out, '__len__') else '?'} for {len(reqs)} contexts; it must "
                    "return one list of token ids per context"
                )
        except BaseException as err:
            for _, _, future in reqs:
                if future.done():
                    continue
                if isinstance(err, Exception):
                    future.set_exception(err)
                else:
                    future.cancel()
            raise
        for (_, _, future), sampled in zip(reqs, out, strict=True):
            if not future.done():
                future.set_result(list(sampled))


class EpisodeSlot:
    """Where one episode is being played: what a tool that plays episodes of its own (a
    subagent, :mod:`~rlinf_algos.lm.agentic.subagents`) is handed through its optional
    ``bind(slot)`` method, to start them in the same batches."""

    def __init__(self, batcher: _Batcher, key: tuple[int, ...], episode: Episode) -> None:
        self._batcher, self.key, self.episode = batcher, key, episode

    async def spawn(
        self,
        conversation: Sequence[Mapping[str, Any]],
        *,
        index: int,
        tools: EpisodeToolCalls,
        chat: ChatFormat,
        config: EpisodeConfig,
    ) -> Episode:
        """Play a child episode (key ``slot.key + (index,)``) from ``conversation``, its turns
        sampled in the batches of every other episode; this episode waits meanwhile. The child
        is added to :attr:`Episode.subagents` (in index order) and returned."""
        state = _start(conversation, tools, chat, config)
        key = (*self.key, int(index))
        state.episode.key = key
        self._batcher.join(key)  # before this episode waits: the batcher never sees neither
        with self._batcher.waiting(self.key):
            child = await _play(state, chat, config, self._batcher, key)
        self.episode.subagents.append(child)
        self.episode.subagents.sort(key=lambda c: c.key)
        return child


async def _play(
    s: _State, chat: ChatFormat, cfg: EpisodeConfig, batcher: _Batcher, key: tuple[int, ...]
) -> Episode:
    """Play one episode to its end, its turns sampled through ``batcher`` (it has joined)."""
    ep = s.episode
    stops = set(cfg.stop_ids) if cfg.stop_ids is not None else set(chat.stop_ids)
    try:
        bind = getattr(s.tools, "bind", None)
        if bind is not None:
            bind(EpisodeSlot(batcher, key, ep))
        while not s.done:
            cap = min(cfg.max_new_tokens, s.budget - len(ep.response_ids))
            sampled = await batcher.sample(key, ep.sequence, cap)
            ids = [int(i) for i in list(sampled)[:cap]]
            cut = next((k for k, i in enumerate(ids) if i in stops), None)
            if cut is not None:
                ids = ids[: cut + 1]
            stopped_with = ids[-1] if ids and ids[-1] in stops else None
            ep._add("sampled", ids)
            ep.turns += 1
            text = chat.decode(ids[:-1] if stopped_with is not None else ids)
            assistant = {"role": "assistant", "content": text}
            ep.messages.append(assistant)
            calls = parse_tool_calls(text)
            if not calls:
                s.done, ep.stop = True, ("answer" if stopped_with is not None else "length")
                break
            if ep.turns >= cfg.max_turns:
                s.done, ep.stop = True, "max_turns"
                break
            if len(ep.response_ids) >= s.budget:
                s.done, ep.stop = True, "budget"
                break
            res = await _run_calls(s.tools, calls)
            ep.results.extend(res)
            tool_msgs = [{"role": "tool", "name": r.name, "content": r.text} for r in res]
            ins = chat.insertion_ids(s.history, assistant, tool_msgs, stopped_with=stopped_with)
            s.history.extend([assistant, *tool_msgs])
            ep.messages.extend(tool_msgs)
            if len(ep.response_ids) + len(ins) >= s.budget:
                s.done, ep.stop = True, "budget"
                break
            ep._add("inserted", ins)
    finally:
        batcher.leave(key)
    ep.stats = s.tools.stats
    return ep


async def _together(coros: Sequence[Awaitable[Any]]) -> list[Any]:
    """Run ``coros`` concurrently; the first to raise cancels the others."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_episodes(
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    generate: GenerateFn,
    toolbox: ToolProvider,
    chat: ChatFormat,
    config: EpisodeConfig | None = None,
) -> list[Episode]:
    """Play one episode per conversation, concurrently: each batch is one ``generate`` call for
    every episode ready to sample (see :class:`_Batcher`; without subagents, turn ``k`` of every
    episode still running), their tool calls run concurrently.

    Raises:
        RlinfError: ``generate`` returned something else than one list of ids per context, or
            the chat template cannot join turns (see :class:`ChatFormat`), or no episode changed
            state within ``config.stall_timeout_s`` (naming what each waited on). Tool failures
            never raise: they are answered and counted.
    """
    cfg = config or EpisodeConfig()
    stop_ids = list(cfg.stop_ids) if cfg.stop_ids is not None else list(chat.stop_ids)
    batcher = _Batcher(generate, stop_ids, cfg.stall_timeout_s)
    states = [_start(conv, toolbox.episode(), chat, cfg) for conv in conversations]
    for i, s in enumerate(states):
        s.episode.key = (i,)
        batcher.join((i,))
    await _together([batcher.serve(), *(_play(s, chat, cfg, batcher, (i,)) for i, s in enumerate(states))])
    return [s.episode for s in states]


def play_episodes(
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    generate: GenerateFn,
    toolbox: ToolProvider,
    chat: ChatFormat,
    config: EpisodeConfig | None = None,
) -> list[Episode]:
    """:func:`run_episodes` from code without a running event loop."""
    return asyncio.run(
        run_episodes(conversations, generate=generate, toolbox=toolbox, chat=chat, config=config)
    )
