"""The SLURM epilog without SLURM: finding the output, deciding, writing, and always exiting 0.

The environments below are what slurm-wlm 22.05 gave a real Epilog and
EpilogSlurmctld (see tests/slurm/ for the same with a running SLURM).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from logsleuth.epilog import Job, expand_pattern, first_host, output_files, run, tail_shows_failure

from .conftest import ROOT

EPILOG = ROOT / "examples" / "slurm" / "epilog.sh"
FIXTURES = ROOT / "tests" / "fixtures"

#: slurmd Epilog of `sbatch -J myname -o '%x-%j-%u-%N.out' -e 'err-%j.txt' --wrap 'echo hi; srun false'`
SLURMD_ENV = {
    "SLURMD_NODENAME": "node01",
    "SLURM_JOBID": "2",
    "SLURM_JOB_ID": "2",
    "SLURM_JOB_DERIVED_EC": "256",
    "SLURM_JOB_EXIT_CODE2": "1:0",
    "SLURM_JOB_EXIT_CODE": "256",
    "SLURM_JOB_GID": "65534",
    "SLURM_JOB_UID": "65534",
    "SLURM_JOB_USER": "nobody",
    "SLURM_JOB_STDERR": "/tmp/jobs/err-%j.txt",
    "SLURM_JOB_STDOUT": "/tmp/jobs/%x-%j-%u-%N.out",
    "SLURM_JOB_WORK_DIR": "/tmp/jobs",
    "SLURM_NODELIST": "node01",
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
}
#: EpilogSlurmctld of task 1 of `sbatch --array=1-2 -o 'a-%A_%a-%x.out' --wrap 'exit 2'`
SLURMCTLD_ENV = {
    "SLURM_ARRAY_JOB_ID": "9",
    "SLURM_ARRAY_TASK_ID": "1",
    "SLURM_JOB_ID": "10",
    "SLURM_JOB_EXIT_CODE2": "2:0",
    "SLURM_JOB_EXIT_CODE": "512",
    "SLURM_JOB_DERIVED_EC": "0",
    "SLURM_JOB_NAME": "wrap",
    "SLURM_JOB_NODELIST": "node01",
    "SLURM_JOB_STDOUT": "/tmp/jobs/a-%A_%a-%x.out",
    "SLURM_JOB_USER": "nobody",
    "SLURM_JOB_WORK_DIR": "/tmp/jobs",
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
}


def env_for(folder: Path, **changes: str) -> dict[str, str]:
    """A slurmd Epilog environment for a job whose default output lives in ``folder``."""
    env = {k: v for k, v in SLURMD_ENV.items() if k not in ("SLURM_JOB_STDOUT", "SLURM_JOB_STDERR")}
    env.update(SLURM_JOB_ID="23", SLURM_JOBID="23", SLURM_JOB_WORK_DIR=str(folder), SLURM_JOB_UID="0", SLURM_JOB_GID="0")
    env.update(changes)
    return env


def test_pattern_expansion_matches_what_slurm_wrote() -> None:
    # SLURM 22.05 named the output of job 11 (not an array) "na-11-4294967294-11-batch-0-0-011-%.out"
    job = Job.from_env(dict(SLURMD_ENV, SLURM_JOB_ID="11"))
    got = expand_pattern("na-%A-%a-%J-%s-%n-%t-%3j-%%.out", job, array=("11", "4294967294"))
    assert got == "na-11-4294967294-11-batch-0-0-011-%.out"


def test_what_the_environment_does_not_say_becomes_a_glob_and_a_backslash_stops_expansion() -> None:
    job = Job.from_env(SLURMD_ENV)  # a slurmd Epilog gets no SLURM_JOB_NAME
    assert expand_pattern(SLURMD_ENV["SLURM_JOB_STDOUT"], job, array=(None, None)) == "/tmp/jobs/*-2-nobody-node01.out"
    assert expand_pattern("/tmp/x\\%j.out", job, array=(None, None)) == "/tmp/x%j.out"
    ctld = Job.from_env(SLURMCTLD_ENV)
    assert expand_pattern(SLURMCTLD_ENV["SLURM_JOB_STDOUT"], ctld, array=("9", "1")) == "/tmp/jobs/a-9_1-wrap.out"


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("node01", "node01"), ("gpu[07-09,12]", "gpu07"), ("gpu[3,1],cpu1", "gpu3"), ("r[1-2]-n[01-04]", "r1-n01"), ("a,b[1-2]", "a")],
)
def test_first_host_of_a_hostlist(nodelist: str, first: str) -> None:
    assert first_host(nodelist) == first


@pytest.mark.parametrize(
    ("codes", "failed"),
    [
        ({"SLURM_JOB_EXIT_CODE": "768", "SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_DERIVED_EC": "0"}, True),
        ({"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_DERIVED_EC": "256"}, True),
        ({"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_DERIVED_EC": "0"}, False),
        ({}, None),
    ],
)
def test_exit_codes(codes: dict[str, str], failed: bool | None) -> None:
    assert Job.from_env({"SLURM_JOB_ID": "1", **codes}).failed() is failed


def test_output_files_by_pattern_default_and_unresolvable(tmp_path: Path) -> None:
    (tmp_path / "myname-2-nobody-node01.out").write_text("hi\n")
    (tmp_path / "err-2.txt").write_text("srun: error: node01: task 0: Exited with exit code 1\n")
    env = dict(SLURMD_ENV, SLURM_JOB_STDOUT=f"{tmp_path}/%x-%j-%u-%N.out", SLURM_JOB_STDERR=f"{tmp_path}/err-%j.txt")
    assert output_files(Job.from_env(env)) == [f"{tmp_path}/myname-2-nobody-node01.out", f"{tmp_path}/err-2.txt"]
    (tmp_path / "other-2-nobody-node01.out").write_text("hi\n")  # now %x could be either: do not guess
    assert output_files(Job.from_env(env)) == [f"{tmp_path}/err-2.txt"]
    (tmp_path / "slurm-23.out").write_text("x\n")
    (tmp_path / "slurm-5_1.out").write_text("x\n")
    assert output_files(Job.from_env(env_for(tmp_path))) == [f"{tmp_path}/slurm-23.out"]
    assert output_files(Job.from_env(env_for(tmp_path, SLURM_JOB_ID="99"))) == [f"{tmp_path}/slurm-5_1.out"]  # an array task
    (tmp_path / "slurm-5_2.out").write_text("x\n")
    assert output_files(Job.from_env(env_for(tmp_path, SLURM_JOB_ID="99"))) == []  # which task? cannot tell


def test_tail_tells_killed_jobs_from_clean_ones(tmp_path: Path) -> None:
    assert tail_shows_failure([str(p) for p in FIXTURES.glob("slurm-time-limit/*.out")])
    assert tail_shows_failure([str(p) for p in FIXTURES.glob("slurm-cancel/*.out")])
    clean = tmp_path / "slurm-1.out"
    clean.write_text("".join(f"0: rank 0 step {i} loss 0.1\n" for i in range(20000)))
    assert not tail_shows_failure([str(clean)])


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    shutil.copy(FIXTURES / "slurm-raise" / "slurm-23.out", tmp_path)
    return tmp_path


def test_run_writes_json_and_markdown_next_to_the_output(job_dir: Path) -> None:
    outcome = run(env_for(job_dir))
    assert outcome.written == [str(job_dir / "slurm-23.logsleuth.json"), str(job_dir / "slurm-23.logsleuth.md")]
    data = json.loads((job_dir / "slurm-23.logsleuth.json").read_text())
    assert data["verdict"]["category"] == "user_code_error" and data["verdict"]["first_failure"]["rank"] == 1
    assert data["job"]["id"] == "23" and data["job"]["exit"] == "1:0"
    assert (job_dir / "slurm-23.logsleuth.md").read_text().startswith("Job 23, exit 1:0, nodes node01\n\n## logsleuth:")
    assert outcome.message.startswith("job 23: user_code_error (user_code_error; rank 1; node01) -> ")


def test_reports_are_as_private_as_the_output(job_dir: Path) -> None:
    (job_dir / "slurm-23.out").chmod(0o600)
    run(env_for(job_dir))
    assert stat.S_IMODE((job_dir / "slurm-23.logsleuth.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((job_dir / "slurm-23.logsleuth.md").stat().st_mode) == 0o600


def test_run_into_a_report_dir_and_a_store(job_dir: Path, tmp_path: Path) -> None:
    out = run(env_for(job_dir), report_dir=str(tmp_path / "reports"), store=str(tmp_path / "store"))
    assert (tmp_path / "reports" / "slurm-23.logsleuth.json").exists()
    assert pl.read_parquet(out.written[-1]).item(0, "job") == "23"


def test_a_job_the_epilog_stored_is_skipped_by_a_later_batch(job_dir: Path, tmp_path: Path) -> None:
    from logsleuth.batch import Options, discover, stored

    run(env_for(job_dir), store=str(tmp_path / "store"))
    (job,) = discover([job_dir]).jobs  # the archive, later: slurm-23.out (the epilog's reports are no logs)
    assert job.fingerprint in stored(tmp_path / "store", Options().version())[0]


def test_a_report_that_cannot_be_written_is_said_not_raised(job_dir: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    outcome = run(env_for(job_dir), report_dir=str(blocked))
    assert outcome.message.startswith("job 23: user_code_error, but the report could not be written:") and not outcome.written


def test_run_acts_only_on_the_batch_host(job_dir: Path) -> None:
    outcome = run(env_for(job_dir, SLURMD_NODENAME="node02", SLURM_NODELIST="node[01-02]"))
    assert "analysed on the batch host node01" in outcome.message and not outcome.written


def test_a_clean_job_is_skipped_unless_always(tmp_path: Path) -> None:
    (tmp_path / "slurm-23.out").write_text("0: rank 0 step 1 loss 0.5\n0: done\n")
    ok = {"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_DERIVED_EC": "0"}
    assert "skipped, exit 0:0" in run(env_for(tmp_path, **ok)).message
    assert run(env_for(tmp_path, **ok), always=True).written


def test_deciding_to_skip_a_clean_job_loads_no_analysis(tmp_path: Path) -> None:
    # every job ends through the epilog; for the many that end well it must stay cheap
    (tmp_path / "slurm-23.out").write_text("0: rank 0 step 1 loss 0.5\n0: done\n")
    env = env_for(tmp_path, SLURM_JOB_EXIT_CODE="0", SLURM_JOB_EXIT_CODE2="0:0", SLURM_JOB_DERIVED_EC="0")
    code = "import json, sys\nfrom logsleuth.cli import app\nfrom logsleuth.epilog import run\n"
    code += "print(run(json.loads(sys.argv[1])).message)\nprint('polars' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(env)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["job 23: skipped, exit 0:0 and no failure at the end of its output", "False"], proc.stderr


def test_a_time_limit_with_exit_code_0_is_still_analysed(tmp_path: Path) -> None:
    # SLURM 22.05 hands the epilog SLURM_JOB_EXIT_CODE=0 for jobs killed at their time limit
    shutil.copy(next(FIXTURES.glob("slurm-time-limit/*.out")), tmp_path / "slurm-23.out")
    ok = {"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_DERIVED_EC": "0"}
    outcome = run(env_for(tmp_path, **ok))
    assert outcome.message.startswith("job 23: slurm_time_limit")


def test_no_output_and_no_job_are_said_plainly(tmp_path: Path) -> None:
    assert "no output file found (slurm-%j.out in" in run(env_for(tmp_path)).message
    assert "not run from a SLURM epilog" in run({}).message


# --- the shell script itself -------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user can enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="logsleuth-epilog-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def epilog(env: dict[str, str], conf: Path, settings: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run examples/slurm/epilog.sh as slurmd would (no PATH, only SLURM variables); return it and its log."""
    log = conf.parent / "epilog.log"
    conf.write_text(f"LOGSLEUTH_LOG={log}\n{settings}\n")
    proc = subprocess.run([str(EPILOG)], env={**env, "LOGSLEUTH_EPILOG_CONF": str(conf)}, capture_output=True, text=True, timeout=timeout)
    return proc, log.read_text() if log.exists() else ""


