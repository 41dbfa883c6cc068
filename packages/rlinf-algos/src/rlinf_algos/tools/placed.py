"""Tools as a placed component: the ``tool`` processes serve calls over a Channel (*light*: no
torch, no tokenizer).

A run that places a ``tool`` component (``tool: {node_group: node, placement: "0:0-1"}``) loads
its ``tools`` section once per tool process (:class:`ToolServer`: the ``search`` index is built
there, not in every agent) and the agents call the tools through a :class:`PlacedTools` client,
a :class:`~rlinf_algos.lm.agentic.ToolProvider` like the in-process
:class:`~rlinf_algos.tools.ToolBox`. Without a ``tool`` component the agents run their tools
themselves (a ``ToolBox`` in the agent process).

The protocol, on the run's ``tools`` channel::

    agent --"req" {id, episode, name, arguments, reply, report}--> any idle tool rank
    tool rank --reply key {id, name, text, status, latency_s}--> the agent

A tool rank serves many calls at once (an asyncio task per request; sync tools in threads of
their own), each under the tool's ``timeout_s`` (the server's
:meth:`~rlinf_algos.tools.EpisodeTools.call`), so a slow or failing tool answers the model with an
error and is counted, never ends the run. Per-episode tool sets live on the tool rank that takes
an episode's call (keyed by the episode id; the newest :data:`MAX_EPISODES` are kept). A client
waits ``timeout`` seconds (``runner.worker_timeout``) for a reply, and an
:data:`~rlinf_algos.channels.ABORT` on its reply key (the driver ending the iteration: a tool
rank died and is being restarted) raises :class:`~rlinf_algos.channels.Aborted` in every waiting
call.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from rlinf_algos.channels import Aborted, is_abort
from rlinf_algos.tools.registry import ToolBox, ToolResult, ToolStats
from rlinf_core.errors import ChannelTimeout, PeerLost, RlinfError

__all__ = ["MAX_EPISODES", "TOOL_STOP", "PlacedTools", "ToolServer"]

TOOL_STOP = "__rlinf_tool_stop__"
"""Put on the ``tools`` channel's ``req`` key once per tool rank to end its serve loop."""

MAX_EPISODES = 4096
"""Per-episode tool sets a tool rank keeps (the oldest are dropped first)."""


class ToolServer:
    """The body of a ``tool`` process: the run's tools, loaded once, serving calls.

    Args:
        host: the worker (``channel("tools")``, ``timeout``, ``rank``).
        entries: the run's ``tools`` section.
        box: the tools themselves (default: loaded from ``entries``).
    """

    def __init__(self, host: Any, entries: Sequence[Any], box: ToolBox | None = None) -> None:
        from rlinf_algos.tools.registry import load_run_tools

        self.host = host
        t0 = time.perf_counter()
        self.box = box if box is not None else load_run_tools(entries)
        self.box.episode()  # builds the shared tool sets (the search index) now, once
        self.load_s = time.perf_counter() - t0
        self.episodes: OrderedDict[str, Any] = OrderedDict()

    def _episode(self, episode: str) -> Any:
        tools = self.episodes.get(episode)
        if tools is None:
            tools = self.episodes[episode] = self.box.episode()
            while len(self.episodes) > MAX_EPISODES:
                self.episodes.popitem(last=False)
        else:
            self.episodes.move_to_end(episode)
        return tools

    def serve(self) -> dict[str, Any]:
        """Answer calls until a :data:`TOOL_STOP` (idle as long as no call comes); returns the
        calls served, the tool figures (:meth:`~rlinf_algos.tools.ToolStats.metrics`) and the
        seconds the index took to load."""
        return asyncio.run(self._serve())

    async def _serve(self) -> dict[str, Any]:
        host = self.host
        ch, timeout = host.channel("tools"), host.timeout
        running: set[asyncio.Task[Any]] = set()
        served = 0
        lost_since = 0.0
        while True:
            try:
                req = await ch.aget("req", timeout=timeout)
            except ChannelTimeout:
                # idle is normal (a policy that calls no tool for a while); the driver ends this
                # loop with TOOL_STOP, and the process goes with the run's Ray job
                continue
            except PeerLost:
                # a caller (an agent) died: the driver restarts it; this rank serves on (the
                # channel forgets the dead caller once its successor connects), as long as
                # it would wait for a call anyway
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > timeout:
                    raise
                await asyncio.sleep(0.2)
                continue
            lost_since = 0.0
            if isinstance(req, str) and req == TOOL_STOP:
                break
            if req.get("report"):
                await ch.aput({"rank": host.rank, "pid": os.getpid()}, req["report"], timeout=timeout)
            task = asyncio.ensure_future(self._answer(ch, req, timeout))
            running.add(task)
            task.add_done_callback(running.discard)
            served += 1
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        return {"calls": served, "load_s": self.load_s, "tools": self.box.stats.metrics()}

    async def _answer(self, ch: Any, req: dict[str, Any], timeout: float) -> None:
        res = await self._episode(str(req["episode"])).call(req["name"], req["arguments"])
        reply = {"id": req["id"], "name": res.name, "text": res.text, "status": res.status}
        reply["latency_s"] = res.latency_s
        try:
            await ch.aput(reply, req["reply"], timeout=timeout)
        except Exception:  # the caller's iteration was ended: nobody reads this reply
            pass


