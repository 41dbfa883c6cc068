"""Tools for agents (rlinf_algos.tools) and the multi-turn tool-using episode
(rlinf_algos.lm.agentic): schemas from functions, a user's tool file, a plugin's
``rlinf_register_tools``, tool sets with episode state, errors/timeouts/malformed calls answered
and counted, ``<tool_call>`` parsing, token-in/token-out across turns with two chat templates and
tokenizers trained here, ``max_turns`` and the token budget, BM25 search and the python sandbox."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rlinf_algos.lm.agentic import ChatFormat, EpisodeConfig, parse_tool_calls, play_episodes
from rlinf_algos.lm.tokens import bpe_tokenizer
from rlinf_algos.tools import ToolBox, ToolSet, function_schema, load_tools, tools_from
from rlinf_algos.tools.sandbox import network_isolation, run_python
from rlinf_algos.tools.search import BM25Index, load_documents, words
from rlinf_core import PluginError, hookimpl, load_plugins
from rlinf_core.errors import ConfigError, RlinfError

# -- tools used below ---------------------------------------------------------------------------


def lookup(entity: str, field: str = "city") -> str:
    """Look up a fact about a made-up entity.

    Args:
        entity: the entity's name, for example Veltrix.
        field: which fact to return.
    """
    facts = {"Veltrix": {"founder": "Ada Morn"}, "Ada Morn": {"city": "Lyon"}}
    return facts[entity][field]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def broken(x: int) -> int:
    """Always fails.

    Args:
        x: ignored.
    """
    raise ValueError(f"cannot handle {x}")


def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"


async def slow_async(seconds: float) -> str:
    """Sleep without blocking.

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return "awake"


class Notebook(ToolSet):
    """Per-episode state: notes written in one episode are not seen by another."""

    PLUGIN_NAME: ClassVar[str] = "notebook"
    resets: ClassVar[int] = 0

    def __init__(self, capacity: int = 3) -> None:
        self.capacity = capacity
        self.notes: list[str] = ["stale"]

    def reset(self) -> None:
        type(self).resets += 1
        self.notes = []

    def write(self, note: str) -> str:
        """Write a note.

        Args:
            note: the text to keep.
        """
        if len(self.notes) >= self.capacity:
            raise RuntimeError("notebook full")
        self.notes.append(note)
        return f"{len(self.notes)} notes"

    def read(self) -> list[str]:
        """Read every note written in this episode."""
        return list(self.notes)


# -- schemas, files, plugins --------------------------------------------------------------------


def test_schema_from_a_function() -> None:
    assert function_schema(lookup) == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a fact about a made-up entity.",
            "parameters": {
                "type": "object",
                "properties": {
                    "entity": {"type": "string", "description": "the entity's name, for example Veltrix."},
                    "field": {"type": "string", "description": "which fact to return."},
                },
                "required": ["entity"],
            },
        },
    }
    (read,) = [t for t in tools_from(Notebook, where="test") if t.name == "read"]
    assert read.schema["function"]["parameters"].get("properties", {}) == {}  # `self` is not a parameter

    def untyped(x):  # type: ignore[no-untyped-def]
        """No hints.

        Args:
            x: something.
        """

    with pytest.raises(
        ConfigError, match=r"tool 'untyped' in here\.py: .*x.*; a tool is a function with a type hint"
    ):
        function_schema(untyped, where="here.py")


