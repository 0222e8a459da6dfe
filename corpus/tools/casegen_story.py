"""The shape every synthetic job shares: start-up, training, one failure, teardown.

A scenario (casegen_causes.py) calls ``begin()``, then writes its failure with
``fail()`` (which also writes what the other ranks, the launcher and SLURM print
afterwards), or ``end_clean()`` for a run that completes.
"""

from __future__ import annotations

from dataclasses import dataclass

from casegen_job import (
    Job,
    Proc,
    accelerate_preamble,
    agent_failed,
    agent_log,
    agent_sigterm,
    benign_warnings,
    child_failed_table,
    cpp_log,
    deepspeed_preamble,
    dist_exc,
    excepthook,
    framework_preamble,
    nccl_error_text,
    nccl_init_lines,
    nccl_warn,
    pg_tag,
    progress_line,
    slurm_task_ids,
    slurmstepd,
    sp,
    srun_exit,
    torchrun_banner,
    traceback_lines,
    user_frames,
)

SIGNAL_TEXT = {-9: "Killed", -15: "Terminated", -11: "Segmentation fault (core dumped)", -6: "Aborted (core dumped)", -7: "Bus error (core dumped)", -4: "Illegal instruction (core dumped)"}


@dataclass
class Truth:
    """Where the job really failed first (what case.toml's [first_failure] records)."""

    rank: int | None = None
    node: str | None = None


