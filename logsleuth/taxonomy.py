"""The root-cause ids of the contract (docs/taxonomy.md). Never rename one.

Finer causes live in rules/causes.toml and name one of these as their parent.
"""

from __future__ import annotations

TAXONOMY: dict[str, str] = {
    "port_in_use": "the rendezvous/store port (MASTER_PORT) is already bound by another process or an earlier job",
    "master_unreachable": "ranks cannot connect to MASTER_ADDR:MASTER_PORT: wrong address, master not started, firewall",
    "hostname_resolution": "a host name (MASTER_ADDR, a peer) does not resolve",
    "rendezvous_timeout": "the process group never forms: some ranks never arrive",
    "env_misconfigured": "required launcher variables missing or inconsistent (RANK, WORLD_SIZE, MASTER_ADDR, LOCAL_RANK)",
    "nccl_wrong_interface": "NCCL/Gloo picked a wrong or unusable network interface, or the named interface does not exist",
    "nccl_ib_error": "InfiniBand / RoCE transport failure",
    "version_mismatch": "NCCL, CUDA, PyTorch or driver versions differ across ranks/nodes, or the runtime is too new for the driver",
    "collective_timeout": "a collective hung until the watchdog fired, with no earlier failure on any rank explaining it",
    "collective_mismatch": "ranks issued different collectives, shapes, dtypes or counts (desync)",
    "peer_failure": "this rank failed only because another rank died first, and that first failure is not in the logs",
    "cuda_oom": "GPU memory exhausted",
    "host_oom": "host memory exhausted: OOM killer, cgroup limit",
    "shm_exhausted": "/dev/shm too small for NCCL or DataLoader workers",
    "permission_denied": "a process cannot read/write a path (checkpoint, log, dataset, init file)",
    "disk_full": "a filesystem is full or over quota",
    "device_misassignment": "processes mapped to GPUs wrongly, or no GPU visible",
    "gpu_hardware_fault": "a GPU or its memory failed",
    "cuda_error": "a CUDA kernel/runtime error in user or library code",
    "ddp_usage_error": "DistributedDataParallel used wrongly",
    "backend_unavailable": "the requested backend is not built or not usable here",
    "file_init_error": "file:// init method problems: stale or shared init file, unreachable path",
    "slurm_time_limit": "SLURM killed the job at its time limit",
    "slurm_node_failure": "SLURM lost a node or preempted/requeued the job",
    "slurm_cancelled": "the job was cancelled by a user or administrator",
    "crash_signal": "a rank died of a signal with no better explanation (segfault, abort, illegal instruction)",
    "user_code_error": "an ordinary exception raised by the training script itself",
    "import_error": "the software environment is broken or differs across nodes: modules or shared libraries missing",
    "unknown": "the job failed, but nothing supports a verdict",
    "none": "no failure in the inputs: the job ran to completion",
}

#: Verdicts that are not causes of a failure.
NON_CAUSES = frozenset({"unknown", "none"})