def test_a_user_tool_file(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(
        "from rlinf_core.tools import ToolSet\n\n"
        "def shout(text: str) -> str:\n"
        '    """Shout.\n\n    Args:\n        text: what to shout.\n    """\n'
        "    return text.upper()\n\n"
        "class Counter(ToolSet):\n"
        "    def __init__(self, start: int = 0) -> None:\n        self.n = start\n"
        "    def reset(self) -> None:\n        self.n = 0\n"
        "    def bump(self, by: int) -> int:\n"
        '        """Add to the counter.\n\n        Args:\n            by: how much.\n        """\n'
        "        self.n += by\n        return self.n\n",
        encoding="utf-8",
    )
    box = load_tools(
        [
            {"path": "my_tools.py", "name": "shout"},
            {"path": "my_tools.py", "name": "Counter", "kwargs": {"start": 5}},
        ],
        root=tmp_path,
    )
    assert box.names == ["shout", "bump"]
    ep = box.episode()
    assert ep.call_sync("shout", {"text": "hi"}).text == "HI"
    assert ep.call_sync("bump", '{"by": 2}').text == "2"  # reset() ran; a JSON-string argument works
    assert ep.call_sync("bump", {"by": 3}).text == "5"
    assert box.episode().call_sync("bump", {"by": 1}).text == "1"  # a new episode, a new instance

    with pytest.raises(
        ConfigError,
        match=r"tools\[0\]\.name: .*my_tools\.py has no 'lookup'; its functions and ToolSet classes: Counter, shout",
    ):
        load_tools([{"path": "my_tools.py", "name": "lookup"}], root=tmp_path)
    with pytest.raises(ConfigError, match=r"tools\[0\]\.path: tool file not found: .*nope\.py"):
        load_tools([{"path": "nope.py", "name": "x"}], root=tmp_path)
    (tmp_path / "bad.py").write_text("def f(:\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"tools\[1\]\.path: .*bad\.py: import failed: SyntaxError at line 1"
    ):
        load_tools(["python", {"path": "bad.py", "name": "f"}], root=tmp_path)
    with pytest.raises(
        ConfigError, match=r"tools\[0\]\.kwargs: Counter does not take these kwargs .*it takes: start"
    ):
        load_tools([{"path": "my_tools.py", "name": "Counter", "kwargs": {"stop": 1}}], root=tmp_path)
    with pytest.raises(ConfigError, match=r"tools\[0\]: not a tool entry .*expected a name or \{path"):
        load_tools([{"path": "my_tools.py", "nam": "shout"}], root=tmp_path)
    with pytest.raises(
        ConfigError, match=r"tools\[0\]\.name: unknown tool 'lookup'; available: python, search"
    ):
        load_tools(["lookup"], root=tmp_path)
    with pytest.raises(ConfigError, match=r"two tools are named 'shout'"):
        load_tools([{"path": "my_tools.py", "name": "shout"}] * 2, root=tmp_path)


class ToolPlugin:
    @hookimpl
    def rlinf_register_tools(self) -> list[Any]:
        return [add, Notebook]


def test_a_plugin_registers_tools_through_the_hook() -> None:
    host = load_plugins(entry_points=[], extra=[("my-tools", ToolPlugin())])
    assert sorted(host.tools.names()) == ["add", "notebook"]
    assert host.tools.get("Notebook") is Notebook and host.tools.owner("add").distribution == "(in-process)"
    (row,) = host.describe()
    assert sorted(row["registers"]["tools"]) == ["add", "notebook"]
    box = load_tools(["add", {"name": "notebook", "kwargs": {"capacity": 1}}], plugins=host)
    assert box.names == ["add", "read", "write"]
    assert box.tools["add"].where.startswith("plugin 'my-tools'")
    ep = box.episode()
    assert ep.call_sync("add", {"a": 2, "b": 3}).text == "5"

    twice = load_plugins(entry_points=[], extra=[("one", ToolPlugin()), ("two", ToolPlugin())])
    with pytest.raises(PluginError, match=r"tool 'add' is registered twice"):
        twice.tools  # noqa: B018

    class Bad:
        @hookimpl
        def rlinf_register_tools(self) -> list[Any]:
            return [dict]

    with pytest.raises(PluginError, match=r"expected a function or a subclass of rlinf_core\.tools\.ToolSet"):
        load_plugins(entry_points=[], extra=[("bad", Bad())]).tools  # noqa: B018
    empty = load_plugins(entry_points=[])
    with pytest.raises(
        PluginError, match=r"unknown tool 'search'; installed: none\. 'search' is provided by rlinf-algos"
    ):
        empty.tools.get("search")


def test_rlinf_algos_registers_its_built_in_tools(host: Any) -> None:
    assert {"search", "python"} <= set(host.tools.names())
    assert host.tools.owner("python").distribution == "rlinf-algos"
    box = load_tools(["python"], plugins=host)
    assert box.tools["python"].where.startswith("plugin 'algos' (rlinf-algos")


# -- calling: never raises ----------------------------------------------------------------------


def test_errors_timeouts_and_malformed_calls_are_answered_and_counted() -> None:
    box = ToolBox(
        [
            *tools_from(lookup, where="t"),
            *tools_from(broken, where="t"),
            *tools_from(slow, where="t"),
            *tools_from(slow_async, where="t"),
            *tools_from(Notebook, where="t"),
        ],
        {Notebook: {"capacity": 1}},
        timeout_s=0.3,
    )
    ep = box.episode()

    async def calls() -> list[Any]:
        return list(
            await asyncio.gather(
                ep.call("lookup", {"entity": "Veltrix", "field": "founder"}),
                ep.call("broken", {"x": 7}),
                ep.call("slow", {"seconds": 30.0}),
                ep.call("slow_async", {"seconds": 30.0}),
                ep.call("lookup", {"entity": "Nobody"}),  # KeyError inside the tool
                ep.call("lookup", {}),
                ep.call("lookup", {"entity": "Veltrix", "colour": "red"}),
                ep.call("lookup", {"entity": 3}),
                ep.call("lookup", '{"entity": '),
                ep.call("lookup", ["Veltrix"]),
                ep.call("nope", {}),
                ep.call("write", {"note": "a"}),
            )
        )

    start = time.perf_counter()
    r = asyncio.run(calls())
    assert time.perf_counter() - start < 15  # the sleepers (30 s) were cut, nothing waited for them
    assert (r[0].status, r[0].text) == ("ok", "Ada Morn")
    assert (r[1].status, r[1].text) == ("error", "error: tool 'broken' raised ValueError: cannot handle 7")
    assert (r[2].status, r[2].text) == ("timeout", "error: tool 'slow' timed out after 0.3 s")
    assert (r[3].status, r[3].text) == ("timeout", "error: tool 'slow_async' timed out after 0.3 s")
    assert r[4].status == "error" and "KeyError" in r[4].text
    assert (
        r[5].status == "malformed"
        and "missing argument(s) 'entity'; expected entity: string, field: string" in r[5].text
    )
    assert r[6].status == "malformed" and "unknown argument(s) 'colour'" in r[6].text
    assert r[7].status == "malformed" and "argument 'entity' must be string, got int" in r[7].text
    assert r[8].status == "malformed" and "not valid JSON" in r[8].text
    assert r[9].status == "malformed" and "must be a JSON object, got list" in r[9].text
    assert r[10].status == "unknown" and "unknown tool 'nope'; available tools: lookup, broken" in r[10].text
    assert r[11].text == "1 notes"
    assert (
        ep.call_sync("write", {"note": "b"}).text == "error: tool 'write' raised RuntimeError: notebook full"
    )
    m = box.stats.metrics()
    assert m["tools/calls"] == 13 and m["tools/calls/lookup"] == 7
    assert (m["tools/errors"], m["tools/timeouts"], m["tools/malformed"], m["tools/unknown"]) == (3, 2, 5, 1)
    assert ep.stats.metrics() == m


def test_tool_sets_have_episode_state() -> None:
    box = ToolBox(tools_from(Notebook, where="t"))
    before = Notebook.resets
    a, b = box.episode(), box.episode()
    assert Notebook.resets == before + 2  # reset() at the start of each episode
    a.call_sync("write", {"note": "mine"})
    assert json.loads(a.call_sync("read", {}).text) == ["mine"]
    assert json.loads(b.call_sync("read", {}).text) == []


def test_parse_tool_calls() -> None:
    text = (
        'Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"entity": "Veltrix"}}\n</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>'
        "<tool_call>{name: add}</tool_call>"
        '<tool_call>["add"]</tool_call><tool_call>{"name": "add", "arguments": 3}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": 1'
    )
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls[:2]] == [
        ("lookup", {"entity": "Veltrix"}),
        ("add", {"a": 1, "b": 2}),
    ]
    assert [c.error is None for c in calls] == [True, True, False, False, False, False]
    assert "not valid JSON" in str(calls[2].error) and "must be a JSON object, got list" in str(
        calls[3].error
    )
    assert "must be a JSON object, got int" in str(calls[4].error) and "never closed" in str(calls[5].error)
    assert parse_tool_calls("The answer is 4.") == []


