"""Verify forwards of a few rows on a CPU in fp32 (hf_specgen/engine/narrow_rows.py): the narrow route computes the
library's linear, lossless calls through it give stock's tokens, and the engine takes it only where it was timed
faster, once per process and device, in eager fp32 on a CPU."""

from __future__ import annotations

import random
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import make_dflash, make_target
from hf_specgen.engine import loop, width_policy
from hf_specgen.engine.narrow_rows import NARROW_ROWS_MAX, NarrowRowLinears, applies, narrow_linear, route_pays
from hf_specgen.engine.width_policy import costs_of
from test_eagle3 import make_eagle3
from test_width_policy import _exact_on_padded_batch, use_random_widths


@pytest.mark.parametrize("rows", range(1, NARROW_ROWS_MAX + 3))
@pytest.mark.parametrize("bias", [False, True])
def test_the_narrow_route_computes_the_librarys_linear(rows, bias):
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=generator)
    b = torch.randn(96, generator=generator) if bias else None
    for x in (torch.randn(rows, 40, generator=generator), torch.randn(1, rows, 40, generator=generator)):
        out = narrow_linear(x, weight, b)
        assert out.shape == (*x.shape[:-1], 96) and out.is_contiguous()
        torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)
    # bf16, or more rows than the route takes: the library's linear itself, to the bit
    x = torch.randn(rows, 40, generator=generator)
    assert torch.equal(narrow_linear(x.bfloat16(), weight.bfloat16()), F.linear(x.bfloat16(), weight.bfloat16()))
    if rows > NARROW_ROWS_MAX:
        assert torch.equal(narrow_linear(x, weight, b), F.linear(x, weight, b))


def test_a_model_forward_under_the_mode_routes_its_linears_and_gives_the_same_logits():
    target = make_target("llama", seed=2)
    ids = torch.tensor([[5, 9, 17]])
    before = NarrowRowLinears.calls
    with torch.no_grad():
        plain = target(ids).logits
        with NarrowRowLinears():
            narrow = target(ids).logits
    # every linear of each layer (q, k, v, o, gate, up, down) and the lm_head went through the mode
    assert NarrowRowLinears.calls - before == 7 * target.config.num_hidden_layers + 1
    torch.testing.assert_close(narrow, plain, rtol=1e-5, atol=1e-5)


def test_route_pays_compares_the_fastest_pass_of_each_way(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(width_policy, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))  # a clock the runs move

    def taking(seconds):
        def run():
            now[0] += seconds.pop(0) if isinstance(seconds, list) else seconds
        return run

    cpu = torch.device("cpu")
    assert route_pays(taking(1.0), taking(0.6), cpu)
    assert not route_pays(taking(1.0), taking(0.97), cpu)  # within the margin: not worth a different summation
    assert not route_pays(taking(1.0), taking(1.4), cpu)
    # the fastest timed pass of each counts, not the untimed first call (allocations) or one slow pass
    assert route_pays(taking([9.0, 1.0, 5.0, 1.0]), taking([9.0, 3.0, 0.5, 0.5]), cpu, passes=3)
    assert not route_pays(taking([9.0, 1.0, 5.0, 1.0]), taking([0.1, 3.0, 2.0, 1.5]), cpu, passes=3)


def test_the_route_applies_to_eager_fp32_forwards_on_a_cpu_only():
    cpu = torch.device("cpu")
    assert applies(cpu, torch.float32, compiled=False)
    assert not applies(cpu, torch.bfloat16, compiled=False)
    assert not applies(cpu, torch.float32, compiled=True)
    assert not applies(torch.device("cuda"), torch.float32, compiled=False)


@pytest.mark.parametrize("mode", ["dflash", "eagle3"])
def test_lossless_default_calls_through_the_narrow_route_give_stock_tokens(mode, monkeypatch):
    use_random_widths(monkeypatch)  # every round a width drawn at random, plain steps included
    target = make_target("qwen3", seed=11)
    drafter = make_dflash(target, block_size=8) if mode == "dflash" else make_eagle3(target)
    costs_of(target).narrow_rows["cpu"] = True  # as if timed faster: every verify of 2-4 rows takes the route
    before = NarrowRowLinears.calls
    rng = random.Random(4)
    for lengths, new in (([13], 32), ([5, 17], 16), ([9, 1, 22, 4], 10)):
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, speculative_mode=mode)
        assert {1, 2, 4} <= set(out.speculative_stats.round_widths)
    assert NarrowRowLinears.calls > before


def test_the_engine_times_the_route_once_per_device_and_leaves_it_off_where_it_does_not_pay(monkeypatch):
    target = make_target("llama", seed=5)
    drafter = make_dflash(target, block_size=8)
    timings = []

    def slower(run_plain, run_narrow, device):
        timings.append(1)
        run_plain()
        run_narrow()  # both ways run over the call's own cache, which is rolled back after
        return False

    monkeypatch.setattr(loop, "route_pays", slower)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for _ in range(2):
        before = NarrowRowLinears.calls
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=24)
        assert out.tolist() == reference.tolist()
        assert costs_of(target).narrow_rows == {"cpu": False}
    assert len(timings) == 1  # the first call timed it; the second kept its verdict
    assert NarrowRowLinears.calls == before  # the second call's verifies took the library's way
    # a bf16 target never times it
    target16 = make_target("llama", seed=5, dtype=torch.bfloat16)
    target16.generate(prompt, assistant_model=make_dflash(target16, block_size=8), speculative_mode="dflash",
                      max_new_tokens=8)
    assert costs_of(target16).narrow_rows == {} and len(timings) == 1


def test_calls_whose_verifies_never_have_2_to_4_rows_never_time_the_route(monkeypatch):
    target = make_target("llama", seed=6)
    drafter = make_dflash(target, block_size=8)
    monkeypatch.setattr(loop, "route_pays", lambda *args: pytest.fail("timed a route no verify could take"))
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", block_size=8, max_new_tokens=6)
    target.generate(prompt, speculative_mode="autoregressive", max_new_tokens=6)  # plain steps of one row
    rows = torch.randint(3, 200, (NARROW_ROWS_MAX + 1, 6), generator=torch.Generator().manual_seed(0))
    target.generate(rows, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=6)  # a wide batch
    assert costs_of(target).narrow_rows == {}
    monkeypatch.undo()
    # a fixed block of 2 at batch 2 verifies 4 rows: timed
    target.generate(prompt.expand(2, -1), assistant_model=drafter, speculative_mode="dflash", block_size=2,
                    max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {"cpu"}
