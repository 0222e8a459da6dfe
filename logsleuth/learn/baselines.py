"""What people do without logsleuth, as baselines the evaluation shows next to it.

- **exit code**: read the job's last exit status the way folklore does (137/-9 "OOM",
  139/-11 "segfault", -6 "NCCL timeout abort", 143/-15 "cancelled").
- **last exception**: take the type of the last exception printed and map it to a cause.
- **first keyword**: ``grep`` the log for one well-known phrase per cause and take the
  first line that has any.
- **tf-idf + logistic regression** (scikit-learn) on the same words the classifier sees,
  trained on the same split: the standard text-classification baseline for the torch model.

The tables are data a person would write from experience; they are deliberately simple.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from logsleuth.events import AGENT_WORKER_FAILED, CHILD_FAILED, EXCEPTION, SRUN_EXIT, TRACEBACK

from .corpus import Observation

#: exit status (or signal) -> the cause people read into it
EXIT_FOLKLORE: dict[str, str] = {
    "SIGKILL": "host_oom",
    "SIGSEGV": "crash_signal",
    "SIGABRT": "collective_timeout",
    "SIGBUS": "shm_exhausted",
    "SIGILL": "crash_signal",
    "SIGTERM": "slurm_cancelled",
    "137": "host_oom",
    "139": "crash_signal",
    "134": "collective_timeout",
    "135": "shm_exhausted",
    "143": "slurm_cancelled",
}
_EXIT_KINDS = (SRUN_EXIT, CHILD_FAILED, AGENT_WORKER_FAILED)

#: exception type (last dotted component) -> cause
EXCEPTION_FOLKLORE: dict[str, str] = {
    "OutOfMemoryError": "cuda_oom",
    "ModuleNotFoundError": "import_error",
    "ImportError": "import_error",
    "PermissionError": "permission_denied",
    "DistNetworkError": "master_unreachable",
    "TimeoutError": "master_unreachable",
    "ConnectionRefusedError": "master_unreachable",
    "gaierror": "hostname_resolution",
    "DistStoreError": "rendezvous_timeout",
    "RendezvousTimeoutError": "rendezvous_timeout",
    "RendezvousConnectionError": "master_unreachable",
    "DistBackendError": "peer_failure",
    "ncclRemoteError": "peer_failure",
    "ncclSystemError": "nccl_wrong_interface",
    "ncclInternalError": "nccl_wrong_interface",
    "ncclInvalidUsage": "device_misassignment",
    "ncclUnhandledCudaError": "cuda_error",
    "ChildFailedError": "unknown",
    "ProcessExitedException": "crash_signal",
    "SignalException": "slurm_cancelled",
    "OSError": "disk_full",
}

#: one phrase per cause, searched in this order on every line
KEYWORDS: tuple[tuple[str, str], ...] = (
    ("out of memory", "cuda_oom"),
    ("Address already in use", "port_in_use"),
    ("Connection refused", "master_unreachable"),
    ("Name or service not known", "hostname_resolution"),
    ("store based barrier", "rendezvous_timeout"),
    ("expected, but not set", "env_misconfigured"),
    ("socket interface", "nccl_wrong_interface"),
    ("NET/IB", "nccl_ib_error"),
    ("driver version is insufficient", "version_mismatch"),
    ("Watchdog caught collective operation timeout", "collective_timeout"),
    ("mismatch between collectives", "collective_mismatch"),
    ("Connection reset by peer", "peer_failure"),
    ("oom-kill", "host_oom"),
    ("oom_kill", "host_oom"),
    ("/dev/shm", "shm_exhausted"),
    ("Permission denied", "permission_denied"),
    ("No space left on device", "disk_full"),
    ("invalid device ordinal", "device_misassignment"),
    ("ECC", "gpu_hardware_fault"),
    ("illegal memory access", "cuda_error"),
    ("find_unused_parameters", "ddp_usage_error"),
    ("built in", "backend_unavailable"),
    ("file://", "file_init_error"),
    ("TIME LIMIT", "slurm_time_limit"),
    ("NODE FAILURE", "slurm_node_failure"),
    ("CANCELLED", "slurm_cancelled"),
    ("Segmentation fault", "crash_signal"),
    ("ModuleNotFoundError", "import_error"),
    ("Traceback", "user_code_error"),
)


def _ordered(events: pl.DataFrame) -> pl.DataFrame:
    return events.sort("file", "line")


def exit_code(obs: Observation) -> str:
    """The cause folklore reads from the last exit status in the logs (none without one)."""
    ex = _ordered(obs.events).filter(
        pl.col("kind").is_in(_EXIT_KINDS) & (pl.col("exit_code").is_not_null() | pl.col("signal").is_not_null())
    )
    if ex.is_empty():
        return "none"
    last = ex.row(ex.height - 1, named=True)
    for key in (last["signal"], str(last["exit_code"]) if last["exit_code"] is not None else None):
        if key in EXIT_FOLKLORE:
            return EXIT_FOLKLORE[key]
    return "user_code_error" if last["exit_code"] not in (None, 0) else "none"


def last_exception(obs: Observation) -> str:
    """The cause of the last exception type printed (user_code_error for other types; none without one)."""
    ex = _ordered(obs.events).filter(pl.col("kind").is_in([TRACEBACK, EXCEPTION]) & pl.col("exc_type").is_not_null())
    if ex.is_empty():
        return "none"
    name = str(ex.get_column("exc_type")[-1]).rsplit(".", 1)[-1]
    return EXCEPTION_FOLKLORE.get(name, "user_code_error")


def first_keyword(obs: Observation) -> str:
    """The cause of the first kept line that contains one of the well-known phrases (none if no line does)."""
    raw = _ordered(obs.events).get_column("raw").fill_null("")
    phrases = [k for k, _ in KEYWORDS]
    hit = raw.str.contains_any(phrases)
    if not hit.any():
        return "none"
    line = raw.filter(hit)[0]
    return next(cause for phrase, cause in KEYWORDS if phrase in line)


def words(obs: Observation) -> list[str]:
    """The classifier's feature strings of a job (unhashed), the input of the scikit-learn baseline."""
    return sorted(set(obs.feats.get_column("feat").to_list()))


def tfidf_logreg(train: Sequence[Observation], test: Sequence[Observation], seed: int = 0) -> list[str]:
    """Fit TF-IDF + logistic regression on ``train`` and predict ``test`` (scikit-learn)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(analyzer=lambda doc: doc, binary=True, sublinear_tf=True, min_df=1)
    x = vec.fit_transform([words(o) for o in train])
    clf = LogisticRegression(C=10.0, max_iter=2000, class_weight="balanced", random_state=seed)
    clf.fit(x, [o.case.label for o in train])
    return [str(p) for p in clf.predict(vec.transform([words(o) for o in test]))]
