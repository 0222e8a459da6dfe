"""Failure scenarios, one function per (label, wording family).

A wording family ("variant") is one way a cause reaches the logs: a PyTorch
release's message, an NCCL release's WARN, a wrapper framework's re-raise. Cases
of one variant share a corpus group, so an evaluation that holds a group out
measures a wording the model never saw. Strings come from the catalogue in
docs/message-catalogue.md and docs/log-formats.md.
"""

from __future__ import annotations

from collections.abc import Callable

from casegen_job import (
    Job,
    Proc,
    agent_log,
    cpp_log,
    dist_exc,
    excepthook,
    framework_frames,
    init_frames,
    nccl_error_text,
    nccl_info,
    nccl_warn,
    pg_tag,
    slurmstepd,
    sp,
    srun_exit,
    traceback_lines,
    user_frames,
)
from casegen_story import Story, Truth, watchdog_block

Scenario = Callable[[Job, Story], Truth]
#: label -> variant -> (scenario, job attributes the variant needs)
VARIANTS: dict[str, dict[str, tuple[Scenario, dict[str, object]]]] = {}


def variant(label: str, name: str, **force: object) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        VARIANTS.setdefault(label, {})[name] = (fn, force)
        return fn

    return register


def _train_frames(job: Job) -> list[tuple[str, int, str, str]]:
    """The script's frames down into the training step (through the wrapper framework, if any)."""
    framework = framework_frames(job)
    return user_frames(job, depth=2 if framework else 3) + framework


def _hex(job: Job, bits: int = 44) -> str:
    return f"0x{job.rng.getrandbits(bits):x}"


def _gib(job: Job, lo: float, hi: float) -> str:
    return f"{job.rng.uniform(lo, hi):.2f} GiB"


def _mib(job: Job, lo: int, hi: int) -> str:
    return f"{job.rng.randint(lo, hi)}.00 MiB"


