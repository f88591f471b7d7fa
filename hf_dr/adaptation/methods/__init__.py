"""Adaptation methods of ``hf-dr adapt``: one module each, behind one protocol
(:class:`~.base.Method`), in one registry (:func:`~.registry.register_method`). A new method is a
:class:`~.base.Method` (or a :class:`~.base.TripletMethod`: one objective on the pseudo-label
triplets) registered from anywhere, a test file included; ``--method`` offers every registered one.
"""

from .base import DevSet, Method, Prepared, TrainInputs, TrainingSetup, TripletMethod, option
from .registry import (METHOD_DEFAULTS, METHODS, get_method, option_fields, option_owner, register_method,
                       registered_methods, unregister_method)
# the built-in methods, registered in this order (the order of --method's choices)
from . import dodress, pseudo_margin_mse, cai, berm, ddr  # noqa: E402,F401  isort: skip

__all__ = ["Method", "TripletMethod", "TrainingSetup", "TrainInputs", "DevSet", "Prepared", "option",
           "register_method", "unregister_method", "get_method", "registered_methods", "METHODS", "METHOD_DEFAULTS",
           "option_fields", "option_owner"]
