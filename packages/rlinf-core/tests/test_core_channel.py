"""LocalChannel: keyed FIFO queues, weights, back-pressure, timeouts, close, asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlinf_core import ChannelClosed, ChannelEmpty, ChannelFull, ChannelTimeout, LocalChannel, WaitTimeout


def test_fifo_per_key_and_sizes():
    ch = LocalChannel("t")
    for i in range(3):
        ch.put(i, "a")
    ch.put("x", "b")
    assert ch.qsize("a") == 3 and ch.qsize("b") == 1 and ch.qsize("nothing") == 0
    assert ch.empty("nothing") and not ch.empty("a")
    assert sorted(ch.keys()) == ["a", "b"]
    assert [ch.get("a") for _ in range(3)] == [0, 1, 2]
    assert ch.get("b") == "x"
    assert ch.empty("a")


def test_default_key():
    ch = LocalChannel()
    ch.put("v")
    assert ch.get() == "v"


def test_payload_passes_by_reference():
    ch = LocalChannel()
    payload = {"obs": bytearray(1024)}
    ch.put(payload)
    assert ch.get() is payload


def test_nowait_errors_name_key_and_channel():
    ch = LocalChannel("pipe", maxsize=1)
    with pytest.raises(ChannelEmpty, match="key 'k' of channel 'pipe' is empty"):
        ch.get_nowait("k")
    ch.put_nowait(1, "k")
    assert ch.full("k") and not ch.full("other")
    with pytest.raises(ChannelFull, match=r"full \(1 items\)"):
        ch.put_nowait(2, "k")


def test_get_batch_takes_items_until_target_weight():
    ch = LocalChannel()
    for w in (1, 2, 3):
        ch.put(f"w{w}", weight=w)
    assert ch.get_batch(3) == ["w1", "w2"]
    assert ch.qsize() == 1
    assert ch.weight() == 3


def test_get_batch_timeout_takes_nothing():
    ch = LocalChannel()
    ch.put("a", weight=1)
    ch.put("b", weight=1)
    with pytest.raises(ChannelTimeout, match=r"weight 5 \(have 2\)"):
        ch.get_batch(5, timeout=0.05)
    assert [ch.get_nowait(), ch.get_nowait()] == ["a", "b"]


def test_get_batch_waits_for_producer_and_frees_room_for_it():
    # maxsize 2 but target needs 4 items: get_batch must consume as items arrive, or it deadlocks.
    ch = LocalChannel(maxsize=2)

    def produce():
        for i in range(4):
            ch.put(i, timeout=5)

    t = threading.Thread(target=produce)
    t.start()
    assert ch.get_batch(4, timeout=5) == [0, 1, 2, 3]
    t.join(5)


def test_put_blocks_until_room_then_times_out_with_message():
    ch = LocalChannel("bp", maxsize=1)
    ch.put(1, "k")
    threading.Timer(0.05, ch.get, args=("k",)).start()
    ch.put(2, "k", timeout=5)  # unblocked by the consumer
    assert ch.get("k") == 2
    ch.put(3, "k")
    start = time.monotonic()
    with pytest.raises(ChannelTimeout) as info:
        ch.put(4, "k", timeout=0.1)
    assert time.monotonic() - start >= 0.09
    assert "for room" in str(info.value) and "'bp'" in str(info.value)
    assert isinstance(info.value, WaitTimeout) and isinstance(info.value, TimeoutError)


def test_get_timeout_message():
    ch = LocalChannel("c", default_timeout=0.05)
    with pytest.raises(
        ChannelTimeout, match=r"timed out after 0.05 s waiting for an item on key 'default' of channel 'c'"
    ):
        ch.get()


def test_close_wakes_every_waiter():
    ch = LocalChannel("c")
    errors = []

    def waiter(fn):
        try:
            fn()
        except ChannelClosed as err:
            errors.append(err)

    threads = [
        threading.Thread(target=waiter, args=(lambda: ch.get("a", timeout=10),)),
        threading.Thread(target=waiter, args=(lambda: ch.get_batch(3, "b", timeout=10),)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.05)
    ch.close()
    for t in threads:
        t.join(2)
    assert len(errors) == 2
    assert ch.closed
    with pytest.raises(ChannelClosed):
        ch.put(1)
    ch.close()  # idempotent


def test_items_queued_before_close_stay_readable():
    ch = LocalChannel()
    ch.put(1)
    ch.close()
    assert ch.get() == 1
    with pytest.raises(ChannelClosed):
        ch.get(timeout=1)


def test_close_wakes_full_producer():
    ch = LocalChannel(maxsize=1)
    ch.put(0)
    out = []

    def producer():
        try:
            ch.put(1, timeout=10)
        except ChannelClosed as err:
            out.append(err)

    t = threading.Thread(target=producer)
    t.start()
    time.sleep(0.05)
    ch.close()
    t.join(2)
    assert out


@pytest.mark.parametrize("bad", [0, -1])
def test_invalid_weights_and_targets(bad):
    ch = LocalChannel()
    with pytest.raises(ValueError, match="weight must be > 0"):
        ch.put(1, weight=bad)
    with pytest.raises(ValueError, match="target_weight must be > 0"):
        ch.get_batch(bad)
    with pytest.raises(ValueError, match="maxsize"):
        LocalChannel(maxsize=-1)


def test_threaded_ordering_stress():
    ch = LocalChannel(maxsize=64)
    n, keys = 10_000, ("a", "b", "c")

    def produce(key):
        for i in range(n):
            ch.put(i, key, timeout=30)

    producers = [threading.Thread(target=produce, args=(k,)) for k in keys]
    for t in producers:
        t.start()
    results = {k: [] for k in keys}

    def consume(key):
        while len(results[key]) < n:
            results[key].extend(ch.get_batch(min(7, n - len(results[key])), key, timeout=30))

    consumers = [threading.Thread(target=consume, args=(k,)) for k in keys]
    for t in consumers:
        t.start()
    for t in producers + consumers:
        t.join(60)
    for k in keys:
        assert results[k] == list(range(n))


# -- asyncio ------------------------------------------------------------------------------------
def test_async_put_get_and_batch():
    async def main():
        ch = LocalChannel(maxsize=2)

        async def produce():
            for i in range(6):
                await ch.aput(i, "k", weight=1, timeout=5)

        task = asyncio.create_task(produce())
        first = await ch.aget("k", timeout=5)
        batch = await ch.aget_batch(5, "k", timeout=5)
        await task
        return first, batch

    assert asyncio.run(main()) == (0, [1, 2, 3, 4, 5])


def test_async_waiter_woken_by_thread_producer():
    async def main():
        ch = LocalChannel()
        threading.Timer(0.05, ch.put, args=("hello",)).start()
        return await ch.aget(timeout=5)

    assert asyncio.run(main()) == "hello"


def test_async_timeout_and_close():
    async def main():
        ch = LocalChannel("a")
        with pytest.raises(ChannelTimeout, match="waiting for an item"):
            await ch.aget(timeout=0.05)
        waiter = asyncio.create_task(ch.aget(timeout=10))
        batch_waiter = asyncio.create_task(ch.aget_batch(2, timeout=10))
        await asyncio.sleep(0.02)
        ch.close()
        for task in (waiter, batch_waiter):
            with pytest.raises(ChannelClosed):
                await task

    asyncio.run(main())


def test_async_get_batch_cancel_and_timeout_return_items():
    async def main():
        ch = LocalChannel()
        ch.put("a")
        task = asyncio.create_task(ch.aget_batch(3, timeout=10))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ch.qsize() == 1
        with pytest.raises(ChannelTimeout):
            await ch.aget_batch(3, timeout=0.05)
        assert ch.get_nowait() == "a"

    asyncio.run(main())


def test_async_put_backpressure_timeout():
    async def main():
        ch = LocalChannel(maxsize=1)
        await ch.aput(1)
        with pytest.raises(ChannelTimeout, match="for room"):
            await ch.aput(2, timeout=0.05)

    asyncio.run(main())
