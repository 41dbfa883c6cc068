"""MetaWorld's task instructions (MetaWorld has none of its own): imported by the backend in
MetaWorld's interpreter and by rlinf's ``metaworld`` family. Standard library only."""

from __future__ import annotations

__all__ = ["instruction"]

_INSTRUCTIONS = {
    "reach-v3": "reach the goal position",
    "push-v3": "push the puck to the goal",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "door-open-v3": "open the door",
    "drawer-open-v3": "open the drawer",
    "drawer-close-v3": "close the drawer",
    "button-press-topdown-v3": "press the button from the top",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}


def instruction(task: str) -> str:
    """The instruction of ``task``: its own sentence for MT10's, else its name in words."""
    return _INSTRUCTIONS.get(task) or task.removesuffix("-v3").replace("-", " ")
