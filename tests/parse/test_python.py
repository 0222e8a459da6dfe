def test_a_traceback_names_the_innermost_frame_of_the_jobs_own_code() -> None:
    from logsleuth import parse
    from logsleuth.ingest import ingest_text

    text = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/user/proj/train.py", line 88, in <module>\n'
        "[rank1]:     main()\n"
        '[rank1]:   File "/home/user/proj/train.py", line 42, in step\n'
        "[rank1]:     loss = model(batch)\n"
        '[rank1]:   File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n'
        "[rank1]:     return forward_call(*args, **kwargs)\n"
        "[rank1]: ValueError: bad batch shape\n"
    )
    events = parse.build(ingest_text(text, parse.KEYWORDS).lines, {})
    tb = events.filter(events["kind"] == "traceback").row(0, named=True)
    assert tb["frame"] == "/home/user/proj/train.py:42 in step"
    assert tb["detail"].endswith("module.py:1501 in _call_impl")  # the last frame, as before
