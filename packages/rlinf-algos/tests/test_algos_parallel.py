"""The data-parallel learner group (rlinf_algos.parallel) in real processes over Gloo: one update on
2 ranks equals one update on 1 rank with the same global batch (DDP and FSDP, with and without
micro-batches), checkpoints move between group sizes, and a rendezvous that cannot complete
names the rank that did not arrive.

The tests that start rank processes are marked ``network`` (Gloo's rendezvous and collectives run
over loopback TCP between processes), so CI's per-package isolation step, which looks for
undeclared imports, does not run them a second time."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos.devices import resolve_device
from rlinf_algos.parallel import rendezvous
from rlinf_core.errors import ConfigError, RlinfError

HELPERS = Path(__file__).parent / "helpers"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_group(
    tmp: Path,
    world: int,
    strategy: str = "ddp",
    micro: int = 0,
    resume: Path | None = None,
    helper: str = "ppo_rank.py",
    extra: tuple[str, ...] = (),
) -> dict:
    """Run ``world`` ranks of ``helpers/<helper>`` as processes; what rank 0 wrote (after one
    update)."""
    out = tmp / f"{helper}-{world}-{strategy}-{micro}-{'-'.join(extra)}-{resume is not None}.pt"
    port = _free_port()
    head = [str(HELPERS / helper)]
    procs = [
        subprocess.Popen(
            [sys.executable, *head, str(r), str(world), str(port), strategy, str(micro), *extra, str(out)]
            + ([str(resume)] if resume else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = []
    for r, p in enumerate(procs):
        text, _ = p.communicate(timeout=180)
        logs.append(f"rank {r} (exit {p.returncode}):\n{text}")
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return torch.load(out, weights_only=False)


def _two_ranks(helper: str, *args: str, timeout: float = 120) -> None:
    """Run ranks 0 and 1 of ``helpers/<helper> RANK 2 PORT ARGS...``; both must succeed."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(HELPERS / helper), str(r), "2", str(port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)