class PlacedTools:
    """Where an agent's episodes get their tools when a ``tool`` component is placed: a
    :class:`~rlinf_algos.lm.agentic.ToolProvider` whose calls go to the tool ranks.

    Args:
        channel: the run's ``tools`` channel.
        reply: this caller's reply key (unique per agent and iteration).
        timeout: seconds to wait for a reply (``runner.worker_timeout``; the tool's own
            ``timeout_s`` is enforced by the tool rank).
        report: a key the tool rank that takes this client's first call reports its rank and
            process id on (fault tests).
    """

    def __init__(self, channel: Any, reply: str, timeout: float, report: str | None = None) -> None:
        self.channel, self.reply, self.timeout, self.report = channel, reply, float(timeout), report
        self.stats = ToolStats()
        self._ids = itertools.count()
        self._episodes = itertools.count()
        self._pending: dict[int, asyncio.Future[ToolResult]] = {}
        self._reader: asyncio.Future[Any] | None = None

    def episode(self) -> PlacedEpisodeTools:
        """The tools of one new episode (its tool sets live on the tool rank)."""
        return PlacedEpisodeTools(self, f"{self.reply}/e{next(self._episodes)}")

    async def call(self, episode: str, name: Any, arguments: Any) -> ToolResult:
        """Send one call to the tool ranks and wait for its result."""
        call_id = next(self._ids)
        fut: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = fut
        req = {"id": call_id, "episode": episode, "name": name, "arguments": arguments, "reply": self.reply}
        if self.report is not None:
            req["report"], self.report = self.report, None
        try:
            await self.channel.aput(req, "req", timeout=self.timeout)
        except BaseException:
            self._pending.pop(call_id, None)
            raise
        if self._reader is None or self._reader.done():
            self._reader = asyncio.ensure_future(self._read())
        return await fut

    async def _read(self) -> None:
        """Hand the replies to their calls until none is pending (an abort or a timeout fails
        every pending call)."""
        while self._pending:
            try:
                item = await self.channel.aget(self.reply, timeout=self.timeout)
            except ChannelTimeout:
                self._fail(
                    RlinfError(
                        f"no reply from the tool ranks for {len(self._pending)} tool call(s) ({self.reply}) "
                        f"within {self.timeout:g} s (runner.worker_timeout)"
                    )
                )
                return
            except BaseException as err:
                self._fail(err if isinstance(err, Exception) else RlinfError(str(err)))
                raise
            if is_abort(item):
                self._fail(Aborted(self.reply))
                return
            fut = self._pending.pop(int(item["id"]), None)
            if fut is not None and not fut.done():
                fut.set_result(
                    ToolResult(item["name"], item["text"], item["status"], float(item["latency_s"]))
                )

    def _fail(self, err: Exception) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()


class PlacedEpisodeTools:
    """One episode's tools on the tool ranks (an
    :class:`~rlinf_algos.lm.agentic.EpisodeToolCalls`): calls and their figures."""

    def __init__(self, client: PlacedTools, episode: str) -> None:
        self.client, self.episode = client, episode
        self.stats = ToolStats()

    def _record(self, result: ToolResult) -> ToolResult:
        self.stats.add(result)
        self.client.stats.add(result)
        return result

    async def call(self, name: Any, arguments: Any) -> ToolResult:
        return self._record(await self.client.call(self.episode, name, arguments))

    def malformed(self, text: str, name: str = "(unparsed)") -> ToolResult:
        """A call that did not parse is answered here, as the in-process tools answer it."""
        return self._record(ToolResult(name, f"error: {text}", "malformed"))
