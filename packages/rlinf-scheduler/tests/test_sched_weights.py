"""Versioned weight broadcast on a real Ray: a 10M-parameter MLP and a small transformer LM."""

from __future__ import annotations

import re
import threading
import time
import uuid

import numpy as np
import pytest

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel import ChannelPeerDied
from rlinf_scheduler.weights import WeightBroadcast

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.network


def mlp_10m() -> nn.Module:
    """2560 -> 1920 -> 2560 -> 128: 10,162,688 parameters."""
    m = nn.Sequential(
        nn.Linear(2560, 1920), nn.ReLU(), nn.Linear(1920, 2560), nn.ReLU(), nn.Linear(2560, 128)
    )
    return m


class TinyLM(nn.Module):
    """A 2-layer causal transformer language model (vocab 1000, width 128)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, 128)
        self.pos = nn.Parameter(torch.zeros(64, 128))
        layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(128, 1000)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.head(self.blocks(x, mask=mask, is_causal=True))


@ray.remote(num_cpus=0)
class Rollout:
    """A rollout worker: its own model copy, loaded from the broadcast."""

    def __init__(self, weights: WeightBroadcast, kind: str) -> None:
        torch.manual_seed(1234)  # deliberately different from the trainer's init
        self.model = mlp_10m() if kind == "mlp" else TinyLM()
        self.weights = weights
        self.version = None

    def sync(self, min_version=None, timeout=60.0):
        version, sd = self.weights.fetch(min_version=min_version, timeout=timeout)
        self.model.load_state_dict(sd)
        self.version = version
        return version, float(sum(p.double().sum() for p in self.model.state_dict().values()))

    def logits(self, tokens):
        with torch.no_grad():
            return self.model(torch.as_tensor(tokens)).numpy()


@ray.remote(num_cpus=0)
class Trainer:
    def publish(self, weights: WeightBroadcast, value: float) -> int:
        return weights.publish({"w": torch.full((300_000,), value)})


def checksum(model: nn.Module) -> float:
    return float(sum(p.double().sum() for p in model.state_dict().values()))


@pytest.mark.slow
def test_mlp_10m_never_stale_across_workers(ray_session) -> None:
    model = mlp_10m()
    assert sum(p.numel() for p in model.parameters()) >= 10_000_000
    wb = WeightBroadcast.create(f"mlp-{uuid.uuid4().hex[:6]}")
    try:
        assert wb.version() is None and wb.fetch_if_newer(None) is None
        workers = [Rollout.remote(wb, "mlp") for _ in range(2)]
        assert wb.publish(model.state_dict()) == 0
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)
        assert wb.publish(model.state_dict()) == 1
        # Once publish returned, every fetch sees version 1, never 0.
        results = ray.get([w.sync.remote() for w in workers])
        assert [v for v, _ in results] == [1, 1]
        assert all(abs(c - checksum(model)) < 1e-3 * abs(checksum(model)) + 1e-3 for _, c in results)
        # Fetching the same version again is served from the handle's cache.
        v, sd = wb.fetch()
        v2, sd2 = wb.fetch()
        assert v == v2 == 1 and sd is sd2 and wb.fetch_if_newer(1) is None
        assert torch.equal(sd["0.weight"], model.state_dict()["0.weight"])
        with pytest.raises(ChannelError, match="version 1 is not newer than the published 1"):
            wb.publish(model.state_dict(), version=1)
        assert wb.publish(model.state_dict(), version=7) == 7
    finally:
        wb.destroy()


@pytest.mark.slow
def test_small_language_model_broadcast_gives_identical_logits(ray_session) -> None:
    torch.manual_seed(0)
    lm = TinyLM().eval()
    wb = WeightBroadcast.create(f"lm-{uuid.uuid4().hex[:6]}")
    try:
        worker = Rollout.remote(wb, "lm")
        waiting = worker.sync.remote(min_version=3, timeout=60)  # waits until version 3 exists
        time.sleep(0.5)
        for v in range(4):
            wb.publish(lm.state_dict(), version=v)
        version, _ = ray.get(waiting)
        assert version == 3
        tokens = np.random.default_rng(0).integers(0, 1000, size=(2, 16))
        with torch.no_grad():
            expected = lm(torch.as_tensor(tokens)).numpy()
        np.testing.assert_allclose(ray.get(worker.logits.remote(tokens)), expected, rtol=1e-5, atol=1e-5)
        with pytest.raises(ChannelTimeout, match=r"version >= 9 \(newest published: 3\)"):
            wb.fetch(min_version=9, timeout=0.3)
    finally:
        wb.destroy()


@pytest.mark.slow
def test_dead_publisher_is_named(ray_session) -> None:
    wb = WeightBroadcast.create(f"dead-{uuid.uuid4().hex[:6]}")
    try:
        trainer = Trainer.options(name=f"trainer-{uuid.uuid4().hex[:6]}").remote()
        assert ray.get(trainer.publish.remote(wb, 2.0)) == 0
        ray.kill(trainer)
        # Ray takes a moment to learn that the object's owner died (over a second once on a
        # loaded CI machine); until then a fetch may still read the object from the local store.
        # A fresh handle each time: this one would answer from its cache.
        deadline = time.monotonic() + 30
        while True:
            time.sleep(0.5)
            try:
                WeightBroadcast.connect(wb.name, timeout=10).fetch(timeout=10)
            except ChannelPeerDied as exc:
                assert re.search(r"publisher actor 'trainer-\w+' \[Trainer\]", str(exc)), exc
                break
            assert time.monotonic() < deadline, "fetches still worked 30 s after the publisher died"
        wb.publish({"w": torch.zeros(3)})  # a live trainer publishes again: fetches work
        assert wb.fetch()[0] == 1
    finally:
        wb.destroy()


def test_bfloat16_and_connect_by_name(ray_session) -> None:
    name = f"bf-{uuid.uuid4().hex[:6]}"
    box: list = []
    t = threading.Thread(target=lambda: box.append(WeightBroadcast.connect(name, timeout=20)))
    t.start()
    wb = WeightBroadcast.create(name)
    try:
        t.join(20)
        sd = {"a": torch.randn(4, 4).to(torch.bfloat16), "b": torch.arange(3)}
        box[0].publish(sd)
        _, got = wb.fetch()
        assert got["a"].dtype == torch.bfloat16 and torch.equal(got["a"], sd["a"])
        assert torch.equal(got["b"], sd["b"])
        with pytest.raises(ChannelTimeout, match="waiting for weight broadcast 'missing"):
            WeightBroadcast.connect(f"missing-{name}", timeout=0.2)
    finally:
        wb.destroy()
