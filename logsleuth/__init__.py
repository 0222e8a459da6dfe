"""logsleuth: why did my distributed PyTorch job die?

Public API: :func:`analyze` returns a :class:`Report`; :func:`analyze_jobs` one per SLURM job.

Both are loaded on first use (PEP 562), so that ``import logsleuth`` and the
commands that need no analysis, such as the epilog deciding to skip a job
that ended well, do not pay for importing polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .api import analyze, analyze_jobs
    from .report.model import Report

__all__ = ["Report", "__version__", "analyze", "analyze_jobs"]


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from .api import analyze

        return analyze
    if name == "analyze_jobs":
        from .api import analyze_jobs

        return analyze_jobs
    if name == "Report":
        from .report.model import Report

        return Report
    raise AttributeError(f"module 'logsleuth' has no attribute {name!r}")
