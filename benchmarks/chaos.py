"""Chaos over many short runs: each placed run has one worker process SIGKILLed at a random point.

Two kinds of run, ``--runs`` of each (seeded by ``--seed``; run ``i`` uses seed ``seed + i``):

- ``grpo_lm``: ``examples/grpo_arith.yaml`` at the tests' tiny size (a 1-layer model of width 16,
  a 2-step warm start, 4 prompts x 2 samples per iteration) for 10 iterations under Ray, with the
  KL term on so a reference process runs: the victim is drawn from the rollout, reward,
  reference and actor processes;
- ``ppo``: ``examples/quickstart.yaml`` (PPO on InvertedPendulum-v5, env, rollout and actor
  processes) shortened to 6 iterations of 2048 env steps, checkpoints every 4096: the victim is
  drawn from the env, rollout and actor processes.

The kill lands at a random point: a trigger the run reports (``grpo_lm``: a rollout rank took a
request of iteration ``k``, or a reward rank took its episodes; ``ppo``: iteration ``k`` starts,
or rollout rank 0 is collecting it), with ``k`` drawn from the run's iterations, then a delay
drawn from 0 to ``--max-delay`` seconds (default: 1 for ``grpo_lm``, whose iterations take 0.1 s
on an idle machine and seconds under load, 1.5 for ``ppo``, whose iterations take 0.5 to 2 s). A
kill that lands after the victim's last call is counted as killed but not noticed. Delays spread the kill over generation, scoring, the
reference's log-probs, the update, the weight publish and fetch (the sync) and the channel puts
between them: which of these it hit is not known exactly, only the trigger and the delay.

Each run is a child process (``chaos.py --child``) attached to one embedded Ray the benchmark
starts (``RAY_ADDRESS``; each run starts and ends its own worker processes on it) under a hard
timeout (``--timeout``): a run still alive then is a **hang** (its process group is killed).
Checked per run: it ended within the timeout; every metrics row once (``metrics.csv`` steps
strictly increasing); it completed (its whole budget, no error), or it ended with an error whose
first line names the killed worker (its role and its pid). A kill that came after the run ended
(a delay past its last iteration) is recorded as ``not killed``.

Overrides for each kind (repeatable): ``--lm-set KEY=VALUE`` (for example
``--lm-set rollout.max_staleness=1``: an asynchronous language-model run; quickstart's PPO is
asynchronous already, ``rollout.max_staleness: 1``) and ``--ppo-set KEY=VALUE``. ``--kinds``
picks the kinds (``grpo_lm,ppo``).

Kills mid wait: with ``--stop-share P`` a share ``P`` of the runs (drawn per run) stops the
victim (SIGSTOP) at its random point and kills it ``--stop-s`` seconds later (default 3): its
peers meanwhile block on it (the learner's weight broadcast to a stopped rollout worker, a
rollout's fetch of the weights, a channel put or get whose other side it is), so the kill lands
in the middle of such a wait, as the fault tests stage it. ``--weight-sync MODE`` (repeatable)
draws ``rollout.weight_sync`` per run from the modes given: ``collective`` is a Gloo broadcast
group whose publish waits for every rollout worker, ``auto`` the object store on CPUs.
``--work-dir DIR`` keeps each run's directory and log (a child's record has the traceback of a
failed run).

Usage::

    uv run python benchmarks/chaos.py [--runs N] [--seed S] [--kinds grpo_lm,ppo]
        [--lm-set K=V ...] [--ppo-set K=V ...] [--stop-share P] [--stop-s S]
        [--weight-sync MODE ...] [--timeout S] [--work-dir DIR] [--json PATH]

Figures are printed (one row per run, then a table per kind), never asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from _report import finish, machine

ROOT = Path(__file__).resolve().parent.parent
DISTS = ("rlinf-algos", "rlinf-scheduler", "ray", "torch", "transformers", "mujoco")

LM_TINY = (
    "model.init.hidden_size=16",
    "model.init.num_layers=1",
    "model.init.num_heads=2",
    "sft.steps=2",
    "sft.batch_size=4",
    "algorithm.prompts_per_iter=2",
    "algorithm.group_size=2",
    "task.eval_size=4",
    "runner.eval_interval=0",
)
KINDS: dict[str, dict[str, Any]] = {
    "grpo_lm": {
        "config": ROOT / "examples" / "grpo_arith.yaml",
        "overrides": (
            *LM_TINY,
            "algorithm.iterations=10",
            "algorithm.prompts_per_iter=4",
            "algorithm.kl_coef=0.05",
            "runner.scheduler=ray",
            "runner.checkpoint_interval=2",
            "runner.loggers=[csv]",
        ),
        "victims": ("rollout", "reward", "reference", "actor"),
        "triggers": ("on_generating", "on_scoring"),
        "iterations": 10,
        # an iteration takes 0.1 s on an idle 2-core machine and seconds under load: a kill
        # later than that lands after the run's last call (see "noticed" in the table)
        "max_delay": 1.0,
    },
    "ppo": {
        "config": ROOT / "examples" / "quickstart.yaml",
        "overrides": (
            "runner.total_steps=12288",
            "runner.log_interval=2048",
            "runner.checkpoint_interval=4096",
            "algorithm.update_epochs=4",
            "runner.loggers=[csv]",
        ),
        "victims": ("env", "rollout", "actor"),
        "triggers": ("on_iteration", "on_collecting"),
        "iterations": 6,
        "max_delay": 1.5,  # an iteration of 2048 env steps takes about 0.5-2 s
    },
}


# -- one run, in a child process ------------------------------------------------------------------
class Killer:
    """SIGKILL on ``victim``'s rank-0 process ``delay`` s after ``trigger`` reports iteration
    ``k`` (once). With ``stop_s > 0`` the victim is first stopped (SIGSTOP) there and killed
    ``stop_s`` later: its peers meanwhile block on it (the learner's weight publish to it, a
    fetch of its weights, a channel put or get whose other side it is), so the kill lands in the
    middle of such a wait, as the fault tests stage it."""

    def __init__(self, victim: str, trigger: str, k: int, delay: float, stop_s: float = 0.0) -> None:
        self.victim, self.trigger, self.k, self.delay, self.stop_s = victim, trigger, k, delay, stop_s
        self.fired = threading.Event()
        self.record: dict[str, Any] = {"killed": False}
        self.ended = threading.Event()
        self.thread: threading.Thread | None = None

    def hook(self, run: Any, k: int, *_: Any) -> None:
        if k != self.k or self.fired.is_set():
            return
        self.fired.set()
        self.thread = threading.Thread(target=self._kill, args=(run,), daemon=True)
        self.thread.start()

    def _kill(self, run: Any) -> None:
        if self.ended.wait(self.delay):
            return
        pid = (run.pids.get(self.victim) or [0])[0]
        if not pid:
            self.record["why_not"] = f"no {self.victim} process"
            return
        try:
            if self.stop_s > 0:
                os.kill(pid, signal.SIGSTOP)
                self.record.update({"stopped": True, "pid": pid, "stopped_at_iteration": run.iteration})
                time.sleep(self.stop_s)  # never left stopped: the kill follows even if the run ended
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.record["why_not"] = f"pid {pid} was gone"
            return
        self.record.update({"killed": True, "pid": pid, "at_iteration": run.iteration})
        self.record["after_run_ended"] = self.ended.is_set()

    def finish(self) -> None:
        """The run is over: no kill starts now; a stopped victim is killed before the record is out."""
        self.ended.set()
        if self.thread is not None:
            self.thread.join(self.stop_s + 5.0)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one training run with one kill; the record the parent reads."""
    from rlinf_algos.training import run_training
    from rlinf_core.config import load_yaml

    kind = KINDS[spec["kind"]]
    killer = Killer(spec["victim"], spec["trigger"], spec["k"], spec["delay"], spec.get("stop_s", 0.0))
    run_dir = Path(spec["run_dir"])
    overrides = [*kind["overrides"], f"runner.seed={spec['seed']}", *spec["set"]]
    out: dict[str, Any] = {"overrides": overrides}
    t0 = time.perf_counter()
    try:
        summary = run_training(
            load_yaml(kind["config"]),
            run_dir=run_dir,
            overrides=overrides,
            callbacks={spec["trigger"]: killer.hook},
            config_path=kind["config"],
        )
        out |= {"outcome": "completed", "exit": 0, "first_line": ""}
        out["summary"] = {
            k: summary.get(k)
            for k in ("restarts", "dropped_batches", "learner_restarts", "iterations", "total_env_steps")
        }
        out["events"] = summary.get("events", [])
    except BaseException as err:  # the record says what ended it
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        out |= {"outcome": "failed", "exit": int(getattr(err, "exit_code", 1)), "first_line": first}
        out["error_type"] = type(err).__name__
        out["traceback"] = traceback.format_exc()[-3000:]
    finally:
        killer.finish()
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["kill"] = killer.record
    return out


