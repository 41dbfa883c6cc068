"""A run configuration that has been validated, carrying what its validation made.

:class:`ValidatedConfig` is what :func:`rlinf_algos.config.prepare.prepare_run` hands to
``Algorithm.run``: a plain ``dict`` of the run's sections (as the YAML gave them, translated) that
also carries the validated section objects (``RunSections`` of an embodied run, ``LMRunConfig``
of a language-model run). ``load_run_sections`` and ``load_lm_sections`` return those instead of
validating again (:func:`carried_sections`), so a run's configuration is validated once, before
anything starts.

It is read-only: the carried objects are only right for the mapping they were made from. A copy
(``dict(config)``, ``copy.deepcopy``, pickling to a worker) is an ordinary ``dict`` and is
validated again wherever it is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

__all__ = ["ValidatedConfig", "carried_sections"]

T = TypeVar("T")


class ValidatedConfig(dict[str, Any]):
    """A read-only ``dict`` of a run's sections with ``sections``, their validated object."""

    __slots__ = ("sections",)

    def __init__(self, data: Mapping[str, Any], sections: Any) -> None:
        super().__init__(data)
        self.sections = sections

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "a validated run configuration is read-only (its validated sections describe it as it is); "
            "change a copy, dict(config), and validate that"
        )

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))  # a copy is a plain dict: validated again where it is loaded

    def __copy__(self) -> dict[str, Any]:
        return dict(self)


def carried_sections(run_config: Any, kind: type[T]) -> T | None:
    """The validated sections ``run_config`` carries when it is a :class:`ValidatedConfig` whose
    sections are a ``kind``; else ``None`` (validate it)."""
    sections = getattr(run_config, "sections", None) if isinstance(run_config, ValidatedConfig) else None
    return sections if isinstance(sections, kind) else None
