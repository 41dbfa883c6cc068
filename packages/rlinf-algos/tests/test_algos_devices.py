"""Devices: every tensor rlinf allocates says where (the house rule "take the device of the data
it meets"), and the learners' update paths run with the model and data away from the default
device.

Two complementary checks:

- a static one (:func:`test_every_factory_call_names_its_device`): an AST scan of
  ``packages/*/src`` for torch factory calls (``torch.zeros``, ``full``, ``tensor``,
  ``randperm``...) without ``device=``; the ``*_like`` ones inherit their input's device and
  are fine, and so are calls in ``__init__`` (a module's parameters and buffers, moved with it
  by ``.to(device)``). What is left must be listed in :data:`ALLOWED` with its reason;
- a dynamic one (:class:`ImplicitDeviceTrap`): while it is active, a factory call *from rlinf's
  own source* that names no device allocates on the ``meta`` device. A model and a batch on the
  CPU then stand in for a model and a batch on a GPU: a tensor the code allocated implicitly
  lands somewhere else than the data, and the first operation mixing the two raises, as the
  CPU/CUDA mix raises on a GPU. This is what catches the crash class without a GPU.

The ``gpu`` tests run the same update paths on CUDA (skipped on CPU-only machines).
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch.overrides import TorchFunctionMode

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import CriticConfig, LMGRPOConfig, LMModelConfig, LMPPOConfig, ModelInitConfig
from rlinf_algos.lm.learner import LMLearner, ReferenceModel, log_probs_chunked, pack_batch
from rlinf_algos.lm.ppo import PPOLMLearner, ValueModel, token_gae
from rlinf_algos.models import build_policy
from rlinf_algos.obs import to_numpy

ROOT = Path(__file__).resolve().parents[3]
FACTORIES = {
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "tensor",
    "as_tensor",
    "randn",
    "rand",
    "randint",
    "randperm",
    "linspace",
    "eye",
}

HOST_BATCH = "a batch built on the host from Python lists (the learner moves it to its device)"
HOST_ORDER = "a minibatch order drawn on the host with a CPU generator (indices work on any device)"
OPEN = "OPEN (issue 39): should take the device of the data it meets; not fixed in this change"
ALLOWED: dict[tuple[str, str], str] = {
    # file (from packages/), enclosing function -> why it needs no device
    ("rlinf-algos/src/rlinf_algos/perception.py", "fit_perception"): HOST_ORDER + "; " + OPEN,
    ("rlinf-algos/src/rlinf_algos/optim.py", "clip_grads_"): "no gradient to take a device from: a 0 norm",
}


def _factory_calls_without_device(path: Path) -> list[tuple[str, int, str]]:
    """``(enclosing function, line, call)`` of every ``torch.<factory>(...)`` without ``device=``
    outside ``__init__`` methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, [*scope, child.name])
                continue
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in FACTORIES
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id == "torch"
                and not any(k.arg == "device" for k in child.keywords)
                and "__init__" not in scope
            ):
                found.append((".".join(scope), child.lineno, f"torch.{child.func.attr}"))
            visit(child, scope)

    visit(tree, [])
    return found


def test_every_factory_call_names_its_device() -> None:
    """Fails on a torch factory call without ``device=`` in any package's source that
    :data:`ALLOWED` does not list, and on an :data:`ALLOWED` entry that no longer matches a
    call (so the list only shrinks). At 22e5e38 it names, among others,
    ``lm/workers.py`` ``log_probs_chunked`` (the old log-probs on the CPU) and ``lm/ppo.py``
    ``token_gae`` and ``PPOLMLearner._values``."""
    offenders: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        rel = str(path.relative_to(ROOT / "packages"))
        for scope, line, call in _factory_calls_without_device(path):
            key = (rel, scope)
            if key in ALLOWED:
                used.add(key)
            else:
                offenders.append(f"{rel}:{line} {scope or '<module>'}: {call}(...) without device=")
    assert not offenders, "tensors allocated without saying where:\n" + "\n".join(offenders)
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries that match no call any more (remove them): {stale}"