def _cuda_hint(job: Job) -> str:
    """The hint lines PyTorch appends to a CUDA error (wording per release)."""
    comma = "API call, so the stacktrace" if job.at_least("2.1") else "API call,so the stacktrace"
    lines = [f"CUDA kernel errors might be asynchronously reported at some other {comma} below might be incorrect."]
    lines.append("For debugging consider passing CUDA_LAUNCH_BLOCKING=1" + ("" if job.at_least("2.4") else "."))
    if job.at_least("2.1"):
        lines.append("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    return "\n".join(lines)


def _store_fail(job: Job, s: Story, p: Proc, exc: str, pre: list[str] | None = None, **kw: object) -> Truth:
    """A rank failing inside init_process_group while creating or joining the TCPStore."""
    frames = user_frames(job) + init_frames(job)
    return s.fail(p, (pre or []) + s.exception(p, frames, exc), **kw)  # type: ignore[arg-type]


def _socket_warn(job: Job, p: Proc, t: float, level: str, msg: str) -> str:
    src = f"socket.cpp:{job.rng.choice((401, 426, 435, 462, 558, 601, 697, 767, 793))}"
    return cpp_log(job, p, t, level, src) + "[c10d] " + msg


# =====================================================================================
# port_in_use
# =====================================================================================


def _bind_text(job: Job, port: int) -> tuple[list[str], str]:
    """Warnings and exception text of a store that cannot bind (socket.cpp or libuv wording)."""
    if not job.at_least("1.13"):
        return [], "RuntimeError: Address already in use"
    if job.at_least("2.4") and job.rng.random() < 0.6:
        tail = f"port: {port}, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use" if job.at_least("2.9") else "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"
        return [], f"{dist_exc(job, 'network')}: The server socket has failed to listen on any local network address. {tail}"
    v6 = f"The server socket has failed to listen on [::]:{port} (errno: 98 - Address already in use)."
    v4 = f"The server socket has failed to bind to 0.0.0.0:{port} (errno: 98 - Address already in use)."
    if job.rng.random() < 0.3:
        v4 = "The server socket has failed to bind to ?UNKNOWN? (errno: 98 - Address already in use)."
    warns = [v6, v4]
    return warns, f"{dist_exc(job, 'network')}: The server socket has failed to listen on any local network address. {v6} {v4}"


@variant("port_in_use", "env-init-rank0")
def port_env_init(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    warns, exc = _bind_text(job, job.master_port)
    pre = [_socket_warn(job, p, s.t, "W", w) for w in warns]
    if warns:
        pre.append(_socket_warn(job, p, s.t, "E", "The server socket has failed to listen on any local network address."))
    return _store_fail(job, s, p, exc, pre, victims="none", dt=2)


@variant("port_in_use", "torchrun-agent-store", launcher="torchrun")
def port_agent(job: Job, s: Story) -> Truth:
    """torchrun's own rendezvous store cannot bind: the agent fails before any worker starts."""
    r = job.rng
    warns, exc = _bind_text(job, job.master_port)
    p = job.proc(0)
    lines = [_socket_warn(job, p, 1.0, "W", w) for w in warns]
    if warns:
        lines.append(_socket_warn(job, p, 1.0, "E", "The server socket has failed to listen on any local network address."))
    frames = [
        (job.python_bin.replace("/python", "/torchrun"), 8, "<module>", "sys.exit(main())"),
        (sp(job, "torch/distributed/elastic/multiprocessing/errors/__init__.py"), r.choice((346, 355)), "wrapper", "return f(*args, **kwargs)"),
        (sp(job, "torch/distributed/run.py"), r.choice((794, 806, 892)), "main", "run(args)"),
        (sp(job, "torch/distributed/run.py"), r.choice((785, 797, 883)), "run", "elastic_launch("),
        (sp(job, "torch/distributed/launcher/api.py"), r.choice((241, 255)), "launch_agent", "result = agent.run()"),
        (sp(job, "torch/distributed/elastic/agent/server/api.py"), r.choice((709, 723, 867)), "run", "result = self._invoke_run(role)"),
        (sp(job, "torch/distributed/elastic/agent/server/api.py"), r.choice((844, 858, 1002)), "_invoke_run", "self._initialize_workers(self._worker_group)"),
        (sp(job, "torch/distributed/elastic/agent/server/api.py"), r.choice((548, 652, 678)), "_rendezvous", "rdzv_info = spec.rdzv_handler.next_rendezvous()"),
        (sp(job, "torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py"), r.choice((55, 67)), "next_rendezvous", "self._store = TCPStore(  # type: ignore[call-arg]"),
    ]
    lines += traceback_lines(job, frames, exc)
    for ni in range(len(job.nodes)):
        job.out(f"agent:{ni}", lines if ni == 0 else [], 1.0, "cause")
    if job.slurm:
        job.out("slurm", [srun_exit(job, 0, [0], "Exited with exit code 1")], 3.0, "summary")
    return Truth(None, job.master)


@variant("port_in_use", "old-bare", era="1.10", launcher="srun")
def port_old(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    return _store_fail(job, s, p, "RuntimeError: Address already in use", victims="none", dt=1)


@variant("port_in_use", "two-launchers-one-port", launcher="srun-torchrun", nodes=1)
def port_two_launchers(job: Job, s: Story) -> Truth:
    """Several srun tasks each start torchrun on the same node and race for MASTER_PORT."""
    warns, exc = _bind_text(job, job.master_port)
    job.label = True
    p = job.proc(0)
    n = job.rng.randint(2, 4)
    lines = []
    for _ in range(n - 1):
        lines += [_socket_warn(job, p, 1.0, "W", w) for w in warns] or [f"{dist_exc(job, 'network')}: address already in use"]
    lines += traceback_lines(job, [
        (sp(job, "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"), job.rng.choice((145, 155, 250)), "_create_tcp_store", "store = TCPStore("),
    ], exc)
    job.out("agent:0", lines, 1.0, "cause")
    job.out("slurm", [srun_exit(job, 0, [0], "Exited with exit code 1")], 3.0, "summary")
    return Truth(None, job.master)


# =====================================================================================
# master_unreachable
# =====================================================================================


def _connect_retries(job: Job, p: Proc, t: float, host: str, errno: str, n: int) -> list[str]:
    return [_socket_warn(job, p, t + i * 10, "W", f"The client socket has failed to connect to [{host}]:{job.master_port} ({errno}).") for i in range(n)]


@variant("master_unreachable", "connect-refused-timeout")
def mu_refused(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick(not_zero=True)
    host = job.rng.choice((job.master, job.ip(0)))
    pre = _connect_retries(job, p, s.t, host, "errno: 111 - Connection refused", job.rng.randint(2, 6))
    if job.at_least("2.4"):
        exc = f"torch.distributed.DistNetworkError: The client socket has timed out after {job.rng.choice((600000, 900000, 1800000))}ms while trying to connect to ({host}, {job.master_port})."
    elif job.at_least("1.13"):
        exc = f"TimeoutError: The client socket has timed out after {job.rng.choice((600, 1800))}s while trying to connect to ({host}, {job.master_port})."
        pre.append(_socket_warn(job, p, s.t, "E", exc.split(": ", 1)[1]))
    else:
        exc = "RuntimeError: Connection refused"
    return _store_fail(job, s, p, exc, pre, victims="none")


@variant("master_unreachable", "tcp-client-validate", era="2.6")
def mu_validate(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick(not_zero=True)
    addr = job.ip(0)
    timeout = job.rng.choice((600000, 1800000))
    pre = []
    for i in range(job.rng.randint(2, 5)):
        pre.append(
            cpp_log(job, p, s.t + i, "W", f"TCPStore.cpp:{job.rng.choice((358, 364))}")
            + f"[c10d] TCP client failed to connect/validate to host {addr}:{job.master_port} - retrying (try={i}, timeout={timeout}ms, delay={job.rng.randint(400, 9000)}ms): The client socket has failed to connect to {addr}:{job.master_port} (errno: 113 - No route to host)."
        )
    final = f"The client socket has timed out after {timeout}ms while trying to connect to ({addr}, {job.master_port})."
    pre.append(cpp_log(job, p, s.t + 9, "E", "TCPStore.cpp:346") + f"[c10d] TCP client failed to connect/validate to host {addr}:{job.master_port} - timed out (try={len(pre)}, timeout={timeout}ms): {final}")
    return _store_fail(job, s, p, f"torch.distributed.DistNetworkError: {final}", pre, victims="none")


@variant("master_unreachable", "old-strerror", era="1.10")
def mu_old(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick(not_zero=True)
    return _store_fail(job, s, p, job.rng.choice(("RuntimeError: Connection timed out", "RuntimeError: Connection refused", "RuntimeError: No route to host")), victims="none")


@variant("master_unreachable", "elastic-c10d-store", launcher="torchrun", nodes=2)
def mu_elastic(job: Job, s: Story) -> Truth:
    """torchrun --rdzv-backend=c10d on a worker node cannot reach the rendezvous host."""
    r = job.rng
    host = job.master
    p = job.proc(job.gpus)  # first rank of node 1: its agent is the one that fails
    inner = traceback_lines(job, [
        (sp(job, "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"), r.choice((155, 156, 159)), "_create_tcp_store", "store = TCPStore("),
    ], f"{dist_exc(job, 'network')}: The client socket has timed out after {r.choice(('60s', '900s', '60000ms'))} while trying to connect to ({host}, {job.master_port}).")
    outer = traceback_lines(job, [
        (job.python_bin.replace("/python", "/torchrun"), 8, "<module>", "sys.exit(main())"),
        (sp(job, "torch/distributed/run.py"), r.choice((785, 797)), "run", "elastic_launch("),
        (sp(job, "torch/distributed/launcher/api.py"), r.choice((228, 240)), "launch_agent", "rdzv_handler=rdzv_registry.get_rendezvous_handler(rdzv_parameters),"),
        (sp(job, "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"), r.choice((250, 253, 256)), "create_backend", "store = _create_tcp_store(params)"),
        (sp(job, "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"), r.choice((176, 180)), "_create_tcp_store", "raise RendezvousConnectionError("),
    ], "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.")
    lines = inner + ["", "The above exception was the direct cause of the following exception:", ""] + outer
    pre = _connect_retries(job, p, 5, host, "errno: 110 - Connection timed out", r.randint(1, 4)) if job.at_least("1.13") else []
    job.out("agent:1", pre + lines, 70, "cause")
    return Truth(None, job.nodes[1])


# =====================================================================================
# hostname_resolution
# =====================================================================================


def _bad_host(job: Job) -> str:
    return job.rng.choice((f"{job.master}.ib.cluster", f"{job.master}-ib", "master.internal", f"job-{job.job_id}-master.svc", "headnode", f"{job.master}.local"))


@variant("hostname_resolution", "gai-warning")
def hr_gai(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick(not_zero=True)
    host = _bad_host(job)
    gai = job.rng.choice(("-2 - Name or service not known", "-3 - Temporary failure in name resolution"))
    pre = [
        _socket_warn(job, p, s.t, "W", f"The IPv6 network addresses of ({host}, {job.master_port}) cannot be retrieved (gai error: {gai})."),
        _socket_warn(job, p, s.t, "W", f"The IPv4 network addresses of ({host}, {job.master_port}) cannot be retrieved (gai error: {gai})."),
    ]
    exc = f"{dist_exc(job, 'network')}: The client socket has failed to connect to any network address of ({host}, {job.master_port})."
    return _store_fail(job, s, p, exc, pre, victims="none")


@variant("hostname_resolution", "host-not-found-old", era="1.10")
def hr_old(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick(not_zero=True)
    msg = job.rng.choice(("Name or service not known", "Temporary failure in name resolution"))
    return _store_fail(job, s, p, f"ValueError: host not found: {msg}", victims="none")


@variant("hostname_resolution", "gloo-find-address")
def hr_gloo(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    host = f"{p.node}.{job.rng.choice(('cluster', 'hpc.example', 'lan'))}"
    frames = user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((627, 761, 1537)), "init_process_group", "default_pg = _new_process_group_helper("),
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((738, 1007, 1655)), "_new_process_group_helper", "pg = ProcessGroupGloo(prefix_store, group_rank, group_size, timeout=timeout)"),
    ]
    exc = f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:{job.rng.choice((83, 84))}] Unable to find address for: {host}"
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("hostname_resolution", "socket-gaierror-user")
def hr_user(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    frames = user_frames(job) + [(f"{job.workdir}/utils/dist.py", job.rng.randint(20, 80), "setup_distributed", 'master_ip = socket.gethostbyname(os.environ["MASTER_ADDR"])')]
    exc = job.rng.choice(("socket.gaierror: [Errno -2] Name or service not known", "socket.gaierror: [Errno -3] Temporary failure in name resolution"))
    return s.fail(p, s.exception(p, frames, exc), victims="none")


# =====================================================================================
# rendezvous_timeout
# =====================================================================================


def _barrier_wait(job: Job, p: Proc, world: int, joined: int) -> list[str]:
    """The INFO line each arrived rank repeats while the store-based barrier waits."""
    field = "num_workers_joined" if job.at_least("2.1") else "worker_count"
    msg = f"Waiting in store based barrier to initialize process group for rank: {p.rank}, key: store_based_barrier_key:1 (world_size={world}, {field}={joined}, timeout=0:30:00)"
    return [f"INFO:torch.distributed.distributed_c10d:{msg}"] * job.rng.randint(1, 3)


@variant("rendezvous_timeout", "store-barrier-1x", era="1.10")
def rt_barrier_old(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    world = job.world * job.rng.choice((2, 4))
    arrived = list(job.procs)
    first = arrived[0]
    for p in arrived[1:]:
        job.out(p, _barrier_wait(job, p, world, job.world), s.t + p.rank * 0.01, "noise")
    exc = f"RuntimeError: Timed out initializing process group in store based barrier on rank: {first.rank}, for key: store_based_barrier_key:1 (world_size={world}, worker_count={job.world}, timeout=0:30:00)"
    frames = user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((627, 640)), "init_process_group", "_store_based_barrier(rank, store, timeout)"),
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((255, 262)), "_store_based_barrier", "raise RuntimeError("),
    ]
    others = [(p, s.exception(p, frames, exc.replace(f"rank: {first.rank},", f"rank: {p.rank},")), 1) for p in arrived[1:4]]
    return s.fail(first, _barrier_wait(job, first, world, job.world) + s.exception(first, frames, exc), others=others, dt=1800, victims="none")


@variant("rendezvous_timeout", "store-barrier-2x", era="2.1")
def rt_barrier_new(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    world = job.world + job.rng.choice((1, 2, job.world))
    first = job.procs[0]
    exc = f"{dist_exc(job, 'store')}: Timed out initializing process group in store based barrier on rank {first.rank}, for key: store_based_barrier_key:1 (world_size={world}, num_workers_joined={job.world}, timeout=0:30:00)"
    frames = user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((1193, 1211)), "init_process_group", "_store_based_barrier(rank, store, group_name, world_size, timeout)"),
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((3980, 4014)), "_store_based_barrier", "raise DistStoreError(  # noqa: TRY200" if job.at_least("2.4") else "raise RuntimeError("),
    ]
    others = [(p, s.exception(p, frames, exc.replace(f"rank {first.rank},", f"rank {p.rank},")), 1) for p in job.procs[1:3]]
    return s.fail(first, s.exception(first, frames, exc), others=others, dt=1800, victims="none")


@variant("rendezvous_timeout", "waiting-for-clients", era="2.4")
def rt_clients(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    expected = job.world * job.rng.choice((2, 4))
    joined = job.rng.randint(1, expected - 1)
    word = "clients" if job.at_least("2.4") else "workers"
    exc = f"torch.distributed.DistStoreError: Timed out after {job.rng.choice((901, 1801, 601))} seconds waiting for {word}. {joined}/{expected} {word} joined."
    return _store_fail(job, s, p, exc, victims="none", dt=1800)


@variant("rendezvous_timeout", "elastic-rdzv-timeout", launcher="torchrun")
def rt_elastic(job: Job, s: Story) -> Truth:
    r = job.rng
    msgs = [agent_log(job, 2, "I", "agent/server/api.py:" + str(r.choice((832, 851))), "[default] starting workers for entrypoint: python", 2900)]
    msgs.append(agent_log(job, 2.1, "I", "agent/server/api.py:" + str(r.choice((669, 677))), "[default] Rendezvous'ing worker group", 2900))
    lines = traceback_lines(job, [
        (job.python_bin.replace("/python", "/torchrun"), 8, "<module>", "sys.exit(main())"),
        (sp(job, "torch/distributed/launcher/api.py"), r.choice((241, 255)), "launch_agent", "result = agent.run()"),
        (sp(job, "torch/distributed/elastic/agent/server/api.py"), r.choice((548, 652)), "_rendezvous", "rdzv_info = spec.rdzv_handler.next_rendezvous()"),
        (sp(job, "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"), r.choice((1057, 1133)), "next_rendezvous", "self._op_executor.run(join_op, deadline, self._get_deadline)"),
        (sp(job, "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"), r.choice((655, 660)), "run", "raise RendezvousTimeoutError"),
    ], "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError")
    job.out("agent:0", msgs, 2, "noise")
    job.out("agent:0", lines, 902, "cause")
    return Truth(None, job.master)


# =====================================================================================
# env_misconfigured
# =====================================================================================


@variant("env_misconfigured", "env-var-missing", launcher="srun")
def env_missing(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    var = job.rng.choice(("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
    exc = f"ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable {var} expected, but not set"
    frames = user_frames(job) + init_frames(job, to_store=False) + [
        (sp(job, "torch/distributed/rendezvous.py"), job.rng.choice((229, 236, 246)), "_env_rendezvous_handler", f'{var.lower()} = int(_get_env_or_raise("{var}"))' if var in ("RANK", "WORLD_SIZE") else f'master_addr = _get_env_or_raise("{var}")'),
        (sp(job, "torch/distributed/rendezvous.py"), job.rng.choice((203, 217)), "_get_env_or_raise", "raise _env_error(env_var)"),
    ]
    first = job.procs[0]
    others = [(p, s.exception(p, frames, exc), 1) for p in job.procs[1:3]]
    return s.fail(first, s.exception(first, frames, exc), others=others, dt=1, victims="none")


@variant("env_misconfigured", "keyerror-local-rank")
def env_keyerror(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    var = job.rng.choice(("LOCAL_RANK", "RANK", "WORLD_SIZE", "SLURM_LOCALID"))
    py = job.site_packages.split("/site-packages")[0].split("/dist-packages")[0]
    frames = user_frames(job) + [
        (f"{job.workdir}/{job.script}", job.rng.randint(20, 60), "setup", f'local_rank = int(os.environ["{var}"])'),
        (f"{py}/os.py", job.rng.choice((675, 679, 680, 714)), "__getitem__", "raise KeyError(key) from None"),
    ]
    first = job.procs[0]
    others = [(p, s.exception(p, frames, f"KeyError: '{var}'"), 1) for p in job.procs[1:3]]
    return s.fail(first, s.exception(first, frames, f"KeyError: '{var}'"), others=others, dt=1, victims="none")


@variant("env_misconfigured", "tcp-param-missing")
def env_tcp(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    what = job.rng.choice(("rank parameter missing", "world size parameter missing", "port number missing"))
    frames = user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((595, 754, 1510)), "init_process_group", "store, rank, world_size = next(rendezvous_iterator)"),
        (sp(job, "torch/distributed/rendezvous.py"), job.rng.choice((139, 149, 157)), "_tcp_rendezvous_handler", f'raise _error("{what}")'),
    ]
    p = job.procs[0]
    return s.fail(p, s.exception(p, frames, f"ValueError: Error initializing torch.distributed using tcp:// rendezvous: {what}"), dt=1, victims="none")


# =====================================================================================
# nccl_wrong_interface
# =====================================================================================


def _nccl_init_fail(job: Job, s: Story, p: Proc, kind: str, last: str, pre: list[str], *, victims: str = "none") -> Truth:
    frames = _train_frames(job)[:2] + [
        (sp(job, "torch/nn/parallel/distributed.py"), job.rng.choice((655, 798, 825)), "__init__", "_verify_param_shape_across_processes(self.process_group, parameters)"),
        (sp(job, "torch/distributed/utils.py"), job.rng.choice((265, 282, 288)), "_verify_param_shape_across_processes", "return dist._verify_params_across_processes(process_group, tensors, logger)"),
    ]
    exc = f"{dist_exc(job, 'backend')}: {nccl_error_text(job, kind, last)}"
    return s.fail(p, pre + s.exception(p, frames, exc), victims=victims)


@variant("nccl_wrong_interface", "no-socket-interface", nccl_debug=True)
def nwi_bootstrap(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    iface = job.rng.choice(("ib0", "eth1", "ens5f0", "bond1", "^docker0,lo"))
    pre = [nccl_info(job, p, f"NCCL_SOCKET_IFNAME set by environment to {iface}")]
    pre += nccl_warn(job, p, s.t, f"bootstrap.cc:{job.rng.choice((40, 45, 72))}", "Bootstrap : no socket interface found", "bootstrapNetInit")
    pre.append(nccl_info(job, p, f"init.cc:{job.rng.choice((82, 93, 101))} -> 3"))
    return _nccl_init_fail(job, s, p, "internal", "Bootstrap : no socket interface found", pre)


@variant("nccl_wrong_interface", "no-listening-interface", nccl_debug=True)
def nwi_listening(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    pre = [nccl_info(job, p, "NET/IB : No device found.")]
    pre += nccl_warn(job, p, s.t, f"transport/net_socket.cc:{job.rng.choice((46, 53))}", "NET/Socket : No usable listening interface found")
    pre.append(nccl_info(job, p, f"net.cc:{job.rng.choice((626, 744))} -> 2"))
    return _nccl_init_fail(job, s, p, "system", "NET/Socket : No usable listening interface found", pre)


@variant("nccl_wrong_interface", "gloo-interface")
def nwi_gloo(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    job.pick()  # draws from the seeded RNG like every scenario
    iface = job.rng.choice(("eth1", "ib0", "ens3f1", "enp94s0"))
    msg = job.rng.choice((f"Unable to find address for: {iface}", f"Unable to find interface for: {iface}"))
    frames = user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((627, 761, 1537)), "init_process_group", "default_pg = _new_process_group_helper("),
        (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((1007, 1655)), "_new_process_group_helper", "backend_class = ProcessGroupGloo(backend_prefix_store, group_rank, group_size, timeout=timeout)"),
    ]
    first = job.procs[0]
    exc = f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:{job.rng.choice((83, 84, 88))}] {msg}"
    others = [(q, s.exception(q, frames, exc), 1) for q in job.procs[1:2]]
    return s.fail(first, s.exception(first, frames, exc), others=others, victims="none")


@variant("nccl_wrong_interface", "docker-bridge", nccl_debug=True, nodes=2)
def nwi_docker(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    r = job.rng
    for p in job.procs:
        ip = f"172.17.0.{1 + p.node_index}"
        job.out(p, [nccl_info(job, p, f"Bootstrap : Using docker0:{ip}<0>"), nccl_info(job, p, f"NET/Socket : Using [0]docker0:{ip}<0> [1]eth0:{job.ip(p.node_index)}<0>")], 9, "preamble")
    p = job.proc(job.gpus)
    if not job.nccl_at_least("2.27.0"):
        pre = nccl_warn(job, p, s.t, f"misc/socket.cc:{r.choice((114, 161))}", f"Net : No interface found in the same subnet as remote address 172.17.0.1<{r.randint(33000, 60000)}>")
    else:
        pre = nccl_warn(job, p, s.t, f"misc/socket.cc:{r.choice((484, 502))}", f"socketPollConnect to 172.17.0.1<{r.randint(33000, 60000)}> failed with error Connection refused")
    return _nccl_init_fail(job, s, p, "system" if job.at_least("1.13") else "internal", pre[-1].split("NCCL WARN ", 1)[1], pre)


@variant("nccl_wrong_interface", "socket-family-ifname", era="2.4", nccl_debug=True)
def nwi_family(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    iface = job.rng.choice(("ib0", "eth9", "enp1s0"))
    fam = job.rng.choice((59936, 33022, 0))
    pre = [nccl_info(job, p, f"NCCL_SOCKET_IFNAME set by environment to {iface}")]
    pre += nccl_warn(job, p, s.t, f"misc/socket.cc:{job.rng.choice((484, 525))}", f"ncclSocketInit: connecting to address  with family {fam} is neither AF_INET(2) nor AF_INET6(10)")
    return _nccl_init_fail(job, s, p, "internal", pre[-1].split("NCCL WARN ", 1)[1], pre)


# =====================================================================================
# nccl_ib_error
# =====================================================================================


def _ib_fail(job: Job, s: Story, warn_msg: str, where: str, *, chain: bool = True) -> Truth:
    """An IB completion error on one rank's proxy thread, its unwind chain, then the PyTorch error."""
    r = job.rng
    p = job.pick()
    pre = nccl_warn(job, p, s.t, where, warn_msg)
    if chain:
        code = 6 if job.nccl_at_least("2.13.0") else 2
        tid = p.tid + r.randint(5, 60)
        for loc in (f"transport/net.cc:{r.choice((1093, 1302, 1347))}", f"proxy.cc:{r.choice((485, 698, 1056))}", f"proxy.cc:{r.choice((652, 878, 1159))}"):
            pre.append(f"{p.node}:{p.pid}:{tid} [{p.local}] NCCL INFO {loc} -> {code}" + (" [Proxy Thread]" if "878" in loc or "1159" in loc else ""))
    kind = "remote" if job.nccl_at_least("2.13.0") else "system"
    frames = _train_frames(job) + ddp_backward_frames(job)
    exc = f"{dist_exc(job, 'backend')}: {nccl_error_text(job, kind, warn_msg)}"
    body = (pre if job.nccl_debug or r.random() < 0.7 else []) + s.exception(p, frames, exc)
    return s.fail(p, body, victims=r.choice(("peer", "watchdog", "sigterm")))


def ddp_backward_frames(job: Job) -> list[tuple[str, int, str, str]]:
    r = job.rng
    return [
        (sp(job, "torch/_tensor.py"), r.choice((487, 492, 521, 581)), "backward", "torch.autograd.backward("),
        (sp(job, "torch/autograd/__init__.py"), r.choice((197, 251, 266, 347)), "backward", "Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
    ]


def _peer(job: Job, p_index: int | None = None) -> str:
    ni = job.rng.randrange(len(job.nodes)) if p_index is None else p_index
    return f"{job.ip(ni, '10.1')}<{job.rng.randint(33000, 60999)}>"


@variant("nccl_ib_error", "ib-completion-2.1x", era="1.13", nodes=2)
def ib_old(job: Job, s: Story) -> Truth:
    s.begin(net="IB")
    st = job.rng.choice(((12, 129), (12, 129), (5, 249), (4, 81)))
    msg = f"NET/IB : Got completion from peer {_peer(job)} with error {st[0]}, opcode {job.rng.choice((0, 1, 32616))}, len {job.rng.choice((0, 32768))}, vendor err {st[1]}"
    return _ib_fail(job, s, msg, f"transport/net_ib.cc:{job.rng.choice((1148, 1260, 1303))}")


@variant("nccl_ib_error", "ib-status-2.21", era="2.6", nodes=2)
def ib_status(job: Job, s: Story) -> Truth:
    s.begin(net="IB")
    side = job.rng.choice(("Recv", "Send"))
    gid = "fe80::" + ":".join(f"{job.rng.randint(0, 0xffff):x}" for _ in range(4))
    msg = f"NET/IB : Got completion from peer {_peer(job)} with status=12 opcode={job.rng.choice((0, 1, 32616))} len=0 vendor err 129 ({side}) localGid {gid} remoteGids{gid[:-2]}1f"
    return _ib_fail(job, s, msg, f"transport/net_ib.cc:{job.rng.choice((1696, 1741))}")


@variant("nccl_ib_error", "ib-hca-2.23", era="2.9", nodes=4)
def ib_hca(job: Job, s: Story) -> Truth:
    s.begin(net="IB")
    side = job.rng.choice(("Recv", "Send"))
    hca = f"mlx5_{job.rng.randint(0, 7)}"
    st = job.rng.choice(((12, 129), (13, 136), (5, 249)))
    msg = f"NET/IB: Got completion from peer {_peer(job)} with status={st[0]} opcode={job.rng.choice((0, 1))} len=0 vendor err {st[1]} ({side}) localGid ::ffff:{job.ip(0, '10.1')} remoteGids::ffff:{job.ip(1, '10.1')} hca {hca}"
    return _ib_fail(job, s, msg, f"transport/net_ib.cc:{job.rng.choice((2203, 2290))}")


@variant("nccl_ib_error", "ibv-verbs-call", nodes=2)
def ib_verbs(job: Job, s: Story) -> Truth:
    s.begin(net="IB")
    r = job.rng
    msg = r.choice((
        "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr state INIT, next state RTR",
        "Call to ibv_poll_cq() returned -1",
        "Call to ibv_reg_mr failed with error Cannot allocate memory",
        "Call to ibv_create_qp failed with error Cannot allocate memory errno 12",
    ))
    return _ib_fail(job, s, msg, f"misc/ibvwrap.cc:{r.choice((106, 202, 288))}" if "ibv_poll" not in msg else f"transport/net_ib.cc:{r.choice((1089, 1200))}")


# =====================================================================================
# version_mismatch
# =====================================================================================


def _nccl_version_lines(job: Job, versions: dict[int, str]) -> None:
    """One 'NCCL version' line per node (its first rank), the way NCCL_DEBUG=INFO prints it."""
    for ni, v in versions.items():
        p = job.proc(ni * job.gpus)
        job.out(p, [nccl_info(job, p, f"NCCL version {v}+cuda{job.rng.choice(('12.1', '12.2', '12.4'))}"), nccl_info(job, p, f"Bootstrap : Using ib0:{job.ip(ni, '10.1')}<0>")], 9 + ni * 0.01, "cause")


@variant("version_mismatch", "nccl-mismatch-warn", era="2.9", nodes=2, nccl_debug=True)
def vm_warn(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    old = job.rng.choice(("2.21.5", "2.20.5", "2.19.3"))
    _nccl_version_lines(job, {0: job.nccl, 1: old})
    p = job.proc(job.gpus)
    code = lambda v: "".join(f"{int(x):02d}" if i else x for i, x in enumerate(v.split(".")))  # noqa: E731
    warn = f"Mismatched NCCL version detected : rank {p.rank} version {code(old)} rank 0 version {code(job.nccl)}"
    pre = nccl_warn(job, p, s.t, f"init.cc:{job.rng.choice((1120, 1298))}", warn, "initTransportsRank")
    return _nccl_init_fail(job, s, p, "usage" if job.rng.random() < 0.5 else "internal", warn, pre)


@variant("version_mismatch", "socket-family-versions", era="2.4", nodes=2, nccl_debug=True)
def vm_family(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    _nccl_version_lines(job, {0: "2.20.5", 1: "2.19.3"})
    p = job.proc(0)
    msg = f"ncclSocketInit: connecting to address  with family {job.rng.choice((0, 33022))} is neither AF_INET(2) nor AF_INET6(10)"
    pre = nccl_warn(job, p, s.t, "misc/socket.cc:484", msg)
    return _nccl_init_fail(job, s, p, "internal", msg, pre)


@variant("version_mismatch", "driver-too-old", nodes=2)
def vm_driver(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(job.gpus * (len(job.nodes) - 1))
    found = job.rng.choice((11040, 10020, 11020, 12020))
    frames = user_frames(job) + [
        (f"{job.workdir}/{job.script}", job.rng.randint(30, 70), "setup", "torch.cuda.set_device(local_rank)"),
        (sp(job, "torch/cuda/__init__.py"), job.rng.choice((350, 404, 478)), "set_device", "torch._C._cuda_setDevice(device)"),
        (sp(job, "torch/cuda/__init__.py"), job.rng.choice((247, 298, 314)), "_lazy_init", "torch._C._cuda_init()"),
    ]
    exc = (
        f"RuntimeError: The NVIDIA driver on your system is too old (found version {found}). Please update your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver."
    )
    if job.rng.random() < 0.4:
        exc = "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"
    node_ranks = [q for q in job.procs if q.node_index == p.node_index]
    others = [(q, s.exception(q, frames, exc), 1) for q in node_ranks[1:3]]
    return s.fail(p, s.exception(p, frames, exc), others=others, victims="watchdog" if job.rng.random() < 0.3 else "none")


@variant("version_mismatch", "no-kernel-image")
def vm_kernel(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    r = job.rng
    gpu, cap = r.choice((("NVIDIA H100 80GB HBM3", "sm_90"), ("NVIDIA A100-SXM4-80GB", "sm_80"), ("NVIDIA GeForce RTX 4090", "sm_89"), ("NVIDIA L40S", "sm_89")))
    p = job.pick()
    warn = [
        f"{sp(job, 'torch/cuda/__init__.py')}:{r.choice((173, 215, 235))}: UserWarning: ",
        f"{gpu} with CUDA capability {cap} is not compatible with the current PyTorch installation.",
        "The current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70 sm_75" + (" sm_80 sm_86." if cap == "sm_90" else "."),
        f"If you want to use the {gpu} GPU with PyTorch, please check the instructions at https://pytorch.org/get-started/locally/",
        "",
        "  warnings.warn(incompatible_device_warn.format(device_name, capability, \" \".join(arch_list), device_name))",
    ]
    exc = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n" + _cuda_hint(job)
    frames = _train_frames(job) + ddp_forward_frames(job)
    return s.fail(p, warn + s.exception(p, frames, exc), victims="sigterm")


def ddp_forward_frames(job: Job) -> list[tuple[str, int, str, str]]:
    r = job.rng
    return [
        (sp(job, "torch/nn/modules/module.py"), r.choice((1102, 1194, 1501, 1511, 1736)), "_call_impl", "return forward_call(*args, **kwargs)"),
        (sp(job, "torch/nn/parallel/distributed.py"), r.choice((886, 1156, 1519, 1643)), "forward", "output = self._run_ddp_forward(*inputs, **kwargs)"),
    ]


# =====================================================================================
# collective_timeout
# =====================================================================================


def _all_watchdogs(job: Job, s: Story, *, ranks: list[Proc] | None = None, seqs: dict[int, int] | None = None) -> Truth:
    r = job.rng
    timeout = r.choice((600000, 1800000, 1800000, 3600000))
    seq = r.randint(20, 200000)
    op = r.choice(("ALLREDUCE", "ALLREDUCE", "ALLGATHER", "BROADCAST", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE"))
    numel = r.choice((1, 1024, 9801523, 25557032))
    s.t += timeout / 1000 + r.uniform(0, 30)
    failed = []
    for p in ranks or job.procs:
        q = (seqs or {}).get(p.rank, seq)
        job.out(p, watchdog_block(job, p, s.t, seq=q, op=op, numel=numel, timeout=timeout), s.t + r.uniform(0, 3), "cause", spread=0.002 if r.random() < 0.3 else 0.0)
        failed.append((p, -6, ""))
    s.t += 4
    s.teardown(failed)
    return Truth()


@variant("collective_timeout", "watchdog-1x", era="1.13")
def ct_old(job: Job, s: Story) -> Truth:
    s.begin()
    return _all_watchdogs(job, s, ranks=job.rng.sample(job.procs, max(1, job.world - job.rng.randint(0, job.world - 1))))


@variant("collective_timeout", "watchdog-pg-guid", era="2.6")
def ct_new(job: Job, s: Story) -> Truth:
    s.begin()
    if job.rng.random() < 0.5:
        for p in job.procs[:2]:
            job.out(p, [cpp_log(job, p, s.t + 1900, "E", "ProcessGroupNCCL.cpp:1563") + f"{pg_tag(job, p)} Observed flight recorder dump signal from another rank via TCPStore.",
                        cpp_log(job, p, s.t + 1900, "E", "ProcessGroupNCCL.cpp:1376") + f"{pg_tag(job, p)} Finished flight recorder successfully. Output can be analyzed using the fr_trace script."], s.t + 1900, "victim")
    return _all_watchdogs(job, s)


@variant("collective_timeout", "gloo-recv-timeout")
def ct_gloo(job: Job, s: Story) -> Truth:
    s.begin()
    r = job.rng
    ms = r.choice((1800000, 600000))
    s.t += ms / 1000
    failed = []
    for p in r.sample(job.procs, min(job.world, r.randint(1, 3))):
        op = r.choice(("recv", "send"))
        frames = _train_frames(job) + [
            (sp(job, "torch/distributed/distributed_c10d.py"), r.choice((1320, 2050, 2288)), "all_reduce", "work.wait()"),
        ]
        exc = f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:{r.choice((81, 84, 133))}] Timed out waiting {ms}ms for {op} operation to complete"
        job.out(p, s.exception(p, frames, exc), s.t + r.uniform(0, 2), "cause")
        failed.append((p, 1, ""))
    s.t += 3
    s.teardown(failed)
    return Truth()


@variant("collective_timeout", "heartbeat-stuck", era="2.4")
def ct_heartbeat(job: Job, s: Story) -> Truth:
    s.begin()
    r = job.rng
    s.t += 1800 + r.uniform(0, 600)
    failed = []
    secs = r.choice((480, 600, 1200))
    for p in r.sample(job.procs, min(job.world, r.randint(1, 3))):
        msg = (
            f"{pg_tag(job, p)} ProcessGroupNCCL's watchdog got stuck for {secs} seconds without making progress in monitoring enqueued collectives. "
            "This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors."
            "If you suspect the watchdog is not actually stuck and a longer timeout would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0)."
            "If either of aforementioned helps, feel free to file an issue to PyTorch about the short timeout or false positive abort; otherwise, please attempt to debug the hang. "
        )
        job.out(p, [cpp_log(job, p, s.t, "E", f"ProcessGroupNCCL.cpp:{r.choice((1316, 1351))}") + msg], s.t, "cause")
        failed.append((p, -6, ""))
    s.t += 3
    s.teardown(failed)
    return Truth()


# =====================================================================================
# collective_mismatch
# =====================================================================================


def _fingerprint(job: Job, seq: int, op: str, shape: list[int], dtype: str) -> str:
    opts = "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))"
    return f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{', '.join(map(str, shape))}], TensorDtypes={dtype}, TensorDeviceTypes={opts})"


def _mismatch_fail(job: Job, s: Story, body: str) -> Truth:
    r = job.rng
    a, b = r.sample(job.procs, 2) if job.world > 1 else (job.proc(0), job.proc(0))
    frames = _train_frames(job) + [
        (sp(job, "torch/distributed/c10d_logger.py"), r.choice((72, 79)), "wrapper", "return func(*args, **kwargs)") if job.at_least("2.1") else (sp(job, "torch/distributed/distributed_c10d.py"), 1320, "all_reduce", "work = group.allreduce([tensor], opts)"),
        (sp(job, "torch/distributed/distributed_c10d.py"), r.choice((1555, 2050, 2288)), r.choice(("all_reduce", "broadcast", "all_gather")), "work = group.allreduce([tensor], opts)"),
    ]
    others = [(b, s.exception(b, frames, body.format(a=b.rank, b=a.rank)), 1)]
    return s.fail(a, s.exception(a, frames, body.format(a=a.rank, b=b.rank)), others=others, victims="sigterm")


@variant("collective_mismatch", "detail-fingerprint-1x", era="1.13")
def cm_old(job: Job, s: Story) -> Truth:
    s.begin()
    seq = job.rng.randint(3, 900)
    body = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank {a} is running collective: "
        + _fingerprint(job, seq, "BROADCAST", [job.rng.randint(1, 40000)], "Long")
        + ", but Rank {b} is running collective: "
        + _fingerprint(job, seq, "ALLREDUCE", [1], "Float")
        + "."
    )
    return _mismatch_fail(job, s, body)


@variant("collective_mismatch", "detail-differ-2x", era="2.4")
def cm_new(job: Job, s: Story) -> Truth:
    s.begin()
    r = job.rng
    seq = r.randint(3, 9000)
    n1, n2 = r.randint(10**5, 2 * 10**8), r.randint(10**5, 2 * 10**8)
    if r.random() < 0.5:
        fp_a, fp_b, diff = _fingerprint(job, seq, "ALLREDUCE", [n1], "Float"), _fingerprint(job, seq, "ALLREDUCE", [n2], "Float"), f"Tensor Tensor shapes: {n1}vs {n2}"
    else:
        fp_a, fp_b, diff = _fingerprint(job, seq, "ALLREDUCE", [n1], "Float"), _fingerprint(job, seq, "REDUCE", [n1], "Float"), "Op type: ALLREDUCEvs REDUCE"
    body = "RuntimeError: Detected mismatch between collectives on ranks. Rank {a} is running collective: " + fp_a + ", but Rank {b} is running collective: " + fp_b + ").Collectives differ in the following aspects: \t " + diff
    return _mismatch_fail(job, s, body)


@variant("collective_mismatch", "nccl-2.4-warn", era="1.10", nccl="2.4.8", nccl_debug=True)
def cm_nccl(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    warn = f"Mismatched collective detected, please check your collective calls at and around rank {p.rank}. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs"
    pre = nccl_warn(job, p, s.t, f"init.cc:{job.rng.choice((1247, 1251))}", warn)
    exc = f"RuntimeError: {nccl_error_text(job, 'usage', warn)}"
    return s.fail(p, pre + s.exception(p, _train_frames(job) + ddp_backward_frames(job), exc), victims="watchdog")


@variant("collective_mismatch", "desync-seqnum", era="2.6")
def cm_desync(job: Job, s: Story) -> Truth:
    s.begin()
    r = job.rng
    base = r.randint(1000, 90000)
    lag = r.choice(job.procs)
    seqs = {p.rank: base + (0 if p.rank != lag.rank else -r.randint(1, 40)) for p in job.procs}
    for p in job.procs[: min(3, job.world)]:
        job.out(p, [cpp_log(job, p, s.t + 1800, "E", "ProcessGroupNCCL.cpp:1703") + f"{pg_tag(job, p)} Desync debug report: - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are: [{lag.rank}] - Please check the collective call at rank {lag.rank} SeqNum={seqs[lag.rank]}"], s.t + 1801, "victim")
    _all_watchdogs(job, s, seqs=seqs)
    return Truth()


# =====================================================================================
# peer_failure (the first failure is not in the logs)
# =====================================================================================


def _only_victims(job: Job, s: Story, victim_lines: Callable[[Proc, Proc], list[str]]) -> Truth:
    """Ranks of the surviving node fail on the dead peer; the dead node's own log is missing."""
    r = job.rng
    job.layout = "per-node" if r.random() < 0.6 else "per-rank"
    job.launcher = "torchrun" if job.launcher in ("srun", "srun-torchrun", "spawn") else job.launcher
    job.slurm = None
    dead = job.proc(r.randrange(job.world))
    s.t += r.uniform(200, 4000)
    failed = []
    for p in [q for q in job.procs if q.node_index != dead.node_index][: r.randint(1, 3)]:
        job.out(p, victim_lines(p, dead), s.t + r.uniform(0, 3), "victim")
        failed.append((p, 1, ""))
    s.t += 5
    s.teardown(failed)
    job.blocks = [b for b in job.blocks if not (b.who.startswith("rank:") and job.proc(int(b.who[5:])).node_index == dead.node_index) and b.who != f"agent:{dead.node_index}"]
    return Truth()


@variant("peer_failure", "nccl-remote-exited", nodes=2)
def pf_remote(job: Job, s: Story) -> Truth:
    s.begin()

    def lines(p: Proc, dead: Proc) -> list[str]:
        peer = f"{job.ip(dead.node_index)}<{job.rng.randint(33000, 60999)}>"
        last = f"socketProgressOpt: Call to recv from {peer} failed : Connection reset by peer" if job.nccl_at_least("2.16.0") else f"Net : Connection closed by remote peer {peer}"
        warn = nccl_warn(job, p, s.t, f"misc/socket.cc:{job.rng.choice((47, 538))}", last) if job.nccl_debug else []
        return warn + s.exception(p, _train_frames(job) + ddp_backward_frames(job), f"{dist_exc(job, 'backend')}: {nccl_error_text(job, 'remote' if job.nccl_at_least('2.13.0') else 'system', last)}")

    return _only_victims(job, s, lines)


@variant("peer_failure", "gloo-closed-by-peer", nodes=2)
def pf_gloo(job: Job, s: Story) -> Truth:
    s.begin()

    def lines(p: Proc, dead: Proc) -> list[str]:
        addr = f"[{job.ip(dead.node_index)}]:{job.rng.randint(10000, 60000)}"
        msg = job.rng.choice((f"Connection closed by peer {addr}", f"Read error {addr}: Connection reset by peer", f"Write error {addr}: Broken pipe"))
        return s.exception(p, _train_frames(job) + [(sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((1320, 2050)), "all_reduce", "work.wait()")],
                           f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:{job.rng.choice((575, 589, 598))}] {msg}")

    return _only_victims(job, s, lines)


@variant("peer_failure", "communicator-aborted", era="2.1", nodes=2)
def pf_aborted(job: Job, s: Story) -> Truth:
    s.begin()

    def lines(p: Proc, dead: Proc) -> list[str]:
        head = cpp_log(job, p, s.t, "E", f"ProcessGroupNCCL.cpp:{job.rng.choice((455, 1182))}")
        msg = f"NCCL communicator was aborted on rank {p.rank}.  Original reason for failure was: NCCL error: remote process exited or there was a network error, NCCL version {job.nccl}"
        return [head + f"{pg_tag(job, p)} " + msg] + s.exception(p, _train_frames(job) + ddp_backward_frames(job), f"{dist_exc(job, 'backend')}: {msg}")

    return _only_victims(job, s, lines)


@variant("peer_failure", "broken-pipe-send", nodes=2, nccl_debug=True)
def pf_pipe(job: Job, s: Story) -> Truth:
    s.begin()

    def lines(p: Proc, dead: Proc) -> list[str]:
        peer = f"{job.ip(dead.node_index)}<{job.rng.randint(33000, 60999)}>"
        last = f"socketProgressOpt: Call to send to {peer} failed : Broken pipe" if job.nccl_at_least("2.16.0") else f"Net : Call to send to {peer} failed : Broken pipe"
        warn = nccl_warn(job, p, s.t, f"misc/socket.cc:{job.rng.choice((49, 572))}", last)
        return warn + s.exception(p, _train_frames(job) + ddp_backward_frames(job), f"{dist_exc(job, 'backend')}: {nccl_error_text(job, 'remote' if job.nccl_at_least('2.13.0') else 'system', last)}")

    return _only_victims(job, s, lines)


# =====================================================================================
# cuda_oom
# =====================================================================================


def _oom_text(job: Job, p: Proc) -> str:
    r = job.rng
    ask = _mib(job, 20, 8000) if r.random() < 0.6 else _gib(job, 1, 12)
    total = r.choice((15.78, 23.65, 31.74, 39.39, 79.10, 79.15, 44.35))
    if not job.at_least("2.1"):
        alloc = total * r.uniform(0.7, 0.93)
        return (
            f"RuntimeError: CUDA out of memory. Tried to allocate {ask} (GPU {p.local}; {total:.2f} GiB total capacity; {alloc:.2f} GiB already allocated; "
            f"{r.randint(3, 900)}.{r.randint(10, 99)} MiB free; {alloc + r.uniform(0.1, 1.5):.2f} GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
        )
    cls, cap = ("torch.cuda.OutOfMemoryError", "capacty") if job.era == "2.1" else ("torch.OutOfMemoryError", "capacity")
    text = (
        f"{cls}: CUDA out of memory. Tried to allocate {ask}. GPU {p.local} has a total {cap} of {total:.2f} GiB of which {r.randint(3, 900)}.{r.randint(10, 99)} MiB is free. "
        f"{'Including non-PyTorch memory, this process' if job.at_least('2.4') else f'Process {p.pid}'} has {total - 0.1:.2f} GiB memory in use. Of the allocated memory {total * 0.9:.2f} GiB is allocated by PyTorch, and {r.randint(20, 900)}.{r.randint(10, 99)} MiB is reserved by PyTorch but unallocated. "
    )
    if job.at_least("2.4"):
        return text + "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    return text + "If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"


def _model_frames(job: Job) -> list[tuple[str, int, str, str]]:
    r = job.rng
    return [
        (f"{job.workdir}/models/{r.choice(('transformer.py', 'unet.py', 'resnet.py', 'llama.py'))}", r.randint(40, 400), r.choice(("forward", "_attn", "block_forward")), r.choice(("attn = torch.matmul(q, k.transpose(-2, -1)) * self.scale", "x = self.mlp(self.norm2(x))", "h = F.silu(self.w1(x)) * self.w3(x)", "out = torch.cat([x, skip], dim=1)"))),
    ]


@variant("cuda_oom", "allocator-1x", era="1.13")
def oom_old(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job) + _model_frames(job), _oom_text(job, p)))


@variant("cuda_oom", "allocator-2x", era="2.4")
def oom_new(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    others = []
    if job.rng.random() < 0.4 and job.world > 1:
        q = job.rng.choice(job.others(p.rank))
        others = [(q, s.exception(q, _train_frames(job) + ddp_forward_frames(job) + _model_frames(job), _oom_text(job, q)), 1)]
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job) + _model_frames(job), _oom_text(job, p)), others=others)


@variant("cuda_oom", "nccl-cuda-failure", nccl_debug=True)
def oom_nccl(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    msg = "Cuda failure 2 'out of memory'" if job.nccl_at_least("2.19.0") else "Cuda failure 'out of memory'"
    pre = nccl_warn(job, p, s.t, f"include/alloc.h:{job.rng.choice((48, 103, 125))}", msg)
    exc = f"{dist_exc(job, 'backend')}: {nccl_error_text(job, 'cuda', msg)}"
    return s.fail(p, pre + s.exception(p, _train_frames(job) + ddp_backward_frames(job), exc), victims=job.rng.choice(("sigterm", "watchdog")))


@variant("cuda_oom", "cublas-alloc-wrapped")
def oom_cublas(job: Job, s: Story) -> Truth:
    """OOM surfacing as a cuBLAS handle failure or a plain CUDA error, sometimes re-raised by a wrapper."""
    s.begin()
    p = job.pick()
    r = job.rng
    inner = r.choice((
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: CUDA error: out of memory\n" + _cuda_hint(job),
    ))
    frames = _train_frames(job) + ddp_forward_frames(job) + [(sp(job, "torch/nn/modules/linear.py"), r.choice((114, 116, 125)), "forward", "return F.linear(input, self.weight, self.bias)")]
    if r.random() < 0.5:
        first = traceback_lines(job, frames, inner)
        wrapper = r.choice((
            f"RuntimeError: Training step {r.randint(10, 99999)} failed on rank {p.rank}: {inner.splitlines()[0].split(': ', 1)[1]}",
            f"deepspeed.runtime.zero.utils.ZeRORuntimeException: {inner.splitlines()[0].split(': ', 1)[1]}",
        ))
        body = excepthook(job, p, first + ["", "The above exception was the direct cause of the following exception:", ""] + traceback_lines(job, user_frames(job), wrapper))
    else:
        body = s.exception(p, frames, inner)
    return s.fail(p, body)


# =====================================================================================
# host_oom
# =====================================================================================


def _oom_kill_line(job: Job, step: str, n: int = 1) -> str:
    """slurmstepd's cgroup OOM notice in the wording of the job's SLURM release."""
    v = job.slurm or "22.05"
    node = job.nodes[0]
    if v >= "23.02":
        return f"{slurmstepd(job, node)}: error: Detected {n} oom_kill event{'s' if n > 1 else ''} in StepId={job.job_id}.{step}. Some of the step tasks have been OOM Killed."
    if v == "20.11":
        return f"{slurmstepd(job, node)}: error: Detected {n} oom-kill event(s) in StepId={job.job_id}.{step} cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler."
    return f"{slurmstepd(job, node)}: error: Detected {n} oom-kill event(s) in StepId={job.job_id}.{step}. Some of your processes may have been killed by the cgroup out-of-memory handler."


@variant("host_oom", "slurm-oom-kill", launcher="srun")
def ho_srun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    s.t += job.rng.uniform(60, 900)
    job.out("slurm", [_oom_kill_line(job, "0", job.rng.randint(1, 3)), srun_exit(job, p.node_index, [p.rank], "Out Of Memory")], s.t, "cause")
    s.t += 2
    s.teardown([(p, -9, "")])
    return Truth(p.rank, p.node)


@variant("host_oom", "torchrun-sigkill-cgroup", launcher="srun-torchrun")
def ho_torchrun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    truth = s.fail(p, [], code=-9, victims="none")
    job.out("slurm", [_oom_kill_line(job, job.rng.choice(("0", "batch")))], s.t - 0.5, "cause")
    return truth


@variant("host_oom", "dataloader-killed")
def ho_loader(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    wpid = p.pid + r.randint(10, 400)
    frames = user_frames(job, depth=3) + [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((628, 630, 633, 701)), "__next__", "data = self._next_data()"),
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1313, 1328, 1448)), "_next_data", "idx, data = self._get_data()"),
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1133, 1284, 1402)), "_try_get_data", "raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e"),
    ]
    cause = traceback_lines(job, [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1120, 1132, 1243)), "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
        (sp(job, "torch/utils/data/_utils/signal_handling.py"), r.choice((66, 67, 73)), "handler", "_error_if_any_worker_fails()"),
    ], f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Killed. ")
    body = excepthook(job, p, cause + ["", "The above exception was the direct cause of the following exception:", ""] + traceback_lines(job, frames, f"RuntimeError: DataLoader worker (pid(s) {wpid}) exited unexpectedly"))
    truth = s.fail(p, body)
    if job.slurm and r.random() < 0.6:
        job.out("slurm", [_oom_kill_line(job, "0")], s.t - 1, "cause")
    return truth


@variant("host_oom", "batch-script-killed", launcher="torchrun", slurm=True, layout="slurm")
def ho_batch(job: Job, s: Story) -> Truth:
    s.begin()
    s.t += job.rng.uniform(100, 900)
    line = f"/var/spool/slurmd/job{job.job_id}/slurm_script: line {job.rng.randint(12, 60)}: {job.rng.randint(1000, 99999)} Killed                  torchrun --nproc_per_node={job.gpus} {job.script}"
    if job.rng.random() < 0.5:
        kern = f"[{job.rng.uniform(100000, 999999):.6f}] Memory cgroup out of memory: Killed process {job.proc(0).pid} (python) total-vm:{job.rng.randint(10**7, 9 * 10**7)}kB, anon-rss:{job.rng.randint(10**7, 9 * 10**7)}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:{job.rng.randint(10**4, 10**5)}kB oom_score_adj:0"
        job.out("console", [kern], s.t - 1, "cause")
    job.out("slurm", [line, _oom_kill_line(job, "batch", job.rng.randint(1, 4))], s.t, "cause")
    return Truth(None, job.master)


# =====================================================================================
# shm_exhausted
# =====================================================================================


def _shm_nccl(job: Job, s: Story, warns: list[tuple[str, str]], last: str) -> Truth:
    p = job.pick()
    pre: list[str] = []
    for where, msg in warns:
        pre += nccl_warn(job, p, s.t, where, msg)
    return _nccl_init_fail(job, s, p, "system", last, pre)


@variant("shm_exhausted", "nccl-fallocate-2.8", era="1.10", nccl="2.8.4", nccl_debug=True)
def shm_fallocate(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    name = f"nccl-shm-recv-{job.rng.getrandbits(40):x}-{job.rng.randint(0, 3)}-{job.rng.randint(0, 7)}-{job.rng.randint(0, 7)}"
    size = job.rng.choice((9637888, 4194304, 33554432))
    return _shm_nccl(job, s, [("include/shm.h:28", "Call to posix_fallocate failed : No space left on device"), ("include/shm.h:48", f"Error while creating shared memory segment {name} (size {size})")], f"Error while creating shared memory segment {name} (size {size})")


@variant("shm_exhausted", "nccl-extend-devshm", era="2.1", nccl_debug=True)
def shm_extend(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    seg = "nccl-" + "".join(job.rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(6))
    size = job.rng.choice((9637888, 5967872, 33554432))
    suffix = ", error: No space left on device (28)" if job.nccl_at_least("2.22.0") else ""
    return _shm_nccl(job, s, [
        ("misc/shmutils.cc:71", f"Error: failed to extend /dev/shm/{seg} to {size + 4} bytes{suffix}"),
        ("misc/shmutils.cc:112", f"Error while creating shared memory segment /dev/shm/{seg} (size {size}){suffix}"),
    ], f"Error while creating shared memory segment /dev/shm/{seg} (size {size}){suffix}")


@variant("shm_exhausted", "dataloader-bus-error")
def shm_bus(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    wpid = p.pid + r.randint(10, 400)
    hint = " It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit." if job.at_least("1.10") else ""
    pre = ["ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."] * r.randint(1, 3)
    cause = traceback_lines(job, [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1120, 1132, 1243)), "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
        (sp(job, "torch/utils/data/_utils/signal_handling.py"), r.choice((66, 67)), "handler", "_error_if_any_worker_fails()"),
    ], f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Bus error.{hint}")
    outer = traceback_lines(job, user_frames(job, depth=3) + [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((628, 633)), "__next__", "data = self._next_data()"),
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1133, 1284)), "_try_get_data", "raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e"),
    ], f"RuntimeError: DataLoader worker (pid(s) {wpid}) exited unexpectedly")
    return s.fail(p, pre + excepthook(job, p, cause + ["", "The above exception was the direct cause of the following exception:", ""] + outer))