# -- the episode: token in, token out -----------------------------------------------------------

QWEN_STYLE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""
"""Qwen2.5-Instruct's chat template (the Hermes tool format): tools in the system prompt, tool results as <tool_response> blocks of
one user turn, ``<|im_end|>`` then a newline between turns."""

OWN_TEMPLATE = (
    "{%- if tools %}<|turn|>tools: {% for t in tools %}{{ t.function.name }}"
    "({{ t.function.parameters.properties | list | join(', ') }}) = {{ t.function.description }}; {% endfor %}"
    'call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|end|>\n\n{% endif %}'
    "{%- for m in messages %}<|turn|>{{ m.role }}{% if m.role == 'tool' %} [{{ m.name }}]{% endif %}: "
    "{{ m.content }}<|end|>\n\n{% endfor %}"
    "{%- if add_generation_prompt %}<|turn|>assistant: {% endif %}"
)
"""A layout written here: its own turn tokens, tool results as one turn per result named by the
tool, a blank line after each turn."""

CORPUS = [
    'Let me look. <tool_call>{"name": "lookup", "arguments": {"entity": "Veltrix", "field": "founder"}}</tool_call>',
    "The founder of Veltrix is Ada Morn, born in Lyon. The answer is Lyon.",
    "system user assistant tool tools call one as function signatures within XML tags",
    "<tool_response> </tool_response> You are a helpful assistant.",
] * 4


