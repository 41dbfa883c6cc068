"""A device check in one command: the learners' update paths on one GPU (or, with ``--cpu``, on
the CPU), with small models built here (no downloads, no Ray), and a short report.

    uv run python tools/gpu_check.py                # on a machine with one NVIDIA GPU
    uv run python tools/gpu_check.py --cpu          # the unit steps on the CPU (the fast suite runs this)
    uv run python tools/gpu_check.py --cpu --runs   # and the end-to-end steps (minutes on a CPU)
    uv run python tools/gpu_check.py --report out.json

Steps (each passes or fails on its own; the exit status is 1 when one fails):

- ``grpo_lm full bf16``: an update with ``update_epochs: 2`` and more sequences than the
  minibatch (the old log-probs recomputed), ``model.dtype: bfloat16`` (float32 master weights,
  bf16 autocast);
- ``grpo_lm lora bf16``: the same with LoRA adapters;
- ``ppo_lm``: a PPO update (critic, token GAE, clipped losses);
- ``reference + generate``: the reference's log-probs and sampling on the device (the
  sampler's generator on the device);
- ``sac vla``: a SAC update of the ``vla`` model (images shifted, instruction tokens);
- ``cpu vs device``: one float32 GRPO update from the same weights and batch on the CPU and on
  the device; the log-probs after it agree within ``atol 2e-3`` (TF32 matmuls on the GPU);
- ``ppo vla cpu vs device``: the embodied PPO collection loop (policy on the device, buffers and
  sampling on the host) and one PPO update of the ``vla`` model (CNN + FiLM + keypoints) on the
  device, against the same on the CPU from the same weights, observations and generator: the
  actions agree within ``atol 1e-3`` and the weights after the update within Adam's bound
  (``PPO_WEIGHTS_ATOL``: a weight whose gradient is near 0 moves by about ``lr`` a step either
  way), TF32 off on the device;
- ``grpo embodied``: an embodied GRPO update (MLP, k3 KL to the frozen copy) on the device;
- ``out of memory``: an in-process PPO run whose third update allocates more than the device
  has (``--cpu``: raises ``torch.OutOfMemoryError`` itself, as no CPU allocation raises it)
  ends with ``RunFailed`` naming the knobs, keeps the checkpoint before it and restarts nothing;
- ``sft bf16``: ``rlinf sft``'s training (``train_sft``, what the command runs) with
  ``model.dtype: bfloat16`` on the device, 5 steps on one fixed batch: the loss is finite and
  falls;
- ``learner group of one``: the language-model actor in a ``torch.distributed`` process group
  of one rank (NCCL on the GPU, Gloo with ``--cpu``; a TCP store on 127.0.0.1) started,
  wrapped and closed as the runtime's actor workers do it (``DataParallel.start``, ``ddp``: the
  weights broadcast, the gradients all-reduced in buckets), one update: the log-probs after it
  equal the group-less update's within ``GROUP_ATOL`` (float32 ``1e-3``), and the group is gone
  after ``close()``;
- ``fsdp learner of one``: the same with ``actor.strategy: fsdp`` in bf16: the model built on
  the meta device, sharded, its shards filled from the loaded weights
  (``DataParallel.wrap_loaded``), FSDP2's gather and reduce-scatter on the device, the weights
  gathered to publish (bf16 tolerance ``2e-2``);
- the end-to-end steps of :mod:`gpu_check_runs` (on a GPU always, on the CPU with ``--runs``):
  ``grpo_arith local`` and ``quickstart ppo local`` (``rlinf train`` shortened, local scheduler,
  no Ray, ``summary.json`` reporting the device), ``two ranks on one device`` (what NCCL says to
  two ranks on one GPU, which ``rollout.weight_sync: auto`` avoids) and ``pytest -m gpu``.

Not covered: two or more ranks (one GPU here; ``test_algos_parallel.py`` runs 2 ranks on 2 GPUs
where there are), vLLM/SGLang engines (not part of rlinf), the weight-sync collective to a
rollout process (``benchmarks/weight_sync.py``, Gloo), Ray itself (the check runs without it).

Without a network (only torch, transformers, peft, pyarrow, pluggy, click, rich and pyyaml
installed), ``tools/gpu_check.sh`` runs it with the wheels it brings (see that script).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_algos.devices import device_report
from rlinf_algos.lm import hf
from rlinf_algos.lm.config import (
    CriticConfig,
    LMGRPOConfig,
    LMModelConfig,
    LMPPOConfig,
    LoraConfig,
    ModelInitConfig,
)
from rlinf_algos.lm.learner import LMLearner, ReferenceModel, pack_batch
from rlinf_algos.lm.ppo import PPOLMLearner
from rlinf_algos.optim import adam_move_bound
from rlinf_algos.parallel import DataParallel

CPU_VS_DEVICE_ATOL = 2e-3
"""log-probs after ONE GRPO update (one AdamW step, lr 2e-4) on the CPU and on the device: a
stable quantity (a single step moves each weight by exactly ``lr`` in its gradient's sign, so a
weight whose gradient rounds to the other sign is ``2 * lr`` off, and the log-probs move by far
less than that times the few such weights); the rest is TF32 matmuls on the GPU (10-bit
mantissas: ~1e-3 relative on the logits of this tiny model)."""


@contextlib.contextmanager
def _deterministic() -> Any:
    """Deterministic kernels where torch has them, for comparisons of two updates on one
    device: TF32 off, the math attention backend (the fused SDPA backwards sum in a
    nondeterministic order), torch's deterministic algorithms (``warn_only``: an op without a
    deterministic kernel still runs, with a warning). Restored afterwards."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    det = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        torch.use_deterministic_algorithms(det[0], warn_only=det[1])


