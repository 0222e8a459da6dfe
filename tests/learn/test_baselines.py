"""The naive baselines do what people do: trust the exit code, the last exception, the first keyword."""

from __future__ import annotations

import textwrap
from pathlib import Path

from logsleuth import rulebook
from logsleuth.classify import FeatureConfig
from logsleuth.learn import baselines
from logsleuth.learn.corpus import Observation, observe, read_case
from logsleuth.learn.train import Settings, load_masks


def observed(tmp_path: Path, text: str) -> Observation:
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "case.toml").write_text('label = "unknown"\ncategory = "unknown"\ngroup = "g"\n')
    (folder / "job.log").write_text(textwrap.dedent(text).lstrip("\n"))
    return observe(read_case(folder), rulebook.load(), FeatureConfig(Settings().dim, load_masks()))


def test_exit_code_folklore_reads_sigkill_as_host_oom(tmp_path: Path) -> None:
    obs = observed(
        tmp_path,
        """
        srun: error: node01: task 1: Exited with exit code 1
        srun: error: node02: task 5: Killed
    """,
    )
    assert baselines.exit_code(obs) == "host_oom"


def test_last_exception_maps_the_last_type_printed(tmp_path: Path) -> None:
    obs = observed(
        tmp_path,
        """
        Traceback (most recent call last):
          File "train.py", line 3, in <module>
        ModuleNotFoundError: No module named 'apex'
        Traceback (most recent call last):
          File "train.py", line 9, in <module>
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
    """,
    )
    assert baselines.last_exception(obs) == "cuda_oom"


def test_first_keyword_takes_the_earliest_line_with_a_known_phrase(tmp_path: Path) -> None:
    obs = observed(
        tmp_path,
        """
        [W socket.cpp:558] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 111 - Connection refused).
        RuntimeError: CUDA error: out of memory
    """,
    )
    assert baselines.first_keyword(obs) == "master_unreachable"


def test_a_quiet_log_reads_as_none_to_every_naive_baseline(tmp_path: Path) -> None:
    obs = observed(tmp_path, "epoch 1 step 10 | loss 0.3\nTraining completed.\n")
    assert {baselines.exit_code(obs), baselines.last_exception(obs), baselines.first_keyword(obs)} == {"none"}
