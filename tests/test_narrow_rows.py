"""The linears of eager decoding forwards on a CPU (hf_specgen/engine/narrow_rows.py): each kind computes the
library's linear, lossless calls through them give stock's tokens, packed weights follow their weights and fit in
memory, and the engine takes each kind only where it was timed faster, once per process, device and kind, in eager
forwards on a CPU."""

from __future__ import annotations

import random
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import make_dflash, make_target
from hf_specgen.engine import loop, narrow_rows, width_policy
from hf_specgen.engine.narrow_rows import (KINDS, RoutedLinears, describe_routes, drop_packed, halves_linear,
                                           kinds_for, pack_linears, packed_linear, pack_weight, routable_linears,
                                           route_pays)
from hf_specgen.engine.width_policy import costs_of
from test_eagle3 import make_eagle3
from test_width_policy import _exact_on_padded_batch, use_random_widths

ONE_ROW, PACKED_FP32, PACKED_BF16 = KINDS  # fp32 one row over the halves; fp32 2+ rows packed; bf16 any rows packed


def taking(*kinds, dtype: torch.dtype = torch.float32) -> dict:
    """An fp32 (or ``dtype``) target's verdicts as if these kinds (and no other of its dtype) were timed faster."""
    return {("cpu", kind.name): kind in kinds for kind in KINDS if kind.dtype == dtype}


def test_one_row_runs_over_the_weights_halves_and_falls_back_where_they_are_no_view():
    generator = torch.Generator().manual_seed(0)
    weight, x, b = (torch.randn(96, 40, generator=generator), torch.randn(1, 1, 40, generator=generator),
                    torch.randn(96, generator=generator))
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "bmm", lambda *args: calls.append(1) or torch.matmul(*args))
        out = halves_linear(x, weight, b)
        assert out.shape == (1, 1, 96)
        torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)
        assert calls == [1]  # the batched product over the two halves, not the library's one-row product
        # an odd count of outputs, or a weight that is no contiguous block: the library's linear itself, to the bit
        odd = torch.randn(95, 40, generator=generator)
        assert torch.equal(halves_linear(x, odd), F.linear(x, odd))
        strided = torch.randn(40, 96, generator=generator).t()
        assert torch.equal(halves_linear(x, strided), F.linear(x, strided))
        assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 16, 33])
