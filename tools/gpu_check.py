"""A device check in one command: the learners' update paths on one GPU (or, with ``--cpu``, on
the CPU), with small models built here (no downloads, no Ray), and a short report.

    uv run python tools/gpu_check.py                # on a machine with one NVIDIA GPU
    uv run python tools/gpu_check.py --cpu          # the same steps on the CPU (the fast suite runs this)
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
  the device; the log-probs after it agree within ``atol 2e-3`` (TF32 matmuls on the GPU).

Not covered yet (issue 39): ``rlinf sft``'s step, the embodied PPO learner (it runs on the CPU),
a one-rank NCCL learner group.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
from rlinf_algos.parallel import DataParallel, device_report

CPU_VS_DEVICE_ATOL = 2e-3


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

    space = {
        "kind": "dict",
        "keys": {
            "image": {"kind": "box", "shape": [32, 32, 3], "dtype": "uint8"},
            "state": {"kind": "box", "shape": [3], "dtype": "float32"},
            "instruction": {"kind": "text", "max_length": 32},
        },
    }
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


def run(cpu: bool, report: Path | None) -> int:
    """Run every step; print one line each, write the JSON report; 0 when all pass."""
    if not cpu and not torch.cuda.is_available():
        print(
            "no CUDA device visible to torch; run with --cpu, or see the README on drivers", file=sys.stderr
        )
        return 2
    dev = torch.device("cpu") if cpu else torch.device("cuda", 0)
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
        print(f"{'PASS' if ok else 'FAIL'}  {name:<22} {results[-1]['seconds']:>6.1f} s  {detail}")
    out = {"device": str(dev), **device_report(), "steps": results}
    if report is not None:
        report.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"report: {report}")
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run every step on the CPU")
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    return run(args.cpu, args.report)


if __name__ == "__main__":
    sys.exit(main())
