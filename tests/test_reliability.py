"""Reliability under real use (issue 17): calls made at the same time on one model (a web server, a notebook with
background jobs, the Space with several workers) each return exactly what they would alone; long runs stay exact
and leave nothing behind; inputs stock generate meets get a clear error before any forward (or stock's own
warning); loading a drafter never runs code from its folder."""

from __future__ import annotations

import gc
import logging
import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch
from transformers import AutoModel, Qwen3Config, Qwen3ForCausalLM
from transformers.generation.streamers import BaseStreamer

import hf_specgen
from conftest import GEOMETRY, VOCAB, make_dflash, make_target, random_prompt
from test_eagle3 import make_eagle3


# ---------------------------------------------------------------------------------------------------- concurrency

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


def test_fifty_threaded_calls_mixing_four_modes_are_each_exact():
    """50 calls from 8 worker threads, dflash / EAGLE-3 / classic / autoregressive interleaved on one target: whichever
    calls overlap, each returns what stock greedy returns for its prompt."""
    target = make_target("qwen3")
    modes = [("dflash", make_dflash(target)), ("eagle3", make_eagle3(target)),
             ("classic", make_target("qwen3", seed=5, num_hidden_layers=1)), ("autoregressive", None)]
    rng = random.Random(1)
    jobs = [(*modes[i % len(modes)], random_prompt(rng, rng.randint(3, 40)), rng.randint(12, 20)) for i in range(50)]
    expected = [target.generate(prompt, max_new_tokens=n, do_sample=False).tolist() for _, _, prompt, n in jobs]

    def call(job) -> list | str:
        mode, assistant, prompt, n = job
        try:
            return target.generate(prompt, assistant_model=assistant, speculative_mode=mode, max_new_tokens=n,
                                   do_sample=False).tolist()
        except Exception as error:  # reported below with the call that raised it
            return repr(error)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(call, jobs))
    failures = [(jobs[i][0], results[i]) for i in range(len(jobs)) if results[i] != expected[i]]
    assert not failures, failures


# ---------------------------------------------------------------------------------------------------- long runs

def resident_bytes() -> int:
    gc.collect()  # count only what is still referenced
    return psutil.Process().memory_info().rss


def kept_state(*models) -> list:
    """Everything a call could leave behind on the models and their submodules: attribute names, the sizes of
    containers (hook dicts, cached decoders, lists) and the shapes of tensors kept as attributes or buffers."""
    state = []
    for model in models:
        for name, module in model.named_modules():
            for key, value in sorted(module.__dict__.items()):
                if isinstance(value, (list, tuple, dict, set)):
                    state.append((name, key, len(value)))
                elif isinstance(value, torch.Tensor):
                    state.append((name, key, tuple(value.shape)))
                else:
                    state.append((name, key))
            state.extend((name, key, tuple(buffer.shape)) for key, buffer in module.named_buffers(recurse=False))
    return state


def test_three_hundred_calls_stay_exact_and_leave_nothing_behind():
    """300 calls on one target, cycling five decoders (dflash, EAGLE-3 tree and chain, classic, autoregressive),
    four prompt lengths and three max_new_tokens: every output equals stock greedy; after a 50-call warm-up the
    resident set grows under 5% and live Python objects by fewer than one per call; what is kept on the models
    (attributes, hooks, cached decoders, buffers) ends as it was before the first call."""
    target = make_target("qwen3")
    dflash, eagle3, small = make_dflash(target), make_eagle3(target), make_target("qwen3", seed=5, num_hidden_layers=1)
    eagle3_chain = dict(eagle_top_k=1, num_draft_tokens=4)
    decoders = [("dflash", dflash, {}), ("eagle3", eagle3, {}), ("eagle3", eagle3, eagle3_chain),
                ("classic", small, {}), ("autoregressive", None, {})]
    rng = random.Random(2)
    prompts = [random_prompt(rng, length) for length in (2, 15, 40, 90)]
    budgets = (1, 8, 20)
    expected = {(p, n): target.generate(prompts[p], max_new_tokens=n, do_sample=False).tolist()
                for p in range(len(prompts)) for n in budgets}  # once per distinct (prompt, max_new_tokens)
    models = (target, dflash, eagle3, small)
    initial_state = kept_state(*models)
    for i in range(300):
        mode, assistant, extra = decoders[i % len(decoders)]
        p, n = i % len(prompts), budgets[i % len(budgets)]
        out = target.generate(prompts[p], assistant_model=assistant, speculative_mode=mode, max_new_tokens=n,
                              do_sample=False, **extra)
        assert out.tolist() == expected[(p, n)], (i, mode, extra, p, n)
        if i == 49:
            warm_rss, warm_objects = resident_bytes(), len(gc.get_objects())
    growth = resident_bytes() / warm_rss - 1
    assert growth < 0.05, f"resident set grew {growth:.1%} between call 50 and call 300"
    assert len(gc.get_objects()) - warm_objects < 250, "live Python objects grew by one or more per call"
    assert kept_state(*models) == initial_state
    assert not getattr(target, "_hf_specgen_decoders", {})  # eager calls cache no decoder on the target