def test_the_scan_finds_an_implicit_allocation(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import torch\n"
        "def f(x):\n"
        "    a = torch.zeros(3)\n"
        "    b = torch.zeros(3, device=x.device)\n"
        "    c = torch.zeros_like(x)\n"
        "    return a, b, c\n"
        "class M:\n"
        "    def __init__(self):\n"
        "        self.w = torch.ones(2)\n"
        "    def g(self):\n"
        "        return torch.randperm(4)\n"
    )
    assert _factory_calls_without_device(src) == [("f", 3, "torch.zeros"), ("M.g", 11, "torch.randperm")]


# -- the dynamic trap --------------------------------------------------------------------------
_FACTORY_FNS = {getattr(torch, n) for n in FACTORIES}


class ImplicitDeviceTrap(TorchFunctionMode):
    """Send factory calls from rlinf's own source that name no device to ``meta`` (see the
    module docstring); ``hits`` records where they came from."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        copies = func in (torch.tensor, torch.as_tensor) and args and isinstance(args[0], torch.Tensor)
        if func in _FACTORY_FNS and "device" not in kwargs and not copies:
            frame = sys._getframe(1)  # the caller, past torch's own frames
            while frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename:
                frame = frame.f_back
            name = frame.f_code.co_filename if frame is not None else ""
            if "rlinf_algos" in name and "/tests/" not in name:
                self.hits.append(f"{name}:{frame.f_lineno} torch.{func.__name__}")
                kwargs["device"] = "meta"
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> LMModelConfig:
    init = ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32)
    return LMModelConfig(path=str(hf.new_model_folder(tmp_path_factory.mktemp("m") / "m", init)))


def _batch(n: int = 4) -> dict[str, torch.Tensor]:
    prompt = [1, 5, 6, 7]
    seqs = [[*prompt, 8 + i % 3, 9, 2] for i in range(n)]
    masks = [[0] * len(prompt) + [1, 1, 1] for _ in seqs]
    batch = pack_batch(seqs, masks, 0)
    batch["episode_index"] = torch.arange(n, device="cpu")
    batch["rewards"] = torch.tensor([float(i % 2) for i in range(n)], device="cpu")
    return batch


def test_the_trap_catches_an_implicit_allocation() -> None:
    """The trap itself: an implicit allocation in rlinf's source (here the 22e5e38 form of the
    old log-probs' buffer, run through a function compiled with an rlinf file name) mixes with
    the data and raises."""
    code = compile(
        "def f(x):\n    out = torch.zeros(x.shape)\n    out[:] = x\n    return x - out\n",
        "/x/rlinf_algos/lm/workers.py",
        "exec",
    )
    ns: dict[str, Any] = {"torch": torch}
    exec(code, ns)
    with ImplicitDeviceTrap() as trap, pytest.raises(RuntimeError, match="meta"):
        ns["f"](torch.ones(3))
    assert trap.hits


def test_grpo_actor_old_log_probs_follow_the_model(spec: LMModelConfig) -> None:
    """grpo_lm with ``update_epochs > 1`` (the old log-probs are recomputed): at 22e5e38 they
    were allocated on the default device and mixed with the model's log-probs in the loss (the
    CUDA crash); here every tensor the update makes follows the model and batch."""
    cfg = LMGRPOConfig(group_size=2, minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    actor = LMLearner(hf.load_causal_lm(spec), cfg)
    batch = _batch()
    with ImplicitDeviceTrap() as trap:
        stats = actor.update(batch)
        lp = actor.compute_log_probs(batch)["log_probs"]
        chunked = log_probs_chunked(actor.model, batch["input_ids"], 1.0, 3, batch["loss_mask"])
    assert trap.hits == [] and lp.device.type == "cpu" and chunked.device.type == "cpu"
    assert stats["trained_sequences"] == 4 and stats["loss"] == stats["loss"]


def test_ppo_actor_update_follows_the_model(spec: LMModelConfig) -> None:
    """ppo_lm: at 22e5e38 the batch never moved to the learner's device, the values' buffer and
    token_gae's running terms were allocated on the default device; here the whole update
    (values, GAE, critic and policy steps) runs with nothing allocated implicitly."""
    cfg = LMPPOConfig(minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    actor = PPOLMLearner(hf.load_causal_lm(spec), cfg, critic=CriticConfig(lr=1e-3), model_spec=spec)
    with ImplicitDeviceTrap() as trap:
        stats = actor.update(_batch())
    assert trap.hits == [] and stats["trained_sequences"] == 4 and stats["value_loss"] >= 0


def test_value_head_lives_with_the_backbone(spec: LMModelConfig) -> None:
    """The critic's head was a new CPU layer on whatever device the backbone was on."""
    model = hf.load_causal_lm(spec).to(
        torch.float64
    )  # a stand-in for "elsewhere": the head follows the device
    critic = ValueModel(model.to("meta"))
    assert critic.head.weight.device.type == "meta"