def test_the_packed_product_computes_the_librarys_linear(dtype, rows):
    if not narrow_rows.packs_on_this_cpu(dtype):  # bf16 on an AVX2-only CPU: torch packs none, so neither do we
        linear = torch.nn.Linear(40, 96, dtype=dtype)
        assert not pack_linears([linear], dtype) and not narrow_rows._is_fresh(linear)
        return
    generator = torch.Generator().manual_seed(rows)
    weight = (torch.randn(96, 40, generator=generator) / 6).to(dtype)
    b = torch.randn(96, generator=generator).to(dtype)
    packed = pack_weight(weight)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for x in (torch.randn(rows, 40, generator=generator), torch.randn(2, rows, 40, generator=generator)):
        x = x.to(dtype)
        for bias in (None, b):
            out = packed_linear(x, packed, bias)
            assert out.shape == (*x.shape[:-1], 96) and out.dtype == dtype
            torch.testing.assert_close(out, F.linear(x, weight, bias), **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_model_forward_under_the_routes_routes_its_linears_and_gives_the_same_logits(dtype):
    target = make_target("llama", seed=2, dtype=dtype)
    linears = routable_linears(target)
    assert len(linears) == 7 * target.config.num_hidden_layers + 1  # q, k, v, o, gate, up, down; the lm_head
    kinds = kinds_for(torch.device("cpu"), dtype, compiled=False)
    if not narrow_rows.packs_on_this_cpu(dtype):  # bf16 on an AVX2-only CPU: nothing packed, the library's way
        assert not pack_linears(linears, dtype) and not any(narrow_rows._is_fresh(m) for m in linears)
        routes, ids, before = RoutedLinears(linears, kinds), torch.tensor([[5, 9, 17]]), RoutedLinears.calls
        with torch.no_grad(), routes:
            routed = target(ids).logits
        with torch.no_grad():
            assert torch.equal(routed, target(ids).logits) and RoutedLinears.calls == before
        return
    assert pack_linears(linears, dtype)
    routes = RoutedLinears(linears, kinds)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for ids in (torch.tensor([[5, 9, 17]]), torch.tensor([[5]])):  # a verify of 3 rows, a plain step
        before = RoutedLinears.calls
        with torch.no_grad():
            plain = target(ids).logits
            with routes:
                routed = target(ids).logits
            again = target(ids).logits  # left: the modules' own forwards again
        assert RoutedLinears.calls - before == len(linears)  # every linear went the kind's way
        torch.testing.assert_close(routed, plain, **tolerance)
        assert torch.equal(again, plain)
    assert all("forward" not in m.__dict__ for m in linears)


def test_packed_copies_follow_their_weights_and_fit_in_memory(monkeypatch):
    target = make_target("llama", seed=3)
    linears = routable_linears(target)
    ids = torch.tensor([[5, 9, 17, 4]])
    with torch.no_grad():
        assert pack_linears(linears, torch.float32)
        with torch.no_grad():
            target.model.layers[0].mlp.down_proj.weight.mul_(3.0)  # the user changes a weight in place
        plain = target(ids).logits
        # a linear whose weight changed since its packing keeps the library's way until packed again
        stale = RoutedLinears(linears, (PACKED_FP32,))
        before = RoutedLinears.calls
        with stale:
            torch.testing.assert_close(target(ids).logits, plain, rtol=1e-5, atol=1e-5)
        assert RoutedLinears.calls - before == len(linears) - 1
        assert pack_linears(linears, torch.float32)  # the next call's packing makes that one again
        before = RoutedLinears.calls
        with RoutedLinears(linears, (PACKED_FP32,)):
            torch.testing.assert_close(target(ids).logits, plain, rtol=1e-5, atol=1e-5)
        assert RoutedLinears.calls - before == len(linears)
    drop_packed(linears)
    # copies that would take more than PACK_MEMORY_SHARE of the memory available: nothing is packed
    monkeypatch.setattr(narrow_rows, "_available_memory", lambda: 1000)
    assert not pack_linears(linears, torch.float32)
    assert not any(narrow_rows._is_fresh(m) for m in linears)
    monkeypatch.setattr(narrow_rows, "_available_memory", lambda: None)  # a platform that does not say
    assert not pack_linears(linears, torch.float32)


def test_only_plain_linears_free_of_other_wrappers_are_routed():
    class Quantized(torch.nn.Linear):  # a subclass with a forward of its own
        pass

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Quantized(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[2].forward = lambda x: x  # a wrapper already set on the instance (as accelerate's hooks do)
    model[3].to("meta")  # not on a CPU
    assert routable_linears(model, None, model) == [model[0]]


def test_route_pays_compares_the_fastest_pass_of_each_way(monkeypatch):
    now = [0.0]
    # a clock the runs move
    monkeypatch.setattr(width_policy, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def taking_seconds(seconds):
        def run():
            now[0] += seconds.pop(0) if isinstance(seconds, list) else seconds
        return run

    cpu = torch.device("cpu")
    assert route_pays(taking_seconds(1.0), taking_seconds(0.6), cpu)
    assert not route_pays(taking_seconds(1.0), taking_seconds(0.97), cpu)  # within the margin
    assert not route_pays(taking_seconds(1.0), taking_seconds(1.4), cpu)
    # the fastest timed pass of each counts, not the untimed first call (allocations) or one slow pass
    assert route_pays(taking_seconds([9.0, 1.0, 5.0, 1.0]), taking_seconds([9.0, 3.0, 0.5, 0.5]), cpu, passes=3)
    assert not route_pays(taking_seconds([9.0, 1.0, 5.0, 1.0]), taking_seconds([0.1, 3.0, 2.0, 1.5]), cpu, passes=3)


def test_the_kinds_apply_to_eager_forwards_on_a_cpu_in_their_dtype():
    cpu = torch.device("cpu")
    assert kinds_for(cpu, torch.float32, compiled=False) == (ONE_ROW, PACKED_FP32)
    assert kinds_for(cpu, torch.bfloat16, compiled=False) == (PACKED_BF16,)
    assert kinds_for(cpu, torch.float16, compiled=False) == ()
    assert kinds_for(cpu, torch.float32, compiled=True) == ()
    assert kinds_for(torch.device("cuda"), torch.float32, compiled=False) == ()
    assert ONE_ROW.holds(1, torch.float32) and not ONE_ROW.holds(2, torch.float32)
    assert PACKED_FP32.holds(2, torch.float32) and PACKED_FP32.holds(64, torch.float32)
    assert not PACKED_FP32.holds(1, torch.float32) and not PACKED_FP32.holds(2, torch.bfloat16)
    assert PACKED_BF16.holds(1, torch.bfloat16) and not PACKED_BF16.holds(1, torch.float32)


@pytest.mark.parametrize("mode", ["dflash", "eagle3"])
def test_lossless_default_calls_through_the_routes_give_stock_tokens(mode, monkeypatch):
    use_random_widths(monkeypatch)  # every round a width drawn at random, plain steps included
    target = make_target("qwen3", seed=11)
    drafter = make_dflash(target, block_size=8) if mode == "dflash" else make_eagle3(target)
    # as if timed faster: every plain step of one row over the halves, every forward of more rows over packed weights
    costs_of(target).narrow_rows.update(taking(ONE_ROW, PACKED_FP32))
    before = RoutedLinears.calls
    rng = random.Random(4)
    for lengths, new in (([13], 32), ([5, 17], 16), ([9, 1, 22, 4], 10)):
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, speculative_mode=mode)
        widths = set(out.speculative_stats.round_widths)  # (a chain's policy offers every width up to its block)
        assert 1 in widths and len(widths - {1}) >= 2
    assert RoutedLinears.calls > before


def test_the_engine_times_each_kind_once_per_device_and_leaves_it_off_where_it_does_not_pay(monkeypatch):
    target = make_target("llama", seed=5)
    drafter = make_dflash(target, block_size=8)
    timings = []

    def slower(run_plain, run_routed, device):
        timings.append(1)
        run_plain()
        run_routed()  # both ways run over the call's own cache, which is rolled back after
        return False

    monkeypatch.setattr(loop, "route_pays", slower)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for _ in range(2):
        before = RoutedLinears.calls
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=24)
        assert out.tolist() == reference.tolist()
        assert costs_of(target).narrow_rows == taking()  # both fp32 kinds timed, neither taken
        # no packed copies kept for a kind that does not pay
        assert not any(narrow_rows._is_fresh(m) for m in routable_linears(target))
    assert len(timings) == 2  # the first call timed both kinds; the second kept the verdicts
    assert RoutedLinears.calls == before  # the second call's forwards took the library's way
    # a bf16 target times its own kind; taken, its packed copies stay for the next calls
    monkeypatch.setattr(loop, "route_pays", lambda *args: True)
    target16 = make_target("llama", seed=5, dtype=torch.bfloat16)
    target16.generate(prompt, assistant_model=make_dflash(target16, block_size=8), speculative_mode="dflash",
                      max_new_tokens=8)
    if narrow_rows.packs_on_this_cpu(torch.bfloat16):
        assert costs_of(target16).narrow_rows == {("cpu", PACKED_BF16.name): True}
        assert all(narrow_rows._is_fresh(m) for m in routable_linears(target16))
    else:  # an AVX2-only CPU: torch packs no bf16 weights, so the kind is neither timed nor taken
        assert costs_of(target16).narrow_rows == {}
        assert not any(narrow_rows._is_fresh(m) for m in routable_linears(target16))


def test_where_torch_cannot_pack_a_dtype_a_call_packs_nothing_and_keeps_stock_tokens(monkeypatch):
    # what every CPU without AVX512 or AVX-NE-CONVERT does for bf16 (torch refuses to pack it), here for fp32
    monkeypatch.setattr(narrow_rows, "packs_on_this_cpu", lambda dtype: False)
    monkeypatch.setattr(loop, "route_pays", lambda *args: True)
    target = make_target("llama", seed=7)
    linears = routable_linears(target)
    assert not pack_linears(linears, torch.float32)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=16, do_sample=False)
    out = target.generate(prompt, assistant_model=make_dflash(target, block_size=8), speculative_mode="dflash",
                          max_new_tokens=16)
    assert out.tolist() == reference.tolist()
    assert costs_of(target).narrow_rows == {("cpu", ONE_ROW.name): True}  # the packed kind neither timed nor taken
    assert not any(narrow_rows._is_fresh(m) for m in linears)