def _assert_close(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=tol, rtol=0, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run_group(tmp_path_factory.mktemp("ref"), 1)


@pytest.mark.slow
@pytest.mark.network
def test_micro_batches_on_one_rank_equal_the_whole_minibatch(tmp_path: Path, reference: dict) -> None:
    _assert_close(_run_group(tmp_path, 1, micro=5)["model"], reference["model"])


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize(
    ("strategy", "micro"),
    # without micro-batches: 16-23 s each on CI's 2 cores, opt-in (-m extended)
    [
        pytest.param("ddp", 0, marks=pytest.mark.extended),
        ("ddp", 6),
        pytest.param("fsdp", 0, marks=pytest.mark.extended),
        ("fsdp", 6),
    ],
)
def test_two_ranks_update_like_one(tmp_path: Path, reference: dict, strategy: str, micro: int) -> None:
    state = _run_group(tmp_path, 2, strategy, micro)
    _assert_close(state["model"], reference["model"])
    # the optimiser state comes back in the single-process format: the Adam moments match too
    ref_opt, opt = reference["optimizer"], state["optimizer"]
    assert sorted(opt["state"]) == sorted(ref_opt["state"])
    for i in ref_opt["state"]:
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt["state"][i][key], ref_opt["state"][i][key], atol=1e-6, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.network
def test_checkpoints_move_between_group_sizes(tmp_path: Path, reference: dict) -> None:
    """A 1-rank state resumed on 2 FSDP ranks, and a 2-rank FSDP state resumed on 1 rank, both
    continue exactly as 1 rank would."""
    ckpt = tmp_path / "one.pt"
    torch.save(reference, ckpt)
    on_one = _run_group(tmp_path, 1, resume=ckpt)
    on_two = _run_group(tmp_path, 2, "fsdp", resume=ckpt)
    _assert_close(on_two["model"], on_one["model"])
    two = tmp_path / "two.pt"
    torch.save(_run_group(tmp_path, 2, "fsdp"), two)
    _assert_close(_run_group(tmp_path, 1, resume=two)["model"], on_one["model"])


@pytest.fixture(scope="module")
def grpo_reference(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``grpo_reference(aggregation)``: embodied GRPO's update on one rank (computed once)."""
    done: dict[str, dict] = {}

    def get(aggregation: str) -> dict:
        if aggregation not in done:
            done[aggregation] = _run_group(
                tmp_path_factory.mktemp("grpo"), 1, helper="grpo_rank.py", extra=(aggregation,)
            )
        return done[aggregation]

    return get


@pytest.mark.network
@pytest.mark.parametrize(
    ("strategy", "micro", "aggregation"),
    [
        # 30 s each on CI's 2 cores: the other two cover DDP, FSDP and micro-batches in CI
        pytest.param("ddp", 0, "token-mean", marks=pytest.mark.extended),
        ("fsdp", 7, "token-mean"),
        ("ddp", 3, "seq-mean-token-mean"),
    ],
)
@pytest.mark.slow
def test_embodied_grpo_updates_on_two_ranks_like_on_one(
    tmp_path: Path, grpo_reference: Any, strategy: str, micro: int, aggregation: str
) -> None:
    """Whole episodes of different lengths: the shards hold different numbers of valid steps,
    and each part's loss counts by its share of the minibatch's denominator."""
    one = grpo_reference(aggregation)
    two = _run_group(tmp_path, 2, strategy, micro, helper="grpo_rank.py", extra=(aggregation,))
    _assert_close(two["model"], one["model"])
    for key in ("policy_loss", "kl_ref", "clip_fraction", "grad_norm"):
        assert two["metrics"][key] == pytest.approx(one["metrics"][key], abs=1e-5), key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_nccl_ranks_on_their_gpus_update_like_one(tmp_path: Path, strategy: str) -> None:
    """The language-model actor with each rank seeing one GPU (CUDA_VISIBLE_DEVICES, as the
    placement sets it, and runner.device: auto): NCCL on cuda:0 of each; against one rank on one."""
    import os

    def run(world: int, strategy: str) -> dict:
        out, port = tmp_path / f"nccl-{world}-{strategy}.pt", _free_port()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HELPERS / "lm_rank.py"),
                    str(r),
                    str(world),
                    str(port),
                    strategy,
                    "0",
                    "0",
                    str(out),
                ],
                env={**os.environ, "CUDA_VISIBLE_DEVICES": str(r), "RLINF_TEST_DEVICE": "auto"},
            )
            for r in range(world)
        ]
        assert all(p.wait(300) == 0 for p in procs)
        return torch.load(out, weights_only=False)

    _assert_close(run(2, strategy)["weights"], run(1, "ddp")["weights"], tol=1e-4)


