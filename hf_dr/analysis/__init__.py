"""Analyses of retrieval behaviour (RSJ weights for SPLADE-CAI)."""

from .rsj import delta_rsj, plot_delta_rsj, rsj_weight

__all__ = ["rsj_weight", "delta_rsj", "plot_delta_rsj"]
