"""Tools as a placed component (issue 40, item 3): a :class:`~rlinf_algos.tools.placed.ToolServer`
serving calls over a channel to :class:`~rlinf_algos.tools.placed.PlacedTools` clients: the tools
loaded once per server, many calls at once, the per-call timeout enforced on the server, per-episode
tool sets kept per episode, an abort on the reply key ending every waiting call, and the same
answers and figures as the in-process tools. The server runs in a thread over a real
:class:`~rlinf_core.channel.LocalChannel` (the Ray run is in ``test_algos_lm_placed_tools.py``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.channels import ABORT, Aborted
from rlinf_algos.tools import load_tools
from rlinf_algos.tools.placed import TOOL_STOP, PlacedTools, ToolServer
from rlinf_core.channel import LocalChannel

TOOLS = '''
import threading
import time

from rlinf_core.tools import ToolSet

GATE = threading.Barrier(6, timeout=20)
BUILT = []


def meet(who: str) -> str:
    """Wait until six calls are in at once.

    Args:
        who: the caller.
    """
    GATE.wait()
    return f"{who} met"


def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"


class Counter(ToolSet):
    """A per-episode counter."""

    def __init__(self) -> None:
        BUILT.append(1)
        self.n = 0

    def bump(self) -> int:
        """Add one and return the count."""
        self.n += 1
        return self.n
'''


class Host:
    """What a tool worker gives its body: its channels, rank and timeout (the worker process
    itself is in the Ray test)."""

    def __init__(self, ch: LocalChannel) -> None:
        self.channels, self.rank, self.timeout = {"tools": ch}, 0, 30.0

    def channel(self, name: str) -> Any:
        return self.channels[name]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LocalChannel, ToolServer, dict[str, Any]]]:
    (tmp_path / "t.py").write_text(TOOLS)
    entries = [
        {"path": str(tmp_path / "t.py"), "name": n, "timeout_s": t}
        for n, t in (("meet", 5.0), ("slow", 0.3), ("Counter", 5.0))
    ]
    ch = LocalChannel("tools", default_timeout=30.0)
    server = ToolServer(Host(ch), entries, box=load_tools(entries))
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(server.serve()), daemon=True)
    thread.start()
    yield ch, server, out
    ch.put(TOOL_STOP, "req")
    thread.join(30)
    assert not thread.is_alive()


def test_a_tool_server_answers_many_concurrent_calls_with_timeouts_and_episode_state(
    served: tuple[LocalChannel, ToolServer, dict[str, Any]],
) -> None:
    ch, server, _ = served
    client = PlacedTools(ch, "agent0/it1/tools", timeout=30.0)

    async def play() -> list[Any]:
        eps = [client.episode() for _ in range(6)]
        # six calls that only return once all six run at once on the server
        met = await asyncio.gather(*(e.call("meet", {"who": f"e{i}"}) for i, e in enumerate(eps)))
        late = await eps[0].call("slow", {"seconds": 5})
        counts = [await eps[0].call("bump", {}) for _ in range(3)] + [await eps[1].call("bump", {})]
        bad = await eps[1].call("bump", {"x": 1})
        return [met, late, counts, bad, eps]

    met, late, counts, bad, eps = asyncio.run(play())
    assert [r.text for r in met] == [f"e{i} met" for i in range(6)] and all(r.ok for r in met)
    assert late.status == "timeout" and "timed out after 0.3 s" in late.text
    assert [r.text for r in counts] == ["1", "2", "3", "1"]  # one Counter per episode
    assert bad.status == "malformed" and "unknown argument(s) 'x'" in bad.text
    assert dict(eps[0].stats.calls) == {"meet": 1, "slow": 1, "bump": 3}
    assert eps[0].stats.timeouts["slow"] == 1 and eps[1].stats.malformed == 1
    # the client's figures are the server's: the same calls counted once each
    assert client.stats.metrics() == server.box.stats.metrics()
    module = next(t.fn.__globals__ for t in server.box.tools.values() if t.name == "meet")
    assert len(module["BUILT"]) == 6 + 1  # one per episode that built tools, plus the server's own


def test_an_abort_on_the_reply_key_ends_every_waiting_call(
    served: tuple[LocalChannel, ToolServer, dict[str, Any]],
) -> None:
    ch, _, _ = served
    client = PlacedTools(ch, "agent1/it2/tools", timeout=30.0)

    async def play() -> BaseException | None:
        ep = client.episode()
        call = asyncio.ensure_future(ep.call("meet", {"who": "alone"}))  # waits at the barrier
        await asyncio.sleep(0)
        await ch.aput(ABORT, "agent1/it2/tools")
        try:
            await call
        except Aborted as err:
            return err
        return None

    assert isinstance(asyncio.run(play()), Aborted)


def test_search_is_indexed_once_by_the_server_and_answers_as_in_process(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"id": "d0", "text": "Veltrix was founded by Ona Reel."}\n'
        '{"id": "d1", "text": "Ona Reel was born in Kesh."}\n'
    )
    entries = [{"name": "search", "kwargs": {"corpus": str(corpus), "top_k": 1}}]
    ch = LocalChannel("tools", default_timeout=30.0)
    server = ToolServer(Host(ch), entries, box=load_tools(entries))
    (index,) = server.box._shared.values()  # built at start, before any call
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        client = PlacedTools(ch, "driver/x/tools", timeout=30.0)
        local = load_tools(entries).episode()
        for q in ("founder of Veltrix", "Ona Reel born"):
            got = asyncio.run(client.episode().call("search", {"query": q}))
            want = local.call_sync("search", {"query": q})
            assert (got.text, got.status) == (want.text, want.status)
        assert list(server.box._shared.values()) == [index]
    finally:
        ch.put(TOOL_STOP, "req")
        thread.join(30)


def test_an_idle_tool_server_keeps_serving(tmp_path: Path) -> None:
    """No call for longer than the worker timeout is not a failure of the tool process (a policy
    may call no tool for a while); it answers the next call."""
    (tmp_path / "t.py").write_text(TOOLS)
    entries = [{"path": str(tmp_path / "t.py"), "name": "slow"}]
    ch = LocalChannel("tools", default_timeout=30.0)
    host = Host(ch)
    host.timeout = 0.05
    server = ToolServer(host, entries, box=load_tools(entries))
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(server.serve()), daemon=True)
    thread.start()
    time.sleep(0.5)  # ten worker timeouts without a call
    assert thread.is_alive()
    got = asyncio.run(PlacedTools(ch, "a/tools", timeout=30.0).episode().call("slow", {"seconds": 0}))
    assert got.ok and got.text == "awake"
    ch.put(TOOL_STOP, "req")
    thread.join(30)
    assert out["calls"] == 1


HOSTILE = '''
import asyncio
import os
import time


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str")


def hostile(kind: str) -> object:
    """Return or raise something hostile.

    Args:
        kind: which.
    """
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "cancel":
        raise asyncio.CancelledError
    if kind == "exit":
        raise SystemExit(2)
    if kind == "os_exit":
        os._exit(7)
    if kind == "unprintable":
        return Unprintable()
    return "lone \\udc80 surrogate"


async def stuck(seconds: float) -> str:
    """Block the event loop.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "woke"