def test_calls_time_only_the_kinds_of_forward_they_can_run(monkeypatch):
    target = make_target("llama", seed=6)
    drafter = make_dflash(target, block_size=8)
    timed = []
    monkeypatch.setattr(loop, "route_pays", lambda *args: timed.append(1) or True)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    # a fixed block of 8 verifies 8 rows: the packed kind alone
    target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", block_size=8, max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {("cpu", PACKED_FP32.name)}
    # a batch of 5 never has a one-row forward, whatever the widths
    rows = torch.randint(3, 200, (5, 6), generator=torch.Generator().manual_seed(0))
    target.generate(rows, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=6)
    target.generate(rows, speculative_mode="autoregressive", max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {("cpu", PACKED_FP32.name)} and len(timed) == 1
    # plain steps of one prompt: one row a step, timed as such
    target.generate(prompt, speculative_mode="autoregressive", max_new_tokens=6)
    assert set(costs_of(target).narrow_rows) == {("cpu", PACKED_FP32.name), ("cpu", ONE_ROW.name)}
    assert len(timed) == 2


def _routed_calls(model) -> list[bool]:
    """Per forward of one of ``model``'s linears from now on: whether the routes computed it."""
    routed = []

    def before(module, args):
        module.calls_before = RoutedLinears.calls

    def after(module, args, out):
        routed.append(RoutedLinears.calls > module.calls_before)

    for linear in (m for m in model.modules() if isinstance(m, torch.nn.Linear)):
        linear.register_forward_pre_hook(before)
        linear.register_forward_hook(after)
    return routed


def test_the_drafters_forwards_take_the_targets_routes(monkeypatch):
    """A drafter on the target's hidden states (EAGLE-3) runs its forwards of the kinds the target took their way."""
    use_random_widths(monkeypatch)
    target = make_target("qwen3", seed=11)
    drafter = make_eagle3(target)
    costs_of(target).narrow_rows.update(taking(ONE_ROW))  # one-row forwards only
    routed = _routed_calls(drafter)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for routes_drafting in (False, True):
        monkeypatch.setattr(loop.SpeculativeDecoder, "routes_drafting", routes_drafting)
        routed.clear()
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=24)
        assert out.tolist() == reference.tolist()
        # the chain's steps (one row each) routed when asked, and only then; its forwards of more rows (the start
        # over the prompt, catching up on committed rows) keep the library's way
        assert routed and any(routed) == routes_drafting and not all(routed)


