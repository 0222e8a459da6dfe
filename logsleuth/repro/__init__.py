"""The reproducer: re-run the suspect collective, the same way, in a minute.

``plan`` works out what to run (from the logs, the flags, or both), ``run``
starts the processes, times and checks the collective and has the analyzer
read what they printed, ``emit`` writes the same test as a cluster script.
Only ``worker`` imports torch, and only in the child processes it runs in, so
importing this package (or running ``logsleuth analyze``) never loads torch.
"""
