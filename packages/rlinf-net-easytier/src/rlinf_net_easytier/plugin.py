"""rlinf plugin of rlinf-net-easytier (entry point ``net-easytier``).

Registers the ``easytier`` network provider and the ``rlinf net`` commands once they exist; until
then it registers nothing. Must import without easytier-pyo3.
"""

from __future__ import annotations

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_network_providers() -> list[type]:
    return []