class Story:
    """Writes a job's life into its Job, keeping the clock."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.t = 0.0
        self.init_done = False

    # -- start ---------------------------------------------------------------------------------

    def begin(self, *, init: bool = True, steps: tuple[int, int] = (2, 9), net: str | None = None, scary: int | None = None) -> None:
        """Launcher banners, per-rank start-up, NCCL init (when NCCL_DEBUG=INFO), warnings, progress."""
        job, r = self.job, self.job.rng
        if job.launcher in ("torchrun", "srun-torchrun", "accelerate") and job.gpus > 1:
            if job.launcher == "accelerate" and r.random() < 0.6:
                job.out("agent:0", accelerate_preamble(), 0.1, "preamble")
            for ni in range(len(job.nodes)):
                job.out(f"agent:{ni}", torchrun_banner(job, 0.5, ni), 0.5, "preamble")
        if job.launcher == "deepspeed":
            job.out("agent:0", deepspeed_preamble(job, 0.2), 0.2, "preamble")
        for p in job.procs:
            pre = framework_preamble(job, p)
            if pre:
                job.out(p, pre, 3 + p.rank * 0.01, "preamble")
        self.t = 8.0
        if not init:
            return
        self.init_done = True
        if job.nccl_debug:
            fabric = net or r.choice(("IB", "IB", "Socket"))
            iface = "ib0" if fabric == "IB" else r.choice(("eth0", "ens3", "enp65s0f0", "bond0"))
            for p in job.procs:
                job.out(p, nccl_init_lines(job, p, net=fabric, iface=iface), 9 + r.uniform(0, 2), "preamble", spread=0.01)
        self.t = 12.0
        self.train(r.randint(*steps), scary=scary)

    def train(self, n: int, *, scary: int | None = None) -> None:
        """``n`` progress lines on rank 0 (sometimes every rank), with harmless warnings among them."""
        job, r = self.job, self.job.rng
        total = r.choice((500, 1000, 2000, 5000, 12000))
        start = r.randint(0, total // 2)
        warns = benign_warnings(job)
        r.shuffle(warns)
        n_warn = r.choice((0, 0, 1, 1, 2)) if scary is None else scary
        warn_at = set(r.sample(range(max(n, 1)), min(n_warn, max(n, 1))))
        every_rank = r.random() < 0.25
        epoch = r.randint(0, 3)
        for i in range(n):
            self.t += r.uniform(20, 240)
            step = min(total - 1, start + (i + 1) * max(1, total // (n + 3)))
            writers = job.procs if every_rank else job.procs[:1]
            for p in writers:
                job.out(p, progress_line(job, step, total, epoch), self.t + p.rank * 0.003, "noise")
            if i in warn_at and warns:
                job.out(job.procs[0], warns.pop(), self.t + 0.5, "noise")

    # -- failure ----------------------------------------------------------------------------------

    def exception(self, p: Proc, frames: list[tuple[str, int, str, str]], exc: str, *, cause: list[str] | None = None) -> list[str]:
        """A traceback as rank ``p`` prints it (with PyTorch's ``[rankN]:`` prefix where it applies)."""
        return excepthook(self.job, p, traceback_lines(self.job, frames, exc, cause=cause), after_init=self.init_done)

    def fail(
        self,
        culprit: Proc,
        lines: list[str],
        *,
        code: int = 1,
        victims: str = "sigterm",
        others: list[tuple[Proc, list[str], int]] | None = None,
        dt: float | None = None,
    ) -> Truth:
        """The culprit's failure, what the other ranks print, then the launcher's and SLURM's summary.

        ``victims``: ``sigterm`` (torn down quietly), ``peer`` (NCCL/socket errors from the
        dead peer), ``watchdog`` (collective timeouts), ``none`` (nothing but exit lines).
        ``others``: extra (proc, lines, exit code) failures of other ranks that are part of
        the story (e.g. the same exception on several ranks).
        """
        job, r = self.job, self.job.rng
        self.t += dt if dt is not None else r.uniform(30, 300)
        t_fail = self.t
        if lines:
            job.out(culprit, lines, t_fail, "cause", spread=0.002 if r.random() < 0.3 else 0.0)
        failed: list[tuple[Proc, int, str]] = [(culprit, code, "")]
        for p, extra, c in others or []:
            job.out(p, extra, t_fail + r.uniform(0.0, 0.4), "cause", spread=0.002 if r.random() < 0.4 else 0.0)
            failed.append((p, c, ""))
        done = {f[0].rank for f in failed}
        rest = [p for p in job.procs if p.rank not in done]
        if victims == "peer":
            failed += self._peer_victims(culprit, rest, t_fail)
        elif victims == "watchdog":
            failed += self._watchdog_victims(rest, t_fail)
        self.t = t_fail + r.uniform(1, 6)
        self.teardown(failed)
        return Truth(culprit.rank, culprit.node)

    def _peer_victims(self, culprit: Proc, rest: list[Proc], t: float) -> list[tuple[Proc, int, str]]:
        """Other ranks (on other nodes first) see their NCCL peer vanish."""
        job, r = self.job, self.job.rng
        remote = [p for p in rest if p.node != culprit.node] or rest
        out: list[tuple[Proc, int, str]] = []
        for p in r.sample(remote, min(len(remote), r.randint(1, 3))):
            peer = f"{job.ip(culprit.node_index)}<{r.randint(33000, 60999)}>"
            if job.nccl_at_least("2.16.0"):
                warn = nccl_warn(job, p, t + 1, f"misc/socket.cc:{r.choice((47, 49, 538, 572))}", f"socketProgress: Connection closed by remote peer {culprit.node}<{r.randint(33000, 60999)}>", "socketProgress")
                last = f"socketProgressOpt: Call to recv from {peer} failed : Connection reset by peer"
            else:
                warn = nccl_warn(job, p, t + 1, f"include/socket.h:{r.choice((409, 423))}", f"Net : Connection closed by remote peer {peer}")
                last = f"Net : Connection closed by remote peer {peer}"
            exc = f"{dist_exc(job, 'backend')}: {nccl_error_text(job, 'remote', last)}"
            frames = user_frames(job, depth=3) + [
                (sp(job, "torch/distributed/c10d_logger.py"), r.choice((72, 79, 83)), "wrapper", "return func(*args, **kwargs)"),
                (sp(job, "torch/distributed/distributed_c10d.py"), r.choice((2050, 2288, 2501)), "all_reduce", "work = group.allreduce([tensor], opts)"),
            ]
            block = (warn if job.nccl_debug else []) + self.exception(p, frames, exc)
            job.out(p, block, t + r.uniform(0.5, 3), "victim")
            out.append((p, 1, ""))
        return out

    def _watchdog_victims(self, rest: list[Proc], t: float) -> list[tuple[Proc, int, str]]:
        """Ranks left waiting in a collective until the NCCL watchdog fires, then abort."""
        job, r = self.job, self.job.rng
        timeout = r.choice((600000, 1800000, 1800000, 300000))
        seq = r.randint(20, 90000)
        op = r.choice(("ALLREDUCE", "ALLREDUCE", "ALLGATHER", "BROADCAST", "_ALLGATHER_BASE", "REDUCE_SCATTER"))
        numel = r.choice((1, 1024, 9801523, 25557032, 131072))
        out: list[tuple[Proc, int, str]] = []
        t_w = t + timeout / 1000 + r.uniform(0, 40)
        for p in r.sample(rest, min(len(rest), r.randint(1, 4))):
            out.append((p, -6, ""))
            job.out(p, watchdog_block(job, p, t_w, seq=seq, op=op, numel=numel, timeout=timeout), t_w + r.uniform(0, 2), "victim", spread=0.001)
        self.t = max(self.t, t_w)
        return out

    # -- teardown ---------------------------------------------------------------------------------

    def teardown(self, failed: list[tuple[Proc, int, str]]) -> None:
        """What the launcher (and SLURM) write once workers have failed."""
        job, r = self.job, self.job.rng
        t = self.t
        root = failed[0]
        launcher = job.launcher
        if launcher in ("torchrun", "srun-torchrun", "accelerate", "lightning") and not (launcher == "lightning" and r.random() < 0.5):
            by_node: dict[int, list[tuple[Proc, int, str]]] = {}
            for f in failed:
                by_node.setdefault(f[0].node_index, []).append(f)
            for ni, fs in sorted(by_node.items()):
                first = fs[0]
                lines = [agent_failed(job, t, first[0], first[1])]
                dead = {f[0].rank for f in fs}
                for p in job.procs:
                    if p.node_index == ni and p.rank not in dead:
                        lines.insert(0, agent_sigterm(job, t - 0.2, p))
                table = child_failed_table(job, t, fs, first if ni != root[0].node_index else root)
                job.out(f"agent:{ni}", lines + table, t + 0.5 + ni * 0.1, "summary")
            if launcher == "accelerate" and r.random() < 0.5:
                job.out("agent:0", [
                    "Traceback (most recent call last):",
                    f'  File "{job.python_bin.replace("/python", "/accelerate")}", line 8, in <module>',
                    "    sys.exit(main())",
                    f'  File "{sp(job, "accelerate/commands/launch.py")}", line {r.choice((1033, 1066, 1097))}, in launch_command',
                    "    multi_gpu_launcher(args)",
                    f'  File "{sp(job, "accelerate/commands/launch.py")}", line {r.choice((666, 702, 733))}, in multi_gpu_launcher',
                    "    distrib_run.run(args)",
                ], t + 0.3, "summary")
        elif launcher == "deepspeed":
            d = job.ts(t)
            stamp = f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]"
            lines = [f"{stamp} [INFO] [launch.py:{r.choice((315, 319, 335))}:sigkill_handler] Killing subprocess {p.pid}" for p in job.procs if p.node_index == root[0].node_index]
            lines.append(
                f"{stamp} [ERROR] [launch.py:{r.choice((321, 325, 341))}:sigkill_handler] ['{job.python_bin}', '-u', '{job.script}', '--local_rank={root[0].local}', '--deepspeed', 'ds_config.json'] exits with return code = {root[1]}"
            )
            job.out(f"agent:{root[0].node_index}", lines, t + 0.5, "summary")
        elif launcher == "spawn":
            p, code, _ = root
            if code < 0:
                sig = {-9: "SIGKILL", -11: "SIGSEGV", -6: "SIGABRT", -7: "SIGBUS", -4: "SIGILL", -15: "SIGTERM"}[code]
                exc = [f"torch.multiprocessing.spawn.ProcessExitedException: process {p.rank} terminated with signal {sig}"]
            else:
                culprit_block = next((b.lines for b in job.blocks if b.who == f"rank:{p.rank}" and b.role == "cause"), [])
                tb_start = [i for i, line in enumerate(culprit_block) if line.lstrip("[rank0123456789]: ").startswith("Traceback")]
                inner = culprit_block[tb_start[-1]:] if tb_start else ["RuntimeError: worker failed"]
                exc = ["torch.multiprocessing.spawn.ProcessRaisedException: ", "", f"-- Process {p.rank} terminated with the following error:"] + inner
            lines = []
            if job.at_least("2.1"):
                lines += [f"W{job.ts(t):%m%d %H:%M:%S}.{r.randint(0, 999999):06d} {r.randint(1000, 99999)} torch/multiprocessing/spawn.py:{r.choice((146, 160))}] Terminating process {q.pid} via signal SIGTERM" for q in job.procs if q.rank != p.rank]
            lines += traceback_lines(job, [
                (f"{job.workdir}/{job.script}", r.randint(200, 400), "<module>", f"mp.spawn(main, args=(world_size,), nprocs={job.world}, join=True)"),
                (sp(job, "torch/multiprocessing/spawn.py"), r.choice((240, 246, 328)), "spawn", "return start_processes(fn, args, nprocs, join, daemon, start_method='spawn')"),
                (sp(job, "torch/multiprocessing/spawn.py"), r.choice((198, 202, 284)), "start_processes", "while not context.join():"),
                (sp(job, "torch/multiprocessing/spawn.py"), r.choice((160, 163, 215)), "join", "raise ProcessRaisedException(msg, error_index, failed_process.pid)" if code >= 0 else "raise ProcessExitedException("),
            ], "\n".join(exc))
            job.out("console", lines, t + 0.5, "summary")
        if job.slurm:
            self._slurm_end(failed, t + 1.0)

    def _slurm_end(self, failed: list[tuple[Proc, int, str]], t: float) -> None:
        """srun's exit lines for failed tasks, the step cancel, and the rest terminated."""
        job, r = self.job, self.job.rng
        lines: list[str] = []
        if job.launcher == "srun":
            dead = {f[0].rank: f[1] for f in failed}
            for p, code, _ in failed[:3]:
                what = f"Exited with exit code {code}" if code > 0 else SIGNAL_TEXT.get(code, "Killed")
                lines.append(srun_exit(job, p.node_index, [p.rank], what))
            lines.append("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
            d = job.ts(t + 1)
            lines.append(f"{slurmstepd(job, job.nodes[0])}: error: *** STEP {job.job_id}.0 ON {job.nodes[0]} CANCELLED AT {d:%Y-%m-%dT%H:%M:%S} ***")
            rest = [p for p in job.procs if p.rank not in dead]
            for ni, tasks in sorted(slurm_task_ids(job, rest).items()):
                lines.append(srun_exit(job, ni, tasks, r.choice(("Terminated", "Killed"))))
        else:
            root = failed[0]
            lines.append(srun_exit(job, root[0].node_index, [root[0].node_index if job.launcher != "spawn" else 0], "Exited with exit code 1"))
            if len(job.nodes) > 1:
                lines.append("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
                d = job.ts(t + 1)
                lines.append(f"{slurmstepd(job, job.nodes[0])}: error: *** STEP {job.job_id}.0 ON {job.nodes[0]} CANCELLED AT {d:%Y-%m-%dT%H:%M:%S} ***")
                others = [ni for ni in range(len(job.nodes)) if ni != root[0].node_index]
                lines.append(srun_exit(job, others[0], others, "Terminated") if len(others) == 1 else srun_exit(job, others[0], others, "Terminated").replace(f"{job.nodes[others[0]]}:", f"{job.nodes[others[0]]},{job.nodes[others[-1]]}:", 1))
        job.out("slurm", lines, t, "summary", spread=0.01)

    # -- ends that are not rank failures ------------------------------------------------------------------

    def end_clean(self) -> Truth:
        """A run that completes: final progress, saving, shutdown lines, exit 0."""
        job, r = self.job, self.job.rng
        self.t += r.uniform(30, 200)
        p0 = job.procs[0]
        done = r.choice((
            [f"Training completed. Saving final checkpoint to {job.workdir}/checkpoints/final.pt", "Done."],
            [f"Saved checkpoint to /scratch/{job.user}/{job.project}/ckpt/step_{r.randint(1000, 99999)}.pt", "training finished"],
            ["`Trainer.fit` stopped: `max_epochs=3` reached."],
            [f"{{'train_runtime': {r.uniform(800, 20000):.2f}, 'train_samples_per_second': {r.uniform(10, 300):.3f}, 'train_steps_per_second': {r.uniform(0.1, 4):.3f}, 'train_loss': {r.uniform(0.3, 2):.4f}, 'epoch': 3.0}}"],
        ))
        job.out(p0, done, self.t, "noise")
        if job.at_least("2.4") and r.random() < 0.5:
            msg = (
                "Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"
                if job.at_least("2.6")
                else "WARNING: process group has NOT been destroyed before it is being destructed. On normal program exit, the application should call destroy_process_group to ensure that any pending NCCL data transfers have finished in this process. In rare cases this process can exit before this point and block the progress of another member of the process group. This constraint has always been present,  but this warning has only been added since PyTorch 2.4"
            )
            for p in job.procs:
                job.out(p, [cpp_log(job, p, self.t + 2, "W", f"ProcessGroupNCCL.cpp:{r.choice((1117, 1168, 1250))}") + msg], self.t + 2 + p.rank * 0.01, "scary")
        if job.nccl_debug and r.random() < 0.5:
            for p in job.procs[: r.randint(1, job.world)]:
                job.out(p, [f"{p.node}:{p.pid}:{p.tid + 7} [{p.local}] NCCL INFO [Service thread] Connection closed by localRank {r.randint(0, job.gpus - 1)}"], self.t + 3, "scary")
                if job.nccl_at_least("2.12.0") and not job.nccl_at_least("2.23.0"):
                    job.out(p, [f"{p.node}:{p.pid}:{p.tid} [{p.local}] NCCL INFO comm 0x{r.getrandbits(40):x} rank {p.rank} nranks {job.world} cudaDev {p.local} busId {r.choice(('1b000', '4d000'))} - Abort COMPLETE"], self.t + 3.1, "scary")
        if job.launcher in ("torchrun", "srun-torchrun") and r.random() < 0.4:
            for ni in range(len(job.nodes)):
                job.out(f"agent:{ni}", [agent_log(job, self.t + 5, "I", "agent/server/api.py:" + str(r.choice((709, 722, 874))), "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.", 2900 + ni)], self.t + 5, "noise")
        return Truth()


def watchdog_block(job: Job, p: Proc, t: float, *, seq: int, op: str, numel: int, timeout: int) -> list[str]:
    """A rank's NCCL watchdog timeout, the abort notice and the C++ terminate (release-specific)."""
    r = job.rng
    ran = timeout + r.randint(5, 900)
    numels = f", NumelIn={numel}, NumelOut={numel}" if job.at_least("2.1") else ""
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}{numels}, Timeout(ms)={timeout}) ran for {ran} milliseconds before timing out."
    src = f"ProcessGroupNCCL.cpp:{r.choice((475, 563, 607, 616, 632, 737))}"
    lines = [cpp_log(job, p, t, "E", src) + f"{pg_tag(job, p) if job.at_least('2.4') else f'[Rank {p.rank}]'} Watchdog caught collective operation timeout: {work}"]
    if job.at_least("2.6"):
        lines.append(cpp_log(job, p, t, "E", f"ProcessGroupNCCL.cpp:{r.choice((1664, 1785, 1834))}") + f"{pg_tag(job, p)} failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq + r.randint(0, 3)}, last completed work: {seq - 1}")
    elif job.at_least("2.4"):
        lines.append(cpp_log(job, p, t, "E", f"ProcessGroupNCCL.cpp:{r.choice((1413, 1785))}") + f"{pg_tag(job, p)} Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + r.randint(0, 3)}, last completed NCCL work: {seq - 1}.")
    if job.at_least("1.13"):
        lines.append(cpp_log(job, p, t, "E", f"ProcessGroupNCCL.cpp:{r.choice((577, 1595, 1858))}") + f"{pg_tag(job, p)} Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.")
        lines.append(cpp_log(job, p, t, "E", f"ProcessGroupNCCL.cpp:{r.choice((583, 1601, 1864))}") + f"{pg_tag(job, p)} To avoid data inconsistency, we are taking the entire process down.")
    else:
        lines.append(cpp_log(job, p, t, "E", "ProcessGroupNCCL.cpp:341") + "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are taking the entire process down.")
    if job.at_least("2.4"):
        head = "Process group watchdog thread terminated with exception"
    else:
        head = "NCCL watchdog thread terminated with exception"
    lines.append(cpp_log(job, p, t, "E", f"ProcessGroupNCCL.cpp:{r.choice((916, 1118, 1417))}") + f"{pg_tag(job, p)} {head}: {pg_tag(job, p)} Watchdog caught collective operation timeout: {work}")
    exc_type = "c10::DistBackendError" if job.at_least("2.1") else "std::runtime_error"
    lines += [
        f"terminate called after throwing an instance of '{exc_type}'",
        f"  what():  {pg_tag(job, p)} {head}: {pg_tag(job, p)} Watchdog caught collective operation timeout: {work}",
    ]
    if job.at_least("2.1"):
        lines += [
            f"Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{r.choice((565, 609, 618))} (most recent call first):",
            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x{r.getrandbits(44):x} in {job.site_packages}/torch/lib/libc10.so)",
            f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x{r.getrandbits(44):x} in {job.site_packages}/torch/lib/libtorch_cuda.so)",
            f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x{r.getrandbits(44):x} in {job.site_packages}/torch/lib/libtorch_cuda.so)",
            f"frame #3: <unknown function> + 0xdc253 (0x{r.getrandbits(44):x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        ]
    return lines
