"""logsleuth: why did my distributed PyTorch job die?

Public API: :func:`analyze` returns a :class:`Report`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import analyze  # noqa: E402
from .report.model import Report  # noqa: E402

__all__ = ["Report", "__version__", "analyze"]