@pytest.fixture(scope="module")
def lm_reference(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``lm_reference(lora)``: the language-model actor's update on one rank (computed once)."""
    done: dict[str, dict] = {}

    def get(lora: str) -> dict:
        if lora not in done:
            done[lora] = _run_group(tmp_path_factory.mktemp("lm"), 1, helper="lm_rank.py", extra=(lora,))
        return done[lora]

    return get


@pytest.mark.network
@pytest.mark.parametrize(
    # DDP with every weight trained is the embodied tests' path (test_two_ranks_update_like_one);
    # the LM-specific ones: DDP with shared prompts and LoRA, FSDP with micro-batches, FSDP + LoRA
    ("strategy", "micro", "lora"),
    # 45 s each on CI's 2 cores: CI runs FSDP with LoRA (and micro-batches in the embodied test)
    [
        pytest.param("fsdp", 3, "0", marks=pytest.mark.extended),
        pytest.param("ddp", 0, "1", marks=pytest.mark.extended),
        ("fsdp", 0, "1"),
    ],
)
@pytest.mark.slow
def test_the_language_model_actor_updates_on_two_ranks_like_on_one(
    tmp_path: Path, lm_reference: Any, strategy: str, micro: int, lora: str
) -> None:
    """grpo_lm's actor: a Qwen2 model (full, or LoRA adapters only), token-mean GRPO loss with a
    KL term, minibatches whose shards hold different numbers of tokens."""
    one = lm_reference(lora)
    two = _run_group(tmp_path, 2, strategy, micro, helper="lm_rank.py", extra=(lora,))
    assert two["version"] == one["version"] == 1
    assert one["stats"]["trained_sequences"] == 12 and one["stats"]["grad_norm"] > 0
    if lora == "1":
        assert all("lora_" in k for k in one["weights"])  # the adapter alone is published
        if strategy == "fsdp":  # and only the adapter is gathered (before: the whole model)
            assert two["gathered"] == sum(v.numel() for v in one["weights"].values())
    _assert_close(two["weights"], one["weights"])
    for key in ("loss", "kl", "clip_fraction", "grad_norm"):
        assert two["stats"][key] == pytest.approx(one["stats"][key], abs=1e-5), key


@pytest.mark.slow  # two Gloo ranks: a process each (README, Development)
@pytest.mark.network
@pytest.mark.parametrize("cap", [1 << 20, 200])
def test_gradients_are_summed_bucket_by_bucket(tmp_path: Path, cap: int) -> None:
    """``ddp``'s gradient sync over 2 Gloo ranks: every gradient is the sum of both ranks', a
    gradient only one rank has is kept, one no rank has stays ``None``; with a bucket of 200
    bytes no concatenation is larger than a bucket plus the flags (the 2 KiB gradient is reduced
    in place), where before every gradient was copied into one buffer (2.4 KiB here)."""
    from rlinf_algos.parallel import grad_buckets

    out = tmp_path / f"sync-{cap}.pt"
    _two_ranks("sync_rank.py", str(cap), str(out))
    got = torch.load(out, weights_only=False)
    shapes = [(4, 4), (3,), (64, 8), (5,), (2, 2), (7,)]
    for i, shape in enumerate(shapes):
        if i == 5:
            assert got["grads"][i] is None
            continue
        base = torch.randn(shape, generator=torch.Generator().manual_seed(i))
        want = base * 2 if i == 3 else base * 3  # rank 1 only: 2x; both ranks: 1x + 2x
        torch.testing.assert_close(got["grads"][i], want)
    flags = 6 * 4
    if cap == 200:
        assert got["max_cat"] <= 200 + flags
        assert grad_buckets([torch.zeros(s) for s in shapes], 200) == [[0, 1], [2], [3, 4, 5]]
    else:
        assert got["max_cat"] == sum(torch.zeros(s).numel() for s in shapes) * 4 + flags  # one bucket


@pytest.mark.slow  # two Gloo ranks: a process each (README, Development)
@pytest.mark.network
def test_fsdp_ranks_shard_before_they_load(tmp_path: Path) -> None:
    """``wrap_loaded`` under ``fsdp`` on 2 Gloo ranks: only rank 0 reads the folder's weights;
    rank 1 builds the model on the meta device and holds only its shards; gathered back, the
    sharded weights and the buffers (rotary frequencies, in no state dict) equal the folder's
    model loaded in one process (before: every rank loaded the whole model and moved it to its
    device before sharding). Every weight trained, then with LoRA adapters."""
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import LMModelConfig, LoraConfig, ModelInitConfig

    init = ModelInitConfig(hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=64)
    folder = hf.new_model_folder(tmp_path / "model", init)
    out = tmp_path / "load"
    _two_ranks("sharded_load_rank.py", str(folder), str(out), timeout=180)
    for lora in (0, 1):
        zero, one = (torch.load(f"{out}.{r}.{lora}", weights_only=False) for r in range(2))
        assert (zero["loads"], one["loads"]) == (1, 0)
        assert zero["skeleton_on"] == one["skeleton_on"] == ["meta"]
        for name, (local, full) in one["shards"].items():
            assert local <= (full + 1) // 2 or full < 2, name  # rank 1 holds its shard, never the whole
        torch.manual_seed(7)
        plain = hf.load_causal_lm(LMModelConfig(path=str(folder), lora=LoraConfig(rank=4) if lora else None))
        want = plain.state_dict()
        assert zero["state"].keys() == want.keys()
        _assert_close(zero["state"], dict(want), tol=0.0)
        _assert_close(zero["buffers"], dict(plain.named_buffers()), tol=0.0)


def test_a_rendezvous_names_the_ranks_that_did_not_arrive() -> None:
    port = _free_port()
    with pytest.raises(RlinfError) as err:
        rendezvous("127.0.0.1", port, 0, 3, timeout=1.5)
    assert "rank(s) 1, 2 of 3 did not arrive" in str(err.value) and f"127.0.0.1:{port}" in str(err.value)


def test_a_rank_without_its_host_names_rank_0() -> None:
    with pytest.raises(RlinfError, match=r"rank 0 \(the host\) did not arrive"):
        rendezvous("127.0.0.1", _free_port(), 1, 2, timeout=1.0)


def test_devices_follow_the_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"no CUDA device.*node group with GPUs"):
            resolve_device("cuda:0")
    with pytest.raises(ConfigError, match="not a torch device"):
        resolve_device("gpu0")