# ---------------------------------------------------------------------------------------------------- interrupted calls

class FailingStreamer(BaseStreamer):
    """Raises ``error`` on its third put (after the prompt and the first new token: in the first decode round), as a
    closed connection would."""

    def __init__(self, error: BaseException):
        self.error, self.puts = error, 0

    def put(self, value):
        self.puts += 1
        if self.puts == 3:
            raise self.error

    def end(self):
        pass


@pytest.mark.parametrize("error", [RuntimeError("client went away"), KeyboardInterrupt()], ids=["exception", "ctrl-c"])
@pytest.mark.parametrize("mode", ["dflash", "eagle3"])
def test_a_call_interrupted_mid_decode_leaves_nothing_behind(mode, error):
    """An exception or Ctrl-C raised from a streamer mid-decode reaches the caller, leaves no hook or state on the
    models, and the next call on them is exact."""
    target = make_target("qwen3")
    drafter = make_dflash(target) if mode == "dflash" else make_eagle3(target)
    prompt = random_prompt(random.Random(4), 12)
    expected = target.generate(prompt, max_new_tokens=24, do_sample=False).tolist()
    before = kept_state(target, drafter)
    streamer = FailingStreamer(error)
    with pytest.raises(type(error)):
        target.generate(prompt, assistant_model=drafter, speculative_mode=mode, max_new_tokens=24, do_sample=False,
                        streamer=streamer)
    assert streamer.puts == 3
    assert kept_state(target, drafter) == before
    out = target.generate(prompt, assistant_model=drafter, speculative_mode=mode, max_new_tokens=24, do_sample=False)
    assert out.tolist() == expected


# ---------------------------------------------------------------------------------------------------- bad inputs

IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])
BAD_PROMPTS = {  # name: (generate kwargs, error type, phrase of its message)
    "empty prompt": (dict(inputs=torch.zeros(1, 0, dtype=torch.long)), ValueError, "needs at least one token"),
    "float ids": (dict(inputs=IDS.float()), TypeError, "must be integer token ids"),
    "negative id": (dict(inputs=torch.tensor([[5, -100, 7]])), ValueError, r"token id -100, outside the model's vocab"),
    "id past the vocabulary": (dict(inputs=torch.tensor([[5, VOCAB, 7]])), ValueError, r"ids 0\.\.255"),
    "shorter padded mask": (dict(inputs=IDS, attention_mask=torch.tensor([[0, 1, 1, 1, 1]])), ValueError,
                            r"attention_mask has shape \(1, 5\) but input_ids \(1, 6\)"),
    "shorter all-ones mask": (dict(inputs=IDS, attention_mask=torch.ones(1, 5, dtype=torch.long)), ValueError,
                              r"attention_mask has shape \(1, 5\) but input_ids \(1, 6\)"),
    "all-ones mask of another batch": (dict(inputs=IDS, attention_mask=torch.ones(2, 6, dtype=torch.long)),
                                       ValueError, r"attention_mask has shape \(2, 6\) but input_ids \(1, 6\)"),
}


def count_forwards(*models) -> list[int]:
    """A one-item list counting every forward of ``models`` (their own, not their submodules')."""
    calls = [0]
    for model in models:
        model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("mode", ["dflash", "autoregressive"])
@pytest.mark.parametrize("case", BAD_PROMPTS)
def test_bad_prompt_is_a_clear_error_before_any_forward(case, mode):
    """Stock generate fails on these inside the model (or, for a mismatched mask, a speculative call decoded with
    it): the speculative call names the fix and runs no forward."""
    kwargs, error, phrase = BAD_PROMPTS[case]
    target = make_target("qwen3")
    drafter = make_dflash(target) if mode == "dflash" else None
    forwards = count_forwards(*[m for m in (target, drafter) if m is not None])
    with pytest.raises(error, match=phrase):
        target.generate(**kwargs, assistant_model=drafter, speculative_mode=mode, max_new_tokens=4, do_sample=False)
    assert forwards[0] == 0


@pytest.mark.parametrize("move, phrase", [
    (lambda drafter: drafter.to(torch.bfloat16), r"load both in one dtype \(drafter.to\(torch.float32\)\)"),
    (lambda drafter: drafter.to("meta"), r"move the drafter with .to\('cpu'\)"),  # another device, without a GPU
], ids=["dtype", "device"])
def test_drafter_on_another_dtype_or_device_is_a_clear_error_before_any_forward(move, phrase):
    target = make_target("qwen3")
    drafter = move(make_dflash(target))
    forwards = count_forwards(target, drafter)
    with pytest.raises(ValueError, match=phrase):
        target.generate(IDS, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=4, do_sample=False)
    assert forwards[0] == 0


def test_prompts_stock_generate_accepts_still_decode_exactly():
    """The checks refuse only what the model cannot read: int32 ids and a padded batch with its own mask decode
    as stock greedy does."""
    target = make_target("qwen3")
    drafter = make_dflash(target)
    padded = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    for kwargs in (dict(inputs=IDS.int()), dict(inputs=padded, attention_mask=(padded != 0).long())):
        expected = target.generate(**kwargs, max_new_tokens=6, do_sample=False)
        out = target.generate(**kwargs, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=6,
                              do_sample=False)
        assert out.tolist() == expected.tolist()