@variant("shm_exhausted", "unable-write-torch-file")
def shm_write(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    name = f"/torch_{r.randint(1000, 99999)}_{r.randint(10**8, 4 * 10**9)}_{r.randint(0, 9)}"
    frames = [
        (sp(job, "torch/utils/data/_utils/worker.py"), r.choice((308, 349)), "_worker_loop", "data = fetcher.fetch(index)"),
        (sp(job, "torch/utils/data/_utils/collate.py"), r.choice((138, 162)), "default_collate", "storage = elem.storage()._new_shared(numel, device=elem.device)"),
        (sp(job, "torch/storage.py"), r.choice((605, 1093)), "_new_shared", "untyped_storage = torch.UntypedStorage._new_shared(size * self._element_size(), device=device)"),
    ]
    inner = ["Caught RuntimeError in DataLoader worker process 0.", "Original Traceback (most recent call last):"] + traceback_lines(job, frames, f"RuntimeError: unable to write to file <{name}>: No space left on device (28)")[1:]
    outer = traceback_lines(job, user_frames(job, depth=3) + [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1345, 1371)), "_process_data", "data.reraise()"),
        (sp(job, "torch/_utils.py"), r.choice((644, 694, 722)), "reraise", "raise exception"),
    ], "RuntimeError: " + "\n".join(inner))
    return s.fail(p, excepthook(job, p, outer))