def _batch(n: int = 6) -> dict[str, torch.Tensor]:
    prompt = [1, 5, 6, 7]
    seqs = [[*prompt, 8 + i % 3, 9 + i % 2, 2] for i in range(n)]
    batch = pack_batch(seqs, [[0] * len(prompt) + [1, 1, 1]] * n, 0)
    batch["episode_index"] = torch.arange(n, device="cpu")
    batch["rewards"] = torch.tensor([float(i % 2) for i in range(n)], device="cpu")
    return batch


def _grpo(spec: LMModelConfig, dev: torch.device) -> str:
    cfg = LMGRPOConfig(group_size=2, minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    actor = LMLearner(hf.load_causal_lm(spec, device=dev), cfg, dp=DataParallel(device=dev))
    stats = actor.update(_batch())
    if not np.isfinite(stats["loss"]):
        raise RuntimeError(f"loss {stats['loss']}")
    return f"loss {stats['loss']:.4f}, {int(stats['trained_sequences'])} sequences"


def _ppo(spec: LMModelConfig, dev: torch.device) -> str:
    cfg = LMPPOConfig(minibatch_size=2, update_epochs=2, kl_coef=0.0, lr_warmup_iters=0)
    actor = PPOLMLearner(
        hf.load_causal_lm(spec, device=dev),
        cfg,
        critic=CriticConfig(path=spec.path),
        model_spec=spec,
        dp=DataParallel(device=dev),
    )
    stats = actor.update(_batch())
    return f"value loss {stats['value_loss']:.4f}, policy loss {stats['loss']:.4f}"


def _reference_and_generate(spec: LMModelConfig, dev: torch.device) -> str:
    ref = ReferenceModel(spec, device=dev)
    lp = ref.compute_log_probs(_batch())["ref_log_probs"]
    gen = torch.Generator(dev).manual_seed(0)
    out = hf.generate(ref.model, [[1, 5, 6], [1, 5, 6], [1, 7]], 6, [2], generator=gen)
    return f"ref log-probs {tuple(lp.shape)}, {out.num_tokens} tokens sampled"


def _sac_vla(dev: torch.device) -> str:
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
    learner = SACLearner(build_policy(spec), sac_critic(spec), SACConfig(image_shift=2, batch_size=4), dev)
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
    stats = learner.update(batch)
    return ", ".join(f"{k} {float(v):.4f}" for k, v in list(stats.items())[:3])


def _cpu_vs_device(spec: LMModelConfig, dev: torch.device) -> str:
    cfg = LMGRPOConfig(group_size=2, minibatch_size=6, update_epochs=1, kl_coef=0.0, lr_warmup_iters=0)
    batch = _batch()
    after = []
    for d in (torch.device("cpu"), dev):
        actor = LMLearner(hf.load_causal_lm(spec, device=d), cfg, dp=DataParallel(device=d))
        actor.update(batch)
        after.append(actor.compute_log_probs(batch)["log_probs"].cpu())
    diff = float((after[0] - after[1]).abs().max())
    if diff > CPU_VS_DEVICE_ATOL:
        raise RuntimeError(f"log-probs after one update differ by {diff:.2e} (> {CPU_VS_DEVICE_ATOL:g})")
    return f"max |log-prob difference| {diff:.2e} (tolerance {CPU_VS_DEVICE_ATOL:g})"


GROUP_ATOL = {"float32": 1e-3, "bfloat16": 2e-2}
"""How far the log-probs after a learner group's update may be from those after the same update
without a group (the same maths: prompts not shared, as FSDP never shares them; on the CPU they
agree exactly). Both updates run under :func:`_deterministic` (no TF32, math attention,
deterministic kernels), so on a GPU a group of one adds only what its collectives change: a
bucketed all-reduce of one rank (an identity, ddp) or FSDP2's gather/reduce-scatter and its
bf16 casts. Without determinism the fused attention backwards sum in varying order, and Adam
at lr 1e-2 can turn a near-zero gradient's rounding into a ``2 * lr`` move of a weight (6 steps:
up to ``2 * 1e-2 * adam_move_bound(6)`` = 0.12), so these tolerances would not hold for the right
reason. In bf16, about one rounding of a log-prob near -3.5."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _learner_group(spec: LMModelConfig, dev: torch.device, strategy: str) -> str:
    """One GRPO update of the language-model actor in a learner group of one rank, through
    ``torch.distributed`` (NCCL on a GPU, Gloo on the CPU) as the runtime starts it
    (:meth:`DataParallel.start` on a ``tcp://127.0.0.1`` store, :meth:`DataParallel.wrap_loaded`:
    under ``fsdp`` a meta skeleton sharded, then its shards from the loaded weights), against
    the same update without a group: the log-probs after it agree within ``GROUP_ATOL`` (of
    ``model.dtype``), while the update itself moved them by at least ten times that."""
    import torch.distributed as dist

    cfg = LMGRPOConfig(
        group_size=2,
        minibatch_size=2,
        update_epochs=2,
        kl_coef=0.0,
        lr_warmup_iters=0,
        lr=1e-2,
        share_prefix=False,
    )
    batch, tol = _batch(), GROUP_ATOL[spec.dtype]
    plain = LMLearner(hf.load_causal_lm(spec, device=dev), cfg, dp=DataParallel(device=dev))
    with _deterministic():  # after DataParallel, which turns TF32 on for a GPU
        before = plain.compute_log_probs(batch)["log_probs"]
        plain.update(batch)
        want = plain.compute_log_probs(batch)["log_probs"]
    moved = float((want - before).abs().max())
    del plain
    dp = DataParallel.start(
        0, 1, strategy=strategy, device=dev, timeout=60.0, addr="127.0.0.1", port=_free_port(),
        what="gpu check learner", group=True,
    )  # fmt: skip
    try:
        backend = dist.get_backend()
        model = dp.wrap_loaded(lambda: hf.load_causal_lm(spec), lambda: hf.load_causal_lm(spec, meta=True))
        sharded = sum(hasattr(p, "to_local") for p in model.parameters())
        actor = LMLearner(model, cfg, dp=dp)
        with _deterministic():
            stats = actor.update(batch)
            got = actor.compute_log_probs(batch)["log_probs"]
        weights, _ = actor.get_weights()  # gathered under fsdp
    finally:
        dp.close()
    if dist.is_initialized():
        raise RuntimeError("the process group is still up after close()")
    if strategy == "fsdp" and not sharded:
        raise RuntimeError("fsdp left every parameter unsharded")
    if not np.isfinite(stats["loss"]) or not weights:
        raise RuntimeError(f"loss {stats['loss']}, {len(weights)} weights published")
    diff = float((want - got).abs().max())
    if diff > tol or moved < 10 * tol:
        raise RuntimeError(
            f"log-probs after the group's update differ by {diff:.2e} (> {tol:g}?) from the plain update's, "
            f"which moved them by {moved:.2e} (< {10 * tol:g}?)"
        )
    return (
        f"{backend}, {strategy}, {spec.dtype}{f', {sharded} sharded parameters' if sharded else ''}: "
        f"max |log-prob difference| {diff:.2e} against no group (tolerance {tol:g}; the update moved them {moved:.2f})"
    )


def _sft(folder: str, dev: torch.device, tmp: Path) -> str:
    """``rlinf sft``'s training (:func:`rlinf_algos.lm.finetune.train_sft`, the code the command
    runs) in bf16 on the device: 5 steps on one fixed batch of 6 examples at a constant
    learning rate; the loss is finite and falls."""
    import csv

    from rlinf_algos.lm.finetune import load_sft_config, train_sft

    pairs = [(3, 4), (12, 5), (7, 7), (20, 1), (9, 9), (6, 2)]
    data = tmp / "sft.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "response": str(a + b)}) + "\n" for a, b in pairs)
    )
    run = load_sft_config(
        {
            "model": {"path": folder, "dtype": "bfloat16"},
            "data": {"train_files": str(data), "response_key": "response", "shuffle": False},
            "train": {"steps": 5, "batch_size": 6, "lr": 1e-2, "warmup_steps": 0, "min_lr_ratio": 1.0},
            "runner": {"device": dev.type, "log_interval": 1, "loggers": ["csv"]},
        }
    )
    res = train_sft(run, tmp / "sft", log=None)
    with open(tmp / "sft" / "metrics.csv", encoding="utf-8") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    if res.summary["device"] != dev.type:
        raise RuntimeError(f"trained on {res.summary['device']}, not {dev.type}")
    if len(losses) != 5 or not all(np.isfinite(losses)) or not losses[-1] < losses[0]:
        raise RuntimeError(f"losses {losses}")
    return f"bf16, loss {losses[0]:.3f} -> {losses[-1]:.3f} over 5 steps"


VLA_SPACE = {
    "kind": "dict",
    "keys": {
        "image": {"kind": "box", "shape": [32, 32, 3], "dtype": "uint8"},
        "state": {"kind": "box", "shape": [3], "dtype": "float32"},
        "instruction": {"kind": "text", "max_length": 32},
    },
}
PPO_LR, PPO_ADAM_STEPS = 3e-4, 4  # 32 samples / minibatch 16 x 2 epochs
PPO_ACTIONS_ATOL = 1e-3
"""Actions sampled from the same weights and host generator on the CPU and the device (TF32 off
there): float32 convolutions and matmuls in another summation order, through the CNN, FiLM and
the keypoint softmax of the ``vla`` model; far above that rounding, far below a changed policy."""
PPO_WEIGHTS_ATOL = 2 * PPO_LR * adam_move_bound(PPO_ADAM_STEPS) + 1e-5
"""Weights after the update (2.4e-3): a weight whose gradient is near 0 may get either sign on
the two devices, and Adam moves it by about ``lr`` a step regardless
(:func:`~rlinf_algos.optim.adam_move_bound`); 1e-5 for float32 rounding."""


class _ImagePort:
    """The env side of the embodied steps: seeded random camera images, states and instructions
    for ``n`` env slots (no simulator on the check's machine)."""

    def __init__(self, n: int = 4, seed: int = 0) -> None:
        self.stages, self.slots = 1, n
        self.rng = np.random.default_rng(seed)
        self.sent: list[np.ndarray] = []

    def recv(self, s: int) -> dict[str, Any]:
        n, rng = self.slots, self.rng
        obs = {
            "image": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
            "state": rng.standard_normal((n, 3)).astype(np.float32),
            "instruction": np.array(["reach the red cube", "reach the blue cube"] * (n // 2)),
        }
        flags = np.zeros(n, bool)
        return {"obs": obs, "rew": rng.standard_normal(n).astype(np.float32), "term": flags, "trunc": flags}

    def send(self, s: int, actions: np.ndarray) -> None:
        self.sent.append(np.array(actions))


def _ppo_vla_once(dev: torch.device) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    from rlinf_algos.embodied.recipe import LearnerContext
    from rlinf_algos.models import build_policy
    from rlinf_algos.ppo.config import PPOConfig
    from rlinf_algos.ppo.learner import PPOLearnerSide
    from rlinf_algos.ppo.rollout import collect_ppo

    torch.manual_seed(0)
    dp = DataParallel(device=dev)
    spec = {"type": "vla", "cls": "GaussianActorCritic", "obs_space": VLA_SPACE, "obs_dim": 3, "act_dim": 2}
    model = dp.wrap(build_policy(spec), methods=("evaluate", "value"))
    cfg = PPOConfig(rollout_steps=8, minibatch_size=16, update_epochs=2, lr=PPO_LR)
    side = PPOLearnerSide(model, cfg, LearnerContext(None, 1, 30.0, lambda: None, device=str(dev), dp=dp), 4)
    port = _ImagePort()
    with _deterministic():
        traj = collect_ppo(port, model, 8, torch.Generator(device="cpu").manual_seed(0))
        traj["version"] = 0
        side.learn([traj])
    steps = max(int(s["step"]) for s in side.learner.optimizer.state.values())
    if steps != PPO_ADAM_STEPS:
        raise RuntimeError(f"{steps} Adam steps, the tolerance assumes {PPO_ADAM_STEPS}")
    if any(p.device.type != dev.type for p in model.parameters()):
        raise RuntimeError(f"the policy left {dev}")
    return np.stack(port.sent), {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _ppo_vla_cpu_vs_device(dev: torch.device) -> str:
    actions_cpu, weights_cpu = _ppo_vla_once(torch.device("cpu"))
    actions_dev, weights_dev = _ppo_vla_once(dev)
    da = float(np.abs(actions_cpu - actions_dev).max())
    dw = max(float((weights_cpu[k].double() - weights_dev[k].double()).abs().max()) for k in weights_cpu)
    if da > PPO_ACTIONS_ATOL or dw > PPO_WEIGHTS_ATOL:
        raise RuntimeError(
            f"actions differ by {da:.2e} (> {PPO_ACTIONS_ATOL:g}?) or weights by {dw:.2e} (> {PPO_WEIGHTS_ATOL:g}?)"
        )
    return f"max |action diff| {da:.2e}, max |weight diff| {dw:.2e} after 1 update"


def _grpo_embodied(dev: torch.device) -> str:
    from rlinf_algos.grpo.config import GRPOConfig
    from rlinf_algos.grpo.learner import GRPOLearner, GRPORollout
    from rlinf_algos.models import build_policy

    torch.manual_seed(0)
    spec = {"type": "mlp", "cls": "GaussianActorCritic", "obs_dim": 3, "act_dim": 2, "hidden": [32, 32],
            "activation": "tanh", "log_std_init": 0.0, "normalize_obs": True}  # fmt: skip
    model = build_policy(spec).to(dev)
    learner = GRPOLearner(
        model, GRPOConfig(group_size=2, num_groups=2, minibatch_size=8, kl_coef=0.1), seed=0
    )
    g = torch.Generator(device="cpu").manual_seed(1)
    S, L = 4, 6
    rollout = GRPORollout(
        obs=torch.randn(S, L, 3, generator=g),
        actions=torch.randn(S, L, 2, generator=g),
        log_probs=torch.randn(S, L, generator=g) - 2.0,
        mask=torch.ones(S, L, dtype=torch.bool),
        returns=torch.tensor([1.0, 0.0, 2.0, 3.0]),
        lengths=torch.full((S,), L),
    )  # host tensors, as the rollout hands them over: the learner moves them
    stats = learner.update(rollout)
    if not all(np.isfinite(v) for v in stats.values()):
        raise RuntimeError(f"statistics {stats}")
    return f"policy loss {stats['policy_loss']:.4f}, kl {stats['kl_ref']:.4f}"


def _out_of_memory(dev: torch.device, tmp: Path) -> str:
    import rlinf_algos.ppo.learner as ppo_learner
    from rlinf_algos.config import RolloutConfig, RunSections, load_sections
    from rlinf_algos.embodied.flow import EmbodiedFlow
    from rlinf_algos.ppo.config import PPOConfig
    from rlinf_algos.ppo.recipe import PPORecipe
    from rlinf_algos.rundir import latest_checkpoint
    from rlinf_algos.runtime.driver import Driver
    from rlinf_algos.runtime.recovery import RunFailed

    update, calls = ppo_learner.PPOLearner.update, []

    def hungry(self: Any, r: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            if dev.type == "cuda":
                torch.empty(2**40, dtype=torch.uint8, device=dev)  # 1 TiB: a real CUDA OOM
            raise torch.OutOfMemoryError("out of memory (raised by the check on the CPU)")
        return update(self, r)

    env, model, runner = load_sections(
        {
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "model": {"hidden_sizes": [16, 16]},
            "runner": {"total_steps": 320, "log_interval": 64, "checkpoint_interval": 64, "device": str(dev)},
        }
    )
    recipe = PPORecipe(PPOConfig(rollout_steps=32, minibatch_size=32, update_epochs=1))
    flow = EmbodiedFlow(recipe, RunSections(env=env, model=model, runner=runner, rollout=RolloutConfig()))
    ppo_learner.PPOLearner.update = hungry  # type: ignore[method-assign]
    try:
        Driver(flow, None, tmp / "oom").run()
    except RunFailed as err:
        msg = str(err)
    else:
        raise RuntimeError("the run did not stop")
    finally:
        ppo_learner.PPOLearner.update = update  # type: ignore[method-assign]
    kept = latest_checkpoint(tmp / "oom")
    if (
        "ran out of memory" not in msg
        or "actor.micro_batch_size" not in msg
        or kept is None
        or len(calls) != 3
    ):
        raise RuntimeError(f"unexpected ending: {msg[:200]}")
    return f"stopped after update 3 with the knobs; kept {kept.name}"


def run(cpu: bool, report: Path | None, runs: bool = False) -> int:
    """Run every step (the end-to-end ones on a GPU, or with ``runs``); print one line each,
    write the JSON report; 0 when all pass."""
    if not cpu and not torch.cuda.is_available():
        print(
            "no CUDA device visible to torch; run with --cpu, or see the README on drivers", file=sys.stderr
        )
        return 2
    dev = torch.device("cpu") if cpu else torch.device("cuda", 0)
    # cuBLAS's deterministic mode (for :func:`_deterministic`) needs this before its first use
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="rlinf-gpu-check-"))
    init = ModelInitConfig(hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=64)
    folder = str(hf.new_model_folder(tmp / "model", init))
    fp32 = LMModelConfig(path=folder)
    bf16 = fp32.model_copy(update={"dtype": "bfloat16"})
    lora = bf16.model_copy(update={"lora": LoraConfig(rank=4)})
    steps: list[tuple[str, Callable[[], str]]] = [
        ("grpo_lm full bf16", lambda: _grpo(bf16, dev)),
        ("grpo_lm lora bf16", lambda: _grpo(lora, dev)),
        ("ppo_lm", lambda: _ppo(fp32, dev)),
        ("reference + generate", lambda: _reference_and_generate(bf16, dev)),
        ("sac vla", lambda: _sac_vla(dev)),
        ("cpu vs device", lambda: _cpu_vs_device(fp32, dev)),
        ("ppo vla cpu vs device", lambda: _ppo_vla_cpu_vs_device(dev)),
        ("grpo embodied", lambda: _grpo_embodied(dev)),
        ("out of memory", lambda: _out_of_memory(dev, tmp)),
        ("sft bf16", lambda: _sft(folder, dev, tmp)),
        ("learner group of one", lambda: _learner_group(fp32, dev, "ddp")),
        ("fsdp learner of one", lambda: _learner_group(bf16, dev, "fsdp")),
    ]
    if runs or not cpu:
        import gpu_check_runs as e2e  # beside this file (tools/ is the script's folder)

        steps += [
            ("grpo_arith local", lambda: e2e.grpo_arith_local(dev, tmp)),
            ("quickstart ppo local", lambda: e2e.quickstart_ppo_local(dev, tmp)),
            ("two ranks on one device", lambda: e2e.two_ranks_on_one_device(dev, tmp)),
            ("pytest -m gpu", lambda: e2e.pytest_gpu(dev, tmp)),
        ]
    results = []
    for name, fn in steps:
        t0 = time.perf_counter()
        try:
            detail, ok = fn(), True
        except Exception as err:  # a step's failure is reported, the others still run
            detail, ok = f"{type(err).__name__}: {err}".splitlines()[0], False
            traceback.print_exc(file=sys.stderr)
        results.append(
            {"step": name, "ok": ok, "seconds": round(time.perf_counter() - t0, 2), "detail": detail}
        )
        print(
            f"{'PASS' if ok else 'FAIL'}  {name:<23} {results[-1]['seconds']:>6.1f} s  {detail}", flush=True
        )
    out = {"device": str(dev), **device_report(), "steps": results}
    if report is not None:
        report.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"report: {report}")
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run every step on the CPU")
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    parser.add_argument(
        "--runs", action="store_true", help="with --cpu: also the end-to-end steps (always on a GPU)"
    )
    args = parser.parse_args(argv)
    return run(args.cpu, args.report, args.runs)


if __name__ == "__main__":
    sys.exit(main())
