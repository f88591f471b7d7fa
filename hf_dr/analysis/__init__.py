"""Analyses of retrieval behaviour (RSJ weights for SPLADE-CAI, BERM's Table 5 diagnostics)."""

from .berm_diagnostics import berm_diagnostics, plot_berm_diagnostics
from .rsj import delta_rsj, plot_delta_rsj, rsj_weight

__all__ = ["rsj_weight", "delta_rsj", "plot_delta_rsj", "berm_diagnostics", "plot_berm_diagnostics"]