'''


def test_a_tool_server_survives_hostile_tools(tmp_path: Path) -> None:
    """Issue 53: what a user's tool raises or returns (KeyboardInterrupt, CancelledError,
    SystemExit, os._exit, an unprintable or non-UTF-8 result, an async tool blocking its loop)
    is an answer over the channel, and the tool process serves on."""
    (tmp_path / "h.py").write_text(HOSTILE)
    entries = [
        {"path": str(tmp_path / "h.py"), "name": "hostile", "timeout_s": 5.0},
        {"path": str(tmp_path / "h.py"), "name": "stuck", "timeout_s": 0.5},
    ]
    ch = LocalChannel("tools", default_timeout=30.0)
    server = ToolServer(Host(ch), entries, box=load_tools(entries))
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(server.serve()), daemon=True)
    thread.start()
    client = PlacedTools(ch, "agent2/it1/tools", timeout=30.0)
    kinds = ["interrupt", "cancel", "exit", "os_exit", "unprintable", "surrogate"]

    async def play() -> list[Any]:
        ep = client.episode()
        got = [await ep.call("hostile", {"kind": k}) for k in kinds]
        return [*got, await ep.call("stuck", {"seconds": 5}), await ep.call("hostile", {"kind": "again"})]

    res = asyncio.run(play())
    ch.put(TOOL_STOP, "req")
    thread.join(30)
    assert not thread.is_alive() and out["calls"] == len(kinds) + 2
    assert [r.status for r in res] == ["error"] * 4 + ["ok", "ok", "timeout", "ok"]
    assert "raised KeyboardInterrupt" in res[0].text and "called os._exit(7)" in res[3].text
    assert "str() failed" in res[4].text and res[5].text == "lone ? surrogate"
    assert out["tools"]["tools/errors"] == 4 and out["tools"]["tools/timeouts"] == 1