@pytest.fixture(scope="module", params=["qwen", "own"])
def chat_tokenizer(request: pytest.FixtureRequest) -> Any:
    tok = bpe_tokenizer(CORPUS, vocab_size=400)
    if request.param == "qwen":
        tok.chat_template = QWEN_STYLE
    else:
        tok.add_special_tokens({"additional_special_tokens": ["<|turn|>", "<|end|>"]})
        tok.eos_token = "<|end|>"
        tok.chat_template = OWN_TEMPLATE
    return tok


class ScriptedPolicy:
    """Plays fixed turns per episode (found by its prompt) and records every context it got."""

    def __init__(
        self, chat: ChatFormat, scripts: dict[str, list[list[int]]], prompts: dict[str, list[int]]
    ) -> None:
        self.chat, self.scripts, self.prompts = chat, scripts, prompts
        self.contexts: dict[str, list[list[int]]] = {k: [] for k in scripts}
        self.sampled: dict[str, list[list[int]]] = {k: [] for k in scripts}

    def __call__(self, contexts: list[list[int]], max_new_tokens: int, stop_ids: Any) -> list[list[int]]:
        out = []
        for ctx in contexts:
            (key,) = [k for k, p in self.prompts.items() if ctx[: len(p)] == p]
            turn = len(self.contexts[key])
            self.contexts[key].append(list(ctx))
            script = self.scripts[key]
            ids = list(script[min(turn, len(script) - 1)])[:max_new_tokens]
            self.sampled[key].append(ids)
            out.append(ids)
        return out


def _char_ids(tok: Any, word: str) -> list[int]:
    """``word`` one character per token: a tokenisation BPE would never produce itself."""
    return [tok.convert_tokens_to_ids(c) for c in word]