def test_token_gae_follows_the_values() -> None:
    rewards = torch.zeros(2, 4, device="meta")
    values = torch.zeros(2, 4, device="meta")
    mask = torch.ones(2, 4, device="meta")
    adv, ret = token_gae(rewards, values, mask, 0.9, 0.95)  # 22e5e38: CPU running terms -> raises
    assert adv.device.type == ret.device.type == "meta"


def test_reference_and_generation_allocate_nothing_implicitly(spec: LMModelConfig) -> None:
    """The reference's log-probs and the sampling loop (whose logits used to go to the host
    every token) make every tensor on the model's device or, for host-side lists, say so."""
    ref = ReferenceModel(spec, temperature=1.0, chunk=2)
    batch = _batch()
    with ImplicitDeviceTrap() as trap:
        lp = ref.compute_log_probs(batch)["ref_log_probs"]
        out = hf.generate(
            ref.model, [[1, 5, 6], [1, 5, 6], [1, 7]], 4, [2], generator=torch.Generator().manual_seed(0)
        )
    assert trap.hits == [] and lp.shape == batch["input_ids"].shape and len(out.tokens) == 3


def test_chunked_token_log_probs_equal_the_plain_log_softmax() -> None:
    """Gather minus logsumexp in chunks (and checkpointed under autograd) equals the float32
    log-softmax over the whole vocabulary, values and gradients."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, device="cpu", dtype=torch.float64).requires_grad_(True)
    targets = torch.randint(0, 11, (3, 5), generator=g, device="cpu")
    plain = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    chunked = hf.token_log_probs(logits, targets, 0.7, chunk_elements=2 * 11)  # 2 rows per chunk
    assert torch.allclose(chunked, plain, atol=1e-6)
    (ga,) = torch.autograd.grad(plain.sum(), logits)
    (gb,) = torch.autograd.grad(chunked.sum(), logits)
    assert torch.allclose(ga, gb, atol=1e-6)


def test_sequence_log_probs_with_a_mask_skip_the_prompt(spec: LMModelConfig) -> None:
    """With the loss mask only the positions from the first trained token on are projected;
    those equal the full computation and the prompt positions hold 0."""
    model = hf.load_causal_lm(spec)
    batch = _batch()
    ids, mask = batch["input_ids"], batch["loss_mask"]
    with torch.no_grad():
        full = hf.sequence_log_probs(model, ids, 0.8)
        part = hf.sequence_log_probs(model, ids, 0.8, mask=mask)
    assert torch.allclose(part[:, 4:], full[:, 4:], atol=1e-5)
    assert torch.all(part[:, :4] == 0)


# -- the same paths on a GPU -------------------------------------------------------------------
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_grpo_and_ppo_updates_on_cuda(spec: LMModelConfig) -> None:
    from rlinf_algos.parallel import DataParallel

    dp = DataParallel(device="cuda")
    cfg = LMGRPOConfig(group_size=2, minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    actor = LMLearner(hf.load_causal_lm(spec).to("cuda"), cfg, dp=dp)
    assert actor.update(_batch())["trained_sequences"] == 4
    pcfg = LMPPOConfig(minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    ppo = PPOLMLearner(
        hf.load_causal_lm(spec).to("cuda"), pcfg, critic=CriticConfig(path=spec.path), model_spec=spec, dp=dp
    )
    assert ppo.update(_batch())["trained_sequences"] == 4
    ref = ReferenceModel(spec, device="cuda")
    assert ref.compute_log_probs(_batch())["ref_log_probs"].device.type == "cpu"
    out = hf.generate(ref.model, [[1, 5, 6]] * 3, 4, [2], generator=torch.Generator("cuda").manual_seed(0))
    assert len(out.tokens) == 3


def _sac_vla() -> Any:
    import numpy as np

    from rlinf_algos.models import build_policy
    from rlinf_algos.replay import ReplayBatch
    from rlinf_algos.sac.config import SACConfig
    from rlinf_algos.sac.learner import SACLearner
    from rlinf_algos.sac.recipe import sac_critic

    space = VLA_SPACE
    spec = {
        "type": "vla",
        "cls": "SquashedGaussianActor",
        "obs_dim": 3,
        "act_dim": 2,
        "action_low": [-1.0, -1.0],
        "action_high": [1.0, 1.0],
        "hidden": [16],
        "obs_space": space,
    }
    torch.manual_seed(0)
    learner = SACLearner(build_policy(spec), sac_critic(spec), SACConfig(image_shift=2, batch_size=4))
    rng = np.random.default_rng(0)

    def obs() -> dict[str, Any]:
        return {
            "image": rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8),
            "state": rng.standard_normal((4, 3)).astype(np.float32),
            "instruction": np.array(["reach red", "reach blue"] * 2),
        }

    batch = ReplayBatch(
        obs(),
        rng.uniform(-1, 1, (4, 2)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
        obs(),
        np.zeros(4, bool),
        np.zeros(4, bool),
    )
    return learner, batch


def test_sac_vla_update_allocates_nothing_implicitly() -> None:
    """SAC with ``model.type: vla``: the observations are prepared on the host (images
    shifted with the host generator) and moved to the learner's device; nothing in the update
    allocates on the default device."""
    learner, batch = _sac_vla()
    with ImplicitDeviceTrap() as trap:
        stats = learner.update(batch)
    assert trap.hits == [] and all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())


@pytest.mark.gpu
@gpu
def test_sac_vla_update_on_cuda() -> None:
    from rlinf_algos.sac.learner import SACLearner

    learner, batch = _sac_vla()
    cuda = SACLearner(learner.actor, learner.critic, learner.cfg, device="cuda")
    stats = cuda.update(batch)
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())


# -- devices from the placement ----------------------------------------------------------------
@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make torch report ``n`` visible GPUs (no GPU exists here; only the count is faked)."""

    def set_count(n: int, visible: str | None = None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)

    return set_count