# =====================================================================================
# permission_denied
# =====================================================================================


def _ckpt_path(job: Job) -> str:
    r = job.rng
    return r.choice((f"/shared/{r.choice(('projects', 'models', 'ckpt'))}/{job.project}/checkpoints/epoch_{r.randint(0, 30)}.pt", f"/mnt/nfs/{job.project}/ckpt/step_{r.randint(100, 99999)}.pt", f"/data/outputs/{job.project}/model_best.pth", f"/gpfs/proj/{job.project}/runs/{r.randint(1, 99)}/last.ckpt"))


def _save_frames(job: Job) -> list[tuple[str, int, str, str]]:
    r = job.rng
    return user_frames(job) + [
        (f"{job.workdir}/utils/checkpoint.py", r.randint(20, 90), "save_checkpoint", "torch.save(state, path)"),
        (sp(job, "torch/serialization.py"), r.choice((440, 618, 627, 849)), "save", "with _open_zipfile_writer(f) as opened_zipfile:"),
        (sp(job, "torch/serialization.py"), r.choice((315, 492, 654)), "_open_zipfile_writer", "return container(name_or_buffer)"),
        (sp(job, "torch/serialization.py"), r.choice((288, 463, 625)), "__init__", "super().__init__(torch._C.PyTorchFileWriter(self.name))" if job.at_least("2.1") else "super(_open_zipfile_writer_file, self).__init__(torch._C.PyTorchFileWriter(str(name)))"),
    ]


