"""Data-parallel learners over ``torch.distributed``: one process group per learner.

When the ``actor`` component is placed on N processes, its N workers form one process group
(:meth:`DataParallel.start`): Gloo on CPU, NCCL when the placement gives the process CUDA
devices, with a Gloo group beside it for the control messages (the batch, the arrivals). The
rendezvous is a ``TCPStore`` on rank 0 at the address and port the scheduler exported
(``MASTER_ADDR``: rank 0's node address, on the interface ``RLINF_COMM_NET_DEVICES`` names, so
an overlay such as EasyTier carries it; ``MASTER_PORT``: a free port there). Every rank first
announces itself on the store; a rank that is not there within the timeout is named, with its
node, in the error (``rendezvous``); the per-iteration :meth:`DataParallel.arrive` does the same
for every update, so a missing rank never leaves the others waiting silently in a collective.

Every wait of the group is bounded by ``timeout`` (``2 * runner.worker_timeout + 30`` s for the
actor: a rank waits for rank 0, which waits on the channel first): the rendezvous, each
:meth:`~DataParallel.arrive`, and every collective (the process group's timeout, which Gloo
honours). A rank that *dies* is found sooner: where the rendezvous recorded a peer on this node,
its process id is checked while an arrival waits, and a collective whose peer's connection closed
fails at once. Either way the error is a :class:`LearnerGroupBroken` (:meth:`DataParallel.lost`)
whose first line names the rank that is gone (its pid and node), then the rank that waited, in
what and for how long.

How one update is split (the learners call these; their maths does not change):

- rank 0 takes the iteration's data off the trajectory channel and :meth:`broadcast_object`
  hands it to the others, so every rank computes the same advantages and permutations;
- each minibatch is cut into one contiguous shard per rank (:meth:`span`), each shard into
  micro-batches of ``actor.micro_batch_size`` (:meth:`micro_spans`, gradient accumulation);
- a micro-batch's mean loss is scaled by its share of the minibatch's denominator
  (:meth:`backward` with ``share = len(micro) / len(minibatch)``, or the share of masked tokens),
  and the gradients are *summed* over ranks: the update equals the single-process update on
  the same global minibatch whatever N and the micro-batch size are (to float rounding);
- rank 0 publishes the weights and writes checkpoints, in the single-process format, so a
  checkpoint written by N ranks resumes on M.

Strategies (``actor.strategy``):

- ``ddp``: every rank holds the whole model; the gradients are all-reduced once per optimiser
  step in buckets of at most :data:`BUCKET_BYTES` (what ``DistributedDataParallel`` does with
  ``no_sync`` over the accumulation steps): an MLP's gradients are one bucket, one collective; a
  large model's never need a second copy of all its gradients, only one bucket's (a gradient
  larger than a bucket is reduced in place, without a copy). torch's DDP wrapper is not used because the learners call
  methods other than ``forward`` (``evaluate``, ``value``), which its hooks never see, and on
  models this size the all-reduce after the backward costs no more than DDP's overlap saves.
- ``fsdp``: FSDP2's ``fully_shard``: parameters, gradients and optimiser state are sharded
  over the ranks (each transformer block is its own unit for Hugging Face models); the
  learners' extra methods are registered as forward methods so they gather the parameters too.
  Publishing and checkpoints gather the full state dict once (a collective: every rank calls).
  :meth:`DataParallel.wrap_loaded` shards a meta-device skeleton before any weight is loaded.

A group of one process uses neither (unless :meth:`DataParallel.start` is asked for a group):
the learner runs exactly as it did before.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from rlinf_algos.devices import configure_precision
from rlinf_core.errors import ConfigError, PeerLost, RlinfError

log = logging.getLogger(__name__)

__all__ = [
    "BUCKET_BYTES",
    "STRATEGIES",
    "DataParallel",
    "LearnerGroupBroken",
    "LearnerOutOfMemory",
    "grad_buckets",
    "rendezvous",
]

STRATEGIES = ("ddp", "fsdp")

BUCKET_BYTES = 25 * 2**20
"""The most gradient bytes one all-reduce of ``ddp`` carries (DDP's default bucket size)."""


class LearnerOutOfMemory(RlinfError):
    """A learner ran out of accelerator memory (``torch.OutOfMemoryError``); the message names the
    rank, the device and the call. Not a crash to restart: the driver ends the run with the
    knobs that lower the need (:func:`rlinf_algos.runtime.recovery.out_of_memory_message`)."""


class LearnerGroupBroken(PeerLost):
    """A rank of the learner group is gone (died, or did not arrive within the timeout) while
    another waited for it in a collective or an arrival; the first line names the gone rank, its
    pid and node, then the rank that waited, in what and for how long."""


def _where(text: str) -> tuple[str, int | None]:
    """``(node, pid)`` of what a rank wrote at the rendezvous (``"node (pid 123)"``)."""
    node, _, rest = text.partition(" (pid ")
    try:
        return node, int(rest.rstrip(")"))
    except ValueError:
        return node, None


LOST_SETTLE_S = 2.0
"""Seconds a rank whose collective failed looks for the peer that died (see ``lost``)."""


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` of this node is gone (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def grad_buckets(grads: Sequence[Tensor], cap: int) -> list[list[int]]:
    """Consecutive runs of ``grads`` (by index) of one dtype and device, each at most ``cap``
    bytes; a gradient larger than ``cap`` is a bucket of its own."""
    out: list[list[int]] = []
    size = 0
    for i, g in enumerate(grads):
        nbytes = g.numel() * g.element_size()
        last = grads[out[-1][-1]] if out else None
        fits = last is not None and last.dtype == g.dtype and last.device == g.device and size + nbytes <= cap
        if fits:
            out[-1].append(i)
            size += nbytes
        else:
            out.append([i])
            size = nbytes
    return out


def _store_wait(store: Any, keys: list[str], timeout: float) -> list[str]:
    """Wait until every key is on the store; returns the keys still missing at the deadline."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        missing = [k for k in keys if not store.check([k])]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def rendezvous(addr: str, port: int, rank: int, world: int, timeout: float, what: str = "actor") -> Any:
    """Meet the other ``world - 1`` ranks on a ``TCPStore`` that rank 0 hosts at ``addr:port``.

    Every rank writes where it runs; rank ``r`` waits for all. Raises :class:`RlinfError` naming
    the ranks that did not arrive within ``timeout`` seconds (and the address), or naming rank 0
    when its store cannot be reached."""
    from torch.distributed import TCPStore

    where = f"{os.uname().nodename} (pid {os.getpid()})"
    try:
        store = TCPStore(
            addr,
            int(port),
            world_size=None,
            is_master=rank == 0,
            timeout=datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
            use_libuv=True,
        )
    except Exception as err:
        if rank == 0:
            raise RlinfError(f"{what} rank 0 could not host the rendezvous on {addr}:{port}: {err}") from None
        raise RlinfError(
            f"{what} rendezvous at {addr}:{port} timed out after {timeout:g} s: rank 0 (the host) did not "
            f"arrive (rank {rank} waited on {where})"
        ) from None
    store.set(f"rlinf/arrived/{rank}", where)
    missing = _store_wait(store, [f"rlinf/arrived/{r}" for r in range(world)], timeout)
    if missing:
        ranks = sorted(int(k.rsplit("/", 1)[1]) for k in missing)
        raise RlinfError(
            f"{what} rendezvous at {addr}:{port} timed out after {timeout:g} s: rank(s) "
            f"{', '.join(map(str, ranks))} of {world} did not arrive (rank {rank} waited on {where})"
        )
    return store


class DataParallel:
    """The data-parallel context of one learner process (see the module docstring).

    Args:
        rank, world: this process's rank in the learner group and the group's size.
        strategy: ``ddp`` or ``fsdp`` (ignored on a group of one).
        device: the torch device the model lives on.
        micro_batch_size: samples per forward/backward on one rank (``None``: the whole shard).
        timeout: seconds any rendezvous, arrival or collective may take.

    ``distributed`` says whether a process group is on: always for ``world > 1``, and for a
    group of one only when :meth:`start` was asked for it (``group=True``: the device check
    runs a one-rank NCCL learner through every collective the runtime uses); ``sharded``
    whether FSDP shards the model (``fsdp`` on a process group).
    """

    def __init__(
        self,
        rank: int = 0,
        world: int = 1,
        strategy: str = "ddp",
        device: torch.device | str = "cpu",
        micro_batch_size: int | None = None,
        timeout: float = 300.0,
        store: Any = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"unknown strategy {strategy!r}; choose {' or '.join(STRATEGIES)}", "actor.strategy"
            )
        self.rank, self.world, self.strategy = rank, world, strategy
        self.distributed = world > 1
        self.device = torch.device(device)
        configure_precision(self.device)  # TF32 for float32 matmuls on a GPU
        self.micro_batch_size = micro_batch_size
        self.timeout = timeout
        self.store = store
        self.ctrl: Any = None  # the Gloo group of control messages
        self.module: nn.Module | None = None
        self._arrivals = 0
        self.bucket_bytes = BUCKET_BYTES  # the most gradient bytes in one all-reduce (ddp)
        self.comm_s = 0.0  # seconds spent in gradient collectives since the last take_comm_s()
        self.what = "actor"  # the role the ranks belong to, in messages
        self.peers: dict[int, str] = {}  # rank -> "node (pid N)", as each wrote at the rendezvous

    # -- setup ---------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        rank: int,
        world: int,
        *,
        strategy: str = "ddp",
        device: torch.device | str = "cpu",
        micro_batch_size: int | None = None,
        timeout: float = 300.0,
        addr: str | None = None,
        port: int | None = None,
        what: str = "actor",
        group: bool = False,
    ) -> DataParallel:
        """Join the learner group (a plain single-process context when ``world == 1``, unless
        ``group``: then a process group of one, with its collectives and FSDP).
        ``addr``/``port`` default to ``MASTER_ADDR``/``MASTER_PORT``."""
        dp = cls(rank, world, strategy, device, micro_batch_size, timeout)
        if world == 1 and not group:
            return dp
        dp.distributed = True
        import torch.distributed as dist

        addr = addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(port or os.environ.get("MASTER_PORT", "0"))
        if not port:
            raise RlinfError(f"{what}: {world} ranks need a rendezvous port (MASTER_PORT is not set)")
        store = rendezvous(addr, port, rank, world, timeout, what)
        dp.what = what
        dp.peers = {r: store.get(f"rlinf/arrived/{r}").decode() for r in range(world)}
        backend = "nccl" if dp.device.type == "cuda" else "gloo"
        if dp.device.type == "cuda":
            torch.cuda.set_device(dp.device)
        dist.init_process_group(
            backend,
            store=dist.PrefixStore("pg", store),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout),
            # NCCL bound to this GPU: the communicator is made at the rendezvous (two ranks on one
            # GPU fail here, not at the first all-reduce) and barriers need not guess the device
            device_id=torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None,
        )
        dp.ctrl = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
        dp.store = store
        return dp

    def close(self) -> None:
        """Leave the process group (no-op on a group of one)."""
        if self.distributed:
            import gc

            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            # rank 0 hosts the store: it leaves last, once every other rank dropped its client
            # (a client whose server is gone aborts the process when it is destroyed)
            store, self.store = self.store, None
            try:
                if self.rank == 0:
                    _store_wait(store, [f"rlinf/left/{r}" for r in range(1, self.world)], 10.0)
                    time.sleep(0.2)
                else:
                    store.set(f"rlinf/left/{self.rank}", "1")
            except Exception:
                pass
            del store
            gc.collect()
            self.world, self.distributed = 1, False

    @property
    def sharded(self) -> bool:
        """Whether FSDP shards the model (``fsdp`` on a process group)."""
        return self.distributed and self.strategy == "fsdp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: nn.Module, methods: Sequence[str] = ()) -> nn.Module:
        """Move ``model`` to the device and, with ``fsdp`` on several ranks, shard it
        (``methods``: the model's methods besides ``forward`` that run the parameters).
        Build optimisers after this: FSDP replaces the parameters."""
        model = model.to(self.device)
        if self.distributed:  # every rank starts from rank 0's weights, however it built them
            import torch.distributed as dist

            with torch.no_grad():
                for t in [*model.parameters(), *model.buffers()]:
                    dist.broadcast(t.data, 0)
        if self.sharded:
            self._shard(model, methods)
        self.module = model
        return model

    def wrap_loaded(
        self,
        load: Callable[[], nn.Module],
        skeleton: Callable[[], nn.Module],
        methods: Sequence[str] = (),
    ) -> nn.Module:
        """The model ``load()`` returns, on the device and wrapped (:meth:`wrap`), without a
        full copy of it on any device when FSDP shards it: then only rank 0 calls ``load()``
        (its host copy); every rank builds ``skeleton()``, the same model on the meta device
        (shapes, no storage), shards it, allocates its own shards on its device and receives
        their values from rank 0's weights, one tensor at a time
        (``set_model_state_dict(..., broadcast_from_rank0=True)``); buffers (not sharded, and
        some, such as rotary frequencies, in no state dict) are rank 0's, broadcast. Without
        sharding every rank loads the model and :meth:`wrap` broadcasts rank 0's weights."""
        if not self.sharded:
            return self.wrap(load(), methods)
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        host = load() if self.is_main else None
        model = skeleton()
        where = sorted({t.device.type for t in [*model.parameters(), *model.buffers()]})
        if where != ["meta"]:
            raise RlinfError(
                f"the model skeleton of a sharded learner must be on the meta device, not {where}"
            )
        self._shard(model, methods)
        model.to_empty(device=self.device)
        full = host.state_dict() if host is not None else {}
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, full, options=options)
        source = dict(host.named_buffers()) if host is not None else {}
        with torch.no_grad():
            for name, buf in model.named_buffers():
                if host is not None:
                    buf.copy_(source[name])
                dist.broadcast(buf, 0)
        del host, full, source
        self.module = model
        return model

    def _shard(self, model: nn.Module, methods: Sequence[str]) -> None:
        """FSDP2 over the group: each transformer block a unit, then the root."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        mesh = init_device_mesh(self.device.type, (self.world,))
        # No MixedPrecisionPolicy (bf16 gathers, half of float32's bytes): with param_dtype bf16 the
        # device check's "fsdp learner of one" (Gloo) ended 1.4e-1 from the unsharded learner (2e-2
        # allowed), as norms and embeddings then compute in bf16 too, not only autocast's matmuls
        blocks = set(getattr(model, "_no_split_modules", None) or ())
        units = [sub for sub in model.modules() if sub is not model and type(sub).__name__ in blocks]
        for sub in units:
            fully_shard(sub, mesh=mesh)
        if not units and self.rank == 0:
            log.warning(
                "actor.strategy fsdp: %s has no blocks to shard one by one (_no_split_modules), so it "
                "is one unit, gathered whole for every forward and reduce-scattered every step; on a "
                "model this small ddp is faster (benchmarks/learner_scaling.py)",
                type(model).__name__,
            )
        # the root's parameters are needed again at once by the backward: keep them gathered
        fully_shard(model, mesh=mesh, reshard_after_forward=False)
        for name in methods:
            if callable(getattr(model, name, None)):
                register_fsdp_forward_method(model, name)
        # the learners never modify their outputs in place (the case this warns about)
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

    # -- splitting a batch -----------------------------------------------------------------------
    def span(self, n: int) -> tuple[int, int]:
        """This rank's contiguous shard ``[lo, hi)`` of ``n`` items (sizes differ by at most 1)."""
        return self.rank * n // self.world, (self.rank + 1) * n // self.world

    def micro_spans(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` cut into micro-batches of at most ``micro_batch_size`` (one piece without).
        An empty shard gives one empty piece, so every rank runs the same number of backwards."""
        mb = self.micro_batch_size
        if not mb or hi - lo <= mb:
            return [(lo, hi)]
        return [(a, min(a + mb, hi)) for a in range(lo, hi, mb)]

    def arrive(self, tag: str) -> None:
        """Every rank reaches ``tag`` (once per update) within the timeout, or a
        :class:`LearnerGroupBroken` names the ranks that did not (at once for a rank of this node
        whose process died)."""
        if not self.distributed:
            return
        self._arrivals += 1
        prefix = f"rlinf/at/{self._arrivals}"
        self.store.set(f"{prefix}/{self.rank}", tag)
        t0 = time.monotonic()
        keys = [f"{prefix}/{r}" for r in range(self.world)]
        while True:
            left = self.timeout - (time.monotonic() - t0)
            missing = _store_wait(self.store, keys, max(0.0, min(0.5, left)))
            if not missing:
                return
            ranks = sorted(int(k.rsplit("/", 1)[1]) for k in missing)
            dead = self.dead_ranks(ranks)
            if dead or left <= 0:
                raise self.lost(f"reaching {tag}", time.monotonic() - t0, gone=dead or ranks)

    def dead_ranks(self, ranks: Iterable[int] | None = None) -> list[int]:
        """The ranks (of ``ranks``, default every other one) whose process is known to be gone:
        those the rendezvous recorded on this node whose process id no longer runs."""
        here = os.uname().nodename
        out = []
        for r in range(self.world) if ranks is None else ranks:
            node, pid = _where(self.peers.get(r, ""))
            if r != self.rank and pid is not None and node == here and _process_gone(pid):
                out.append(r)
        return out

    def describe(self, rank: int) -> str:
        """``actor rank 1 (pid 123 on node-a)``: a rank as the rendezvous recorded it."""
        node, pid = _where(self.peers.get(rank, ""))
        where = f"pid {pid} on {node}" if pid is not None else (node or "where unknown")
        return f"{self.what} rank {rank} ({where})"

    def lost(
        self,
        during: str,
        waited: float,
        error: BaseException | None = None,
        gone: Sequence[int] | None = None,
    ) -> LearnerGroupBroken:
        """The error of a rank whose group broke ``during`` a call, after ``waited`` seconds:
        the gone ranks first (``gone``, default those :meth:`dead_ranks` finds), then this rank,
        then ``error``'s first line (the collective's own words). A collective can fail the
        moment a peer's sockets close, while that peer is still exiting: its death is looked for
        during up to :data:`LOST_SETTLE_S` seconds before the error says no rank is known dead."""
        if gone is None:
            gone = self.dead_ranks()
            settle = time.monotonic() + LOST_SETTLE_S
            while not gone and error is not None and time.monotonic() < settle:
                time.sleep(0.05)
                gone = self.dead_ranks()
        gone = list(gone)
        dead = set(self.dead_ranks(gone))
        if gone:
            head = "; ".join(f"{self.describe(r)} {'died' if r in dead else 'did not answer'}" for r in gone)
        else:
            head = f"a rank of the {self.what} learner group of {self.world} is gone or stuck"
        detail = ""
        if error is not None:
            detail = ": " + ((str(error).strip().splitlines() or [type(error).__name__])[0][:300])
        limit = "" if dead or not gone else f" (the group's timeout is {self.timeout:g} s)"
        return LearnerGroupBroken(
            f"{head}: {self.describe(self.rank)} waited for it {waited:.1f} s in {during}{limit}{detail}"
        )

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled once, sent over the Gloo control group)."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        if self.rank == 0:
            payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=5)), dtype=torch.uint8)
            size = torch.tensor([payload.numel()], dtype=torch.int64, device="cpu")  # the Gloo group: host
        else:
            size = torch.zeros(1, dtype=torch.int64, device="cpu")
        dist.broadcast(size, 0, group=self.ctrl)
        if self.rank != 0:
            payload = torch.empty(int(size), dtype=torch.uint8, device="cpu")
        dist.broadcast(payload, 0, group=self.ctrl)
        return obj if self.rank == 0 else pickle.loads(payload.numpy().tobytes())

    def from_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on rank 0, its result (or the exception it raised, raised on every rank)
        handed to every rank: how a group takes an iteration's data off a channel once."""
        if not self.distributed:
            return fn()
        got: Any = None
        if self.is_main:
            try:
                got = ("ok", fn())
            except Exception as err:
                got = ("error", err)
        kind, value = self.broadcast_object(got)
        if kind == "error":
            raise value
        return value

    # -- gradients -------------------------------------------------------------------------------
    def backward(self, loss: Tensor, share: float | Tensor = 1.0, last: bool = True) -> None:
        """``(loss * share).backward()``: ``share`` is the micro-batch's part of the minibatch's
        denominator, so the gradients summed over micro-batches and ranks are the minibatch's.
        ``last``: the last micro-batch of the step on this rank (FSDP reduces its gradients then)."""
        if self.sharded:
            self.module.set_requires_gradient_sync(last)  # type: ignore[union-attr, operator]
            share = share * self.world  # FSDP averages over ranks; the shares are already global
        (loss if isinstance(share, float) and share == 1.0 else loss * share).backward()

    def sync_grads(self, params: Iterable[Tensor]) -> None:
        """Sum the gradients of ``params`` over the ranks (``ddp``; FSDP did it in the backward),
        bucket by bucket (:func:`grad_buckets`): the extra memory is one bucket, never a copy of
        every gradient."""
        if not self.distributed or self.strategy == "fsdp":
            return
        import torch.distributed as dist

        t0 = time.perf_counter()
        params = list(params)
        if not params:
            return
        # every rank sends the same layout, also for a parameter its shard left alone, plus one
        # flag per parameter: one no rank touched keeps no gradient (the optimiser skips it, as
        # it would in one process)
        had = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self.device)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        buckets = grad_buckets(grads, self.bucket_bytes)
        flags_sent = False
        for k, idx in enumerate(buckets):
            part = [grads[i] for i in idx]
            # the flags ride with the last bucket that is copied anyway (one collective for an MLP)
            carry = len(part) > 1 and k == len(buckets) - 1
            if len(part) == 1 and not carry:
                dist.all_reduce(part[0])  # in place: a gradient as large as a bucket is not copied
                continue
            flat = torch.cat([*(g.reshape(-1) for g in part), *([had.to(part[0].dtype)] if carry else [])])
            dist.all_reduce(flat)
            sizes = [g.numel() for g in part]
            pieces = flat.split([*sizes, len(params)] if carry else sizes)
            torch._foreach_copy_(part, [c.view_as(g) for c, g in zip(pieces, part, strict=False)])
            if carry:
                had, flags_sent = pieces[-1], True
        if not flags_sent:
            dist.all_reduce(had)
        for p, used in zip(params, had.tolist(), strict=True):
            if not used:
                p.grad = None
        self.comm_s += time.perf_counter() - t0

    def clip_grad_norm(self, params: Sequence[Tensor], max_norm: float) -> Tensor:
        """Clip the global gradient norm (over every shard); returns the norm before clipping."""
        if self.sharded:
            norm = torch.nn.utils.clip_grad_norm_(list(params), max_norm)
            return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        from rlinf_algos.optim import clip_grads_

        return clip_grads_([p.grad for p in params if p.grad is not None], max_norm)

    def mean(self, t: Tensor) -> Tensor:
        """The mean of ``t`` over the ranks (metrics)."""
        if not self.distributed:
            return t
        import torch.distributed as dist

        out = t.detach().to(self.device, torch.float64).clone()
        dist.all_reduce(out)
        return (out / self.world).to(t.dtype).cpu()

    def take_comm_s(self) -> float:
        s, self.comm_s = self.comm_s, 0.0
        return s

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self, model: nn.Module, only: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The full state dict of ``model`` on the CPU (a collective with ``fsdp``: every rank
        calls, rank 0 gets it, the others an empty dict). ``only``: the parameters whose names it
        accepts, and nothing else (under ``fsdp`` only those are gathered: LoRA adapters are
        published without gathering the base model)."""
        if only is not None:
            return self._parameters(model, only)
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(
                model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        if self.device.type == "cpu":
            return model.state_dict()
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}

    def _parameters(self, model: nn.Module, only: Callable[[str], bool]) -> dict[str, Any]:
        """``{name: parameter on the CPU}`` of the parameters ``only`` accepts; under ``fsdp`` each
        is gathered alone (every rank calls, in the same order; rank 0 keeps them)."""
        out: dict[str, Any] = {}
        sharded = self.sharded
        for name, p in model.named_parameters():
            if not only(name):
                continue
            t = p.detach()
            if sharded and hasattr(t, "full_tensor"):
                t = t.full_tensor()
            if not sharded or self.rank == 0:
                out[name] = t.cpu()
        return out

    def load_state_dict(self, model: nn.Module, state: dict[str, Any]) -> None:
        """Load a full state dict (every rank holds it) into ``model``."""
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
        else:
            model.load_state_dict(state)

    def optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimiser's state in the single-process format (parameters by position), gathered
        with ``fsdp`` (a collective; on rank 0, the others get an empty dict), so any number of
        ranks can load it."""
        if not self.sharded:
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(
            model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if not full:  # gathered on rank 0 only
            return {}
        index = _param_index(model, optimizer)
        groups = [{**g, "params": [index[n] for n in g["params"]]} for g in full["param_groups"]]
        return {"state": {index[n]: s for n, s in full["state"].items()}, "param_groups": groups}

    def load_optim_state_dict(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load :meth:`optim_state_dict` output (written by any number of ranks)."""
        if not self.sharded:
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = {i: n for n, i in _param_index(model, optimizer).items()}
        groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
        full = {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}
        set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))


def _param_index(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Each optimised parameter's name -> its position in the optimiser (the state-dict ids)."""
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, int] = {}
    i = 0
    for g in optimizer.param_groups:
        for p in g["params"]:
            out[names[id(p)]] = i
            i += 1
    return out