# -- the parent ---------------------------------------------------------------------------------
def metric_steps(run_dir: Path) -> list[int]:
    try:
        with (run_dir / "metrics.csv").open() as f:
            return [int(float(r["step"])) for r in csv.DictReader(f)]
    except OSError:
        return []


def one(kind: str, i: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(f"{args.seed}-{kind}-{i}")
    k_spec = KINDS[kind]
    spec = {
        "kind": kind,
        "seed": args.seed + i,
        "victim": rng.choice(k_spec["victims"]),
        "trigger": rng.choice(k_spec["triggers"]),
        "k": rng.randint(1, k_spec["iterations"] - 2),
        "delay": round(rng.uniform(0.0, args.max_delay or k_spec["max_delay"]), 2),
        "run_dir": str(tmp / f"{kind}-{i}"),
        "set": list(args.lm_set if kind == "grpo_lm" else args.ppo_set),
    }
    # drawn after the draws above, so a seed's victim, trigger and delay do not change with them
    spec["stop_s"] = args.stop_s if rng.random() < args.stop_share else 0.0
    spec["weight_sync"] = rng.choice(args.weight_syncs) if args.weight_syncs else None
    if spec["weight_sync"]:
        spec["set"].append(f"rollout.weight_sync={spec['weight_sync']}")
    result_file = tmp / f"{kind}-{i}.json"
    t0 = time.perf_counter()
    with open(tmp / f"{kind}-{i}.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(spec), "--child-out", str(result_file)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp,
            env={**os.environ, "RAY_ADDRESS": args.ray_address},
        )  # fmt: skip
        try:
            proc.wait(timeout=args.timeout)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - t0
    keys = ("kind", "seed", "victim", "trigger", "k", "delay", "stop_s", "weight_sync")
    row: dict[str, Any] = {k: spec[k] for k in keys}
    row["wall_s"] = round(wall, 1)
    if hung or not result_file.is_file():
        tail = (tmp / f"{kind}-{i}.log").read_text(errors="replace").strip().splitlines()[-3:]
        row |= {"outcome": "hang" if hung else "crashed", "exit": None if hung else proc.returncode}
        row["first_line"] = (
            f"no record: the child {'ran past --timeout' if hung else 'died'}; log tail: {tail}"
        )
        row |= {"killed": None, "rows_once": None, "cause_named": False, "ok": False}
        return row
    rec = json.loads(result_file.read_text())
    steps = metric_steps(Path(spec["run_dir"]))
    kill = rec["kill"]
    row |= {
        "outcome": rec["outcome"],
        "exit": rec["exit"],
        "first_line": rec["first_line"][:300],
        "killed": kill.get("killed"),
        "pid": kill.get("pid"),
        "at_iteration": kill.get("at_iteration"),
        "after_run_ended": kill.get("after_run_ended"),
        "rows": len(steps),
        "rows_once": steps == sorted(set(steps)),
    }
    if rec["outcome"] == "completed":
        s = rec["summary"]
        row |= {"restarts": s["restarts"], "dropped_batches": s["dropped_batches"]}
        row["learner_restarts"] = len(s["learner_restarts"] or [])
        row["cause_named"] = None
        named = [e for e in rec.get("events", []) if kill.get("pid") and f"pid {kill['pid']}" in e]
        row["death_named_in_events"] = bool(named) if kill.get("killed") else None
        row["cause_event"] = named[0][:300] if named else ""
    else:
        pid = kill.get("pid")
        row["cause_named"] = (
            bool(pid) and spec["victim"] in row["first_line"] and str(pid) in row["first_line"]
        )
    row["ok"] = bool(row["rows_once"]) and (row["outcome"] == "completed" or row["cause_named"])
    return row


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    killed = [r for r in rows if r.get("killed")]
    return {
        "runs": len(rows),
        "killed": len(killed),
        "kills the run noticed (restart or error naming the pid)": sum(
            bool(r.get("death_named_in_events")) or bool(r.get("cause_named")) for r in killed
        ),
        "hangs": sum(r["outcome"] == "hang" for r in rows),
        "completed": sum(r["outcome"] == "completed" for r in rows),
        "failed, cause named first": sum(r["outcome"] == "failed" and bool(r["cause_named"]) for r in rows),
        "failed, cause not named": sum(r["outcome"] == "failed" and not r["cause_named"] for r in rows),
        "metrics rows not once": sum(r["rows_once"] is False for r in rows),
        "stopped first (SIGSTOP, then SIGKILL)": sum(bool(r.get("stop_s")) for r in killed),
        "max wall s": max((r["wall_s"] for r in rows), default=None),
        "victims (killed)": {
            v: sum(r["victim"] == v for r in killed) for v in sorted({r["victim"] for r in rows})
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default="grpo_lm,ppo")
    parser.add_argument("--lm-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ppo-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--max-delay", type=float, default=None, help="seconds after the trigger, at most (default: per kind)"
    )
    parser.add_argument(
        "--stop-share", type=float, default=0.0,
        help="share of runs whose victim is stopped (SIGSTOP) first and killed --stop-s later",
    )  # fmt: skip
    parser.add_argument(
        "--stop-s", type=float, default=3.0, help="seconds a stopped victim waits for its kill"
    )
    parser.add_argument(
        "--weight-sync", dest="weight_syncs", action="append", default=[], metavar="MODE",
        help="rollout.weight_sync drawn per run from the modes given (repeatable; none: the config's)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="hard bound per run (s): past it, a hang"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep each run's directory and log here (default: removed)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        record = child(json.loads(args.child))
        tmp = args.child_out.with_suffix(".part")
        tmp.write_text(json.dumps(record, default=str))
        tmp.replace(args.child_out)
        os._exit(0)  # the record is out: do not wait on a worker thread a kill left behind
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        parser.error(f"--kinds: unknown {bad}; valid: {sorted(KINDS)}")
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Chaos: short placed runs, one worker process SIGKILLed at a random point in each",
        "machine": machine(DISTS),
        "seeds": [args.seed + i for i in range(args.runs)],
        "source": "benchmarks/chaos.py",
        "command": " ".join(
            ["uv run python benchmarks/chaos.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    import tempfile

    from rlinf_scheduler.runtime.cluster import Cluster

    rows: list[dict[str, Any]] = []
    cluster = Cluster(1, ray_init={"num_cpus": 2})  # every run attaches to it (its start is not counted)
    args.ray_address = cluster.address
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="rlinf-chaos-", dir=args.work_dir))
    try:
        for i in range(args.runs):
            for kind in kinds:
                row = one(kind, i, args, tmp)
                rows.append(row)
                print(
                    f"{kind:<8} seed {row['seed']:<3} {row['victim']:<9} {row['trigger']:<13} k={row['k']} "
                    f"+{row['delay']:.1f}s{' stop' if row['stop_s'] else ' kill'} {row['weight_sync'] or '-':<12} {row['outcome']:<9} exit {row['exit']!s:<4} {row['wall_s']:>6.1f}s "
                    f"{'ok ' if row['ok'] else 'BAD'} restarts {row.get('restarts', '-')} "
                    f"{(row['first_line'] or row.get('cause_event') or '')[:90]}",
                    flush=True,
                )
    finally:
        if args.work_dir is None:  # kept under --work-dir: each run's directory and log
            shutil.rmtree(tmp, ignore_errors=True)
    cluster.shutdown()
    summary = {kind: table([r for r in rows if r["kind"] == kind]) for kind in kinds}
    report["figures"] = [
        {"kind": k, **{n: v for n, v in t.items() if n != "victims (killed)"}} for k, t in summary.items()
    ]
    report["runs"] = rows
    report["victims_killed"] = {k: t["victims (killed)"] for k, t in summary.items()}
    report["notes"] = [
        "Each run a child process attached to the benchmark's one embedded Ray (its start is not counted); "
        f"--timeout {args.timeout:g} s per run: past it a run counts as a hang.",
        "ok: metrics rows each once, and completed or failed with the killed worker's role and pid in "
        "the error's first line.",
        "grpo_lm: " + " ".join(KINDS["grpo_lm"]["overrides"]) + (f" + {args.lm_set}" if args.lm_set else ""),
        "ppo: examples/quickstart.yaml "
        + " ".join(KINDS["ppo"]["overrides"])
        + (f" + {args.ppo_set}" if args.ppo_set else ""),
    ]
    print()
    for kind, t in summary.items():
        print(f"{kind}: " + ", ".join(f"{n} {v}" for n, v in t.items()))
    start, end = report["machine"]["load_at_start"][0], os.getloadavg()[0]
    report["conditions"] = f"load average {start:.1f} at the start, {end:.1f} at the end (2 cores, shared)"
    return finish(report, t0, args.json)


if __name__ == "__main__":
    main()
