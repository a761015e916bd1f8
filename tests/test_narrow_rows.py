"""Plain steps and verify forwards of a few rows on a CPU in fp32 (hf_specgen/engine/narrow_rows.py): the narrow route
computes the library's linear, lossless calls through it give stock's tokens, and the engine takes each kind of it (one
row; 2-4 rows) only where it was timed faster, once per process and device, in eager fp32 on a CPU."""

from __future__ import annotations

import random
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import make_dflash, make_target
from hf_specgen.engine import loop, width_policy
from hf_specgen.engine.narrow_rows import (NARROW_ROWS_MAX, NarrowRowLinears, applies, describe_routes, halves_linear,
                                           narrow_linear, route_pays)
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


def test_one_row_runs_over_the_weights_halves_and_falls_back_where_they_are_no_view():
    generator = torch.Generator().manual_seed(0)
    weight, x = torch.randn(96, 40, generator=generator), torch.randn(1, 1, 40, generator=generator)
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "bmm", lambda *args: calls.append(1) or torch.matmul(*args))
        torch.testing.assert_close(narrow_linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-5)
        assert calls == [1]  # the batched product over the two halves, not the library's one-row product
        # an odd count of outputs, or a weight that is no contiguous block: the library's linear itself, to the bit
        odd = torch.randn(95, 40, generator=generator)
        assert torch.equal(halves_linear(x, odd), F.linear(x, odd))
        strided = torch.randn(40, 96, generator=generator).t()
        assert torch.equal(halves_linear(x, strided), F.linear(x, strided))
        assert calls == [1]


def test_a_model_forward_under_the_mode_routes_its_linears_and_gives_the_same_logits():
    target = make_target("llama", seed=2)
    for ids in (torch.tensor([[5, 9, 17]]), torch.tensor([[5]])):  # a verify of 3 rows, a plain step
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
    # a clock the runs move
    monkeypatch.setattr(width_policy, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

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
    # as if timed faster: every plain step of one row and every verify of 2-4 rows takes the route
    costs_of(target).narrow_rows.update({("cpu", 1): True, ("cpu", 2): True})
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
        assert costs_of(target).narrow_rows == {("cpu", 1): False, ("cpu", 2): False}
    assert len(timings) == 2  # the first call timed both kinds (plain steps, verifies); the second kept the verdicts
    assert NarrowRowLinears.calls == before  # the second call's forwards took the library's way
    # a bf16 target never times it
    target16 = make_target("llama", seed=5, dtype=torch.bfloat16)
    target16.generate(prompt, assistant_model=make_dflash(target16, block_size=8), speculative_mode="dflash",
                      max_new_tokens=8)
    assert costs_of(target16).narrow_rows == {} and len(timings) == 2


def test_calls_time_only_the_kinds_of_forward_they_can_run(monkeypatch):
    target = make_target("llama", seed=6)
    drafter = make_dflash(target, block_size=8)
    monkeypatch.setattr(loop, "route_pays", lambda *args: pytest.fail("timed a route no forward could take"))
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", block_size=8, max_new_tokens=6)
    rows = torch.randint(3, 200, (NARROW_ROWS_MAX + 1, 6), generator=torch.Generator().manual_seed(0))
    target.generate(rows, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=6)  # a wide batch
    target.generate(rows, speculative_mode="autoregressive", max_new_tokens=6)
    assert costs_of(target).narrow_rows == {}
    monkeypatch.undo()
    # plain steps of one prompt: one row a step, timed as such and no more
    target.generate(prompt, speculative_mode="autoregressive", max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {("cpu", 1)}
    # a fixed block of 2 at batch 2 verifies 4 rows: timed
    target.generate(prompt.expand(2, -1), assistant_model=drafter, speculative_mode="dflash", block_size=2,
                    max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {("cpu", 1), ("cpu", 2)}


@pytest.mark.parametrize("mode", ["eagle3", "classic"])
def test_the_drafters_forwards_take_the_targets_routes(mode, monkeypatch):
    """A drafter on the target's hidden states (EAGLE-3 here) runs its forwards of routed row counts the narrow way; a
    separate draft LM (classic) keeps the library's, its sizes being its own."""
    use_random_widths(monkeypatch)
    target = make_target("qwen3", seed=11)
    drafter = make_eagle3(target) if mode == "eagle3" else make_target("qwen3", seed=5, num_hidden_layers=1)
    costs_of(target).narrow_rows.update({("cpu", 1): True, ("cpu", 2): True})
    routed = []  # per call of one of the drafter's linears: whether the mode computed it

    def before(module, args):
        module.calls_before = NarrowRowLinears.calls

    def after(module, args, out):
        routed.append(NarrowRowLinears.calls > module.calls_before)

    for linear in (m for m in drafter.modules() if isinstance(m, torch.nn.Linear)):
        linear.register_forward_pre_hook(before)
        linear.register_forward_hook(after)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for routes_drafting in (False, True):
        monkeypatch.setattr(loop.SpeculativeDecoder, "routes_drafting", routes_drafting)
        routed.clear()
        out = target.generate(prompt, assistant_model=drafter, speculative_mode=mode, max_new_tokens=24)
        assert out.tolist() == reference.tolist()
        # EAGLE-3: the chain's steps (one row each) and its catching up on committed rows (1-4) routed when asked,
        # and only then; the drafter's start over the prompt (9 rows) never
        assert routed and any(routed) == (routes_drafting and mode == "eagle3") and not all(routed)


def test_the_benchmarks_report_says_which_routes_were_taken():
    assert describe_routes({}) is None  # nothing timed: bf16, a GPU, compiled steps
    line = describe_routes({("cpu", 2): False, ("cpu", 1): True})
    assert line.index("one-row steps") < line.index("verifies of 2-4 rows")
    assert "one-row steps as a batched product over the weights' halves on cpu: taken" in line
    assert "verifies of 2-4 rows as W @ x.T on cpu: not taken" in line