def python_cmd() -> str:
    return f'LOGSLEUTH_CMD="{sys.executable} -m logsleuth"\nLOGSLEUTH_PYTHONPATH={ROOT}'


def test_script_writes_the_report_and_one_log_line(job_dir: Path, tmp_path: Path) -> None:
    proc, log = epilog(env_for(job_dir, SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_GID=str(os.getgid())), tmp_path / "c", python_cmd())
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""
    assert (job_dir / "slurm-23.logsleuth.json").exists()
    assert "job 23: user_code_error (user_code_error; rank 1; node01) -> " in log


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ('LOGSLEUTH_CMD="/nonexistent/logsleuth"', "logsleuth exited with status 127"),
        ("LOGSLEUTH_CMD=false", "logsleuth exited with status 1"),
        ("this is not shell (", ""),
    ],
    ids=["missing", "failing", "broken-config"],
)
def test_script_exits_0_when_logsleuth_cannot_run(job_dir: Path, tmp_path: Path, settings: str, said: str) -> None:
    proc, log = epilog(env_for(job_dir), tmp_path / "c", settings)
    assert proc.returncode == 0 and said in log


def test_script_exits_0_within_its_time_limit(job_dir: Path, tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    started = time.monotonic()
    proc, log = epilog(env_for(job_dir), tmp_path / "c", f"LOGSLEUTH_CMD={slow}\nLOGSLEUTH_TIMEOUT=2", timeout=30)
    assert proc.returncode == 0 and time.monotonic() - started < 10
    assert "job 23: stopped after 2s" in log


def test_script_ignores_a_config_others_may_write(job_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text(f"LOGSLEUTH_LOG={tmp_path / 'from-conf.log'}\nLOGSLEUTH_CMD=false\n")
    env = {**env_for(job_dir), "LOGSLEUTH_EPILOG_CONF": str(conf), "LOGSLEUTH_LOG": str(tmp_path / "from-env.log")}
    subprocess.run([str(EPILOG)], env=env, timeout=60, check=True)
    assert (tmp_path / "from-conf.log").exists() and not (tmp_path / "from-env.log").exists()  # the file wins
    (tmp_path / "from-conf.log").unlink()
    conf.chmod(0o666)  # now anyone could put commands in it: it must not be read
    subprocess.run([str(EPILOG)], env=env, timeout=60, check=True)
    assert (tmp_path / "from-env.log").exists() and not (tmp_path / "from-conf.log").exists()


def test_script_exits_0_outside_slurm_and_with_an_unwritable_log(tmp_path: Path) -> None:
    env = {"LOGSLEUTH_EPILOG_CONF": "/nonexistent", "LOGSLEUTH_LOG": "/nonexistent/epilog.log"}
    proc = subprocess.run([str(EPILOG)], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def args_probe(folder: Path) -> Path:
    """A stand-in for logsleuth that only prints the arguments the epilog gave it."""
    probe = folder / "args"
    probe.write_text('#!/bin/sh\necho "args $*"\n')
    probe.chmod(0o755)
    return probe


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to the job's user needs root, as slurmd has")


@needs_root
def test_script_runs_logsleuth_as_the_jobs_user(shared_dir: Path, tmp_path: Path) -> None:
    probe = shared_dir / "whoami"
    probe.write_text('#!/bin/sh\necho "uid $(id -u) gid $(id -g) args $*"\n')
    probe.chmod(0o755)
    (shared_dir / "slurm-23.out").write_text("srun: error: node01: task 0: Exited with exit code 1\n")
    proc, log = epilog(env_for(shared_dir, SLURM_JOB_UID="65534", SLURM_JOB_GID="65534"), tmp_path / "c", f"LOGSLEUTH_CMD={probe}")
    assert proc.returncode == 0 and "uid 65534 gid 65534 args epilog --budget 10" in log


@needs_root
def test_script_report_dir_is_owned_by_the_user_and_private(shared_dir: Path, tmp_path: Path) -> None:
    probe = args_probe(shared_dir)
    spool = shared_dir / "spool"
    env = env_for(shared_dir, SLURM_JOB_UID="65534", SLURM_JOB_GID="65534", SLURM_JOB_USER="nobody")
    proc, log = epilog(env, tmp_path / "c", f"LOGSLEUTH_CMD={probe}\nLOGSLEUTH_REPORT_DIR={spool}\nLOGSLEUTH_STORE={spool}/history")
    assert proc.returncode == 0 and f"--report-dir {spool}/nobody --store {spool}/history" in log
    mine = (spool / "nobody").stat()
    assert (mine.st_uid, stat.S_IMODE(mine.st_mode)) == (65534, 0o700)
    assert stat.S_IMODE((spool / "history").stat().st_mode) == 0o1733  # all may add, none may list


@needs_root
@pytest.mark.parametrize("mode", [0o1777, 0o777], ids=["sticky-world-writable", "world-writable"])
def test_script_refuses_a_report_dir_users_may_write_where_a_link_was_planted(shared_dir: Path, tmp_path: Path, mode: int) -> None:
    """A user who may write LOGSLEUTH_REPORT_DIR plants `<user> -> /a/root/folder`; root must not chown its target."""
    probe = args_probe(shared_dir)
    spool, target = shared_dir / "spool", shared_dir / "roots-own"
    spool.mkdir()
    spool.chmod(mode)
    target.mkdir(mode=0o755)
    (spool / "nobody").symlink_to(target)
    env = env_for(shared_dir, SLURM_JOB_UID="65534", SLURM_JOB_GID="65534", SLURM_JOB_USER="nobody")
    proc, log = epilog(env, tmp_path / "c", f"LOGSLEUTH_CMD={probe}\nLOGSLEUTH_REPORT_DIR={spool}")
    assert proc.returncode == 0 and "refusing LOGSLEUTH_REPORT_DIR" in log and "args" not in log
    assert (target.stat().st_uid, stat.S_IMODE(target.stat().st_mode)) == (0, 0o755)


@needs_root
def test_script_never_chowns_through_a_link_in_the_report_dir(shared_dir: Path, tmp_path: Path) -> None:
    probe = args_probe(shared_dir)
    spool, target = shared_dir / "spool", shared_dir / "roots-own"
    spool.mkdir(mode=0o755)
    target.mkdir(mode=0o755)
    (spool / "nobody").symlink_to(target)
    env = env_for(shared_dir, SLURM_JOB_UID="65534", SLURM_JOB_GID="65534", SLURM_JOB_USER="nobody")
    proc, log = epilog(env, tmp_path / "c", f"LOGSLEUTH_CMD={probe}\nLOGSLEUTH_REPORT_DIR={spool}")
    assert proc.returncode == 0 and "is a link" in log and "args" not in log
    assert target.stat().st_uid == 0


@needs_root
def test_script_refuses_a_report_dir_a_user_owns(shared_dir: Path, tmp_path: Path) -> None:
    probe = args_probe(shared_dir)
    spool = shared_dir / "spool"
    spool.mkdir(mode=0o755)
    os.chown(spool, 65534, 65534)
    env = env_for(shared_dir, SLURM_JOB_UID="65534", SLURM_JOB_GID="65534", SLURM_JOB_USER="nobody")
    proc, log = epilog(env, tmp_path / "c", f"LOGSLEUTH_CMD={probe}\nLOGSLEUTH_REPORT_DIR={spool}")
    assert proc.returncode == 0 and "refusing LOGSLEUTH_REPORT_DIR" in log


def test_fifty_epilogs_at_once_all_write_their_report_and_history_row(shared_dir: Path, tmp_path: Path) -> None:
    """Jobs ending together on a small node: each waits for a slot instead of all missing their time limit."""
    store, jobs = shared_dir / "history", range(101, 151)
    conf = tmp_path / "c"
    conf.write_text(
        f"LOGSLEUTH_LOG={tmp_path / 'epilog.log'}\n{python_cmd()}\nLOGSLEUTH_STORE={store}\n"
        f"LOGSLEUTH_LOCK_DIR={tmp_path / 'locks'}\nLOGSLEUTH_QUEUE_WAIT=600\n"
    )
    procs = []
    for job in jobs:
        folder = shared_dir / f"job{job}"
        folder.mkdir()
        shutil.copy(FIXTURES / "slurm-raise" / "slurm-23.out", folder / f"slurm-{job}.out")
        env = env_for(folder, SLURM_JOB_ID=str(job), SLURM_JOBID=str(job), SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_GID=str(os.getgid()))
        procs.append(subprocess.Popen([str(EPILOG)], env={**env, "LOGSLEUTH_EPILOG_CONF": str(conf)}))
    assert all(p.wait(timeout=900) == 0 for p in procs)
    assert sorted(p.name for p in shared_dir.glob("job*/*.logsleuth.json")) == sorted(f"slurm-{j}.logsleuth.json" for j in jobs)
    assert len(list(store.glob("*.parquet"))) == len(jobs)
