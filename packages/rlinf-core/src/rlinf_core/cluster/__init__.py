"""The ``cluster`` configuration: models, rank expressions, placement strings and validation.

``rlinf_core.cluster`` is pure Python (pydantic, no Ray): the placement planner in
``rlinf-scheduler`` and any other package (hardware plugins reading ``RLINF_*`` rank variables,
the runtime) build on it.

- :func:`parse_rank_expr` / :func:`rank_expr_problems`: ``"0-3,8"``, ``all``, ints, lists.
- :func:`parse_placement` / :func:`expand_placement`: ``res[:proc],...`` placement strings.
- :class:`ClusterConfig` and friends: the pydantic models of the YAML.
- :func:`resolve_cluster`: every cross-field rule and plugin-owned part, all problems at once.
"""

from __future__ import annotations

from rlinf_core.cluster.models import (
    RESERVED_LABELS,
    ClusterConfig,
    ComponentPlacementSpec,
    HardwareSpec,
    NodeGroup,
    NodeGroupEnvConfig,
)
from rlinf_core.cluster.placement_string import (
    PLACEMENT_HELP,
    PlacementPart,
    expand_placement,
    parse_placement,
)
from rlinf_core.cluster.ranks import RANK_EXPR_HELP, compress_ranks, parse_rank_expr, rank_expr_problems
from rlinf_core.cluster.resolve import (
    ComponentSpec,
    NodeEnv,
    ResolvedCluster,
    ResolvedGroup,
    resolve_cluster,
    resolve_cluster_partial,
)

__all__ = [
    "PLACEMENT_HELP",
    "RANK_EXPR_HELP",
    "RESERVED_LABELS",
    "ClusterConfig",
    "ComponentPlacementSpec",
    "ComponentSpec",
    "HardwareSpec",
    "NodeEnv",
    "NodeGroup",
    "NodeGroupEnvConfig",
    "PlacementPart",
    "ResolvedCluster",
    "ResolvedGroup",
    "compress_ranks",
    "expand_placement",
    "parse_placement",
    "parse_rank_expr",
    "rank_expr_problems",
    "resolve_cluster",
    "resolve_cluster_partial",
]