@variant("permission_denied", "python-errno13")
def pd_python(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    path = _ckpt_path(job).rsplit("/", 1)[0] if job.rng.random() < 0.5 else f"/shared/logs/{job.project}/train_rank{p.rank}.log"
    frames = user_frames(job) + [(f"{job.workdir}/utils/io.py", job.rng.randint(10, 80), job.rng.choice(("setup_logging", "save_checkpoint", "prepare_output_dir")), job.rng.choice(("os.makedirs(out_dir, exist_ok=True)", 'with open(path, "w") as f:')))]
    if "makedirs" in frames[-1][3]:
        py = job.site_packages.split("/site-packages")[0].split("/dist-packages")[0]
        frames.append((f"{py}/os.py", job.rng.choice((215, 225)), "makedirs", "mkdir(name, mode)"))
    return s.fail(p, s.exception(p, frames, f"PermissionError: [Errno 13] Permission denied: '{path}'"))


@variant("permission_denied", "inline-container-errno13", era="1.13")
def pd_enforce(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.proc(0)
    path = _ckpt_path(job)
    exc = f"RuntimeError: [enforce fail at inline_container.cc:{job.rng.choice((337, 342, 424))}] . open file failed because of errno 13 on fopen: , file path: {path}"
    return s.fail(p, s.exception(p, _save_frames(job), exc))


@variant("permission_denied", "inline-container-strerror", era="2.9")
def pd_strerror(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.proc(0)
    exc = f"RuntimeError: [enforce fail at inline_container.cc:{job.rng.choice((747, 783))}] . open file failed with strerror: Permission denied"
    return s.fail(p, s.exception(p, _save_frames(job), exc))


@variant("permission_denied", "dataset-read-denied")
def pd_dataset(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    r = job.rng
    path = r.choice((f"/datasets/{job.project}/train/shard-{r.randint(0, 511):05d}.tar", f"/data/{job.project}/annotations/train.json", f"/scratch/shared/{job.project}/tokenized/train.bin"))
    frames = user_frames(job) + [(f"{job.workdir}/data/dataset.py", r.randint(20, 120), "__init__", r.choice(('with open(ann_file, "r") as f:', "self.data = np.memmap(path, dtype=np.uint16, mode='r')")))]
    if "memmap" in frames[-1][3]:
        frames.append((sp(job, "numpy/core/memmap.py"), r.choice((228, 267)), "__new__", "f_ctx = open(os_fspath(filename), ('r' if mode == 'c' else mode)+'b')"))
    return s.fail(p, s.exception(p, frames, f"PermissionError: [Errno 13] Permission denied: '{path}'"), victims="sigterm")


# =====================================================================================
# disk_full
# =====================================================================================


@variant("disk_full", "errno28-write")
def df_errno(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.proc(0)
    path = _ckpt_path(job)
    frames = user_frames(job) + [(f"{job.workdir}/utils/checkpoint.py", job.rng.randint(20, 90), "save_checkpoint", "torch.save(state, path)"),
                                 (sp(job, "torch/serialization.py"), job.rng.choice((441, 619, 850)), "save", "_save(obj, opened_zipfile, pickle_module, pickle_protocol)")]
    exc = job.rng.choice((f"OSError: [Errno 28] No space left on device: '{path}'", "OSError: [Errno 28] No space left on device"))
    return s.fail(p, s.exception(p, frames, exc))


@variant("disk_full", "quota-exceeded-cache")
def df_quota(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    home = f"/home/{job.user}"
    path = r.choice((f"{home}/.triton/cache/{r.getrandbits(64):x}/triton_.cubin", f"{home}/.cache/huggingface/hub/models--{r.choice(('meta-llama', 'bert'))}/blobs/{r.getrandbits(80):x}.incomplete", f"/tmp/torchinductor_{job.user}/fx_graph_cache/{r.getrandbits(40):x}"))
    frames = _train_frames(job) + [(sp(job, r.choice(("triton/compiler/compiler.py", "huggingface_hub/file_download.py", "torch/_inductor/codecache.py"))), r.randint(100, 1600), r.choice(("compile", "http_get", "write_atomic")), 'with open(tmp_path, "wb") as f:')]
    return s.fail(p, s.exception(p, frames, f"OSError: [Errno 122] Disk quota exceeded: '{path}'"))


@variant("disk_full", "stream-writer-failed", era="2.1")
def df_writer(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.proc(0)
    r = job.rng
    what = r.choice((f"data/{r.randint(0, 900)}", "data.pkl", "version", ".data/serialization_id"))
    exc = f"RuntimeError: [enforce fail at inline_container.cc:{r.choice((445, 588, 603, 778))}] . PytorchStreamWriter failed writing file {what}: file write failed"
    frames = _save_frames(job)[:3] + [(sp(job, "torch/serialization.py"), r.choice((441, 619, 850)), "save", "_save(obj, opened_zipfile, pickle_module, pickle_protocol)"), (sp(job, "torch/serialization.py"), r.choice((662, 853, 1109)), "_save", "zip_file.write_record(name, storage, num_bytes)")]
    return s.fail(p, s.exception(p, frames, exc))


@variant("disk_full", "unexpected-pos", era="1.13")
def df_pos(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.proc(0)
    a = job.rng.randint(10**7, 9 * 10**9)
    exc = f"RuntimeError: [enforce fail at inline_container.cc:{job.rng.choice((300, 325))}] . unexpected pos {a} vs {a - job.rng.randint(10, 200)}"
    frames = _save_frames(job)[:3] + [(sp(job, "torch/serialization.py"), job.rng.choice((380, 423)), "save", "return")]
    first = traceback_lines(job, _save_frames(job)[:3] + [(sp(job, "torch/serialization.py"), 441, "save", "_save(obj, opened_zipfile, pickle_module, pickle_protocol)")],
                            f"RuntimeError: [enforce fail at inline_container.cc:{job.rng.choice((445, 471))}] . PytorchStreamWriter failed writing file data/{job.rng.randint(0, 500)}: file write failed")
    return s.fail(p, excepthook(job, p, first + ["", "During handling of the above exception, another exception occurred:", ""] + traceback_lines(job, frames, exc)))


# =====================================================================================
# device_misassignment
# =====================================================================================


@variant("device_misassignment", "invalid-ordinal")
def dm_ordinal(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    bad = [p for p in job.procs if p.local >= max(1, job.gpus // 2)] or job.procs
    p = bad[0]
    frames = user_frames(job) + [(f"{job.workdir}/{job.script}", job.rng.randint(20, 80), "setup", "torch.cuda.set_device(args.local_rank)"),
                                 (sp(job, "torch/cuda/__init__.py"), job.rng.choice((314, 350, 404, 478)), "set_device", "torch._C._cuda_setDevice(device)")]
    exc = "RuntimeError: CUDA error: invalid device ordinal\n" + _cuda_hint(job)
    others = [(q, s.exception(q, frames, exc), 1) for q in bad[1:3]]
    return s.fail(p, s.exception(p, frames, exc), others=others, victims="none")


@variant("device_misassignment", "duplicate-gpu", nccl_debug=True)
def dm_duplicate(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(min(1, job.world - 1))
    dev = job.rng.choice(("1b000", "4d000", "f000", "c3000"))
    if job.nccl_at_least("2.30.0"):
        msg = "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."
    else:
        msg = f"Duplicate GPU detected : rank {p.rank} and rank 0 both on CUDA device {dev}"
    pre = nccl_warn(job, p, s.t, f"init.cc:{job.rng.choice((290, 328, 742))}", msg)
    return _nccl_init_fail(job, s, p, "usage", msg, pre)


@variant("device_misassignment", "no-gpus-visible")
def dm_nogpu(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    r = job.rng
    exc = r.choice(("RuntimeError: No CUDA GPUs are available", "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", "RuntimeError: CUDA error: no CUDA-capable device is detected\n" + _cuda_hint(job)))
    frames = user_frames(job) + ([(sp(job, "torch/cuda/__init__.py"), r.choice((298, 302, 314)), "_lazy_init", "torch._C._cuda_init()")] if "No CUDA GPUs" in exc else init_frames(job, to_store=False))
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("device_misassignment", "thc-ordinal-old", era="1.10")
def dm_thc(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.procs[-1]
    code = job.rng.choice((10, 101))
    pre = [f"THCudaCheck FAIL file=/pytorch/torch/csrc/cuda/Module.cpp line=33 error={code} : invalid device ordinal"]
    frames = user_frames(job) + [(sp(job, "torch/cuda/__init__.py"), job.rng.choice((263, 281)), "set_device", "torch._C._cuda_setDevice(device)")]
    return s.fail(p, pre + s.exception(p, frames, f"RuntimeError: cuda runtime error ({code}) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:33"), victims="none")


# =====================================================================================
# gpu_hardware_fault
# =====================================================================================


def _xid_lines(job: Job, node: str, xid: int) -> list[str]:
    r = job.rng
    bus = r.choice(("0000:3b:00", "0000:86:00", "0000:af:00", "0000:1b:00", "0000:d8:00"))
    when = job.start.strftime("%a %b %d") + f" {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d} {job.start.year}"
    text = {
        79: "GPU has fallen off the bus.",
        48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 0.",
        94: "Contained: SM (0x1). RST: No, D-RST: No",
        95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
        64: "Row Remapper Error: (0x0000000f00000001) - All reserved rows for bank are remapped",
    }[xid]
    lines = [f"[{when}] NVRM: Xid (PCI:{bus}): {xid}, pid={r.randint(1000, 99999)}, name=python, {text}"]
    if xid == 79:
        lines.append(f"[{when}] NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    return lines


@variant("gpu_hardware_fault", "ecc-uncorrectable")
def hw_ecc(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    exc = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + _cuda_hint(job)
    if r.random() < 0.5:
        head = cpp_log(job, p, s.t, "E", f"ProcessGroupNCCL.cpp:{r.choice((916, 1418))}")
        what = "Process group watchdog thread terminated with exception" if job.at_least("2.4") else "NCCL watchdog thread terminated with exception"
        body = [head + f"{pg_tag(job, p)} {what}: CUDA error: uncorrectable ECC error encountered", *_cuda_hint(job).splitlines(),
                f"terminate called after throwing an instance of '{'c10::DistBackendError' if job.at_least('2.1') else 'std::runtime_error'}'",
                f"  what():  {pg_tag(job, p)} {what}: CUDA error: uncorrectable ECC error encountered"]
        return s.fail(p, body, code=-6)
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job), exc))


@variant("gpu_hardware_fault", "xid79-fallen-off-bus")
def hw_xid79(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    exc = "RuntimeError: CUDA error: unknown error\n" + _cuda_hint(job)
    truth = s.fail(p, s.exception(p, _train_frames(job) + ddp_backward_frames(job), exc), victims=r.choice(("watchdog", "peer", "sigterm")))
    job.out("console", [f"=== dmesg on {p.node} ==="] + _xid_lines(job, p.node, 79) + [f"Unable to determine the device handle for GPU{r.choice(('0000:3B:00.0', '0000:86:00.0'))}: Unknown Error"], s.t + 5, "cause")
    return truth


@variant("gpu_hardware_fault", "xid-dbe-row-remap")
def hw_xid_dbe(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    xid = r.choice((48, 94, 95, 64))
    msg = r.choice(("CUDA error: an illegal memory access was encountered", "CUDA error: unspecified launch failure", "CUDA error: uncorrectable ECC error encountered"))
    truth = s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job), f"RuntimeError: {msg}\n" + _cuda_hint(job)), victims="watchdog")
    job.out("console", _xid_lines(job, p.node, xid), s.t - 3, "cause")
    return truth


@variant("gpu_hardware_fault", "nccl-ecc-cuda-failure", nccl_debug=True)
def hw_nccl(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    msg = "Cuda failure 214 'uncorrectable ECC error encountered'" if job.nccl_at_least("2.19.0") else "Cuda failure 'uncorrectable ECC error encountered'"
    pre = nccl_warn(job, p, s.t, f"enqueue.cc:{job.rng.choice((1014, 1620))}", msg)
    exc = f"{dist_exc(job, 'backend')}: {nccl_error_text(job, 'cuda', msg)}"
    return s.fail(p, pre + s.exception(p, _train_frames(job) + ddp_backward_frames(job), exc), victims="watchdog")


# =====================================================================================
# cuda_error
# =====================================================================================


@variant("cuda_error", "illegal-memory-access")
def ce_illegal(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    exc = "RuntimeError: CUDA error: an illegal memory access was encountered\n" + _cuda_hint(job)
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job) + _model_frames(job), exc), victims=job.rng.choice(("sigterm", "watchdog")))


@variant("cuda_error", "device-side-assert")
def ce_assert(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    cond = r.choice(('`index >= -sizes[i] && index < sizes[i] && "index out of bounds"`', '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"`', '`t >= 0 && t < n_classes`'))
    kern = r.choice(("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator()", "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d"))
    pre = [f"{kern}: block: [{r.randint(0, 900)},0,0], thread: [{t},0,0] Assertion {cond} failed." for t in sorted(r.sample(range(128), r.randint(2, 6)))]
    exc = "RuntimeError: CUDA error: device-side assert triggered\n" + _cuda_hint(job)
    return s.fail(p, pre + s.exception(p, _train_frames(job) + [(sp(job, "torch/nn/functional.py"), r.choice((2996, 3029, 3104)), "cross_entropy", "return torch._C._nn.cross_entropy_loss(input, target, weight, _Reduction.get_enum(reduction), ignore_index, label_smoothing)")], exc))


@variant("cuda_error", "launch-failure-misaligned")
def ce_launch(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    msg = job.rng.choice(("unspecified launch failure", "misaligned address", "an illegal instruction was encountered"))
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job) + _model_frames(job), f"RuntimeError: CUDA error: {msg}\n" + _cuda_hint(job)))


@variant("cuda_error", "watchdog-illegal-access", era="2.4")
def ce_watchdog(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    head = cpp_log(job, p, s.t, "E", f"ProcessGroupNCCL.cpp:{r.choice((1418, 1530))}")
    body = [head + f"{pg_tag(job, p)} Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered", *_cuda_hint(job).splitlines(), "",
            "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):",
            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({_hex(job)} in {job.site_packages}/torch/lib/libc10.so)",
            f"frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x118 ({_hex(job)} in {job.site_packages}/torch/lib/libc10_cuda.so)",
            f"frame #2: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0x56 ({_hex(job)} in {job.site_packages}/torch/lib/libtorch_cuda.so)",
            f"frame #3: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 ({_hex(job)} in {job.site_packages}/torch/lib/libtorch_cuda.so)",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {pg_tag(job, p)} Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"]
    return s.fail(p, body, code=-6)


@variant("cuda_error", "cublas-execution-failed")
def ce_cublas(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    call = job.rng.choice(("cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)", "cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)"))
    exc = f"RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `{call}`"
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job) + [(sp(job, "torch/nn/modules/linear.py"), job.rng.choice((114, 116, 125)), "forward", "return F.linear(input, self.weight, self.bias)")], exc))


# =====================================================================================
# ddp_usage_error
# =====================================================================================


_UNUSED = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss. "
    "You can enable unused parameter detection by passing the keyword argument `find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by \n"
    "making sure all `forward` function outputs participate in calculating loss. \n"
    "If you already have done the above, then the distributed data parallel module wasn't able to locate the output tensors in the return value of your module's `forward` function. "
    "Please include the loss function and the structure of the return value of `forward` of your module when reporting this issue (e.g. list, dict, iterable)."
)


@variant("ddp_usage_error", "unused-parameters")
def ddp_unused(job: Job, s: Story) -> Truth:
    s.begin(steps=(1, 3))
    r = job.rng
    idx = " ".join(str(i) for i in sorted(r.sample(range(40, 400), r.randint(2, 8))))
    text = _UNUSED + f"\nParameter indices which did not receive grad for rank {{rank}}: {idx}\n In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL to print out information about which particular parameters did not receive gradient on this rank as part of this error"
    frames = _train_frames(job) + ddp_forward_frames(job)[:1] + [(sp(job, "torch/nn/parallel/distributed.py"), r.choice((1008, 1139, 1395)), "forward", "if torch.is_grad_enabled() and self.require_backward_grad_sync:")]
    first, second = job.procs[0], job.procs[min(1, job.world - 1)]
    others = [(second, s.exception(second, frames, text.format(rank=second.rank)), 1)] if second is not first else []
    return s.fail(first, s.exception(first, frames, text.format(rank=first.rank)), others=others)


@variant("ddp_usage_error", "marked-ready-twice")
def ddp_twice(job: Job, s: Story) -> Truth:
    s.begin(steps=(1, 3))
    r = job.rng
    name = r.choice(("module.encoder.layers.0.attn.qkv.weight", "module.backbone.conv1.weight", "module.head.bias"))
    exc = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following reasons: 1) Use of a module parameter outside the `forward` function. "
        "Please make sure model parameters are not shared across multiple concurrent forward-backward passes. or try to use _set_static_graph() as a workaround if this module graph does not change during training loop."
        "2) Reused parameters in multiple reentrant backward passes. For example, if you use multiple `checkpoint` functions to wrap the same part of your model, it would result in the same set of parameters been used by different reentrant backward passes multiple times, and hence marking a variable ready multiple times. DDP does not support such use cases in default. You can try to use _set_static_graph() as a workaround if your module graph does not change over iterations.\n"
        f"Parameter at index {r.randint(10, 500)} with name {name} has been marked as ready twice. This means that multiple autograd engine  hooks have fired for this particular parameter during this iteration."
    )
    p = job.pick()
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_backward_frames(job), exc))


@variant("ddp_usage_error", "params-differ-across-ranks")
def ddp_differ(job: Job, s: Story) -> Truth:
    s.begin(steps=(0, 1))
    r = job.rng
    n = r.randint(100, 900)
    p = job.pick(not_zero=True)
    exc = f"RuntimeError: DDP expects same model across all ranks, but Rank {p.rank} has {n} params, while rank 0 has inconsistent {n + r.randint(1, 4)} params."
    frames = user_frames(job) + [(f"{job.workdir}/{job.script}", r.randint(60, 200), "build_model", "model = DDP(model, device_ids=[local_rank])"),
                                 (sp(job, "torch/nn/parallel/distributed.py"), r.choice((655, 798, 825)), "__init__", "_verify_param_shape_across_processes(self.process_group, parameters)"),
                                 (sp(job, "torch/distributed/utils.py"), r.choice((265, 282)), "_verify_param_shape_across_processes", "return dist._verify_params_across_processes(process_group, tensors, logger)")]
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("ddp_usage_error", "static-graph-changed")
def ddp_static(job: Job, s: Story) -> Truth:
    s.begin(steps=(1, 3))
    exc = (
        _UNUSED.replace("This error indicates that your module has parameters that were not used in producing loss.", "This error indicates that your training graph has changed in this iteration, e.g., one parameter is used in first iteration, but then got unused in the second iteration. this is not compatible with static_graph set to True.")
    )
    p = job.pick()
    return s.fail(p, s.exception(p, _train_frames(job) + ddp_forward_frames(job), exc))


# =====================================================================================
# backend_unavailable
# =====================================================================================


def _windows_job(job: Job) -> None:
    job.layout, job.launcher, job.slurm, job.tee = "console", "torchrun", None, False
    job.nodes[:] = [job.nodes[0]]
    job.procs[:] = job.procs[: min(2, len(job.procs))]
    job.site = f"C:\\Users\\{job.user}\\miniconda3\\envs\\train\\lib\\site-packages"


@variant("backend_unavailable", "no-nccl-windows")
def bu_windows(job: Job, s: Story) -> Truth:
    _windows_job(job)
    s.begin(init=False)
    p = job.proc(0)
    site = job.site
    frames = [(f"C:\\Users\\{job.user}\\{job.project}\\{job.script}", job.rng.randint(40, 200), "main", 'dist.init_process_group(backend="nccl", init_method="env://")'),
              (f"{site}\\torch\\distributed\\distributed_c10d.py", job.rng.choice((761, 907, 1536)), "init_process_group", "default_pg = _new_process_group_helper("),
              (f"{site}\\torch\\distributed\\distributed_c10d.py", job.rng.choice((882, 1226, 1670)), "_new_process_group_helper", 'raise RuntimeError("Distributed package doesn\'t have NCCL built in")')]
    pre = ["NOTE: Redirects are currently not supported in Windows or MacOs."] if job.rng.random() < 0.6 else []
    return s.fail(p, pre + s.exception(p, frames, "RuntimeError: Distributed package doesn't have NCCL built in"), victims="none")


@variant("backend_unavailable", "no-mpi")
def bu_mpi(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    frames = user_frames(job) + [(sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((761, 1536)), "init_process_group", "default_pg = _new_process_group_helper("),
                                 (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((818, 1587)), "_new_process_group_helper", "raise RuntimeError(")]
    exc = "RuntimeError: Distributed package doesn't have MPI built in. MPI is only included if you build PyTorch from source on a host that has MPI installed."
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("backend_unavailable", "invalid-backend-name")
def bu_invalid(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    name = job.rng.choice(("ncl", "nccl2", "cuda", "hccl", "xla"))
    if job.at_least("2.1"):
        exc = f"ValueError: Unknown backend '{name}'. Specify a 'device:backend' string or use one of: ['undefined', 'gloo', 'nccl', 'ucc', 'mpi']" if job.rng.random() < 0.6 else f"AssertionError: Unknown backend type {name}"
    else:
        exc = f"ValueError: Invalid backend: '{name}'"
    frames = user_frames(job) + [(sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((585, 1144)), "init_process_group", "backend = Backend(backend)"),
                                 (sp(job, "torch/distributed/distributed_c10d.py"), job.rng.choice((107, 232, 266)), "__new__", 'raise ValueError(f"Invalid backend: \'{name}\'")')]
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("backend_unavailable", "nccl-missing-macos", era="2.4")
def bu_macos(job: Job, s: Story) -> Truth:
    job.layout, job.launcher, job.slurm, job.tee = "console", "torchrun", None, False
    job.procs[:] = job.procs[:2]
    job.nodes[:] = [job.nodes[0]]
    job.site = f"/Users/{job.user}/miniforge3/lib/python{job.py}/site-packages"
    s.begin(init=False)
    p = job.proc(0)
    warn = [f"{sp(job, 'torch/distributed/distributed_c10d.py')}:{job.rng.choice((1432, 1605))}: UserWarning: Attempted to get default timeout for nccl backend, but NCCL support is not compiled", "  warnings.warn("]
    frames = user_frames(job) + [(sp(job, "torch/distributed/distributed_c10d.py"), 1536, "init_process_group", "default_pg, _ = _new_process_group_helper("),
                                 (sp(job, "torch/distributed/distributed_c10d.py"), 1759, "_new_process_group_helper", 'raise RuntimeError("Distributed package doesn\'t have NCCL built in")')]
    return s.fail(p, warn + s.exception(p, frames, "RuntimeError: Distributed package doesn't have NCCL built in"), victims="none")


# =====================================================================================
# file_init_error
# =====================================================================================


def _file_frames(job: Job) -> list[tuple[str, int, str, str]]:
    r = job.rng
    return user_frames(job) + [
        (sp(job, "torch/distributed/distributed_c10d.py"), r.choice((595, 754, 1510)), "init_process_group", "store, rank, world_size = next(rendezvous_iterator)"),
        (sp(job, "torch/distributed/rendezvous.py"), r.choice((103, 119, 137)), "_file_rendezvous_handler", "store = FileStore(path, world_size)"),
    ]


@variant("file_init_error", "filestore-open-failed")
def fi_open(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    r = job.rng
    path, err = r.choice((("tmp/sharedfile", "No such file or directory"), (f"/shared/{job.project}/dist_init", "Permission denied"), ("/nfs/init/ddp_init_file", "Permission denied"), ("shared/init", "No such file or directory")))
    return s.fail(p, s.exception(p, _file_frames(job), f"RuntimeError: open({path}): {err}"), victims="none")


@variant("file_init_error", "stale-init-file-overfull", era="1.13")
def fi_stale(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    exc = f"RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size={job.world}, worker_count={job.world * 2}, timeout=0:30:00)"
    frames = _file_frames(job)[:-1] + [(sp(job, "torch/distributed/distributed_c10d.py"), 640, "init_process_group", "_store_based_barrier(rank, store, timeout)"), (sp(job, "torch/distributed/distributed_c10d.py"), 262, "_store_based_barrier", "raise RuntimeError(")]
    pre = [f"init_method=file:///shared/{job.project}/ddp_init (reused from a previous run)"] if job.rng.random() < 0.3 else []
    return s.fail(p, pre + s.exception(p, frames, exc), dt=1800, victims="none")


@variant("file_init_error", "file-path-missing")
def fi_missing(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    exc = "ValueError: Error initializing torch.distributed using file:// rendezvous: path missing"
    frames = _file_frames(job)[:-1] + [(sp(job, "torch/distributed/rendezvous.py"), job.rng.choice((97, 110)), "_file_rendezvous_handler", 'raise _error("path missing")')]
    return s.fail(p, s.exception(p, frames, exc), victims="none")


@variant("file_init_error", "rerendezvous-file")
def fi_rerdzv(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.proc(0)
    frames = _file_frames(job)[:-1] + [(sp(job, "torch/distributed/rendezvous.py"), job.rng.choice((124, 139)), "_file_rendezvous_handler", 'raise RuntimeError("Unable to perform rerendezvous using file:// method")')]
    return s.fail(p, s.exception(p, frames, "RuntimeError: Unable to perform rerendezvous using file:// method"), victims="none")


# =====================================================================================
# SLURM ends: time limit, node failure, cancellation
# =====================================================================================


def _cancel_line(job: Job, t: float, reason: str, *, step: bool = False, node_index: int = 0) -> str:
    """slurmstepd's cancel banner in the job's SLURM release (``reason`` '' for a plain scancel)."""
    d = job.ts(t)
    when = f"{d:%Y-%m-%dT%H:%M:%S}"
    node = job.nodes[node_index]
    what = f"STEP {job.job_id}.0" if step else f"JOB {job.job_id}"
    head = f"{slurmstepd(job, node)}: error: "
    if job.slurm == "14.11":
        return head + f"*** {what} CANCELLED AT {when} DUE TO {reason} on {node} ***" if reason else head + f"*** {what} CANCELLED AT {when} ***"
    if not reason:
        if (job.slurm or "") >= "25.05":
            return head + f"*** {what} ON {node} CANCELLED AT {when} DUE to SIGNAL Terminated ***"
        return head + f"*** {what} ON {node} CANCELLED AT {when} ***"
    return head + f"*** {what} ON {node} CANCELLED AT {when} DUE TO {reason} ***"


def _sigterm_reactions(job: Job, s: Story, t: float) -> list[tuple[Proc, int, str]]:
    """What frameworks print when SLURM sends SIGTERM to a running job."""
    r = job.rng
    failed = []
    if job.launcher == "lightning" or job.framework_noise == "lightning":
        for p in job.procs[: r.randint(1, job.world)]:
            job.out(p, [f"[rank: {p.rank}] Received SIGTERM: 15", f"[rank: {p.rank}] Bypassing SIGTERM: 15" if r.random() < 0.3 else f"[rank: {p.rank}] Received SIGTERM: 15"][: r.randint(1, 2)], t + r.uniform(0, 1), "victim")
    if job.launcher in ("torchrun", "srun-torchrun", "accelerate"):
        for ni in range(len(job.nodes)):
            lines = [agent_log(job, t, "I", "agent/server/api.py:" + str(r.choice((727, 770, 881))), "Received Signals.SIGTERM death signal, shutting down workers" if job.at_least("2.1") else "Received 15 death signal, shutting down workers", 2900 + ni)]
            lines += [agent_log(job, t, "W", "multiprocessing/api.py:" + str(r.choice((699, 897))), f"Sending process {p.pid} closing signal SIGTERM", 2900 + ni) for p in job.procs if p.node_index == ni]
            lines += traceback_lines(job, [
                (job.python_bin.replace("/python", "/torchrun"), 8, "<module>", "sys.exit(main())"),
                (sp(job, "torch/distributed/elastic/agent/server/api.py"), r.choice((835, 850, 870)), "_invoke_run", "time.sleep(monitor_interval)"),
                (sp(job, "torch/distributed/elastic/multiprocessing/api.py"), r.choice((62, 79, 84)), "_terminate_process_handler", "raise SignalException(f\"Process {os.getpid()} got signal: {sigval}\", sigval=sigval)"),
            ], f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {2900 + ni} got signal: 15")
            job.out(f"agent:{ni}", lines, t + 0.5, "victim")
    return failed


def _slurm_end_job(job: Job, s: Story, reason: str, *, step_only: bool = False, node_index: int = 0, extra: list[str] | None = None) -> None:
    s.t += job.rng.uniform(600, 40000)
    t = s.t
    lines = list(extra or [])
    if not step_only:
        lines.append(_cancel_line(job, t, reason, node_index=node_index))
    lines.append(_cancel_line(job, t, reason, step=True, node_index=node_index))
    job.out("slurm", lines, t, "cause")
    _sigterm_reactions(job, s, t + 0.2)
    tail = ["srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
    tasks = list(range(job.world)) if job.launcher == "srun" else list(range(len(job.nodes)))
    what = job.rng.choice(("Terminated", "Killed")) if reason != "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS" else "Killed"
    tail.append(srun_exit(job, 0, tasks, what).replace(f"{job.nodes[0]}:", f"{job.nodes[0] if len(job.nodes) == 1 else job.nodes[0] + '-' + job.nodes[-1]}:", 1))
    if job.rng.random() < 0.3:
        tail.append(f"srun: Force Terminated StepId={job.job_id}.0" if (job.slurm or "") >= "21.08" else f"srun: Force Terminated job step {job.job_id}.0")
    job.out("slurm", tail, t + 1, "summary")


def _slurm_job(job: Job) -> None:
    job.slurm = job.slurm or job.rng.choice(("22.05", "23.02", "23.11", "24.11"))
    if job.layout not in ("slurm", "per-node"):
        job.layout = "slurm"
    if job.launcher not in ("srun", "srun-torchrun", "lightning", "deepspeed"):
        job.launcher = job.rng.choice(("srun", "srun-torchrun"))


@variant("slurm_time_limit", "time-limit-job-and-step")
def tl_modern(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin(steps=(6, 20))
    _slurm_end_job(job, s, "TIME LIMIT")
    return Truth(None, job.master)


@variant("slurm_time_limit", "time-limit-old-14", slurm_version="14.11")
def tl_old(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    job.slurm = "14.11"
    s.begin(steps=(6, 20))
    _slurm_end_job(job, s, "TIME LIMIT")
    return Truth(None, job.master)


@variant("slurm_time_limit", "time-limit-step-only")
def tl_step(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin(steps=(6, 20))
    _slurm_end_job(job, s, "TIME LIMIT", step_only=True)
    return Truth(None, job.master)


@variant("slurm_node_failure", "node-failure")
def nf_node(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin()
    ni = job.rng.randrange(len(job.nodes))
    _slurm_end_job(job, s, "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS", node_index=ni)
    return Truth(None, job.nodes[ni])


@variant("slurm_node_failure", "preempted-submitit")
def nf_preempt(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin()
    extra = []
    if job.rng.random() < 0.6:
        d = job.ts(s.t + 500)
        extra = [f"submitit WARNING ({d:%Y-%m-%d %H:%M:%S},{job.rng.randint(0, 999):03d}) - Bypassing signal SIGTERM", f"submitit WARNING ({d:%Y-%m-%d %H:%M:%S},{job.rng.randint(0, 999):03d}) - Caught signal SIGUSR2 on {job.master}: this job is preempted.",
                 f"submitit WARNING ({d:%Y-%m-%d %H:%M:%S},{job.rng.randint(0, 999):03d}) - Requeued job {job.job_id} ({job.rng.randint(0, 3)} remaining timeouts)"]
    _slurm_end_job(job, s, "PREEMPTION", extra=extra)
    return Truth(None, job.master)


@variant("slurm_node_failure", "srun-node-failure", nodes=2)
def nf_srun(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin()
    ni = len(job.nodes) - 1
    s.t += job.rng.uniform(600, 20000)
    job.out("slurm", [f"srun: error: Node failure on {job.nodes[ni]}", "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                      "srun: error: Timed out waiting for job step to complete" if job.rng.random() < 0.4 else f"srun: error: {job.nodes[0]}: tasks 0-{max(0, job.gpus - 1)}: Killed"], s.t, "cause")
    victims = [p for p in job.procs if p.node_index != ni]
    if victims and job.rng.random() < 0.6:
        s._peer_victims(job.proc(job.world - 1), victims, s.t - 5)
    return Truth(None, job.nodes[ni])


@variant("slurm_node_failure", "job-requeue")
def nf_requeue(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin()
    _slurm_end_job(job, s, "JOB REQUEUE")
    return Truth(None, job.master)


@variant("slurm_cancelled", "scancel-plain", slurm_version="23.11")
def sc_plain(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    job.slurm = job.rng.choice(("20.11", "22.05", "23.02", "23.11", "24.11"))
    s.begin()
    _slurm_end_job(job, s, "")
    return Truth(None, job.master)


@variant("slurm_cancelled", "signal-terminated-25")
def sc_signal(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    job.slurm = "25.05"
    s.begin()
    _slurm_end_job(job, s, "")
    return Truth(None, job.master)


@variant("slurm_cancelled", "cancel-step-with-agents", launcher="srun-torchrun")
def sc_step(job: Job, s: Story) -> Truth:
    _slurm_job(job)
    s.begin()
    _slurm_end_job(job, s, "", step_only=True)
    return Truth(None, job.master)


# =====================================================================================
# crash_signal
# =====================================================================================


@variant("crash_signal", "srun-segfault", launcher="srun")
def cs_srun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    return s.fail(p, [], code=-11)


@variant("crash_signal", "torchrun-sigsegv-table", launcher="torchrun")
def cs_torchrun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    return s.fail(p, [], code=job.rng.choice((-11, -11, -4)))


@variant("crash_signal", "faulthandler-fatal")
def cs_faulthandler(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    kind = r.choice(("Segmentation fault", "Segmentation fault", "Aborted", "Illegal instruction"))
    lines = [f"Fatal Python error: {kind}", "", f"Thread 0x{r.getrandbits(48):016x} (most recent call first):",
             f'  File "{sp(job, "torch/utils/data/_utils/worker.py")}", line {r.choice((270, 308))} in _worker_loop',
             "", f"Current thread 0x{r.getrandbits(48):016x} (most recent call first):",
             f'  File "{sp(job, "torch/nn/modules/conv.py")}", line {r.choice((453, 456, 459))} in _conv_forward',
             f'  File "{sp(job, "torch/nn/modules/module.py")}", line {r.choice((1501, 1511))} in _call_impl',
             f'  File "{job.workdir}/{job.script}", line {r.randint(60, 300)} in train_step',
             "", "Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, torch._C, torch._C._fft, torch._C._linalg, torch._C._nn, torch._C._sparse, torch._C._special (total: 24)"]
    code = {"Segmentation fault": -11, "Aborted": -6, "Illegal instruction": -4}[kind]
    return s.fail(p, lines, code=code)


@variant("crash_signal", "spawn-process-exited", launcher="spawn")
def cs_spawn(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    return s.fail(p, [], code=job.rng.choice((-11, -7, -6)))


@variant("crash_signal", "ucx-caught-signal")
def cs_ucx(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    r = job.rng
    head = f"[{p.node}:{p.pid} :0:{p.tid}]"
    lines = [f"{head} Caught signal 11 (Segmentation fault: address not mapped to object at address {r.choice(('(nil)', '0x8', hex(r.getrandbits(40))))})",
             f"==== backtrace (tid:{p.tid}) ====",
             f" 0  /usr/lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2e4) [{_hex(job)}]",
             f" 1  /usr/lib/x86_64-linux-gnu/libucs.so.0(+0x2f4bf) [{_hex(job)}]",
             f" 2  {job.site_packages}/torch/lib/libtorch_cuda.so(+0x{r.getrandbits(28):x}) [{_hex(job)}]",
             f" 3  {job.site_packages}/torch/lib/libtorch_python.so(+0x{r.getrandbits(28):x}) [{_hex(job)}]",
             "================================="]
    return s.fail(p, lines, code=-11)


# =====================================================================================
# user_code_error
# =====================================================================================


def _user_exc(job: Job) -> tuple[list[tuple[str, int, str, str]], str]:
    """A bug in the training script or its data: frames and the exception line."""
    r = job.rng
    data = f"{job.workdir}/data/{r.choice(('dataset.py', 'loader.py', 'collate.py'))}"
    opts = [
        ([(data, r.randint(30, 200), "__getitem__", 'label = self.label_map[record["category"]]')], f"KeyError: '{r.choice(('caption', 'label', 'input_ids', 'category_name', 'bbox'))}'"),
        ([(data, r.randint(30, 200), "__getitem__", "img = self.transform(img)"), (sp(job, "torchvision/transforms/transforms.py"), 95, "__call__", "img = t(img)")], f"ValueError: {r.choice(('too many values to unpack (expected 2)', 'could not convert string to float: ', 'Expected more than 1 value per channel when training, got input size torch.Size([1, 256])'))}"),
        (_model_frames(job), f"RuntimeError: shape '[{r.choice((32, 64, -1))}, {r.choice((512, 768, 1024))}, {r.randint(1, 64)}]' is invalid for input of size {r.randint(10**4, 10**8)}"),
        (_model_frames(job), f"RuntimeError: mat1 and mat2 shapes cannot be multiplied ({r.randint(8, 512)}x{r.choice((768, 1024, 2048))} and {r.choice((512, 4096))}x{r.randint(10, 1000)})"),
        ([(f"{job.workdir}/{job.script}", r.randint(80, 300), "train_step", "assert not torch.isnan(loss), f\"loss is NaN at step {step}\"")], f"AssertionError: loss is NaN at step {r.randint(100, 90000)}"),
        ([(data, r.randint(20, 90), "__init__", "with open(self.index_file) as f:")], f"FileNotFoundError: [Errno 2] No such file or directory: '/data/{job.project}/{r.choice(('train_index.json', 'val.csv', 'shards/train-00017.tar'))}'"),
        (_model_frames(job), f"RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:{r.randint(0, 7)} and cpu!"),
        ([(f"{job.workdir}/{job.script}", r.randint(80, 300), "evaluate", "acc = correct / total")], "ZeroDivisionError: division by zero"),
        ([(data, r.randint(20, 90), "collate_fn", "batch = torch.stack([b['pixel_values'] for b in batch])")], f"RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 and [3, {r.choice((160, 256, 299))}, 224] at entry {r.randint(1, 31)}"),
        ([(f"{job.workdir}/{job.script}", r.randint(80, 300), "log_metrics", "wandb.log({'lr': scheduler.get_lr()[0], **metrics})")], "TypeError: 'NoneType' object is not subscriptable"),
    ]
    frames, exc = r.choice(opts)
    return frames, exc


@variant("user_code_error", "torchrun-root-cause", launcher="torchrun")
def uc_torchrun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    frames, exc = _user_exc(job)
    return s.fail(p, s.exception(p, _train_frames(job) + frames, exc))


@variant("user_code_error", "srun-exception", launcher="srun")
def uc_srun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    frames, exc = _user_exc(job)
    return s.fail(p, s.exception(p, _train_frames(job) + frames, exc), victims=job.rng.choice(("sigterm", "peer")))


@variant("user_code_error", "lightning-wrapped", launcher="lightning")
def uc_lightning(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    frames, exc = _user_exc(job)
    pkg = job.rng.choice(("pytorch_lightning", "lightning/pytorch"))
    lfr = framework_frames(job) + [(sp(job, f"{pkg}/loops/fit_loop.py"), job.rng.choice((205, 359)), "run", "self.advance()"),
                                   (sp(job, f"{pkg}/core/module.py"), 0, "training_step", ""),
                                   (f"{job.workdir}/model.py", job.rng.randint(40, 300), "training_step", "loss = self.compute_loss(batch)")]
    lfr = [f for f in lfr if f[1]]
    return s.fail(p, s.exception(p, user_frames(job) + lfr + frames, exc), victims=job.rng.choice(("sigterm", "watchdog")))


@variant("user_code_error", "hf-accelerate-deepspeed")
def uc_hf(job: Job, s: Story) -> Truth:
    if job.launcher not in ("accelerate", "deepspeed"):
        job.launcher = job.rng.choice(("accelerate", "deepspeed"))
    job.framework_noise = "hf"
    s.begin()
    p = job.pick()
    frames, exc = _user_exc(job)
    return s.fail(p, s.exception(p, _train_frames(job) + frames, exc))


@variant("user_code_error", "spawn-raised", launcher="spawn")
def uc_spawn(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    frames, exc = _user_exc(job)
    return s.fail(p, s.exception(p, [(sp(job, "torch/multiprocessing/spawn.py"), job.rng.choice((69, 74, 90)), "_wrap", "fn(i, *args)")] + user_frames(job)[1:] + frames, exc))


# =====================================================================================
# import_error
# =====================================================================================


@variant("import_error", "module-not-found-one-node", nodes=2)
def ie_module(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    ni = job.rng.randrange(len(job.nodes))
    mod = job.rng.choice(("flash_attn", "apex", "deepspeed", "transformers", "timm", "einops", "mmcv._ext", "bitsandbytes"))
    frames = [(f"{job.workdir}/{job.script}", job.rng.randint(1, 30), "<module>", f"from {mod.split('.')[0]} import {job.rng.choice(('utils', 'ops', 'Block'))}")]
    exc = f"ModuleNotFoundError: No module named '{mod}'"
    node_procs = [p for p in job.procs if p.node_index == ni]
    others = [(q, traceback_lines(job, frames, exc), 1) for q in node_procs[1:3]]
    return s.fail(node_procs[0], traceback_lines(job, frames, exc), others=others, victims="none")


@variant("import_error", "shared-object-missing")
def ie_so(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    lib = job.rng.choice(("libcudart.so.11.0", "libnccl.so.2", "libcudnn.so.8", "libtorch_cuda_cu.so", "libmpi.so.40"))
    frames = [(f"{job.workdir}/{job.script}", job.rng.randint(1, 20), "<module>", "import torch"),
              (sp(job, "torch/__init__.py"), job.rng.choice((191, 229, 235, 289)), "<module>", "_load_global_deps()" if job.rng.random() < 0.5 else "from torch._C import *  # noqa: F403"),
              (sp(job, "torch/__init__.py"), job.rng.choice((153, 188)), "_load_global_deps", "ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)")]
    exc = f"ImportError: {lib}: cannot open shared object file: No such file or directory"
    if job.rng.random() < 0.4:
        exc = f"OSError: {lib}: cannot open shared object file: No such file or directory"
    return s.fail(p, traceback_lines(job, frames, exc), victims="none")


@variant("import_error", "undefined-symbol")
def ie_symbol(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    sym = job.rng.choice(("ncclCommRegister", "ncclCommInitRankScalable", "ncclCommWindowRegister", "_ZN5torch4cuda4nccl6detail16throw_nccl_errorE12ncclResult_t", "_ZN3c104cuda9SetDeviceEi"))
    lib = "libtorch_python.so" if sym.startswith("_Z") else "libtorch_cuda.so"
    frames = [(f"{job.workdir}/{job.script}", job.rng.randint(1, 20), "<module>", "import torch"),
              (sp(job, "torch/__init__.py"), job.rng.choice((235, 289, 367)), "<module>", "from torch._C import *  # noqa: F403")]
    return s.fail(p, traceback_lines(job, frames, f"ImportError: {job.site_packages}/torch/lib/{lib}: undefined symbol: {sym}"), victims="none")


@variant("import_error", "cannot-import-name")
def ie_name(job: Job, s: Story) -> Truth:
    s.begin(init=False)
    p = job.pick()
    name, mod = job.rng.choice((("LlamaFlashAttention2", "transformers.models.llama.modeling_llama"), ("is_torch_xla_available", "transformers.utils"), ("_get_default_group", "torch.distributed.distributed_c10d"), ("packaging", "pkg_resources.extern")))
    frames = [(f"{job.workdir}/{job.script}", job.rng.randint(1, 30), "<module>", f"from {mod} import {name}")]
    return s.fail(p, traceback_lines(job, frames, f"ImportError: cannot import name '{name}' from '{mod}' ({sp(job, mod.replace('.', '/') + '/__init__.py')})"), victims="none")


# =====================================================================================
# unknown: the job failed, nothing in the logs says why
# =====================================================================================


@variant("unknown", "childfailed-no-traceback", launcher="torchrun")
def un_cfe(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    s.fail(p, [], code=job.rng.choice((1, 1, 2, 255)), victims="none")
    return Truth(p.rank, p.node)


@variant("unknown", "srun-exit-code-only", launcher="srun")
def un_srun(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    s.fail(p, [], code=job.rng.choice((1, 2, 3, 120)), victims="none")
    return Truth(p.rank, p.node)


@variant("unknown", "hydra-hidden-error")
def un_hydra(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    overrides = job.rng.choice(("['trainer.devices=8', 'model=llama7b']", "['experiment=baseline', 'data.batch_size=64']", "[]"))
    return s.fail(p, [f"Error executing job with overrides: {overrides}", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."])


@variant("unknown", "deepspeed-return-code", launcher="deepspeed")
def un_ds(job: Job, s: Story) -> Truth:
    s.begin()
    p = job.pick()
    return s.fail(p, [], code=job.rng.choice((1, 2, 245)), victims="none")


@variant("unknown", "job-failed-banner", launcher="srun")
def un_banner(job: Job, s: Story) -> Truth:
    s.begin()
    s.t += job.rng.uniform(100, 5000)
    p = job.pick()
    job.out("slurm", [srun_exit(job, p.node_index, [p.rank], f"Exited with exit code {job.rng.choice((1, 3))}"),
                      f"{slurmstepd(job, job.nodes[0])}: error: *** JOB {job.job_id} ON {job.nodes[0]} FAILED (non-zero exit code or other failure mode) ***"], s.t, "cause")
    return Truth(p.rank, p.node)


# =====================================================================================
# none: clean runs that print scary but harmless lines
# =====================================================================================


@variant("none", "clean-with-warnings")
def no_warnings(job: Job, s: Story) -> Truth:
    s.begin(scary=job.rng.randint(2, 4), steps=(6, 16))
    return s.end_clean()


@variant("none", "connect-retried-then-ok")
def no_retry(job: Job, s: Story) -> Truth:
    r = job.rng
    for p in job.procs[job.gpus:] or job.procs[1:]:
        for i in range(r.randint(1, 4)):
            job.out(p, [_socket_warn(job, p, 5 + i, "W", f"The client socket has failed to connect to [{job.master}]:{job.master_port} (errno: 111 - Connection refused).")], 5 + i * 2, "scary")
    s.begin(steps=(5, 12))
    return s.end_clean()


@variant("none", "handled-bad-sample")
def no_handled(job: Job, s: Story) -> Truth:
    s.begin(steps=(3, 6))
    r = job.rng
    p = job.pick()
    path = f"/data/{job.project}/images/{r.randint(10**5, 10**7)}.jpg"
    frames = [(f"{job.workdir}/data/dataset.py", r.randint(30, 120), "__getitem__", "img = Image.open(path).convert('RGB')"), (sp(job, "PIL/Image.py"), r.choice((3280, 3309, 3339)), "open", "raise UnidentifiedImageError(msg)")]
    lines = [f"ERROR:data.dataset:Failed to load sample {r.randint(0, 10**6)} ({path}), skipping"] + traceback_lines(job, frames, f"PIL.UnidentifiedImageError: cannot identify image file '{path}'")
    job.out(p, lines, s.t + 30, "scary")
    s.train(r.randint(3, 8))
    return s.end_clean()


@variant("none", "benign-nccl-lines", nccl_debug=True, nccl="2.10.3", era="1.10")
def no_nccl(job: Job, s: Story) -> Truth:
    for p in job.procs:
        job.out(p, nccl_warn(job, p, 9, f"misc/ibvwrap.cc:{job.rng.choice((63, 106))}", "Failed to open libibverbs.so[.1]") + [nccl_info(job, p, "NET/IB : No device found.")], 8.5, "scary")
    s.begin(net="Socket", steps=(4, 10))
    return s.end_clean()


@variant("none", "hub-download-retried")
def no_hub(job: Job, s: Story) -> Truth:
    r = job.rng
    p = job.proc(0)
    lines = []
    for i in range(r.randint(1, 3)):
        lines.append(f"WARNING:urllib3.connectionpool:Retrying (Retry(total={4 - i}, connect=None, read=None, redirect=None, status=None)) after connection broken by 'ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))': /{r.choice(('bert-base-uncased', 'meta-llama/Llama-2-7b-hf', 'openai/clip-vit-large-patch14'))}/resolve/main/config.json")
    job.out(p, lines, 4, "scary")
    s.begin(steps=(4, 10))
    return s.end_clean()


@variant("none", "dataloader-del-ignored")
def no_del(job: Job, s: Story) -> Truth:
    s.begin(steps=(4, 10))
    truth = s.end_clean()
    r = job.rng
    p = job.pick()
    lines = [f"Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x{r.getrandbits(44):x}>"] + traceback_lines(job, [
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1478, 1479, 1604)), "__del__", "self._shutdown_workers()"),
        (sp(job, "torch/utils/data/dataloader.py"), r.choice((1443, 1462, 1568)), "_shutdown_workers", "if w.is_alive():"),
        (f"/usr/lib/python{job.py}/multiprocessing/process.py", 160, "is_alive", "assert self._parent_pid == os.getpid(), 'can only test a child process'"),
    ], "AssertionError: can only test a child process")
    job.out(p, lines, s.t + 10, "scary")
    return truth


@variant("none", "oom-recovered-fairseq")
def no_oom(job: Job, s: Story) -> Truth:
    s.begin(steps=(3, 6))
    r = job.rng
    p = job.pick()
    text = _oom_text(job, p).split(": ", 1)[1]
    job.out(p, [f"| WARNING: ran out of memory with exception: {text};", " Skipping batch", "| WARNING: attempting to recover from OOM in forward/backward pass"][: r.randint(2, 3)], s.t + 20, "scary")
    s.train(r.randint(3, 8))
    return s.end_clean()


@variant("none", "slurm-memory-limit-note", launcher="srun")
def no_slurm(job: Job, s: Story) -> Truth:
    s.begin(steps=(4, 10))
    truth = s.end_clean()
    job.out("slurm", [f"StepId={job.job_id}.0 hit memory limit at least once during execution. This may or may not result in some failure."], s.t + 20, "scary")
    return truth