def position_warnings(call) -> list[str]:
    """The warnings stock generate's max-length criterion logs during ``call()`` (its once-per-process memory
    cleared first, so each call can show it)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    criterion_logger = logging.getLogger("transformers.generation.stopping_criteria")
    logging.Logger.warning_once.cache_clear()
    criterion_logger.addHandler(handler)
    try:
        call()
    finally:
        criterion_logger.removeHandler(handler)
    return [record.getMessage() for record in records if "maximum length" in record.getMessage()]


@pytest.mark.parametrize("prompt_len", [28, 32, 40])
@pytest.mark.parametrize("max_new", [1, 5, 6])
def test_passing_the_positions_warns_and_decodes_like_stock(prompt_len, max_new):
    """Stock generate only warns when the sequence passes max_position_embeddings (here 32) and decodes on; a
    speculative call gives the same warning in the same cases (a prompt past them, or a continuation that passes
    them mid-call, even inside one verified block; none when the length that passes them ends the call) and the same
    tokens."""
    target = make_target("qwen3", max_position_embeddings=32)
    drafter = make_dflash(target)
    prompt = random_prompt(random.Random(prompt_len), prompt_len)
    outputs = {}

    def generate(**speculative):
        outputs[bool(speculative)] = target.generate(prompt, max_new_tokens=max_new, do_sample=False, **speculative)

    stock = position_warnings(generate)
    ours = position_warnings(lambda: generate(assistant_model=drafter, speculative_mode="dflash"))
    warns = max_new > 1 and prompt_len + max_new - 1 > 32  # a length past 32 that does not end the call
    assert ours == stock == (["This is a friendly reminder - the current text generation call has exceeded the "
                              "model's predefined maximum length (32). Depending on the model, you may observe "
                              "exceptions, performance degradation, or nothing at all."] if warns else [])
    assert outputs[True].tolist() == outputs[False].tolist()


# ---------------------------------------------------------------------------------------------------- remote code

HUB_MODELS = Path(__file__).resolve().parents[1] / "hub_models"


def booby_trapped_copy(folder: Path, destination: Path, marker: Path) -> Path:
    """A copy of ``folder`` whose every Python file (the modeling files its config's auto_map names) writes
    ``marker`` when executed."""
    shutil.copytree(folder, destination)
    for source in destination.rglob("*.py"):
        lines = source.read_text().splitlines(keepends=True)
        first_statement = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
        trap = f"open({str(marker)!r}, 'a').write({source.name!r})\n"  # after __future__ imports, which must lead
        source.write_text("".join(lines[:first_statement] + [trap] + lines[first_statement:]))
    return destination


@pytest.mark.parametrize("name, loaded_type", [("specgen-tiny-dflash-b16", "DFlashDraftModel"),
                                                ("specgen-tiny-eagle3", "Eagle3DraftModel"),
                                                ("specgen-tiny-whiflash", "WhiFlash")])
def test_load_drafter_never_runs_code_from_the_folder(tmp_path, name, loaded_type):
    marker = tmp_path / "remote code ran"
    folder = booby_trapped_copy(HUB_MODELS / name, tmp_path / name, marker)
    drafter = hf_specgen.load_drafter(folder)
    assert not marker.exists(), marker.read_text()
    assert type(drafter).__name__ == loaded_type and type(drafter).__module__.startswith("hf_specgen.")


def test_the_trap_fires_when_remote_code_is_trusted(tmp_path):
    """The check above is live: transformers' own remote-code path runs the trapped dflash.py."""
    marker = tmp_path / "remote code ran"
    folder = booby_trapped_copy(HUB_MODELS / "specgen-tiny-dflash-b16", tmp_path / "dflash-b16", marker)
    AutoModel.from_pretrained(str(folder), trust_remote_code=True)
    assert marker.read_text() == "dflash.py"


def test_custom_generate_repo_runs_only_with_trust_remote_code(tmp_path):
    """transformers refuses the custom_generate repo without trust_remote_code=True, before running any of its
    code; with it, the repo's generate.py runs and decodes exactly."""
    marker = tmp_path / "remote code ran"
    repo = booby_trapped_copy(HUB_MODELS / "speculative-generate", tmp_path / "speculative-generate", marker)
    torch.manual_seed(0)
    stock_model = Qwen3ForCausalLM(Qwen3Config(**GEOMETRY, head_dim=16)).eval()  # never enabled
    for refusal in (dict(), dict(trust_remote_code=False)):
        with pytest.raises(ValueError, match="trust_remote_code"):
            stock_model.generate(IDS, custom_generate=str(repo), speculative_mode="autoregressive", max_new_tokens=4,
                                 **refusal)
        assert not marker.exists()
    expected = stock_model.generate(IDS, max_new_tokens=4, do_sample=False)
    out = stock_model.generate(IDS, custom_generate=str(repo), trust_remote_code=True,
                               speculative_mode="autoregressive", max_new_tokens=4, do_sample=False)
    assert marker.read_text() == "generate.py"
    assert out.tolist() == expected.tolist()
