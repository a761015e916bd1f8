"""torch.compile path (CUDA graphs on GPU): identical tokens, one graph per step, no recompiles.

CPU only here: inductor without CUDA graphs. The CUDA-graph replay itself was not run in this project's CI.
"""

from __future__ import annotations

import random

import torch
import torch._dynamo

import hf_specgen
from torch._dynamo.utils import counters

from hf_specgen.engine.cache import cache_tensor_addresses
from conftest import make_dflash, make_target, random_prompt


def test_compiled_steps_match_eager_without_recompiles():
    torch._dynamo.reset()
    counters.clear()
    target = make_target("qwen3", seed=21)
    drafter = make_dflash(target)
    rng = random.Random(0)
    addresses = []
    for call, prompt_len in enumerate((12, 37, 60)):  # one cache bucket: the graphs must be reused
        prompt = random_prompt(rng, prompt_len)
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", speculative_compile=True,
                              max_new_tokens=40, do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                              adaptive_width=False)  # the fixed block: one verify graph (widths: test_width_policy)
        assert out.sequences.tolist() == ref.tolist()
        assert out.speculative_stats.num_rounds > 3  # many rounds with varying acceptance ran through the graphs
        (decoder,) = target._hf_specgen_decoders.values()
        # The same cache tensors serve every call (CUDA graphs record their addresses): target's and drafter's.
        addresses.append(cache_tensor_addresses(decoder.cache) + cache_tensor_addresses(decoder.proposer.cache))
        if call == 0:
            graphs = counters["stats"]["unique_graphs"]
            assert graphs == 2, dict(counters["stats"])  # one verify graph, one draft graph
            torch._dynamo.config.error_on_recompile = True
    try:
        assert counters["stats"]["unique_graphs"] == graphs
        assert addresses[0] == addresses[1] == addresses[2]
        hf_specgen.release_compiled(target)
        assert not getattr(target, "_hf_specgen_decoders", None)
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()


def test_compiled_autoregressive_baseline_is_one_graph():
    """speculative_mode="autoregressive" + compile (the benchmark's static-cache baseline): stock tokens, one graph."""
    torch._dynamo.reset()
    counters.clear()
    target = make_target("llama", seed=4)
    rng = random.Random(1)
    try:
        for call, prompt_len in enumerate((9, 50)):
            prompt = random_prompt(rng, prompt_len)
            ref = target.generate(prompt, max_new_tokens=30, do_sample=False, eos_token_id=None)
            out = target.generate(prompt, speculative_mode="autoregressive", speculative_compile=True,
                                  max_new_tokens=30, do_sample=False, eos_token_id=None)
            assert out.tolist() == ref.tolist()
            if call == 0:
                assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
                torch._dynamo.config.error_on_recompile = True
        assert counters["stats"]["unique_graphs"] == 1
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()


def test_every_compiled_mode_returns_the_stock_tokens():
    """The benchmark compiles every mode of our engine: classic, EAGLE-3 tree and chain, WhiFlash switching drafter
    every round, DFlash trees. Each must still return the stock greedy tokens."""
    import hf_specgen
    from hf_specgen.engine.prefill import set_forward_overhead
    from test_batch import padded_batch
    from test_eagle3 import make_eagle3
    from test_whiflash import Alternate

    torch._dynamo.reset()
    target = make_target("qwen3", seed=8)
    set_forward_overhead(target, 0.0)  # the batches' rows prefilled alone (engine/prefill.py), then compiled steps
    small = make_target("qwen3", seed=5, num_hidden_layers=1)
    eagle, dflash = make_eagle3(target), make_dflash(target, block_size=6)
    cases = [dict(assistant_model=small, speculative_mode="classic", num_draft_tokens=4),
             dict(assistant_model=eagle, speculative_mode="eagle3", eagle_top_k=3, eagle_depth=3, eagle_total_tokens=8),
             dict(assistant_model=eagle, speculative_mode="eagle3", eagle_top_k=1, num_draft_tokens=4),
             dict(assistant_model=dflash, speculative_mode="dflash", dflash_tree_nodes=8)]
    # Batches of 3 for the modes whose rows go their own ways inside drafting: WhiFlash (three rows voting in turn:
    # the batch switches drafter every round, catching up ragged backlogs) and FLy's per-row prompt lookup.
    batched = [dict(assistant_model=hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router=Alternate(1)),
                    speculative_mode="whiflash", eagle_top_k=1, num_draft_tokens=4),
               dict(assistant_model=small, speculative_mode="fly", fly_entropy_threshold=1.0986, num_draft_tokens=6)]
    rng = random.Random(2)
    try:
        for kwargs in cases + batched:
            if kwargs in batched:
                prompt, mask = padded_batch(rng, [rng.randint(2, 40) for _ in range(3)])
            else:
                prompt, mask = random_prompt(rng, rng.randint(5, 40)), None
            ref = target.generate(prompt, attention_mask=mask, max_new_tokens=30, do_sample=False, eos_token_id=None)
            out = target.generate(prompt, attention_mask=mask, speculative_compile=True, max_cache_len=256,
                                  max_new_tokens=30, do_sample=False, eos_token_id=None, **kwargs)
            assert out.tolist() == ref.tolist(), kwargs["speculative_mode"]
        # The tree compiles three steps (target verify, drafter context, drafter level), its per-level step serving
        # every level with one graph, and the next call reuses them all (any recompile raises).
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        tree = cases[1]
        for length in (9, 33):
            if length == 33:
                assert counters["stats"]["unique_graphs"] == 3, dict(counters["stats"])
                torch._dynamo.config.error_on_recompile = True
            prompt = random_prompt(rng, length)
            ref = target.generate(prompt, max_new_tokens=20, do_sample=False, eos_token_id=None)
            out = target.generate(prompt, speculative_compile=True, max_cache_len=256, max_new_tokens=20,
                                  do_sample=False, eos_token_id=None, **tree)
            assert out.tolist() == ref.tolist()
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()


