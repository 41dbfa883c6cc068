"""Every model output and tool result is survivable (issue 53, item 2).

A model's tool call nested 40 levels deep or holding a 5,000-digit number, a tool whose result's
``str()`` raises, holds a lone surrogate, is bytes or is huge, a tool raising
``asyncio.CancelledError``, ``SystemExit`` or ``KeyboardInterrupt``, calling ``os._exit``, an
``async`` tool that blocks its event loop: each is an answer to the model and a counted tool
result, never the end of the run. A fuzz over malformed and adversarial model outputs (fixed
seed, bounded: ``RLINF_OUTPUT_FUZZ_EXAMPLES``, default 80) plays them through the parser, the
tools and a whole multi-turn episode: no traceback, no hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlinf_algos.lm.agentic import ChatFormat, EpisodeConfig, parse_tool_calls, play_episodes
from rlinf_algos.lm.tokens import bpe_tokenizer
from rlinf_algos.tools import ToolBox, load_tools, tools_from
from rlinf_algos.tools.guard import MAX_JSON_DEPTH, as_text, loads_bounded

FUZZ_EXAMPLES = int(os.environ.get("RLINF_OUTPUT_FUZZ_EXAMPLES", "80"))


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


class Interrupting:
    def __str__(self) -> str:
        raise KeyboardInterrupt


def _hostile(kind: str) -> Any:
    if kind == "unprintable":
        return Unprintable()
    if kind == "interrupting":
        return [Interrupting()]
    if kind == "surrogate":
        return "text \udc80 with a lone surrogate \ud800"
    if kind == "bytes":
        return b"\xff\xfe binary \x00\x01"
    if kind == "huge":
        return "x" * 1_000_000
    if kind == "deep":
        deep: list[Any] = []
        for _ in range(100_000):
            deep = [deep]
        return deep
    if kind == "cycle":
        loop: list[Any] = []
        loop.append(loop)
        return loop
    if kind == "cancel":
        raise asyncio.CancelledError
    if kind == "exit":
        raise SystemExit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "os_exit":
        os._exit(7)
    if kind == "bad_exception":
        raise Exception(Unprintable())
    return kind


def weird(kind: str) -> Any:
    """Return or raise something hostile.

    Args:
        kind: which.
    """
    return _hostile(kind)


async def weird_async(kind: str) -> Any:
    """Return or raise something hostile, from a coroutine.

    Args:
        kind: which.
    """
    await asyncio.sleep(0)
    return _hostile(kind)


async def blocking_async(seconds: float) -> str:
    """Block the event loop it runs on.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "woke"


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what.
    """
    return text


KINDS = [
    "unprintable",
    "interrupting",
    "surrogate",
    "bytes",
    "huge",
    "deep",
    "cycle",
    "cancel",
    "exit",
    "interrupt",
    "os_exit",
    "bad_exception",
]
RAISING = {"cancel": "CancelledError", "exit": "SystemExit", "interrupt": "KeyboardInterrupt"}


def _box(timeout_s: float = 5.0) -> ToolBox:
    load_tools([])  # installs the os._exit guard, as loading a run's tools does
    tools = [t for f in (weird, weird_async, blocking_async, echo) for t in tools_from(f, where="t")]
    return ToolBox(tools, timeout_s=timeout_s, max_result_chars=500)


def test_hostile_results_and_base_exceptions_are_answers_and_counted() -> None:
    box = _box()
    ep = box.episode()

    async def calls() -> list[Any]:
        jobs = [ep.call(name, {"kind": k}) for name in ("weird", "weird_async") for k in KINDS]
        return list(await asyncio.gather(*jobs))

    results = asyncio.run(calls())
    assert threading.main_thread().is_alive()  # os._exit(7) did not end this process
    for (name, kind), res in zip(
        [(n, k) for n in ("weird", "weird_async") for k in KINDS], results, strict=True
    ):
        res.text.encode("utf-8")  # always encodable: no lone surrogate reaches a tokenizer
        assert len(res.text) < 700, (name, kind)
        if kind in RAISING:
            assert res.status == "error" and f"raised {RAISING[kind]}" in res.text, (name, kind, res)
        elif kind == "os_exit":
            assert res.status == "error" and "called os._exit(7)" in res.text, (name, kind, res)
        elif kind == "bad_exception":
            assert res.status == "error" and "raised Exception" in res.text, (name, kind, res)
        else:
            assert res.status == "ok", (name, kind, res)
    by_kind = {k: r for k, r in zip(KINDS, results, strict=False)}
    assert "whose str() failed" in by_kind["unprintable"].text
    assert "[truncated: 999500 more characters]" in by_kind["huge"].text
    assert "binary" in by_kind["bytes"].text and "?" in by_kind["surrogate"].text
    m = box.stats.metrics()
    assert m["tools/calls"] == 2 * len(KINDS) and m["tools/errors"] == 2 * 5
    # the run goes on: a plain call still works
    assert ep.call_sync("echo", {"text": "still here"}).text == "still here"


def test_a_keyboard_interrupt_in_a_tool_is_not_the_users_ctrl_c() -> None:
    ep = _box().episode()
    res = ep.call_sync("weird", {"kind": "interrupt"})
    assert res.status == "error"  # and this test was not interrupted


def test_an_async_tool_that_blocks_its_loop_still_times_out() -> None:
    box = _box(timeout_s=0.5)
    ep = box.episode()
    start = time.perf_counter()
    res = ep.call_sync("blocking_async", {"seconds": 5.0})
    assert res.status == "timeout" and time.perf_counter() - start < 3.0
    # later async calls are not stuck behind the blocked loop
    start = time.perf_counter()
    assert ep.call_sync("weird_async", {"kind": "fine"}).text == "fine"
    assert time.perf_counter() - start < 2.0


def test_deep_and_huge_tool_calls_are_malformed_not_fatal() -> None:
    text = "<tool_call>" + "[" * 40 + "</tool_call>"
    (call,) = parse_tool_calls(text)
    assert call.error is not None
    deep = '{"name": "echo", "arguments": {"text": ' + "[" * 5000 + "]" * 5000 + "}}"
    (call,) = parse_tool_calls(f"<tool_call>{deep}</tool_call>")
    assert call.error is not None and "nested" in call.error
    big = '{"name": "echo", "arguments": {"text": ' + "9" * 5000 + "}}"
    (call,) = parse_tool_calls(f"<tool_call>{big}</tool_call>")
    assert call.error is not None and "5000 digits" in call.error
    ep = _box().episode()
    for arguments in ("[" * 100_000, '{"text": ' + "1" * 10_000 + "}", '{"text": "' + "a" * 200_000 + '"}'):
        res = ep.call_sync("echo", arguments)
        assert res.status == "malformed", res
    many = "".join('<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call>' for _ in range(100))
    calls = parse_tool_calls(many)
    assert len(calls) == 100 and sum(c.error is None for c in calls) == 32
    with pytest.raises(ValueError, match="nested"):
        loads_bounded("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    assert as_text({"a": [1, "\udc80"]}, 100) == '{"a": [1, "?"]}'


# -- the fuzz -----------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        '{"name": "echo", "arguments": ',
        '{"name": "weird", "arguments": {"kind": "',
        '{"name": "weird_async", "arguments": {"kind": "',
        '"}}',
        "}}",
        '"arguments": "',
        '{"name": ',
        "[" * 40,
        "{" * 70,
        '{"a":' * 70,
        "9" * 4400,
        "-" + "1" * 5000,
        "1e999999",
        "NaN",
        "Infinity",
        '"\\ud800"',
        "\\",
        '"',
        "null",
        "\x00",
        "\udc80",
        "<tool_call><tool_call>",
        "</tool_call></tool_call>",
        *KINDS,
    ]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
ARGUMENTS = (
    st.builds(lambda k: {"kind": k}, st.sampled_from([*KINDS, "fine"]))
    | st.builds(lambda v: {"text": v}, JSON)
    | JSON
    | st.text(max_size=30)
)
NAMES = st.sampled_from(["weird", "weird_async", "echo", "nope", ""]) | st.text(max_size=10) | JSON
CALLS = st.builds(lambda n, a: json.dumps({"name": n, "arguments": a}), NAMES, ARGUMENTS)
BLOCKS = st.builds(
    lambda body, cut, junk: "<tool_call>" + (body[:cut] + junk if cut < len(body) else body) + "</tool_call>",
    CALLS,
    st.integers(0, 400) | st.just(1 << 30) | st.just(1 << 30),
    FRAGMENTS,
)
OUTPUTS = st.builds(
    lambda head, blocks, tail: head + "".join(blocks) + tail,
    st.text(max_size=20) | FRAGMENTS,
    st.lists(BLOCKS, max_size=4),
    st.just("") | FRAGMENTS | st.text(max_size=20),
)


@settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(OUTPUTS)
def test_fuzz_model_outputs_through_the_parser_and_the_tools(text: str) -> None:
    box = _FUZZ_BOX
    ep = box.episode()

    async def turn() -> list[Any]:
        calls = parse_tool_calls(text)
        jobs = [
            ep.call(c.name, c.arguments) if c.error is None else asyncio.sleep(0, ep.malformed(c.error))
            for c in calls
        ]
        return list(await asyncio.gather(*jobs))

    start = time.perf_counter()
    for res in asyncio.run(turn()):
        res.text.encode("utf-8")
        assert res.status in ("ok", "error", "timeout", "malformed", "unknown")
    assert time.perf_counter() - start < 10


_FUZZ_BOX = _box(timeout_s=2.0)

TEMPLATE = (
    "{%- for m in messages %}<|turn|>{{ m.role }}: {{ m.content }}<|end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|turn|>assistant: {% endif %}"
)


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    corpus = [
        '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call> [[[ {{{ 999 \\ " null',
        "user assistant tool weird kind surrogate bytes huge exit interrupt cancel os_exit",
    ] * 4
    tok = bpe_tokenizer(corpus, vocab_size=300)
    tok.add_special_tokens({"additional_special_tokens": ["<|turn|>", "<|end|>"]})
    tok.eos_token = "<|end|>"
    tok.chat_template = TEMPLATE
    return ChatFormat(tok, _FUZZ_BOX.schemas)


@settings(max_examples=max(10, FUZZ_EXAMPLES // 4), derandomize=True, deadline=None)
@given(st.lists(OUTPUTS, min_size=1, max_size=3))
def test_fuzz_whole_episodes(chat: ChatFormat, turns: list[str]) -> None:
    """Adversarial turns of a policy through play_episodes (parse, call, insert the results as
    ids): the episode ends by its own rules."""
    # a policy's text is decoded ids: valid UTF-8 (the parser sees surrogates in the fuzz above)
    texts = [t.encode("utf-8", "replace").decode("utf-8") for t in turns]
    scripted = [[*chat.encode(t), *chat.stop_ids[:1]] for t in texts]
    seen = {"n": 0}

    def generate(contexts: list[list[int]], max_new: int, stop: Any) -> list[list[int]]:
        out = [scripted[min(seen["n"], len(scripted) - 1)][:max_new] for _ in contexts]
        seen["n"] += 1
        return out

    start = time.perf_counter()
    (ep,) = play_episodes(
        [[{"role": "user", "content": "go"}]],
        generate=generate,
        toolbox=_FUZZ_BOX,
        chat=chat,
        config=EpisodeConfig(max_turns=3, max_new_tokens=4096, max_response_tokens=20000, stall_timeout_s=30),
    )
    assert ep.stop in ("answer", "max_turns", "budget", "length")
    assert time.perf_counter() - start < 20
    json.dumps(ep.metrics())