def test_token_in_token_out_across_turns(chat_tokenizer: Any) -> None:
    tok = chat_tokenizer
    box = ToolBox([*tools_from(lookup, where="t"), *tools_from(add, where="t")])
    chat = ChatFormat(tok, box.schemas)
    stop = tok.eos_token_id
    assert stop in chat.stop_ids
    enc = chat.encode
    call1 = enc(
        'Let me look. <tool_call>{"name": "lookup", "arguments": {"entity": "Veltrix", "field": "founder"}}</tool_call>'
    )
    call2 = enc(
        '<tool_call>{"name": "lookup", "arguments": {"entity": "Ada Morn"}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    )
    odd = _char_ids(tok, "Lyon")
    assert enc(chat.decode(odd)) != odd  # so keeping these ids proves nothing was re-encoded
    answer = [*enc("The answer is "), *odd, *enc(".")]
    convs = {
        "a": [{"role": "user", "content": "In which city was the founder of Veltrix born?"}],
        "b": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Say Lyon."}],
    }
    scripts = {"a": [[*call1, stop], [*call2, stop], [*answer, stop]], "b": [[*answer, stop]]}
    prompts = {k: chat.prompt_ids(v) for k, v in convs.items()}
    policy = ScriptedPolicy(chat, scripts, prompts)
    a, b = play_episodes(
        [convs["a"], convs["b"]], generate=policy, toolbox=box, chat=chat, config=EpisodeConfig(max_turns=5)
    )
    assert (a.turns, a.stop, b.turns, b.stop) == (3, "answer", 1, "answer")
    assert [r.text for r in a.results[:2]] == ["Ada Morn", "Lyon"]
    assert a.results[2].status == "malformed"  # add without b: answered, counted, the episode went on
    assert a.stats.malformed == 1 and box.stats.metrics()["tools/calls"] == 3

    for key, ep in (("a", a), ("b", b)):
        sampled = [ep.response_ids[s:e] for kind, s, e in ep.segments if kind == "sampled"]
        inserted = [ep.response_ids[s:e] for kind, s, e in ep.segments if kind == "inserted"]
        assert sampled == policy.sampled[key] == scripts[key]  # the sampled ids, untouched
        assert ep.response_ids[-len(odd) - 2 : -2] == odd
        # turn k's context is exactly prompt + sampled_1 + inserted_1 + ... (token in)
        expect = list(prompts[key])
        for k, ctx in enumerate(policy.contexts[key]):
            assert ctx == expect
            expect = expect + sampled[k] + (inserted[k] if k < len(inserted) else [])
        assert ep.sequence == expect == ep.prompt_ids + ep.response_ids
        # the loss mask is 1 on sampled ids only
        assert len(ep.loss_mask) == len(ep.response_ids)
        assert sum(ep.loss_mask) == sum(map(len, sampled))
        for kind, s, e in ep.segments:
            assert set(ep.loss_mask[s:e]) == {1 if kind == "sampled" else 0}
        # and the inserted ids are what the template writes: the whole sequence decodes to the
        # template's rendering of the conversation (up to the last turn's closing)
        rest = chat.closing[len(chat.decode([stop])) :]
        assert chat.decode(ep.sequence) + rest == chat.render(ep.messages, add_generation_prompt=False)
    assert "Ada Morn" in chat.decode(inserted_a := a.response_ids[a.segments[1][1] : a.segments[1][2]])
    assert a.loss_mask[a.segments[1][1] : a.segments[1][2]] == [0] * len(inserted_a)


def test_an_episode_that_hits_max_turns_and_the_budget(chat_tokenizer: Any) -> None:
    tok = chat_tokenizer
    box = ToolBox(tools_from(lookup, where="t"))
    chat = ChatFormat(tok, box.schemas)
    forever = [
        *chat.encode(
            '<tool_call>{"name": "lookup", "arguments": {"entity": "Veltrix", "field": "founder"}}</tool_call>'
        ),
        tok.eos_token_id,
    ]
    conv = [{"role": "user", "content": "Keep looking."}]
    prompts = {"x": chat.prompt_ids(conv)}
    policy = ScriptedPolicy(chat, {"x": [forever]}, prompts)
    (ep,) = play_episodes([conv], generate=policy, toolbox=box, chat=chat, config=EpisodeConfig(max_turns=3))
    assert (ep.turns, ep.stop, len(ep.results)) == (3, "max_turns", 2)  # the third turn's call is not run
    assert [k for k, _, _ in ep.segments] == ["sampled", "inserted", "sampled", "inserted", "sampled"]
    assert ep.response_ids[-len(forever) :] == forever

    policy = ScriptedPolicy(chat, {"x": [forever]}, prompts)
    budget = 2 * len(forever) + 5

    async def async_policy(contexts: list[list[int]], n: int, stop_ids: Any) -> list[list[int]]:
        return policy(contexts, n, stop_ids)  # an async engine plugs in the same way

    (ep,) = play_episodes(
        [conv],
        generate=async_policy,
        toolbox=box,
        chat=chat,
        config=EpisodeConfig(max_turns=10, max_response_tokens=budget),
    )
    assert ep.stop == "budget" and len(ep.response_ids) <= budget and ep.turns <= 2

    cut = ScriptedPolicy(chat, {"x": [chat.encode("The answer is Lyon and more words")]}, prompts)
    (ep,) = play_episodes(
        [conv], generate=cut, toolbox=box, chat=chat, config=EpisodeConfig(max_new_tokens=3)
    )
    assert (ep.stop, len(ep.response_ids)) == ("length", 3)
    with pytest.raises(RlinfError, match=r"generate returned list of length 0 for 1 contexts"):
        play_episodes([conv], generate=lambda c, n, s: [], toolbox=box, chat=chat)


# -- search -------------------------------------------------------------------------------------


def _bm25_reference(docs: list[str], query: str, k1: float = 1.5, b: float = 0.75) -> list[float]:
    toks = [words(d) for d in docs]
    avg = sum(map(len, toks)) / len(toks)
    out = []
    for t in toks:
        tf = Counter(t)
        s = 0.0
        for q in words(query):
            df = sum(q in set(x) for x in toks)
            if tf[q]:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                s += idf * tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(t) / avg))
        out.append(s)
    return out


