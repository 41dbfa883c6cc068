"""The asyncio client of a channel, driven turn by turn: replies that race a cancellation.

The reader is a real :class:`asyncio.StreamReader` fed by the test and the writer records the
frames the client sends, so that a reply can be made to arrive in exactly the event-loop turn
where the caller gives up. ``test_cancelled_aget_loses_nothing`` (test_sched_channel.py) covers
the same race on a live channel actor, where it shows only now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import time

import pytest

from rlinf_scheduler.channel.client import AsyncConn
from rlinf_scheduler.channel.wire import HDR, frame


class _Writer:
    """The frames a client wrote, decoded."""

    def __init__(self) -> None:
        self.frames: list[tuple] = []

    def write(self, data: bytes) -> None:
        n = HDR.unpack(data[:4])[0]
        assert len(data) == 4 + n
        self.frames.append(pickle.loads(data[4:]))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def ops(self) -> list[str]:
        return [f[1] for f in self.frames]


ENTRY = ("b", pickle.dumps("item"), 1.0, "producer")


async def _give_up_as_the_reply_lands(how: str) -> tuple[_Writer, BaseException | None]:
    reader = asyncio.StreamReader()
    writer = _Writer()
    conn = AsyncConn(reader, writer)  # type: ignore[arg-type]
    wait = 0.05 if how == "timeout" else 10.0
    task = asyncio.create_task(conn.call("get", ("k", 10.0, False), "k", wait))
    await asyncio.sleep(0)  # the request is written; the caller waits for its reply
    assert writer.ops() == ["get"]
    if how == "timeout":
        time.sleep(2 * wait)  # the loop is held past the wait: its timer fires next turn ...
        await asyncio.sleep(0)
        reader.feed_data(frame((1, True, ENTRY)))  # ... as the reply lands
    else:
        reader.feed_data(frame((1, True, ENTRY)))  # the read loop runs next turn, before the caller
        task.cancel()
    error: BaseException | None = None
    try:
        await task
    except (asyncio.CancelledError, TimeoutError) as exc:
        error = exc
    conn.close()
    with contextlib.suppress(asyncio.CancelledError):
        await conn.task
    return writer, error


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_reply_landing_as_the_caller_gives_up_goes_back(how: str) -> None:
    writer, error = asyncio.run(_give_up_as_the_reply_lands(how))
    assert isinstance(error, asyncio.CancelledError if how == "cancel" else TimeoutError)
    # The caller gave up, but the item left the queue: the client must put it back at the head.
    ungets = [f for f in writer.frames if f[1] == "unget"]
    assert ungets == [(0, "unget", ("k", [ENTRY]))], writer.frames


def test_a_reply_after_the_cancellation_goes_back_from_the_read_loop() -> None:
    async def main() -> _Writer:
        reader = asyncio.StreamReader()
        writer = _Writer()
        conn = AsyncConn(reader, writer)  # type: ignore[arg-type]
        task = asyncio.create_task(conn.call("get_batch", ("k", 2.0, 10.0, False), "k", 10.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert writer.ops() == ["get_batch", "cancel"]
        reader.feed_data(frame((1, True, [ENTRY, ENTRY])))  # the server had replied already
        for _ in range(5):
            await asyncio.sleep(0)
        conn.close()
        return writer

    writer = asyncio.run(main())
    assert writer.frames[-1] == (0, "unget", ("k", [ENTRY, ENTRY]))
