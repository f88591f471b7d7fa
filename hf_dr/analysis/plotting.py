"""The one way analyses of hf-dr write a matplotlib figure to disk."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, path, dpi: int = 120) -> Path:
    """Lay out ``fig``, write it to ``path`` (parent folders created), close it, return the path."""
    from ..extras import require

    plt = require("matplotlib.pyplot")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
