"""PyTorch's shape checks are bugs of the script: a cut traceback ending in one, then the launcher's
failure table without a traceback, still reads as user_code_error (not unknown)."""

from __future__ import annotations

from pathlib import Path

import logsleuth


def test_a_headless_shape_mismatch_before_torchruns_failure_table_is_user_code(tmp_path: Path) -> None:
    # trl#316's layout: a traceback pasted from its frames on, unranked, then torchrun's table naming rank 1
    lines = [
        '  File "/opt/envs/trl/lib/python3.8/site-packages/torch/optim/adam.py", line 344, in _single_tensor_adam',
        "    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)",
        "RuntimeError: The size of tensor a (9846529) must match the size of tensor b (39386113) at non-singleton dimension 0",
        "Traceback (most recent call last):",
        '  File "/opt/envs/trl/lib/python3.8/site-packages/torch/distributed/launcher/api.py", line 250, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "[1]:",
        "  time      : 2023-04-25_13:29:47",
        "  host      : node01",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 1 (pid: 227062)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    ]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = logsleuth.analyze([str(tmp_path / "train.log")])
    assert report.verdict.category == "user_code_error"
    assert report.verdict.first_failure.rank == 1
    assert any("must match the size of tensor b" in e.text for e in report.verdict.evidence)