def test_bm25_ranks_a_small_corpus(tmp_path: Path) -> None:
    docs = [
        {"id": "d1", "title": "Veltrix", "text": "Veltrix was founded by Ada Morn in 1999."},
        {"id": "d2", "title": "Ada Morn", "text": "Ada Morn was born in Lyon and studied glass."},
        {"id": "d3", "title": "Lyon", "text": "Lyon is a city. Lyon has rivers."},
        {"id": "d4", "text": "Nothing about anyone here at all, only filler words repeated filler."},
    ]
    index = BM25Index(docs)
    for q in ("where was Ada Morn born", "Lyon", "founded Veltrix", "filler"):
        ref = _bm25_reference([f"{d.get('title', '')} {d['text']}" for d in docs], q)
        assert index.scores(q).tolist() == pytest.approx(ref, rel=1e-5)
    assert [h.id for h in index.search("where was Ada Morn born", k=2)] == ["d2", "d1"]
    assert [h.id for h in index.search("Lyon", k=5)] == ["d3", "d2"]  # only positive scores
    assert index.search("zebra") == []

    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist([{**d, "title": d.get("title")} for d in docs]), tmp_path / "docs.parquet"
    )
    assert load_documents(tmp_path / "docs.parquet") == load_documents(path)
    box = load_tools([{"name": "search", "kwargs": {"corpus": str(path), "top_k": 1}}])
    assert box.episode().call_sync("search", {"query": "founder of Veltrix"}).text == (
        "[d1] Veltrix: Veltrix was founded by Ada Morn in 1999."
    )
    (tmp_path / "bad.jsonl").write_text('{"id": 1, "text": "ok"}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: the document's text must be a string"):
        load_documents(tmp_path / "bad.jsonl")


# -- python sandbox -----------------------------------------------------------------------------


def test_python_tool_limits() -> None:
    box = load_tools(
        [
            {
                "name": "python",
                "kwargs": {"cpu_s": 1, "memory_mb": 256, "wall_s": 3, "max_output_chars": 50},
                "timeout_s": 8,
            }
        ]
    )
    ep = box.episode()
    assert ep.call_sync("python", {"code": "print(sum(range(10)))"}).text == "45\n"
    start = time.perf_counter()
    looped = run_python("while True:\n    pass\n", cpu_s=1, wall_s=20)
    assert looped.limit == "cpu" and time.perf_counter() - start < 10
    slept = run_python("import time\ntime.sleep(60)\n", cpu_s=5, wall_s=1)
    assert slept.limit == "wall"
    bomb = ep.call_sync("python", {"code": "x = bytearray(4 * 1024 ** 3)\nprint('allocated')"})
    assert bomb.status == "ok" and "MemoryError" in bomb.text and "allocated" not in bomb.text
    long = ep.call_sync("python", {"code": "print('x' * 10000)"}).text
    assert long.startswith("x" * 50) and "[truncated]" in long and len(long) < 100
    net = run_python(
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)\nprint('connected')"
    )
    assert "PermissionError: sandbox: socket" in net.stderr and "connected" not in net.stdout
    assert 'File "<string>"' not in net.stderr and "main.py" in net.stderr  # the user's frames only


def test_python_sandbox_network_namespace_stops_native_code() -> None:
    """Below the audit hook: a socket made through libc (ctypes) cannot reach a server listening
    on this machine's loopback, because the child has its own network namespace."""
    if network_isolation() == "audit-hook":
        pytest.skip("no network namespace on this machine: only the audit hook holds (see sandbox doc)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    code = (
        "import ctypes, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(2, 1, 0)\n"
        f"addr = struct.pack('=H', 2) + struct.pack('!H4s8x', {port}, bytes([127, 0, 0, 1]))\n"
        "rc = libc.connect(fd, addr, len(addr))\nprint('fd', fd, 'rc', rc)\n"
    )
    # the control: the same code outside the sandbox reaches the server
    control = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert "rc 0" in control.stdout, control.stderr
    res = run_python(code, wall_s=5)
    server.close()
    assert "fd " in res.stdout, res.stderr  # the native socket was made: the hook did not see it
    assert "rc -1" in res.stdout  # but it reaches nothing: the namespace holds