@pytest.mark.parametrize("pays", [True, False])
def test_a_draft_lm_times_the_kinds_on_its_own_forwards(pays, monkeypatch):
    """A separate draft LM (classic) has sizes of its own: each kind is timed on its own drafting steps, once per
    process, draft model and device (the verdicts kept on its cost model, whatever the target's), and its forwards
    take the kinds timed faster; the tokens stay stock's either way."""
    use_random_widths(monkeypatch)
    target = make_target("qwen3", seed=11)
    costs_of(target).narrow_rows.update(taking())  # the target's own forwards: neither kind taken
    drafter = make_target("qwen3", seed=5, num_hidden_layers=1)
    timed = []

    def verdict(run_plain, run_routed, device):
        timed.append(1)
        run_plain()
        run_routed()  # both ways run over the draft cache, which drafting then rewrites
        return pays

    monkeypatch.setattr(loop, "route_pays", verdict)
    routed = _routed_calls(drafter)
    prompt = torch.tensor([[7, 3, 11, 29, 5, 8, 40, 2, 19]])
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for call in range(2):
        routed.clear()
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="classic", max_new_tokens=24)
        assert out.tolist() == reference.tolist()
        assert costs_of(drafter).narrow_rows == (taking(ONE_ROW, PACKED_FP32) if pays else taking())
        # taken: its one-row steps over the halves, its first step's two rows (and a catch-up) over packed weights,
        # every forward after the first call's timing (which ran both ways)
        if call:
            assert routed and all(routed) == pays and any(routed) == pays
        assert all(narrow_rows._is_fresh(m) for m in routable_linears(drafter)) == pays  # no copies for nothing
    assert len(timed) == 2  # both fp32 kinds timed in the first call, none in the second
    assert costs_of(target).narrow_rows == taking()


def test_the_benchmarks_report_says_which_routes_were_taken():
    assert describe_routes({}) is None  # nothing timed: a GPU, compiled steps
    line = describe_routes({("cpu", PACKED_FP32.name): False, ("cpu", ONE_ROW.name): True})
    assert line.startswith("decoding linears (engine/narrow_rows.py): ")
    assert line.index("1 row") < line.index("2+ rows")
    assert "fp32 forwards of 1 row as a batched product over the weights' halves on cpu: taken" in line
    assert "fp32 forwards of 2+ rows as oneDNN's product over packed weights on cpu: not taken" in line
    assert describe_routes({("cpu", ONE_ROW.name): True}, "the draft LM's linears").startswith(
        "the draft LM's linears (engine/narrow_rows.py): fp32 forwards of 1 row")


def test_calls_after_the_timing_prefill_over_the_kinds_taken(monkeypatch):
    """The prefill comes before a call's own timing (which needs its cache): the first call prefills the library's
    way, later calls over the kinds timed faster, with stock's tokens; a kind timed slower leaves the prefill alone."""
    target = make_target("llama", seed=7)
    drafter = make_dflash(target, block_size=8)
    prompt = torch.randint(3, 200, (1, 21), generator=torch.Generator().manual_seed(1))  # wider than any verify
    reference = target.generate(prompt, max_new_tokens=16, do_sample=False)
    prefills = []  # per call: whether the first layer's query projection over the whole prompt was routed
    probe = target.model.layers[0].self_attn.q_proj

    def before(module, args):
        module.calls_before = RoutedLinears.calls

    def after(module, args, out):
        if args[0].shape[-2] == prompt.shape[1]:
            prefills.append(RoutedLinears.calls > module.calls_before)

    probe.register_forward_pre_hook(before)
    probe.register_forward_hook(after)
    for pays in (True, False):
        monkeypatch.setattr(loop, "route_pays", lambda *args, pays=pays: pays)
        costs_of(target).narrow_rows.clear()
        prefills.clear()
        for _ in range(2):
            out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=16)
            assert out.tolist() == reference.tolist()
        assert costs_of(target).narrow_rows[("cpu", PACKED_FP32.name)] is pays
        assert prefills == [False, pays]
