"""One rank of an FSDP learner group loading a model folder (run by test_algos_parallel.py):

    python sharded_load_rank.py RANK WORLD PORT FOLDER OUT

The language-model actor's load (:meth:`DataParallel.wrap_loaded` with
:func:`rlinf_algos.lm.hf.load_causal_lm` and its ``meta`` skeleton). Each rank writes
``OUT.RANK.LORA`` (LORA 0: every weight trained, 1: with LoRA adapters): how often it loaded
the folder's weights, the devices of its skeleton's tensors, each parameter's local shard and
full sizes; rank 0 adds the gathered full state dict and the buffers, which the test compares
with the folder.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMModelConfig, LoraConfig
from rlinf_algos.parallel import DataParallel


def main(argv: list[str]) -> None:
    rank, world, port, folder, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3], argv[4]
    torch.set_num_threads(1)
    dp = DataParallel.start(rank, world, strategy="fsdp", timeout=60, addr="127.0.0.1", port=port)
    for lora in (False, True):
        spec = LMModelConfig(path=folder, lora=LoraConfig(rank=4) if lora else None)
        torch.save(load_sharded(dp, spec), f"{out}.{rank}.{int(lora)}")
    dp.close()


def load_sharded(dp: DataParallel, spec: LMModelConfig) -> dict[str, Any]:
    loads: list[int] = []
    skeleton_on: set[str] = set()

    def load() -> torch.nn.Module:
        loads.append(dp.rank)
        torch.manual_seed(7)  # LoRA's initial adapter weights
        return hf.load_causal_lm(spec)

    def skeleton() -> torch.nn.Module:
        m = hf.load_causal_lm(spec, meta=True)
        skeleton_on.update(t.device.type for t in [*m.parameters(), *m.buffers()])
        return m

    model = dp.wrap_loaded(load, skeleton)
    shards = {
        n: (p.to_local().numel() if hasattr(p, "to_local") else p.numel(), p.numel())
        for n, p in model.named_parameters()
    }
    full = dp.state_dict(model)  # a collective: rank 0 gets it
    result: dict[str, Any] = {"loads": len(loads), "skeleton_on": sorted(skeleton_on), "shards": shards}
    if dp.rank == 0:
        result["state"] = full
        result["buffers"] = {n: b.detach().cpu() for n, b in model.named_buffers()}
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
