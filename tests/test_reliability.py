"""Calls made at the same time on one model (a web server, a notebook with background jobs, the Space with several
workers) each return exactly what they would alone."""

from __future__ import annotations

import random
import threading

from conftest import make_dflash, make_target, random_prompt
from test_eagle3 import make_eagle3


def test_concurrent_calls_on_one_model_are_each_exact():
    """12 calls in 12 threads, dflash / EAGLE-3 tree / autoregressive on one target: the target's tap hooks fire for
    every thread's forwards, and each call must keep only its own hidden states."""
    target = make_target("qwen3")
    modes = [("dflash", make_dflash(target)), ("eagle3", make_eagle3(target)), ("autoregressive", None)]
    rng = random.Random(0)
    jobs = [(mode, assistant, random_prompt(rng, rng.randint(5, 40))) for _ in range(4) for mode, assistant in modes]
    expected = [target.generate(prompt, max_new_tokens=20, do_sample=False).tolist() for _, _, prompt in jobs]
    results: list = [None] * len(jobs)

    def call(i: int) -> None:
        mode, assistant, prompt = jobs[i]
        try:
            results[i] = target.generate(prompt, assistant_model=assistant, speculative_mode=mode, max_new_tokens=20,
                                         do_sample=False).tolist()
        except Exception as error:  # reported below with the call that raised it
            results[i] = repr(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failures = [(jobs[i][0], results[i]) for i in range(len(jobs)) if results[i] != expected[i]]
    assert not failures, failures