def test_auto_is_the_gpu_of_the_local_rank(fake_gpus: Any) -> None:
    from rlinf_algos.devices import resolve_device

    fake_gpus(2)  # a process placed on a node sees every GPU of it
    assert resolve_device("auto", local_rank=0) == torch.device("cuda", 0)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)  # 22e5e38: cuda:0 for both
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:0", local_rank=1) == torch.device("cuda", 0)  # named: as named
    fake_gpus(1, "3")  # the placement gave the process its own GPU
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 0)
    fake_gpus(0, "")
    assert resolve_device("auto", local_rank=1) == torch.device("cpu")


def test_a_rank_past_the_gpus_it_sees_is_refused(fake_gpus: Any) -> None:
    from rlinf_algos.devices import resolve_device
    from rlinf_core.errors import ConfigError

    fake_gpus(2)
    with pytest.raises(ConfigError, match="local rank 2 but sees 2 GPU") as err:
        resolve_device("auto", local_rank=2)
    assert "runner.device" in str(err.value)


def test_gpus_torch_cannot_use_name_the_torch_cuda_version(fake_gpus: Any) -> None:
    from rlinf_algos.devices import resolve_device
    from rlinf_core.errors import ConfigError

    fake_gpus(0, "0,1")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=0,1 names GPUs") as err:
        resolve_device("cuda")
    assert f"CUDA {torch.version.cuda}" in str(err.value) and "\n" not in str(err.value)
    assert resolve_device("auto") == torch.device("cpu")  # with a warning saying why


def _plan(actor: dict[str, Any], gpus: int) -> Any:
    from rlinf_scheduler.placement import Inventory, plan_placement

    cluster = {
        "num_nodes": 1,
        "component_placement": {"rollout": {"node_group": "node", "placement": "0"}, "actor": actor},
    }
    return plan_placement(cluster, Inventory.uniform(gpus))


