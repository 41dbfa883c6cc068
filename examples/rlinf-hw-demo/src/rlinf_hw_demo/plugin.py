"""Entry point ``hw-demo``: registers the ``DemoArm`` hardware type."""

from __future__ import annotations

from rlinf_core import hookimpl


@hookimpl
def rlinf_register_hardware():
    from rlinf_hw_demo.hardware import DemoArm

    return [DemoArm]
