"""Causes that explain the lead's symptoms and go first: a disagreement between nodes, a GPU the
driver reports as faulty, a file:// init file (which symptoms each explains is ``symptom_of`` in
rules/causes.toml)."""

from __future__ import annotations

import polars as pl

from logsleuth.rulebook import RuleSet

from . import consistency, hangs
from .candidates import STRONG, Candidate, _first_failure, _own_time
from .exits import IS_FAILURE

#: A stalled collective with a SeqNum above this shows the job had been running:
#: set-up problems (versions, interfaces) are then unlikely to be the cause.
PROGRESS_SEQ = 2


def _with_findings(
    cands: list[Candidate],
    findings: list[consistency.Finding],
    hang: hangs.Hang | None,
    ev: pl.DataFrame,
    rules: RuleSet,
    signalled: bool = False,
) -> list[Candidate]:
    """Add disagreements between nodes as candidates; one leads when it explains a symptom-only
    verdict or a failure no rule explains (``signalled``: some line shows the job failed, see
    failure_signals, e.g. a log that ends while processes are still joining)."""
    if not findings:
        return cands
    lead = cands[0] if cands else None
    progressed = hang is not None and hang.seq is not None and hang.seq > PROGRESS_SEQ
    named_culprit = lead is not None and lead.role == "hang" and bool(hang and hang.hung)
    failed = signalled or bool(ev.filter(IS_FAILURE).height) or lead is not None or any(f.shows_failure for f in findings)
    extra: list[Candidate] = []
    promoted: Candidate | None = None
    absorbed: Candidate | None = None
    for f in sorted(findings, key=lambda f: (-f.corroborated, -f.weight)):
        cand = _finding_candidate(f, ev, rules)
        # a rule already names this category from some rank's line; the comparison
        # across nodes says which node is the odd one, so it names the culprit
        agrees = lead is not None and lead.category == cand.category
        explains = lead is None or agrees or lead.cause == "unknown" or lead.category in rules.symptoms(f.cause)
        strong = f.corroborated or agrees or (f.weight >= 0.7 and not progressed and not named_culprit)
        if failed and promoted is None and explains and strong:
            promoted = cand
            absorbed = lead if agrees else None
        elif promoted is not None and f.cause == promoted.cause and set(f.nodes) <= set(promoted.nodes or f.nodes):
            promoted.eids += [e for e in f.eids if e not in promoted.eids]  # the same disagreement, seen another way
        elif f.weight >= 0.6:  # weaker findings stay suspect nodes, not candidates
            extra.append(cand)
    if not failed:
        return cands
    if promoted is not None and absorbed is not None:
        # the rule's lines come after the comparison's own evidence (the odd node's lines)
        promoted.eids += [e for e in absorbed.eids if e not in promoted.eids]
        promoted.rules = sorted(set(promoted.rules) | set(absorbed.rules))
        promoted.weight = max(promoted.weight, absorbed.weight)
        cands = [c for c in cands if c is not absorbed]
    head = [promoted] if promoted else []
    return head + cands + extra


def _hardware_first(cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet, notes: list[str]) -> list[Candidate]:
    """A GPU the driver reports as faulty (Xid, ECC, fallen off the bus, needing a reset) explains
    the CUDA errors, crashes, stalls and unusable devices the programs saw (the causes that are a
    ``symptom_of`` gpu_hardware_fault), whichever file happens to come first."""
    symptoms = rules.symptoms("gpu_hardware_fault")
    fault = next((c for c in cands if c.category == "gpu_hardware_fault" and c.role == "primary" and c.weight >= STRONG), None)
    if fault is None or (cands[0] is not fault and cands[0].category not in symptoms):
        return cands
    symptom = next((c for c in cands if c.category in symptoms), None)
    if cands[0] is not fault:
        notes.append(f"the GPU fault explains the {cands[0].category} the processes reported")
    if symptom is not None and _first_failure(ev, fault).get("rank") is None:
        fault.first = _first_failure(ev, symptom)  # a kernel line names a PCI address; the rank that saw it is the culprit
    return [fault] + [c for c in cands if c is not fault]


def _init_file_first(cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet, notes: list[str]) -> list[Candidate]:
    """A job that meets through a file:// init file and fails to reach its peers at set-up:
    the init file (stale, or not shared by every node) explains what the ranks saw: connects to dead
    addresses, peers that close on them, waits that never end (a ``symptom_of`` file_init_error)."""
    if not cands or cands[0].category not in rules.symptoms("file_init_error"):
        return cands
    uses = ev.filter((pl.col("role") == "context") & (pl.col("cause") == "file_init_error")).sort("pos")
    lead = cands[0]
    shown = ev.filter(pl.col("eid").is_in(lead.eids))
    at_setup = shown.select(pl.col("at_setup").any()).item()
    if uses.is_empty() or not at_setup:
        return cands
    notes.append(f"the job meets through a file:// init file: it explains the {lead.category} the ranks reported at set-up")
    promoted = Candidate(
        cause="file_init_error",
        category=rules.category("file_init_error"),
        role="primary",
        weight=STRONG,
        confidence=0.0,
        eids=[*lead.eids, int(uses.get_column("eid")[0])],
        rules=sorted({*lead.rules, *uses.get_column("rule").drop_nulls().to_list()}),
        ranks=list(lead.ranks),
        nodes=list(lead.nodes),
        summary=(
            f"The ranks met through a file:// init file and then could not reach each other ({lead.category}):"
            " an init file left by an earlier run, or one not shared by every node, hands out dead or foreign addresses"
        ),
        first=lead.first or _first_failure(ev, lead),
    )
    return [promoted, *cands]


def _finding_candidate(f: consistency.Finding, ev: pl.DataFrame, rules: RuleSet) -> Candidate:
    """A disagreement as a candidate; its first failure is the odd rank when there is one,
    else the first failing rank on the odd node."""
    on_node = ev.filter(pl.col("node").is_in(f.nodes) & pl.col("rank").is_not_null())
    failing = on_node.filter(pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).sort("pos")
    rank: int | None
    node: str | None
    when: str | None
    if len(f.ranks) == 1:
        rank = f.ranks[0]
        node = f.nodes[0] if len(f.nodes) == 1 else None
        mine = failing.filter(pl.col("rank") == rank)
        when = _own_time(ev, int(mine.get_column("eid")[0])) if mine.height else None
    elif failing.height:
        row = failing.row(0, named=True)
        rank, node, when = row["rank"], row["node"], _own_time(ev, int(row["eid"]))
    else:
        rank = f.ranks[0] if f.ranks else None
        node, when = (f.nodes[0] if f.nodes else None), None
    return Candidate(
        cause=f.cause,
        category=rules.category(f.cause),
        role="consistency",
        weight=f.weight,
        confidence=0.0,
        eids=list(f.eids),
        rules=[],
        ranks=list(f.ranks),
        nodes=list(f.nodes),
        summary=f.summary,
        first={"rank": rank, "node": node, "time": when},
    )
