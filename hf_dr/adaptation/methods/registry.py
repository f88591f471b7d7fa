"""The registry of adaptation methods (``hf-dr adapt --method`` offers every registered one, and a
flag for each of their options)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from ..config import AdaptConfig, AdaptError
from .base import Method

__all__ = ["register_method", "unregister_method", "get_method", "registered_methods", "METHODS",
           "METHOD_DEFAULTS", "option_fields", "option_owner"]

_REGISTRY: dict[str, Method] = {}


def register_method(method, *, replace: bool = False):
    """Register a :class:`Method` (a subclass, instantiated, or an instance) under its ``name``;
    returns its argument (a class decorator). A name already taken is refused unless ``replace``."""
    instance = method() if isinstance(method, type) else method
    if not isinstance(instance, Method) or not instance.name:
        raise TypeError(f"register_method takes a Method with a name (got {method!r})")
    if instance.name in _REGISTRY and not replace:
        raise ValueError(f"an adaptation method named {instance.name!r} is already registered")
    common = {f.name for f in dataclasses.fields(AdaptConfig)}
    for f in option_fields(instance):
        owner = option_owner(f.name)
        if f.name in common or (owner is not None and owner.name != instance.name):
            raise ValueError(f"{instance.name}: its option {f.name!r} is already "
                             f"{'a field of AdaptConfig' if f.name in common else f'an option of {owner.name}'}")
    _REGISTRY[instance.name] = instance
    return method


def option_fields(method: Method) -> tuple[dataclasses.Field, ...]:
    """The fields of ``method``'s options (:attr:`Method.Options`; none without)."""
    return dataclasses.fields(method.Options) if method.Options is not None else ()


def option_owner(name: str) -> Method | None:
    """The registered method that has the option ``name``, or None."""
    return next((m for m in _REGISTRY.values() if any(f.name == name for f in option_fields(m))), None)


def unregister_method(name: str) -> None:
    """Remove the method ``name`` from the registry (no error when absent)."""
    _REGISTRY.pop(name, None)


def get_method(name: str) -> Method:
    """The registered method ``name``; an unknown one is refused (:class:`AdaptError`)."""
    if name not in _REGISTRY:
        raise AdaptError(f"unknown method {name!r}: one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def registered_methods() -> Iterator[Method]:
    """The registered methods, in the order of registration (the built-in ones first)."""
    return iter(list(_REGISTRY.values()))


class _Registered(Mapping):
    """A live view ``{method name: one attribute of the method}`` of the registry."""

    def __init__(self, attribute: str):
        self._attribute = attribute

    def __getitem__(self, name: str):
        return getattr(_REGISTRY[name], self._attribute)

    def __iter__(self):
        return iter(list(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(dict(self))


#: method -> what it trains with (a live view of the registry)
METHODS: Mapping[str, str] = _Registered("description")
#: method -> the configuration of its measured row (``python benchmarks/adapt.py``, which runs
#: ``hf-dr adapt`` with no tuning flag; a test checks that the two agree); a live view
METHOD_DEFAULTS: Mapping[str, Mapping] = _Registered("defaults")

