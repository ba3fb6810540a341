"""The shape of the Kubernetes backend (a house rule, checked on the classes): no name is
defined in two of its classes, so no method overrides another and falls back with
``super()`` — which one runs is never a question of the method resolution order. What a
slot whose objects come from a source does differently is one part the backend holds
(:class:`~shipway.backends.kubernetes.source_slot.SourceSlot`), called where it differs."""

from __future__ import annotations

from shipway.backends.kubernetes.backend import KubernetesBackend
from shipway.backends.kubernetes.source_slot import SourceSlot


def _defined_twice(cls: type) -> dict[str, list[str]]:
    """Each attribute or method (``object``'s dunders aside) that more than one of the
    class's own shipway classes defines, with those classes."""
    where: dict[str, list[str]] = {}
    for part in cls.__mro__:
        if not part.__module__.startswith("shipway."):
            continue
        for name in vars(part):
            if not (name.startswith("__") and name.endswith("__")):
                where.setdefault(name, []).append(f"{part.__module__}.{part.__qualname__}")
    return {name: parts for name, parts in sorted(where.items()) if len(parts) > 1}


def test_no_name_is_defined_in_two_classes_of_the_backend() -> None:
    assert _defined_twice(KubernetesBackend) == {}


def test_no_name_is_defined_in_two_classes_of_the_source_part() -> None:
    assert _defined_twice(SourceSlot) == {}


def test_the_source_part_is_held_not_inherited() -> None:
    backend_classes = set(KubernetesBackend.__mro__)
    assert not backend_classes & set(SourceSlot.__mro__) - {object}
