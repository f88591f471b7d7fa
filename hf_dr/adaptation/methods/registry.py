"""The registry of adaptation methods (``hf-dr adapt --method`` offers every registered one), and a
configuration resolved by its method's defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from ..config import CONFIG_FIELDS, FALLBACKS, AdaptConfig, AdaptError, eval_steps, generates_queries
from .base import Method

__all__ = ["register_method", "unregister_method", "get_method", "registered_methods", "METHODS",
           "METHOD_DEFAULTS", "with_method_defaults", "resolved_config"]

_REGISTRY: dict[str, Method] = {}


def register_method(method, *, replace: bool = False):
    """Register a :class:`Method` (a subclass, instantiated, or an instance) under its ``name``;
    returns its argument (a class decorator). A name already taken is refused unless ``replace``."""
    instance = method() if isinstance(method, type) else method
    if not isinstance(instance, Method) or not instance.name:
        raise TypeError(f"register_method takes a Method with a name (got {method!r})")
    if instance.name in _REGISTRY and not replace:
        raise ValueError(f"an adaptation method named {instance.name!r} is already registered")
    _REGISTRY[instance.name] = instance
    return method


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


def with_method_defaults(cfg: AdaptConfig) -> AdaptConfig:
    """``cfg`` with every field left at ``None`` set to its method's default (:attr:`Method.defaults`,
    with :attr:`Method.generated_defaults` over them when the training queries are generated, then
    :data:`~hf_dr.adaptation.config.FALLBACKS`), and ``eval_steps`` resolved
    (:func:`~hf_dr.adaptation.config.eval_steps`)."""
    method = _REGISTRY.get(cfg.method)
    own = {**FALLBACKS, **(method.defaults if method else {})}
    if method is not None and method.generated_defaults and generates_queries(cfg):
        own.update(method.generated_defaults)
    filled = {k: v for k, v in own.items() if getattr(cfg, k) is None}
    cfg = dataclasses.replace(cfg, **filled)
    if cfg.eval_steps is None and cfg.max_steps and cfg.max_steps > 0:
        cfg = dataclasses.replace(cfg, eval_steps=eval_steps(cfg))
    return cfg


def resolved_config(cfg: AdaptConfig) -> dict:
    """The fields of :data:`~hf_dr.adaptation.config.CONFIG_FIELDS` after :func:`with_method_defaults`
    (what metrics.json records)."""
    cfg = with_method_defaults(cfg)
    # the training queries when not the folder's own (auto: the keys of the rows measured before --queries fill)
    return {**{k: getattr(cfg, k) for k in CONFIG_FIELDS},
            **({"queries": cfg.queries} if cfg.queries != "auto" else {})}
