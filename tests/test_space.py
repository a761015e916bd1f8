"""The Gradio Space, started in-process on the tiny world and driven through gradio_client like a remote visitor."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from conftest import load_repo_module

pytestmark = pytest.mark.xdist_group("space")  # with test_space_browser, on one worker (see there)


@pytest.fixture(scope="module")
def space_url():
    import os

    os.environ["SPECGEN_WORLD"] = "tiny"  # the embedded models: seconds, whatever else is installed
    os.environ["SPECGEN_DTYPE"] = "fp32"  # exact: bf16 multi-token verifies may round a near-tie differently
    module = load_repo_module("space/app.py", "space_app")
    app = module.build_app()
    _, url, _ = app.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    yield url
    app.close()
    os.environ.pop("SPECGEN_WORLD")
    os.environ.pop("SPECGEN_DTYPE")


def _client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


@pytest.mark.parametrize("method", ["dflash", "eagle3", "whiflash", "classic"])
def test_compare_api_returns_identical_texts_and_positive_stats_for_lossless_methods(space_url, method):
    baseline, speculative, stats = _client(space_url).predict(
        "Complete this function:\ndef add(a, b):", method, 40, api_name="/compare")
    assert baseline and speculative == baseline and stats["identical"] is True
    assert stats["baseline_tokens_per_s"] > 0 and stats["speculative_tokens_per_s"] > 0 and stats["tau"] >= 1
    assert stats["new_tokens"] > 0 and stats["lossy"] is False


def test_fly_is_reported_as_lossy(space_url):
    _, _, stats = _client(space_url).predict("Solve: 12 + 30", "fly", 32, api_name="/compare")
    assert stats["lossy"] is True and stats["tau"] >= 1


def test_four_visitors_at_once_all_get_their_answers(space_url):
    prompts = [f"Solve: {a} + {a * 3}" for a in range(2, 6)]
    results, errors = {}, []

    def visit(prompt):
        try:
            results[prompt] = _client(space_url).predict(prompt, "dflash", 24, api_name="/compare")
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=visit, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and sorted(results) == sorted(prompts)
    assert all(r[2]["identical"] and r[0] == r[1] for r in results.values())


@pytest.mark.parametrize("prompt, method, max_new, message", [
    ("", "dflash", 16, "Type a prompt first"),
    ("   ", "dflash", 16, "Type a prompt first"),
    ("x" * 5000, "dflash", 16, "at most 4000"),
    ("Solve: 1 + 2", "dflash", 0, "between 1 and 256"),
    ("Solve: 1 + 2", "dflash", 10_000, "between 1 and 256"),
    ("Solve: 1 + 2", "medusa", 16, "not available here"),
])
def test_bad_inputs_get_a_message_and_the_app_keeps_serving(space_url, prompt, method, max_new, message):
    client = _client(space_url)
    with pytest.raises(Exception, match=message):
        client.predict(prompt, method, max_new, api_name="/compare")
    baseline, speculative, _ = client.predict("Solve: 2 + 2", "dflash", 8, api_name="/compare")
    assert baseline == speculative  # the next visitor is served normally


def test_token_origins_follow_the_acceptance_lengths(space_url):
    module = sys.modules["space_app"]
    assert module.origins(True, [3, 1, 2], 7) == ["target", "draft", "draft", "target", "target", "draft", "target"]
    assert module.origins(True, [4], 3) == ["target", "draft", "draft"]  # cut by max_new_tokens


def test_a_visitor_who_leaves_stops_the_decode_in_flight(space_url):
    """Closing the stream (what gradio does when the page goes away) stops the running generate at its next round,
    so it never competes with the next visitor's timed decode."""
    demo = sys.modules["space_app"].Demo(sys.modules["space_app"].load_models())
    stream = demo.decode_pair("Continue the text:\nThe", "dflash", 256)
    frame = next(stream)
    started = time.perf_counter()
    stream.close()  # GeneratorExit inside: cancel + join
    assert time.perf_counter() - started < 5
    assert frame.baseline.done.is_set() and len(frame.baseline.tokens()) < 256
