"""A real torchrun 2.13 run (3 ranks, gloo, rank 1 raises), produced on this project's
CI machine by a 3-process torchrun of a script whose rank 1 raises after three all_reduces; this machine's paths and host name replaced."""

TORCHRUN_VALUEERROR = r"""W1122 03:59:44.349000 25272 torch/distributed/run.py:874]
W1122 03:59:44.349000 25272 torch/distributed/run.py:874] *****************************************
W1122 03:59:44.349000 25272 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.
W1122 03:59:44.349000 25272 torch/distributed/run.py:874] *****************************************
step 0 ok
step 0 ok
step 0 ok
step 2 ok
[rank1]: Traceback (most recent call last):
[rank1]:   File "/home/user/run/t.py", line 9, in <module>
[rank1]:     raise ValueError("bad sample 17 on purpose")
[rank1]: ValueError: bad sample 17 on purpose
[rank2]: Traceback (most recent call last):
[rank2]:   File "/home/user/run/t.py", line 11, in <module>
[rank2]:     dist.all_reduce(t)
[rank2]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper
[rank2]:     return func(*args, **kwargs)
[rank2]:            ^^^^^^^^^^^^^^^^^^^^^
[rank2]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[rank2]:     work.wait()
[rank2]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:43188. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️
W1122 03:59:47.084000 25272 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 25299 closing signal SIGTERM
W1122 03:59:47.084000 25272 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 25301 closing signal SIGTERM
E1122 03:59:47.118000 25272 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 25300) of binary: /opt/venv/bin/python3
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
t.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_03:59:47
  host      : node01.cluster.example
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 25299)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 25299
[2]:
  time      : 2026-11-22_03:59:47
  host      : node01.cluster.example
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 25301)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 25301
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_03:59:47
  host      : node01.cluster.example
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 25300)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
