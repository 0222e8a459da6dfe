"""The five founding stories (docs/seed-stories.md): each cause is recognised
from a representative line and explained with the fixes the story names."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth import analyze, rulebook

RULES = rulebook.load()

#: story -> (cause, phrases its fix must mention) ...
FIXES: dict[str, list[tuple[str, list[str]]]] = {
    "1 permission denied in multi-node DDP": [
        (
            "permission_denied",
            ["writable for the job's user on every node", "rank 0 only", "per-rank paths", "real exception are logged", "MASTER_ADDR"],
        ),
    ],
    "2 DDP initialisation times out": [
        (
            "rendezvous_timeout",
            [
                "firewall",
                "same MASTER_ADDR/MASTER_PORT",
                "same PyTorch, NCCL and CUDA versions",
                "memory and CPU",
                "Only once the cause is known",
            ],
        ),
        ("master_unreachable", ["nc -zv", "firewall", "same MASTER_ADDR and MASTER_PORT", "only once connectivity is proven"]),
    ],
    "3 general DDP problems": [
        ("ddp_usage_error", ["DistributedSampler", "set_epoch", "no_sync", "find_unused_parameters=True` (slower; only when needed)"]),
        ("collective_timeout", ["DistributedSampler", "set_epoch"]),
        ("backend_unavailable", ["`nccl` for GPU training, `gloo` for CPU tensors"]),
        ("env_misconfigured", ["RANK must be unique", "WORLD_SIZE must equal"]),
    ],
    "4 NCCL communicator setup fails under SLURM": [
        ("nccl_wrong_interface", ["NCCL_SOCKET_IFNAME=ib0", "every node's stderr"]),
        ("hostname_resolution", ["IP address for MASTER_ADDR", "DNS"]),
        ("env_misconfigured", ["--export"]),
        ("version_mismatch", ["one container image", "CUDA/NCCL"]),
        ("peer_failure", ["every node's stderr"]),
    ],
    "5 DDP hangs acquiring a free port": [
        ("port_in_use", ["10000 + SLURM_JOB_ID % 50000", "one process choose the port", "exponential backoff"]),
        ("file_init_error", ["fresh init file per run"]),
        ("init_file_reused", ["fresh init file per run"]),
    ],
}

#: story -> (a representative excerpt, the category it must get)
LINES: dict[str, list[tuple[str, str]]] = {
    "1": [
        (
            "[rank1]: RuntimeError: [enforce fail at inline_container.cc:747] . open file failed with strerror: Permission denied\n",
            "permission_denied",
        ),
        ("[rank1]: PermissionError: [Errno 13] Permission denied: '/shared/ckpt/epoch_3.pt'\n", "permission_denied"),
    ],
    "2": [
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 "
            "(world_size=4, worker_count=2, timeout=0:30:00)\n",
            "rendezvous_timeout",
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (node01, 29500).\n",
            "master_unreachable",
        ),
    ],
    "3": [
        (
            "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates "
            "that your module has parameters that were not used in producing loss.\n",
            "ddp_usage_error",
        ),
        ("RuntimeError: Distributed package doesn't have NCCL built in\n", "backend_unavailable"),
        (
            "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK expected, but not set\n",
            "env_misconfigured",
        ),
    ],
    "4": [
        ("node02:4021:4021 [0] bootstrap.cc:1053 NCCL WARN Bootstrap : no socket interface found\n", "nccl_wrong_interface"),
        (
            "[W socket.cpp:663] [c10d] The IPv4 network addresses of (node-missing, 29500) cannot be retrieved (gai error: -2 - Name or service not known).\n",
            "hostname_resolution",
        ),
        ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version\n", "version_mismatch"),
    ],
    "5": [
        (
            "[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).\n",
            "port_in_use",
        ),
        (
            "Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 "
            "(world_size=2, worker_count=4, timeout=0:02:00)\n",
            "file_init_error",
        ),
    ],
}


@pytest.mark.parametrize(("story", "cause", "phrases"), [(s, c, p) for s, items in FIXES.items() for c, p in items])
def test_story_cause_is_explained_with_its_fixes(story: str, cause: str, phrases: list[str]) -> None:
    record = RULES.cause(cause)
    text = " ".join(record.fix)
    assert record.explanation, f"story {story}: {cause} has no explanation"
    missing = [p for p in phrases if p not in text]
    assert not missing, f"story {story}: the fix of {cause} does not mention {missing}"


@pytest.mark.parametrize(("story", "text", "category"), [(s, t, c) for s, items in LINES.items() for t, c in items])
def test_story_line_gets_its_category(story: str, text: str, category: str, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(text)
    assert analyze([log]).verdict.category == category, f"story {story}"