# -- the learner group in a run's configuration ----------------------------------------------------
ROOT = Path(__file__).resolve().parents[3]


def _config(tmp_path: Path, actor: str, group: str = "node", **extra: str) -> Path:
    import yaml

    cfg = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    if group != "node":
        cfg["cluster"]["node_groups"] = [{"label": group, "node_ranks": 0}]
    cfg["cluster"]["component_placement"]["actor"] = {"node_group": group, "placement": actor}
    cfg.update(extra)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _said(result: Any) -> str:
    """What the console script would print: the output, and the error it reports."""
    return result.output + ("" if result.exception is None else str(result.exception))


def test_a_learner_placed_on_gpus_of_a_machine_without_them_fails_up_front(
    tmp_path: Path, host: Any, invoke: Any
) -> None:
    result = invoke(host, "train", str(_config(tmp_path, "0-1", group="gpu")), "--dry-run")
    assert result.exit_code != 0
    assert "cluster.component_placement.actor.placement" in _said(result)
    assert "no accelerators" in _said(result) and "Traceback" not in _said(result)


def test_the_plan_shows_every_learner_rank_and_the_actor_section(
    tmp_path: Path, host: Any, invoke: Any
) -> None:
    result = invoke(host, "train", str(_config(tmp_path, "0:0-1")), "--dry-run", "actor.strategy=fsdp")
    assert result.exit_code == 0, result.output
    assert "actor: 2 processes on nodes 0" in _said(result)
    assert "strategy: fsdp" in _said(result)


def test_actor_section_errors_name_their_keys(tmp_path: Path, host: Any, invoke: Any) -> None:
    path = _config(tmp_path, "0:0-1")
    result = invoke(host, "train", str(path), "--dry-run", "actor.strategy=zero3", "actor.micro_batch_size=0")
    assert result.exit_code != 0
    assert "actor.strategy" in _said(result) and "'ddp'" in _said(result) and "'fsdp'" in _said(result)
    assert "actor.micro_batch_size" in _said(result)


def test_sac_keeps_its_learner_on_one_process(tmp_path: Path, host: Any, invoke: Any) -> None:
    result = invoke(host, "train", str(ROOT / "examples" / "sac_halfcheetah.yaml"), "--dry-run",
                    "cluster.component_placement.actor.placement=0:0-1")  # fmt: skip
    assert result.exit_code != 0
    assert "cluster.component_placement.actor.placement" in _said(result)
    assert "not data-parallel" in _said(result)


def test_a_lm_learner_on_a_cuda_device_its_placement_lacks_is_refused(
    tmp_path: Path, host: Any, invoke: Any
) -> None:
    result = invoke(
        host, "train", str(ROOT / "examples" / "grpo_arith.yaml"), "--dry-run", "runner.device=cuda:0"
    )
    assert result.exit_code != 0
    assert "runner.device" in _said(result) and "no accelerators" in _said(result)


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("mode", ["collective", "arrive"])
def test_a_rank_that_dies_mid_wait_is_named_first_at_once(tmp_path: Path, mode: str) -> None:
    """Rank 1 dies with SIGKILL while rank 0 waits for it in an all-reduce (Gloo) or an arrival:
    rank 0's error names rank 1, its pid and node first, then itself and how long it waited, long
    before the group's timeout."""
    import json

    out = tmp_path / "rank0.json"
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(HELPERS / "lost_rank.py"), str(r), "2", str(port), mode, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[0].returncode == 0 and procs[1].returncode == -9, "\n".join(logs)
    got = json.loads(out.read_text())
    during = "sync_grads()" if mode == "collective" else "reaching update 1"
    assert got["message"].startswith(
        f"LearnerGroupBroken: actor rank 1 (pid {got['pid']} on {got['node']}) died: actor rank 0 (pid "
    ), got
    assert "waited for it " in got["message"] and f"s in {during}" in got["message"], got
    assert 0.5 < got["waited"] < 10.0 < got["timeout"], got  # found dead, not timed out
