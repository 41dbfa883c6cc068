"""The end-to-end steps of the device check (:mod:`gpu_check`): whole ``rlinf train`` runs on the
device with the local scheduler (no Ray), a two-process collective probe on one device, and the
``gpu``-marked tests. Each step is a function returning its one-line detail or raising.

- ``grpo_arith local``: ``rlinf train examples/grpo_arith.yaml`` shortened (a tiny model, a
  2-step warm start, 2 GRPO iterations with the reference, ``runner.loggers=[csv]``) with
  ``runner.scheduler=local`` on the device; ``summary.json`` must report the device, and the
  run's metrics must hold finite losses.
- ``quickstart ppo local``: ``rlinf train examples/quickstart.yaml`` shortened the same way,
  with ``env.id=Pendulum-v1`` (the quickstart's InvertedPendulum needs MuJoCo, which the GPU
  machine does not have and whose wheels would not fit the 64 MiB a device call may carry).
- ``two ranks on one device``: two processes form one ``torch.distributed`` group on the same
  device and broadcast (NCCL on ``cuda:0``, Gloo with ``--cpu``). NCCL refuses two ranks of one
  communicator on one GPU, which is why ``rollout.weight_sync: auto`` never builds a collective
  whose members share a GPU (issue 52, item 1); the step records what NCCL said, and checks that
  ``auto`` picks the object store for such a set. On the CPU, Gloo must work.
- ``pytest -m gpu``: the ``gpu``-marked tests of the files that hold them (they skip without
  CUDA, so ``--cpu`` checks only that they collect and run).

Every run is a subprocess, so a run's CUDA memory and state end with it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 240.0
"""Seconds one shortened run may take (a few on a GPU; the CPU of the fast suite is slower)."""

GRPO_ARITH = [
    "model.init.hidden_size=32",
    "model.init.num_layers=1",
    "model.init.num_heads=2",
    "sft.steps=2",
    "sft.batch_size=4",
    "sft.check_size=4",
    "algorithm.iterations=2",
    "algorithm.prompts_per_iter=2",
    "algorithm.group_size=2",
    "algorithm.kl_coef=0.01",  # the reference takes part
    "task.eval_size=4",
    "runner.eval_interval=0",
    "runner.checkpoint_interval=0",
]
QUICKSTART = [
    "env.id=Pendulum-v1",
    "env.num_envs=2",
    "algorithm.rollout_steps=32",
    "algorithm.minibatch_size=32",
    "algorithm.update_epochs=1",
    "runner.total_steps=192",
    "runner.log_interval=64",
    "runner.checkpoint_interval=0",
]
GPU_TEST_FILES = [
    "packages/rlinf-algos/tests/test_algos_devices.py",
    "packages/rlinf-algos/tests/test_algos_checkpoint_devices.py",
    "packages/rlinf-algos/tests/lm/test_role_devices.py",
    "packages/rlinf-algos/tests/runtime/test_host_values.py",
]
"""The files with ``gpu``-marked tests that run without Ray (those of ``test_algos_parallel.py``
and the scheduler's need two GPUs or Ray)."""


def _env() -> dict[str, str]:
    """This process's environment (``PYTHONPATH`` carries the wheelhouse of ``gpu_check.sh``)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _train(config: str, overrides: list[str], dev: Any, tmp: Path, name: str) -> dict[str, Any]:
    """``rlinf train ROOT/config OVERRIDES`` with the local scheduler and csv logs on ``dev``, in
    a subprocess; returns its ``summary.json`` (with ``_metrics``: the rows of metrics.csv)."""
    run_dir = tmp / name
    device = "cpu" if dev.type == "cpu" else "cuda"
    args = [
        sys.executable,
        "-m",
        "rlinf_core",
        "train",
        str(ROOT / config),
        "--run-dir",
        str(run_dir),
        *overrides,
        "runner.scheduler=local",
        "runner.loggers=[csv]",
        f"runner.device={device}",
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=_env(), check=False)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"rlinf train exited {res.returncode}: {' | '.join(tail)}")
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    with open(run_dir / "metrics.csv", encoding="utf-8") as f:
        summary["_metrics"] = list(csv.DictReader(f))
    want = "cpu" if dev.type == "cpu" else "cuda:0"
    got = summary.get("devices", {}).get("roles", {}).get("local")
    if got != [want]:
        raise RuntimeError(f"summary.json reports {got}, not [{want!r}]")
    return summary


def _finite(rows: list[dict[str, str]], column: str) -> list[float]:
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
    if not values or not all(math.isfinite(v) for v in values):
        raise RuntimeError(f"{column}: {values}")
    return values


def grpo_arith_local(dev: Any, tmp: Path) -> str:
    s = _train("examples/grpo_arith.yaml", GRPO_ARITH, dev, tmp, "grpo_arith")
    losses = _finite(s["_metrics"], "loss")
    return f"{len(s['_metrics'])} rows on {s['devices']['roles']['local'][0]}, last loss {losses[-1]:.4f}"


def quickstart_ppo_local(dev: Any, tmp: Path) -> str:
    s = _train("examples/quickstart.yaml", QUICKSTART, dev, tmp, "quickstart")
    returns = _finite(s["_metrics"], "policy_loss")
    return f"{len(s['_metrics'])} rows on {s['devices']['roles']['local'][0]}, last policy loss {returns[-1]:.4f}"


PROBE = r"""
import datetime, json, sys
import torch, torch.distributed as dist
rank, port, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = {"rank": rank}
try:
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    dev = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(dev)
    t = torch.full((4,), float(rank + 1), device=dev)
    dist.broadcast(t, 0)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    out.update(ok=True, value=t.cpu().tolist())
except Exception as err:
    out.update(ok=False, error=f"{type(err).__name__}: {str(err).strip().splitlines()[0][:240] if str(err).strip() else ''}",
               duplicate="Duplicate GPU" in str(err))
print(json.dumps(out), flush=True)
try:
    dist.destroy_process_group()
except Exception:
    pass
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_ranks_on_one_device(dev: Any, tmp: Path) -> str:
    from rlinf_core.weights import resolve_weight_sync_mode

    backend = "gloo" if dev.type == "cpu" else "nccl"
    script = tmp / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(port), backend],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for r in (0, 1)
    ]
    answers = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"the {backend} probe hung for 120 s (two ranks on {dev})") from None
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"probe rank exited {p.returncode}: {err.strip().splitlines()[-1:]}")
        answers.append(json.loads(lines[-1]))
    same = {"actor rank 0": f"{dev.type}:0@node 0", "rollout rank 0": f"{dev.type}:0@node 0"}
    chosen = resolve_weight_sync_mode("auto", same)
    if dev.type == "cpu":
        if not all(a["ok"] and a["value"] == [1.0] * 4 for a in answers):
            raise RuntimeError(f"gloo on the CPU failed: {answers}")
        return f"gloo, two ranks on the CPU: broadcast ok; auto for members on one CPU: {chosen}"
    if chosen != "object_store":
        raise RuntimeError(f"auto picks {chosen} for two members on one GPU")
    if all(a["ok"] for a in answers):
        return f"nccl, two ranks on cuda:0: NCCL accepted them here; auto picks {chosen} all the same"
    errors = sorted({a.get("error", "") for a in answers if not a["ok"]})
    return f"nccl, two ranks on cuda:0: refused ({'; '.join(errors)}); auto picks {chosen} for such members"


def pytest_gpu(dev: Any, tmp: Path) -> str:
    """``pytest -m gpu`` of :data:`GPU_TEST_FILES` (skipped tests count as passed on the CPU)."""
    report = tmp / "pytest.xml"
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *[str(ROOT / f) for f in GPU_TEST_FILES],
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT, check=False)
    import xml.etree.ElementTree as ET

    if not report.is_file():
        raise RuntimeError(f"pytest exited {res.returncode}: {res.stdout.strip().splitlines()[-1:]}")
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    if res.returncode not in (0, 5) or n["failures"] or n["errors"]:
        failed = [
            c.get("name")
            for c in suite.iter("testcase")
            if c.find("failure") is not None or c.find("error") is not None
        ]
        raise RuntimeError(f"pytest -m gpu: {n}; failed {failed}")
    return f"{n['tests'] - n['skipped']} passed, {n['skipped']} skipped of {n['tests']} gpu tests"