def test_two_learner_ranks_on_one_gpu_are_refused_at_plan_time() -> None:
    from rlinf_algos.devices import plan_devices, shared_gpu_problems

    shared = _plan({"node_group": "node", "placement": "0:0-1"}, gpus=1)  # both see the one GPU
    (msg,) = shared_gpu_problems(shared, "auto")
    assert "actor" in msg and "'0:0-1'" in msg and "share GPU 0" in msg and "\n" not in msg
    assert shared_gpu_problems(shared, "cpu") == []  # Gloo on the CPU: nothing shared
    apart = _plan({"node_group": "node", "placement": "0:0-1"}, gpus=2)
    assert shared_gpu_problems(apart, "auto") == []
    assert plan_devices(apart, "auto")["actor"] == ["cuda:0@node 0", "cuda:1@node 0"]
    assert plan_devices(apart, "cpu")["actor"] == ["cpu", "cpu"]
    own = _plan({"placement": "0-1"}, gpus=2)  # the GPU group: one GPU each
    assert shared_gpu_problems(own, "cuda") == []


def test_dry_run_refuses_two_ranks_on_one_gpu_and_shows_devices(host: Any, invoke: Any) -> None:
    args = [
        "train",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        "runner.device=auto",
        "cluster.component_placement.actor.placement=0:0-1",
        "--dry-run",
        "--gpus-per-node",
    ]
    res = invoke(host, *args, "1")
    assert res.exit_code != 0 and "ranks 0 and 1 would share GPU 0" in f"{res.output}{res.exception}"
    res = invoke(host, *args, "2")
    assert res.exit_code == 0, res.output
    assert "#   actor: cuda:0@node 0, cuda:1@node 0" in res.output and "# torch " in res.output


