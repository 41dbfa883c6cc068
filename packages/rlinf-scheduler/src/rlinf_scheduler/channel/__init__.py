"""Ray-backed channels: named, keyed FIFO queues between processes and nodes.

:class:`RayChannel` implements :class:`rlinf_core.channel.Channel` (same semantics and errors as
:class:`~rlinf_core.channel.LocalChannel`) for every process of a Ray cluster. Its parts:

* **One channel actor** (an asyncio Ray actor, named ``rlinf-channel:<name>`` in a namespace)
  owns the queues. It is created by name from the driver or any worker (``get_if_exists``: two
  creators race safely) on the node the plan says (``node_id``; default: the node of the process
  that creates it, which is the consumer's node when the consumer creates it).
* **A direct data plane.** A Ray actor call costs 1-2 ms here; a queue operation must cost far less.
  The actor therefore also listens on a TCP port of its node's Ray address; every client process
  opens authenticated connections to it (the token travels only over Ray's authenticated RPC) and
  runs ``put``/``get`` over them: one small frame each way, waiters parked on asyncio futures in
  the actor, no polling.
* **Payloads by reference.** An item whose arrays/tensors add up to at least ``inline_limit``
  bytes is put once in Ray's object store by the producer (torch tensors as zero-copy numpy
  views) and only its ``ObjectRef`` is handed to the actor; the queue carries a slot id. The
  consumer fetches the object in one transfer from wherever it lives (zero-copy on the same
  node). Smaller items are pickled once by the producer and unpickled once by the consumer; the
  actor never unpickles a payload.
* **Peers and failure.** Every client process keeps one *control connection* per channel for its
  life. Losing it without the goodbye that :meth:`RayChannel.disconnect`, garbage collection or
  interpreter exit sends marks the process dead (TCP keep-alive covers a vanished node). Every
  waiter on a key whose producer (for ``get``) or consumer (for a ``put`` blocked on a full
  queue) died fails at once with :class:`ChannelPeerDied` naming that peer, instead of hanging
  until its timeout; the record is cleared when a process of the same name reconnects. A queued
  large item whose producer died (its object died with its owner) is reported the same way.

:class:`DistributedRayChannel` keeps one channel actor per node and routes each key to the replica
on the node of the key's first producer, so a producer's ``put`` never leaves its node.

Payloads are numpy arrays, torch tensors (only if torch is importable; it is not a dependency),
and dicts, lists, tuples and dataclasses of them, or anything picklable.

Modules: :mod:`~rlinf_scheduler.channel.wire` (frames, errors, payload packing),
:mod:`~rlinf_scheduler.channel.server` (the channel actor), :mod:`~rlinf_scheduler.channel.client`
(connections to it), :mod:`~rlinf_scheduler.channel.peer` (this process as a peer, and
:func:`node_address`), :mod:`~rlinf_scheduler.channel.ray_channel` and
:mod:`~rlinf_scheduler.channel.distributed` (the two channel classes). Import the public names from
this package.
"""

from __future__ import annotations

from rlinf_scheduler.channel.distributed import DistributedRayChannel
from rlinf_scheduler.channel.peer import node_address
from rlinf_scheduler.channel.ray_channel import INLINE_LIMIT, RayChannel
from rlinf_scheduler.channel.server import ACTOR_PREFIX, ChannelCore
from rlinf_scheduler.channel.wire import ChannelPeerDied, pack_payload, unpack_payload

__all__ = [
    "ACTOR_PREFIX",
    "INLINE_LIMIT",
    "ChannelCore",
    "ChannelPeerDied",
    "DistributedRayChannel",
    "RayChannel",
    "node_address",
    "pack_payload",
    "unpack_payload",
]

_node_address = node_address
"""Deprecated alias of :func:`node_address` (kept while callers move to the public name)."""
