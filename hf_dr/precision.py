"""The one place where a precision request (``--dtype auto|fp32|bf16|fp16``) becomes a torch dtype,
an autocast context (encoding) or the Trainer's mixed-precision arguments (training).

* ``auto``: bf16 on a CUDA GPU that supports it, fp16 on an older one, fp32 on CPU / MPS;
* ``fp32`` (alias ``float32``): no autocast;
* ``bf16`` / ``fp16`` (aliases ``bfloat16`` / ``float16``): autocast to that dtype on any device,
  the CPU included (``torch.autocast("cpu", ...)``: how the GPU paths are tested and benchmarked on
  a machine without one). Weights stay float32; only the autocast ops run in 16 bits.

Training maps the same request onto ``TrainingArguments(bf16=True)`` / ``(fp16=True)``, i.e. the
Trainer's own mixed precision (accelerate's autocast around ``forward``; fp16 adds its gradient
scaler). accelerate autocasts bf16 on CPU (with ``use_cpu=True``) but ignores fp16 on CPU, so
``fp16`` training on CPU is refused rather than silently run in fp32.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported where a torch dtype is made, not here: parsing --dtype (every command's
# arguments) does not import it

__all__ = ["DTYPES", "canonical_dtype", "resolve_dtype", "dtype_name", "encoding_dtype", "autocast",
           "training_precision", "with_training_precision"]

#: the values of ``--dtype``
DTYPES = ("auto", "fp32", "bf16", "fp16")
_ALIASES = {"auto": "auto", "fp32": "fp32", "float32": "fp32", "float": "fp32", "bf16": "bf16", "bfloat16": "bf16",
            "fp16": "fp16", "float16": "fp16", "half": "fp16"}


def _torch_dtypes() -> dict:
    """``{"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}``."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _names() -> dict:
    """The inverse of :func:`_torch_dtypes`."""
    return {v: k for k, v in _torch_dtypes().items()}


def canonical_dtype(dtype: str | torch.dtype | None) -> str:
    """``auto`` / ``fp32`` / ``bf16`` / ``fp16`` for any accepted spelling (``None`` is ``auto``;
    ``float32``, ``bfloat16``, ``float16`` and torch dtypes too); ``ValueError`` otherwise."""
    if dtype is None:
        return "auto"
    if not isinstance(dtype, str) and type(dtype).__module__ == "torch":  # a torch.dtype
        names = _names()
        if dtype not in names:
            raise ValueError(f"unsupported dtype {dtype}: one of {', '.join(DTYPES)}")
        return names[dtype]
    name = str(dtype).strip().lower().removeprefix("torch.")
    if name not in _ALIASES:
        raise ValueError(f"unknown dtype {dtype!r}: one of {', '.join(DTYPES)}")
    return _ALIASES[name]


def _device(device) -> torch.device:
    import torch

    from .devices import resolve_device

    return device if isinstance(device, torch.device) else resolve_device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> torch.dtype:
    """The compute dtype of ``dtype`` on ``device`` (``None`` / ``"auto"``: the device this process
    would use): ``auto`` is bf16 on a CUDA GPU that supports it, fp16 on another CUDA GPU, float32
    elsewhere; an explicit ``bf16`` / ``fp16`` is that dtype on every device."""
    import torch

    name = canonical_dtype(dtype)
    if name != "auto":
        return _torch_dtypes()[name]
    dev = _device(device)
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def dtype_name(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> str:
    """``fp32`` / ``bf16`` / ``fp16``: what ``dtype`` resolves to on ``device`` (recorded in metrics)."""
    return _names()[resolve_dtype(dtype, device)]


def encoding_dtype(model, dtype: str | torch.dtype | None = None, device=None) -> torch.dtype:
    """The dtype ``model``'s ``encode_*`` calls compute in: ``dtype`` (default: the model's own
    ``encode_dtype``) on ``device`` (default: the device the encode loop puts it on, ``encode_device``), as the encode loop
    resolves it. Recorded in embeddings manifests, metrics and the pseudo-label cache keys."""
    if dtype is None:
        dtype = getattr(model, "encode_dtype", None) or "auto"
    if device is None:
        from .devices import encode_device

        device = encode_device(model)
    return resolve_dtype(dtype, device)


def autocast(device: str | torch.device | None, dtype: str | torch.dtype | None):
    """The autocast context of ``dtype`` on ``device`` (a no-op for float32)."""
    import torch

    dev = _device(device)
    target = resolve_dtype(dtype, dev)
    if target == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=dev.type, dtype=target)


def training_precision(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> dict:
    """``TrainingArguments`` keyword arguments for ``dtype`` on the training device (default: the one
    the Trainer picks): ``{}`` for fp32, ``{"bf16": True}`` / ``{"fp16": True}`` on a GPU,
    ``{"bf16": True, "use_cpu": True}`` on CPU (transformers refuses bf16 on a machine without a bf16
    GPU unless ``use_cpu``; accelerate then autocasts on CPU). fp16 on CPU: ``ValueError``
    (accelerate would silently train in fp32 — no CPU autocast, no gradient scaler)."""
    import torch

    dev = _device(device)
    target = resolve_dtype(dtype, dev)
    if target == torch.float32:
        return {}
    if target == torch.bfloat16:
        return {"bf16": True, **({"use_cpu": True} if dev.type == "cpu" else {})}
    if dev.type == "cpu":
        raise ValueError("--dtype fp16 trains on a GPU only (the Trainer does not autocast fp16 on CPU); "
                         "use --dtype bf16 or fp32 on CPU")
    return {"fp16": True}


def with_training_precision(args, dtype: str | torch.dtype | None):
    """``args`` (a ``TrainingArguments``) rebuilt with the mixed precision of ``dtype``
    (:func:`training_precision`; ``__post_init__`` runs again, so the Trainer sees a consistent
    object). ``auto`` leaves a ``--bf16`` / ``--fp16`` given to the Trainer's own parser as it is."""
    import dataclasses

    if canonical_dtype(dtype) == "auto" and (args.bf16 or args.fp16):
        return args
    device = "cpu" if getattr(args, "use_cpu", False) else None
    kwargs = {"bf16": False, "fp16": False, **training_precision(dtype, device)}
    if all(getattr(args, k) == v for k, v in kwargs.items()):
        return args
    return dataclasses.replace(args, **kwargs)