def test_compiling_raises_dynamos_recompile_limit_and_never_lowers_it():
    """Every compiled decoder adds graphs of the same step functions and of the target's forward: at dynamo's default
    limit of 8 a ninth decoder in one process would fail to compile (fullgraph=True)."""
    import torch._dynamo.config as dynamo_config

    from hf_specgen.engine.graphs import StepRunner

    saved = dynamo_config.recompile_limit, dynamo_config.accumulated_recompile_limit
    try:
        dynamo_config.recompile_limit, dynamo_config.accumulated_recompile_limit = 8, 256
        StepRunner(lambda x: x + 1, False, torch.device("cpu"))  # an eager step leaves them alone
        assert (dynamo_config.recompile_limit, dynamo_config.accumulated_recompile_limit) == (8, 256)
        StepRunner(lambda x: x + 1, True, torch.device("cpu"))
        assert dynamo_config.recompile_limit == 64 and dynamo_config.accumulated_recompile_limit == 1024
        dynamo_config.recompile_limit = 500
        StepRunner(lambda x: x + 1, True, torch.device("cpu"))
        assert dynamo_config.recompile_limit == 500
    finally:
        dynamo_config.recompile_limit, dynamo_config.accumulated_recompile_limit = saved


def test_max_autotune_steps_compile_on_frozen_weights_and_return_the_stock_tokens(monkeypatch):
    """speculative_compile="max-autotune" (CPU): inductor compiles the steps with frozen weights and max_autotune on,
    the condition for its own GEMM kernels; a plain compiled step freezes nothing. Inductor reads both settings while
    it compiles, inside a step's call, so the test watches its freezing pass run and what it saw. The tokens stay
    stock's."""
    import torch._inductor.freezing as freezing
    from torch._inductor import config as inductor_config

    from hf_specgen.engine.graphs import StepRunner

    seen = []

    def watched_freeze(*args, **kwargs):
        seen.append(inductor_config.max_autotune)
        return real_freeze(*args, **kwargs)

    real_freeze = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", watched_freeze)
    torch._dynamo.reset()
    try:
        layer = torch.nn.Linear(24, 40, bias=False)
        with torch.no_grad():
            x = torch.randn(4, 24)
            plain = StepRunner(lambda x: layer(x).relu(), True, torch.device("cpu"))
            assert torch.allclose(plain(x), plain.eager(x)) and seen == []
            tuned = StepRunner(lambda x: layer(x).relu() * 2, "max-autotune", torch.device("cpu"))
            assert torch.allclose(tuned(x), tuned.eager(x)) and seen == [True]
        assert not inductor_config.freezing and not inductor_config.max_autotune  # only while the step runs

        target = make_target("llama", seed=6)
        drafter = make_dflash(target, block_size=4)
        prompt = random_prompt(random.Random(3), 20)
        ref = target.generate(prompt, max_new_tokens=16, do_sample=False, eos_token_id=None)
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash",
                              speculative_compile="max-autotune", max_new_tokens=16, do_sample=False,
                              eos_token_id=None, return_dict_in_generate=True, adaptive_width=False)
        assert out.sequences.tolist() == ref.tolist()
        assert len(seen) == 3  # the target's verify and the drafter's step, each frozen (and the two above)
    finally:
        torch._dynamo.reset()
