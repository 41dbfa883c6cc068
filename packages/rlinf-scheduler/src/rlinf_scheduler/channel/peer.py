"""This process as a peer of channels: its id, its description and its node's address.

A channel actor names the processes connected to it by these (``ChannelPeerDied`` messages, the
``peers()`` table); :func:`node_address` is also where the actor of a channel listens.
"""

from __future__ import annotations

import contextlib
import os
import uuid

__all__ = ["PEER_ID", "node_address", "peer_desc"]

PEER_ID = uuid.uuid4().hex
"""This process's id as a channel peer (one per interpreter)."""
_PEER_DESC: str | None = None


def node_address() -> str:
    """The address Ray uses for this node (the overlay address when Ray is bound to one).

    Call it inside a Ray driver or worker (it asks Ray for this process's node).
    """
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return node["NodeManagerAddress"]
    return ray.util.get_node_ip_address()


def peer_desc() -> str:
    """``'<name> (pid N, node ADDR)'`` for this process: its actor name or id, else ``driver``."""
    global _PEER_DESC
    if _PEER_DESC is None:
        import ray

        ctx = ray.get_runtime_context()
        name = "driver"
        try:
            actor_id = ctx.get_actor_id()
        except Exception:
            actor_id = None
        if actor_id:
            actor_name = ctx.get_actor_name()
            name = f"actor {actor_name!r}" if actor_name else f"actor {actor_id}"
            with contextlib.suppress(Exception):
                name += f" [{ctx.current_actor._ray_actor_creation_function_descriptor.class_name}]"
        elif getattr(getattr(ctx, "worker", None), "mode", 0) != 0:  # a task in a worker process
            name = "task worker"
        try:
            node = node_address()
        except Exception:
            node = "?"
        _PEER_DESC = f"{name} (pid {os.getpid()}, node {node})"
    return _PEER_DESC
