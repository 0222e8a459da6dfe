"""Across ranks: identity, timeline, culprit vs victims, hangs and consistency -> ranked candidates.

``resolve_identity`` runs right after parsing (so rules see ranks and nodes);
``reason`` runs after matching and returns the conclusions the report shows.
"""

from __future__ import annotations

from logsleuth.parse.identity import rank_table, resolve_identity

from .verdict import EVIDENCE_LIMIT, IS_FAILURE, STRONG, Candidate, RankState, Reasoning, Suspect, failure_signals, reason

__all__ = [
    "EVIDENCE_LIMIT",
    "IS_FAILURE",
    "failure_signals",
    "STRONG",
    "Candidate",
    "RankState",
    "Reasoning",
    "Suspect",
    "rank_table",
    "reason",
    "resolve_identity",
]
