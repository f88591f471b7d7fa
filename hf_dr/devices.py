"""Where a model runs: the one device resolution of hf-dr (``auto`` = the GPU when there is one),
used by encoding, precision and training alike."""

from __future__ import annotations

import torch

__all__ = ["resolve_device", "encode_device"]


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def encode_device(model, device: str | torch.device | None = None) -> torch.device | None:
    """The device ``model``'s ``encode_*`` calls run on: ``device`` when given; otherwise the device
    of its weights, except that weights on the CPU go to the GPU when there is one (Sentence
    Transformers' default: loading leaves every model on the CPU, and a user with a GPU expects it
    used). A model in training mode stays where its weights are (the Trainer placed it). ``None`` for
    a model without parameters."""
    if device is not None:
        return resolve_device(device)
    p = next(model.parameters(), None) if isinstance(model, torch.nn.Module) else None
    if p is None:
        return None
    if p.device.type == "cpu" and not model.training:
        return resolve_device(None)
    return p.device