# -- precision -----------------------------------------------------------------------------------
def test_bfloat16_trains_float32_master_weights_under_autocast(spec: LMModelConfig) -> None:
    """``model.dtype: bfloat16`` without LoRA: the trained weights are float32 and the forward
    runs under bf16 autocast (CPU autocast supports bf16). One AdamW step with a learning rate
    whose updates are below half a bf16 ulp of the weights changes the float32 weights, where
    bf16 weights would not have moved (22e5e38 trained the bf16 weights directly)."""
    bf = spec.model_copy(update={"dtype": "bfloat16"})
    model = hf.load_causal_lm(bf)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert hf.load_causal_lm(bf, trainable=False).dtype == torch.bfloat16  # rollout/reference: bf16
    batch = _batch()
    with torch.no_grad():
        plain = hf.sequence_log_probs(model, batch["input_ids"])
        model.rlinf_compute_dtype, saved = None, model.rlinf_compute_dtype
        exact = hf.sequence_log_probs(model, batch["input_ids"])
        model.rlinf_compute_dtype = saved
    assert not torch.equal(plain, exact) and torch.allclose(plain, exact, atol=0.1)  # bf16 compute
    cfg = LMGRPOConfig(
        group_size=2, minibatch_size=4, update_epochs=1, lr=1e-6, kl_coef=0.0, lr_warmup_iters=0
    )
    actor = LMLearner(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    actor.update(batch)
    moved = rounded_away = 0
    for n, p in model.named_parameters():
        changed = p.detach() != before[n]
        moved += int(changed.sum())
        rounded_away += int((changed & (p.detach().bfloat16() == before[n].bfloat16())).sum())
    assert moved > 0 and rounded_away > 0.5 * moved  # most of the update lives below bf16's resolution


def test_tf32_is_set_for_cuda_devices_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlinf_algos.devices import configure_precision

    calls: list[str] = []
    monkeypatch.setattr(torch, "set_float32_matmul_precision", calls.append)
    configure_precision(torch.device("cpu"))
    assert calls == []
    configure_precision(torch.device("cuda", 0))  # sets a flag only: no GPU needed
    assert calls == ["high"]


def test_summary_records_each_roles_device_and_torchs_cuda(tmp_path: Path) -> None:
    import json

    from rlinf_algos.training import _record_devices

    (tmp_path / "summary.json").write_text(json.dumps({"iterations": 3}))
    plan = _plan({"node_group": "node", "placement": "0:0-1"}, gpus=2)
    out = _record_devices(tmp_path, {"iterations": 3}, plan, {"runner": {"device": "auto"}})
    stored = json.loads((tmp_path / "summary.json").read_text())
    assert stored["iterations"] == 3 and stored["devices"] == out["devices"]
    dev = stored["devices"]
    assert dev["roles"]["actor"] == ["cuda:0@node 0", "cuda:1@node 0"] and dev["roles"]["rollout"] == [
        "cuda:0@node 0"
    ]
    assert dev["torch_cuda"] == (torch.version.cuda or "none") and dev["gpus"] == 0
    assert dev["driver"] == "none"  # no NVIDIA driver here (issue 39: "none" on the CPU)


def test_a_local_run_records_and_dry_runs_its_one_device(tmp_path: Path, host: Any, invoke: Any) -> None:
    """``runner.scheduler: local``: every role in this process, on the device runner.device
    resolves to here; ``--dry-run`` and ``summary.json`` show it (before, neither showed a device
    for a local run), with the NVIDIA driver ``none`` on the CPU."""
    import json

    from rlinf_algos.training import _record_devices

    out = _record_devices(tmp_path, {}, None, {"runner": {"device": "auto"}})
    assert out["devices"]["roles"] == {"local": ["cpu"]} and out["devices"]["driver"] == "none"
    res = invoke(
        host, "train", str(ROOT / "examples" / "quickstart.yaml"), "runner.scheduler=local", "--dry-run"
    )
    assert res.exit_code == 0, res.output
    assert "#   local: cpu" in res.output and "NVIDIA driver none" in res.output
    res = invoke(
        host,
        "train",
        str(ROOT / "examples" / "quickstart.yaml"),
        "runner.scheduler=local",
        "runner.device=cuda",
        "--dry-run",
    )
    assert res.exit_code != 0 and "no CUDA device" in f"{res.output}{res.exception}"
    assert json.dumps(out["devices"])


# -- embodied learners and rollouts on their placed device ---------------------------------------
# PPO and embodied GRPO used to refuse any runner.device but cpu. Their learners (MLP and vla
# models) now train where the actor is placed and their rollout and reference policies run where
# they are placed; observations cross to the device and actions come back at the policy's
# boundary, the collection buffers and sampling streams stay on the host.
VLA_SPACE = {
    "kind": "dict",
    "keys": {
        "image": {"kind": "box", "shape": [32, 32, 3], "dtype": "uint8"},
        "state": {"kind": "box", "shape": [3], "dtype": "float32"},
        "instruction": {"kind": "text", "max_length": 32},
    },
}


def policy_spec(kind: str) -> dict[str, Any]:
    if kind == "vla":
        return {
            "type": "vla",
            "cls": "GaussianActorCritic",
            "obs_space": VLA_SPACE,
            "obs_dim": 3,
            "act_dim": 2,
        }
    return {
        "type": "mlp",
        "cls": "GaussianActorCritic",
        "obs_dim": 3,
        "act_dim": 2,
        "hidden": [16, 16],
        "activation": "tanh",
        "log_std_init": 0.0,
        "normalize_obs": True,
    }


class RandomPort:
    """A collection loop's port fed with random observations of the spec's space (the env side
    of these tests: what is checked is the policy's side)."""

    def __init__(self, kind: str, n: int = 4, stages: int = 1, seed: int = 0) -> None:
        self.kind, self.slots, self.stages = kind, n, stages
        self.rng = np.random.default_rng(seed)
        self.sent: list[np.ndarray] = []
        self.t = 0

    def obs(self) -> Any:
        n = self.slots
        if self.kind == "vla":
            return {
                "image": self.rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                "state": self.rng.standard_normal((n, 3)).astype(np.float32),
                "instruction": np.array(["reach red", "reach blue"] * (n // 2)),
            }
        return self.rng.standard_normal((n, 3)).astype(np.float32)

    def recv(self, s: int) -> dict[str, Any]:
        self.t += 1
        n = self.slots
        trunc = np.zeros(n, bool)
        msg: dict[str, Any] = {
            "obs": self.obs(),
            "rew": self.rng.standard_normal(n).astype(np.float32),
            "term": np.zeros(n, bool),
            "trunc": trunc,
        }
        if self.t % 3 == 0:  # an episode of slot 0 hits its time limit: a final observation
            trunc[0] = True
            final = self.obs()
            msg["final"] = (
                np.array([0]),
                {k: v[:1] for k, v in final.items()} if self.kind == "vla" else final[:1],
            )
        return msg

    def send(self, s: int, actions: np.ndarray) -> None:
        self.sent.append(np.array(actions))


def _ppo_side(kind: str, device: str = "cpu") -> Any:
    from rlinf_algos.embodied.recipe import LearnerContext
    from rlinf_algos.parallel import DataParallel
    from rlinf_algos.ppo.config import PPOConfig
    from rlinf_algos.ppo.learner import PPOLearnerSide

    torch.manual_seed(0)
    dp = DataParallel(device=device)
    model = dp.wrap(build_policy(policy_spec(kind)), methods=("evaluate", "value"))
    cfg = PPOConfig(rollout_steps=6, minibatch_size=8, update_epochs=2, normalize_reward=True)
    ctx = LearnerContext(None, 1, 30.0, publish=lambda: None, seed=0, device=device, dp=dp)
    return PPOLearnerSide(model, cfg, ctx, 4)


@pytest.mark.parametrize("kind", ["mlp", "vla"])
def test_ppo_collection_and_update_allocate_nothing_implicitly(kind: str) -> None:
    """PPO's collection loop and its learner (the batch assembled, the values, GAE, the epochs,
    the observation statistics folded in) allocate nothing on the default device: with the
    model on a GPU every tensor they make is on it. At 22e5e38 (before this change) the update's
    statistics, the truncation bootstrap and the folded moments were CPU tensors."""
    from rlinf_algos.ppo.rollout import collect_ppo

    side = _ppo_side(kind)
    port = RandomPort(kind)
    with ImplicitDeviceTrap() as trap:
        traj = collect_ppo(port, side.model, 6, torch.Generator(device="cpu").manual_seed(0))
        traj["version"] = 0
        metrics = side.learn([traj])
    assert trap.hits == []
    assert len(traj["final_idx"]) > 0  # the bootstrap path ran
    assert all(np.isfinite(v) for k, v in metrics.items() if k != "explained_variance")
    assert side.version == 1


def test_grpo_update_allocates_nothing_implicitly() -> None:
    from rlinf_algos.grpo.config import GRPOConfig
    from rlinf_algos.grpo.learner import GRPOLearner, GRPORollout

    torch.manual_seed(0)
    model = build_policy(policy_spec("mlp"))
    cfg = GRPOConfig(group_size=2, num_groups=2, minibatch_size=8, update_epochs=2, kl_coef=0.1)
    learner = GRPOLearner(model, cfg, seed=0)
    S, L = 4, 5
    g = torch.Generator(device="cpu").manual_seed(1)
    mask = torch.ones(S, L, dtype=torch.bool)
    mask[0, 3:] = False
    r = GRPORollout(
        obs=torch.randn(S, L, 3, generator=g),
        actions=torch.randn(S, L, 2, generator=g),
        log_probs=torch.randn(S, L, generator=g) - 2.0,
        mask=mask,
        returns=torch.tensor([1.0, 0.0, 2.0, 3.0]),
        lengths=mask.sum(1),
    )
    with ImplicitDeviceTrap() as trap:
        metrics = learner.update(r)
    assert trap.hits == [] and all(np.isfinite(v) for v in metrics.values())


# -- devices from the placement ----------------------------------------------------------------
class _Host:
    def __init__(self, **options: Any) -> None:
        self.options = options


def test_rollout_and_reference_bodies_take_their_placements_gpu(fake_gpus: Any) -> None:
    """The embodied rollout and GRPO reference bodies build their policy on
    :func:`placed_device`: the process's GPU under any ``runner.device`` but ``cpu`` when its
    placement gives it one, else the CPU (they used to build it on the CPU always)."""
    from rlinf_algos.embodied.roles import placed_device

    fake_gpus(1)
    assert placed_device(_Host(device="auto")) == torch.device("cuda", 0)
    assert placed_device(_Host(device="cuda")) == torch.device("cuda", 0)
    assert placed_device(_Host(device="cpu")) == torch.device("cpu")
    assert placed_device(_Host()) == torch.device("cpu")  # launched without one: the CPU
    fake_gpus(0)  # placed on a CPU node: the CPU whatever runner.device says
    assert placed_device(_Host(device="auto")) == torch.device("cpu")
    assert placed_device(_Host(device="cuda")) == torch.device("cpu")


def test_rollout_body_on_the_cpu_hands_out_cpu_weights() -> None:
    from rlinf_algos.embodied.roles import EmbodiedRollout

    class Recipe:
        name = "ppo"

    body = EmbodiedRollout(_Host(device="cpu"), Recipe())  # type: ignore[arg-type]
    body.configure(policy_spec("mlp"))
    assert all(v.device.type == "cpu" for v in body.weights().values())
    assert not body.model.training


@pytest.mark.parametrize("name", ["ppo", "grpo"])
def test_ppo_and_grpo_accept_a_gpu_learner_and_dry_run_shows_each_roles_device(name: str, host: Any) -> None:
    """``runner.device: auto`` (or ``cuda``) on a GPU placement is no longer refused for PPO
    and embodied GRPO, and ``--dry-run`` shows the actor, rollout and reference on their GPUs,
    the env and reward workers on the CPU."""
    from rlinf_algos.config.prepare import dry_run
    from rlinf_scheduler.placement import Inventory

    path = ROOT / "examples" / ("quickstart.yaml" if name == "ppo" else "grpo_pendulum.yaml")
    data = yaml.safe_load(path.read_text())
    place = data["cluster"]["component_placement"]
    place["actor"] = {"placement": "0"}  # the GPU group: GPU 0
    place["rollout"] = {"placement": "1"}
    if name == "grpo":
        place["reference"] = {"placement": "1"}
    for device in ("auto", "cuda"):
        out = dry_run(data, overrides=[f"runner.device={device}"], host=host, inventory=Inventory.uniform(2))
        devices = out["devices"]
        assert devices["actor"] == ["cuda:0@node 0"] and devices["rollout"] == ["cuda:1@node 0"]
        assert set(devices["env"]) == {"cpu"}
        if name == "grpo":
            assert devices["reference"] == ["cuda:1@node 0"] and devices["reward"] == ["cpu"]
    out = dry_run(data, overrides=["runner.device=cpu"], host=host, inventory=Inventory.uniform(2))
    assert {d for ranks in out["devices"].values() for d in ranks} == {"cpu"}  # CPU: unchanged


# -- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kind", ["mlp", "vla"])
def test_ppo_on_cuda_matches_the_cpu(kind: str) -> None:
    """One collection and one PPO update with the policy on CUDA against the same on the CPU,
    TF32 off on the GPU (float32 kernels on both sides, which differ only in summation order):
    the same actions from the same host generator (to 1e-4), and the same weights after the
    update within Adam's bound: a weight whose gradient is near 0 can move by about ``lr`` a
    step in either direction, so ``2 * lr * adam_move_bound(steps)`` (3.6e-3 for 6 steps at
    3e-4; the old 1e-3 was below it)."""
    from rlinf_algos.optim import adam_move_bound
    from rlinf_algos.ppo.rollout import collect_ppo

    out, steps, lr = {}, {}, {}
    for device in ("cpu", "cuda"):
        side = _ppo_side(kind, device)
        matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            port = RandomPort(kind)
            traj = collect_ppo(port, side.model, 6, torch.Generator(device="cpu").manual_seed(0))
            traj["version"] = 0
            side.learn([traj])
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        opt = side.learner.optimizer
        steps[device] = max(int(s["step"]) for s in opt.state.values())
        lr[device] = side.cfg.lr  # annealing only lowers it
        out[device] = (np.stack(port.sent), {k: v.cpu() for k, v in side.model.state_dict().items()})
        assert all(p.device.type == device for p in side.model.parameters())
    assert steps["cpu"] == steps["cuda"] == 6
    np.testing.assert_allclose(out["cuda"][0], out["cpu"][0], atol=1e-4)
    bound = 2 * max(lr.values()) * adam_move_bound(steps["cpu"]) + 1e-5  # + float32 rounding
    for k, v in out["cpu"][1].items():
        torch.testing.assert_close(out["cuda"][1][k], v, atol=bound, rtol=0)
    assert all(isinstance(v, np.ndarray) for v in to_numpy({"a": torch.zeros(1, device="cuda")}).values())
