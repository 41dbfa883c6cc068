"""RayChannel on a real single-node Ray: semantics of core's Channel across processes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import pickle
import threading
import time
import uuid

import numpy as np
import pytest

from rlinf_core.errors import ChannelClosed, ChannelEmpty, ChannelError, ChannelFull, ChannelTimeout
from rlinf_scheduler.channel import ChannelPeerDied, RayChannel, pack_payload, unpack_payload

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.network]


def _name() -> str:
    return f"ch-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def chan(ray_session):
    """One unbounded channel shared by the tests (each test uses its own keys): every channel is
    an actor, and starting a process costs seconds on a loaded 2-core machine."""
    ch = RayChannel.create(_name(), default_timeout=20)
    yield ch
    ch.destroy()


@pytest.fixture(scope="module")
def bounded(ray_session):
    ch = RayChannel.create(_name(), maxsize=2, default_timeout=20)
    yield ch
    ch.destroy()


@pytest.fixture(scope="module")
def producers(ray_session, chan):
    return [Producer.remote(chan) for _ in range(2)]


@ray.remote(num_cpus=0)
class Producer:
    def __init__(self, channel):
        self.channel = channel

    def put_range(self, n: int, keys: list[str]) -> int:
        for i in range(n):
            self.channel.put(i, keys[i % len(keys)])
        return n

    def put(self, item, key="default"):
        self.channel.put(item, key)
        return True

    def put_big(self, nbytes: int, key: str = "default") -> int:
        self.channel.put({"blob": np.full(nbytes, 7, dtype=np.uint8), "tag": "big"}, key)
        return nbytes

    def use(self, channel):
        self.channel = channel
        return True


@ray.remote(num_cpus=0)
class Consumer:
    def __init__(self, channel):
        self.channel = channel

    def get(self, key="default", timeout=None):
        try:
            return ("ok", self.channel.get(key, timeout=timeout))
        except ChannelError as exc:
            return (type(exc).__name__, str(exc))

    def ping(self):
        return True


def test_put_get_several_keys_and_sizes(chan: RayChannel) -> None:
    chan.put("a0", "a")
    chan.put("b0", "b")
    chan.put("a1", "a")
    assert (chan.qsize("a"), chan.qsize("b"), chan.qsize("c")) == (2, 1, 0)
    assert chan.empty("c") and not chan.empty("a")
    assert not chan.full("a")  # unbounded
    assert sorted(chan.keys()) == ["a", "b"]
    assert [chan.get("a"), chan.get("a"), chan.get("b")] == ["a0", "a1", "b0"]
    chan.put(1, key=("tuple", 3))
    assert chan.get(key=("tuple", 3)) == 1


def test_get_nowait_on_an_empty_key(chan: RayChannel) -> None:
    with pytest.raises(ChannelEmpty, match=r"key 'nw' of channel .* is empty"):
        chan.get_nowait("nw")


def test_put_nowait_on_a_full_key(bounded: RayChannel) -> None:
    bounded.put_nowait(1, "nw")
    bounded.put_nowait(2, "nw")
    assert bounded.full("nw") and not bounded.full("other")
    with pytest.raises(ChannelFull, match=r"key 'nw' .* is full \(2 items\)"):
        bounded.put_nowait(3, "nw")
    assert [bounded.get_nowait("nw"), bounded.get_nowait("nw")] == [1, 2]


def test_get_batch_weight_rule_and_timeout_takes_nothing(chan: RayChannel) -> None:
    for i, w in enumerate([1, 2, 3]):
        chan.put(f"i{i}", "gb", weight=w)
    assert chan.weight("gb") == 6
    assert chan.get_batch(3, "gb") == ["i0", "i1"]  # 1 + 2 reaches 3
    with pytest.raises(ChannelTimeout, match=r"weight 5 \(have 3\)"):
        chan.get_batch(5, "gb", timeout=0.2)
    assert chan.qsize("gb") == 1 and chan.get("gb") == "i2"  # nothing was lost by the timeout
    with pytest.raises(ValueError, match="target_weight must be > 0"):
        chan.get_batch(0)
    with pytest.raises(ValueError, match="weight must be > 0"):
        chan.put(1, weight=0)


def test_get_batch_drains_while_waiting_for_a_small_maxsize(bounded: RayChannel, producers) -> None:
    prod = producers[0]
    ray.get(prod.use.remote(bounded))
    try:
        done = prod.put_range.remote(5, ["drain"])
        assert bounded.get_batch(5, "drain", timeout=20) == [0, 1, 2, 3, 4]  # more than maxsize fits
        assert ray.get(done) == 5
    finally:
        ray.get(prod.use.remote(None))


def test_ordering_stress_10000_items_across_processes(chan: RayChannel, producers) -> None:
    keys = ["k0", "k1", "k2", "k3"]
    ray.get([p.use.remote(chan) for p in producers])
    # Two producer processes, each on its own two keys, interleaving 5,000 items each.
    refs = [p.put_range.remote(5000, keys[2 * i : 2 * i + 2]) for i, p in enumerate(producers)]
    got: dict[str, list[int]] = {k: [] for k in keys}
    for _ in range(10_000 // 200):
        for k in keys:
            got[k] += chan.get_batch(50, k, timeout=60)
    assert ray.get(refs) == [5000, 5000]
    for i, k in enumerate(keys):
        assert got[k] == list(range(i % 2, 5000, 2)), k


def test_back_pressure_blocks_then_times_out(bounded: RayChannel) -> None:
    ch = bounded
    ch.put(0, "bp")
    ch.put(1, "bp")
    t0 = time.monotonic()
    with pytest.raises(ChannelTimeout, match=r"waiting for room \(the queue is full\) on key 'bp'"):
        ch.put(2, "bp", timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    assert ch.qsize("bp") == 2  # the timed-out put left nothing behind

    threading.Timer(0.3, ch.get, args=("bp",)).start()
    t0 = time.monotonic()
    ch.put(2, "bp", timeout=10)  # blocks until the timer's get makes room
    assert time.monotonic() - t0 >= 0.2
    assert [ch.get("bp"), ch.get("bp")] == [1, 2]
    ch.put_many(range(2), "bp-many")
    with pytest.raises(ChannelTimeout, match="0 of 1 items were put"):
        ch.put_many(["x"], "bp-many", timeout=0.2)
    assert [ch.get("bp-many"), ch.get("bp-many")] == [0, 1]


def test_close_wakes_sync_and_async_waiters(ray_session) -> None:
    ch = RayChannel.create(_name(), maxsize=1, default_timeout=0.2)
    with pytest.raises(ChannelTimeout, match=r"after 0\.2 s"):  # the channel's default timeout
        ch.get()
    threading.Timer(0.3, ch.put, args=("late", "inf")).start()
    assert ch.get("inf", timeout=math.inf) == "late"
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        ch.get(timeout=-1)
    ch.put("left")
    errors: list[BaseException] = []

    def blocked_put() -> None:
        try:
            ch.put("x", timeout=30)
        except BaseException as exc:
            errors.append(exc)

    def blocked_get() -> None:
        try:
            ch.get("empty", timeout=30)
        except BaseException as exc:
            errors.append(exc)

    async def async_waiters() -> list[BaseException]:
        results = await asyncio.gather(
            ch.aget("e1", timeout=30), ch.aget_batch(3, "e2", timeout=30), return_exceptions=True
        )
        return list(results)

    threads = [threading.Thread(target=f) for f in (blocked_put, blocked_get)]
    for t in threads:
        t.start()
    box: list = []
    at = threading.Thread(target=lambda: box.append(asyncio.run(async_waiters())))
    at.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    ch.close()
    for t in [*threads, at]:
        t.join(10)
    assert time.monotonic() - t0 < 5
    assert len(errors) == 2 and all(isinstance(e, ChannelClosed) for e in errors)
    assert all(isinstance(e, ChannelClosed) for e in box[0])
    assert ch.closed
    assert ch.get_nowait() == "left"  # queued items stay readable
    with pytest.raises(ChannelClosed):
        ch.put("late")
    with pytest.raises(ChannelClosed):
        ch.get(timeout=1)
    ch.close()  # twice is harmless
    ch.destroy()


def test_async_api_several_waiters_in_order(chan: RayChannel) -> None:
    async def main() -> list:
        waiters = [asyncio.create_task(chan.aget("q", timeout=10)) for _ in range(5)]
        await asyncio.sleep(0.2)
        for i in range(5):
            await chan.aput(i, "q")
        batch = asyncio.create_task(chan.aget_batch(2.5, "w", timeout=10))
        await chan.aput("a", "w", weight=1.5)
        await chan.aput("b", "w", weight=1.5)
        with pytest.raises(ChannelTimeout):
            await chan.aget("nothing", timeout=0.1)
        return [sorted(await asyncio.gather(*waiters)), await batch]

    got, batch = asyncio.run(main())
    assert got == [0, 1, 2, 3, 4]
    assert batch == ["a", "b"]


def test_cancelled_aget_loses_nothing(chan: RayChannel) -> None:
    async def main() -> None:
        for i in range(20):  # cancellation racing with the item's arrival, in many interleavings
            task = asyncio.create_task(chan.aget("c", timeout=10))
            await asyncio.sleep(0.05 if i % 2 else 0.002)
            task.cancel()
            if i % 3 == 0:
                await chan.aput(i, "c")
            with contextlib.suppress(asyncio.CancelledError):
                got = await task
                await chan.aput(got, "c")  # it won the race: hand it back ourselves
            if i % 3:
                await chan.aput(i, "c")

    asyncio.run(main())
    assert sorted(chan.get_batch(20, "c", timeout=10)) == list(range(20))
    assert chan.qsize("c") == 0


@dataclasses.dataclass
class Step:
    obs: np.ndarray
    info: dict


def test_payloads_small_and_large_cross_process(chan: RayChannel, producers) -> None:
    prod = producers[1]
    ray.get(prod.use.remote(chan))
    ray.get(prod.put.remote(Step(np.arange(5.0), {"r": [np.ones(2), 3]}), "s"))
    step = chan.get("s", timeout=20)
    assert isinstance(step, Step)
    np.testing.assert_array_equal(step.obs, np.arange(5.0))
    ray.get(prod.put_big.remote(4 << 20, "big"))
    item = chan.get("big", timeout=20)
    assert item["tag"] == "big" and item["blob"].shape == (4 << 20,) and int(item["blob"][-1]) == 7
    assert not item["blob"].flags.writeable  # a zero-copy view of the object store


def test_torch_tensors_roundtrip(chan: RayChannel) -> None:
    torch = pytest.importorskip("torch")
    small = {"x": torch.arange(6, dtype=torch.float32), "h": torch.ones(3, dtype=torch.bfloat16)}
    big = {"w": torch.randn(512, 512), "nested": [torch.arange(300_000, dtype=torch.int64)]}
    chan.put(small, "t")
    chan.put(big, "t")
    got_small, got_big = chan.get("t", timeout=10), chan.get("t", timeout=10)
    assert torch.equal(got_small["x"], small["x"]) and got_small["h"].dtype == torch.bfloat16
    assert torch.equal(got_big["w"], big["w"]) and torch.equal(got_big["nested"][0], big["nested"][0])
    packed, nbytes, has_torch = pack_payload(small)
    assert has_torch and nbytes == 6 * 4 + 3 * 2
    assert torch.equal(unpack_payload(packed)["h"], small["h"])


def test_connect_by_name_from_a_worker_and_pickled_handle(ray_session) -> None:
    name = _name()
    ref = ray.remote(num_cpus=0)(lambda: RayChannel.connect(name, timeout=20).get("k", timeout=20)).remote()
    time.sleep(0.3)  # the worker waits for the channel to be created
    ch = RayChannel.create(name)
    try:
        ch.put("hello", "k")
        assert ray.get(ref, timeout=30) == "hello"
        clone = pickle.loads(pickle.dumps(ch))
        clone.put("via clone", "k")
        assert ch.get("k") == "via clone"
    finally:
        ch.destroy()


def test_create_conflict_and_missing_channel(bounded: RayChannel) -> None:
    same = RayChannel.create(bounded.name, maxsize=2)  # create-or-connect
    same.put(1, "cc")
    assert bounded.get("cc") == 1
    same.disconnect()
    with pytest.raises(ChannelError, match="already exists with maxsize=2, not 5"):
        RayChannel.create(bounded.name, maxsize=5)
    with pytest.raises(ChannelTimeout, match="waiting for channel 'nope-"):
        RayChannel.connect(f"nope-{bounded.name}", timeout=0.3)
    with pytest.raises(ValueError, match="maxsize must be >= 0"):
        RayChannel.create(_name(), maxsize=-1)
    with pytest.raises(ValueError, match="not an alive Ray node"):
        RayChannel.create(_name(), node_id="ff" * 28)


def test_dead_producer_is_named_before_the_timeout(chan: RayChannel) -> None:
    prod = Producer.options(name=f"producer-{uuid.uuid4().hex[:6]}").remote(chan)
    assert ray.get(prod.put.remote("first", "d"))
    assert chan.get("d") == "first"
    threading.Timer(0.5, ray.kill, args=(prod,)).start()
    t0 = time.monotonic()
    with pytest.raises(
        ChannelPeerDied, match=r"producer actor 'producer-\w+' \[Producer\] \(pid \d+"
    ) as info:
        chan.get("d", timeout=30)
    assert time.monotonic() - t0 < 10
    assert "producer-" in info.value.peer


def test_dead_consumer_unblocks_a_full_put(bounded: RayChannel) -> None:
    ch = bounded
    cons = Consumer.options(name=f"consumer-{uuid.uuid4().hex[:6]}").remote(ch)
    ch.put(1, "p")
    assert ray.get(cons.get.remote("p", 10)) == ("ok", 1)
    ch.put(2, "p")
    ch.put(3, "p")
    threading.Timer(0.5, ray.kill, args=(cons,)).start()
    with pytest.raises(ChannelPeerDied, match=r"consumer actor 'consumer-\w+' \[Consumer\]"):
        ch.put(4, "p", timeout=30)


def test_dead_channel_actor_is_reported(ray_session) -> None:
    ch = RayChannel.create(_name())
    threading.Timer(0.5, ray.kill, args=(ch._actor,)).start()
    with pytest.raises(ChannelPeerDied, match="lost the connection to the actor of channel"):
        ch.get(timeout=30)


class _Touch:
    """Unpickling this creates a file: proof that a frame was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def test_data_plane_rejects_a_wrong_token_before_unpickling(chan: RayChannel, tmp_path) -> None:
    import socket
    import struct

    marker = tmp_path / "unpickled"
    body = pickle.dumps(_Touch(str(marker)))
    for first in (b"0" * 32, struct.pack("!I", len(body)) + body):
        with socket.create_connection(chan._address, timeout=10) as s:
            s.sendall(first + struct.pack("!I", len(body)) + body)
            assert s.recv(100) == b""  # closed without a reply
    time.sleep(0.2)
    assert not marker.exists()
    assert chan.qsize("never") == 0  # the channel still serves its real clients
