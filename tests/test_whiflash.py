"""WhiFlash: lossless for any routing; lazy catch-up and KV-only prefill change nothing but cost."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

import hf_specgen
from hf_specgen.engine.cache import static_cache

from conftest import make_dflash, make_target, random_prompt
from test_eagle3 import make_eagle3


class Alternate:
    """Switches drafter every ``period`` rounds."""

    def __init__(self, period: int):
        self.period, self.calls = period, 0

    def __call__(self, signal):
        self.calls += 1
        return "eagle3" if (self.calls // self.period) % 2 else "dflash"


def _bundle(target, eagle, dflash, router, lazy):
    if router == "neural":
        mlp = hf_specgen.WhiFlashRouter(target.config.hidden_size).eval()
        return hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="neural", neural_router=mlp, neural_threshold=0.0,
                                   lazy=lazy)
    return hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router=router, entropy_threshold=3.0, lazy=lazy)


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_greedy_equals_stock_for_any_routing(family):
    target = make_target(family)
    eagle, dflash = make_eagle3(target, draft_vocab=128), make_dflash(target, block_size=8)
    rng = random.Random(5)
    for router in ["eagle3", "dflash", "random", Alternate(1), Alternate(3), "entropy", "neural"]:
        for lazy in (True, False):
            prompt = random_prompt(rng, rng.randint(1, 70))
            max_new = rng.randint(5, 40)
            shape = rng.choice(({}, {"eagle_top_k": 1, "num_draft_tokens": 4},
                                {"eagle_top_k": 3, "eagle_depth": 3, "eagle_total_tokens": 8}))
            ref = target.generate(prompt, max_new_tokens=max_new, do_sample=False)
            out = target.generate(prompt, assistant_model=_bundle(target, eagle, dflash, router, lazy),
                                  speculative_mode="whiflash", max_new_tokens=max_new, do_sample=False,
                                  return_dict_in_generate=True, **shape)
            assert out.sequences.tolist() == ref.tolist(), (family, router, lazy, shape)
            stats = out.speculative_stats
            assert len(stats.drafter_per_round) == stats.num_rounds
            if router in ("eagle3", "dflash"):
                # (the default call, shape {}, may also run plain steps: "plain" rounds draft nothing)
                assert set(stats.drafter_per_round) - {"plain"} == {router} and stats.switches == 0
                assert "plain" not in stats.drafter_per_round or shape == {}
            if isinstance(router, Alternate) and router.period == 1 and stats.num_rounds > 2:
                assert stats.switches == stats.num_rounds - 1


def _record_drafts(target, bundle, prompt, **kwargs):
    """Every round's proposal (block or tree tokens), in order."""
    from hf_specgen.drafters.whiflash import WhiFlashProposer

    seen, original = [], WhiFlashProposer.propose

    def recording(self):
        draft = original(self)
        seen.append(draft.tokens.tolist() if hasattr(draft, "tokens") else draft.tolist())
        return draft

    WhiFlashProposer.propose = recording
    try:
        out = target.generate(prompt, assistant_model=bundle, speculative_mode="whiflash", do_sample=False,
                              return_dict_in_generate=True, **kwargs)
    finally:
        WhiFlashProposer.propose = original
    return seen, out


def test_lazy_catch_up_proposes_exactly_what_eager_updating_proposes():
    """Switching every third round, each catch-up prefills a backlog of several rounds in one forward."""
    target = make_target("qwen3")
    eagle, dflash = make_eagle3(target), make_dflash(target, block_size=6)
    prompt = random_prompt(random.Random(8), 30)
    runs = {}
    for lazy in (True, False):
        bundle = hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router=Alternate(3), lazy=lazy)
        runs[lazy] = _record_drafts(target, bundle, prompt, max_new_tokens=60, eagle_top_k=1, num_draft_tokens=5)
    (lazy_drafts, lazy_out), (eager_drafts, eager_out) = runs[True], runs[False]
    lazy_stats, eager_stats = lazy_out.speculative_stats, eager_out.speculative_stats
    assert lazy_stats.drafter_per_round == eager_stats.drafter_per_round and lazy_stats.switches >= 3
    assert lazy_drafts == eager_drafts
    assert max(lazy_stats.backlog_sizes) > 1 and not eager_stats.backlog_sizes


class RowVotes:
    """Row-dependent votes: rows vote EAGLE-3 when their newest token's slot is in an ``eagle_share`` of the slots, so
    rows disagree and the batch's choice moves round by round. Records every round's votes."""

    def __init__(self, period: int = 5, eagle_share: int = 2):
        self.period, self.eagle_share, self.votes = period, eagle_share, []

    def __call__(self, signal):
        choice = "eagle3" if signal["position"] % self.period < self.eagle_share else "dflash"
        self.votes.append(choice)
        return choice


def test_batches_route_by_vote_and_catch_up_ragged_backlogs():
    """A padded batch of 4: rows vote differently, the batch switches drafters, and every catch-up compacts a backlog
    whose rows committed different numbers of tokens. Equal to stock batched greedy, lazy and eager; lazy catch-up
    proposes exactly what eager updating proposes."""
    from test_batch import padded_batch

    target = make_target("llama")
    eagle, dflash = make_eagle3(target), make_dflash(target, block_size=6)
    ids, mask = padded_batch(random.Random(4), [7, 30, 2, 15])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=45, do_sample=False, eos_token_id=None)
    runs = {}
    for lazy in (True, False):
        router = RowVotes()
        bundle = hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router=router, lazy=lazy)
        drafts, out = _record_drafts(target, bundle, ids, attention_mask=mask, max_new_tokens=45,
                                     eos_token_id=None, eagle_top_k=1, num_draft_tokens=4)
        runs[lazy] = drafts, out, router.votes
    (lazy_drafts, lazy_out, votes), (eager_drafts, eager_out, _) = runs[True], runs[False]
    assert lazy_out.sequences.tolist() == ref.tolist() == eager_out.sequences.tolist()
    assert len(set(votes)) == 2 and lazy_out.speculative_stats.switches >= 3
    assert lazy_drafts == eager_drafts
    assert max(lazy_out.speculative_stats.backlog_sizes) > 1


@torch.no_grad()
def test_kv_only_prefill_stores_the_same_kv_as_a_full_forward():
    target = make_target("llama")
    eagle = make_eagle3(target)
    torch.manual_seed(0)
    rows = 9
    embeds = torch.randn(1, rows, target.config.hidden_size)
    features = torch.randn(1, rows, 3 * target.config.hidden_size)
    positions = torch.arange(rows)[None]
    full, kv_only = static_cache(32, 1), static_cache(32, 1)
    causal = torch.full((rows, 32), float("-inf"))
    causal[:, :rows] = torch.full((rows, rows), float("-inf")).triu(1)
    eagle(embeds, features, positions, full, causal[None, None])
    eagle.prefill_kv(embeds, features, positions, kv_only)
    torch.testing.assert_close(kv_only.layers[0].keys[:, :, :rows], full.layers[0].keys[:, :, :rows])
    torch.testing.assert_close(kv_only.layers[0].values[:, :, :rows], full.layers[0].values[:, :, :rows])


def test_whiflash_errors_name_the_fix():
    target = make_target("qwen3")
    prompt = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="WhiFlash"):
        target.generate(prompt, assistant_model=make_dflash(target), speculative_mode="whiflash", max_new_tokens=4)
    with pytest.raises(ValueError, match="neural_router"):
        hf_specgen.WhiFlash(ar=make_eagle3(target), parallel=make_dflash(target), router="neural")


def test_bundle_saves_and_loads_as_one_folder(tmp_path):
    import json
    import subprocess
    import sys

    target = make_target("qwen3")
    eagle, dflash = make_eagle3(target, draft_vocab=128), make_dflash(target, block_size=8)
    router = hf_specgen.WhiFlashRouter(target.config.hidden_size).eval()
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="neural", neural_router=router,
                                 neural_threshold=0.25)
    bundle.config.entropy_thresholds = {"code": 1.5, "math": 2.5}
    bundle.save_pretrained(tmp_path / "bundle")
    files = {p.name for p in (tmp_path / "bundle").iterdir()}
    assert {"config.json", "model.safetensors", "whiflash.py", "dflash.py", "eagle3.py"} <= files
    loaded = hf_specgen.load_drafter(str(tmp_path / "bundle"))
    assert loaded.router == "neural" and loaded.neural_threshold == 0.25
    for key, value in bundle.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    loaded.set_category("math")
    assert loaded.entropy_threshold == 2.5
    prompt = random_prompt(random.Random(1), 20)
    out = target.generate(prompt, assistant_model=loaded, speculative_mode="whiflash", max_new_tokens=20,
                          do_sample=False)
    assert out.tolist() == target.generate(prompt, max_new_tokens=20, do_sample=False).tolist()
    code = ("import sys; sys.modules['hf_specgen'] = None\n"
            "from transformers import AutoModel\n"
            f"m = AutoModel.from_pretrained({str(tmp_path / 'bundle')!r}, trust_remote_code=True)\n"
            "print(type(m).__name__, type(m.ar).__name__, type(m.parallel).__name__, m.config.router)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["WhiFlash", "Eagle3DraftModel", "DFlashDraftModel", "neural"]
    assert json.loads((tmp_path / "bundle" / "config.json").read_text())["auto_map"]["AutoModel"] == "whiflash.WhiFlash"


def test_calibration_picks_the_fastest_threshold():
    from hf_specgen.bench.calibrate import best_threshold, calibrate_entropy

    assert best_threshold({0.5: 100.0, 1.0: 130.0, 2.0: 120.0}) == 1.0
    assert best_threshold({0.5: 130.0, 1.0: 130.0}) == 0.5
    target = make_target("qwen3")
    bundle = hf_specgen.WhiFlash(ar=make_eagle3(target), parallel=make_dflash(target, block_size=4))
    prompts = {"a": [random_prompt(random.Random(i), 12) for i in range(2)]}
    result = calibrate_entropy(target, bundle, prompts, [0.0, 100.0], max_new_tokens=6)
    assert set(result["a"]["tokens_per_second"]) == {0.0, 100.0}
    assert result["a"]["best"] in (0.0, 100.0) and bundle.router == "entropy"


def test_linked_bundle_points_at_the_drafter_folders(tmp_path):
    target = make_target("qwen3")
    eagle, dflash = make_eagle3(target), make_dflash(target, block_size=8)
    eagle.save_pretrained(tmp_path / "eagle")
    dflash.save_pretrained(tmp_path / "dflash")
    router = hf_specgen.WhiFlashRouter(target.config.hidden_size).eval()
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="neural", neural_router=router)
    bundle.config.entropy_thresholds = {"math": 1.25}
    bundle.save_linked(tmp_path / "bundle", "../eagle", "../dflash")
    assert (tmp_path / "bundle" / "model.safetensors").stat().st_size < 50_000  # the router only
    loaded = hf_specgen.load_drafter(str(tmp_path / "bundle"))
    assert loaded.router == "neural" and loaded.config.entropy_thresholds == {"math": 1.25}
    for key, value in bundle.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_step_oracle_routes_by_the_accepted_length_table_of_each_position():
    """The benchmark's per-step oracle: at each round's position it picks the drafter its table favours."""
    from hf_specgen.bench.oracle import StepOracle

    target = make_target("qwen3")
    eagle, dflash = make_eagle3(target), make_dflash(target, block_size=4)
    prompt = random_prompt(random.Random(3), 20)
    table = {p: ((2.0, 1.0) if p % 3 == 0 else (1.0, 2.0)) for p in range(20, 60)}  # EAGLE-3 at multiples of 3
    router = StepOracle([{}, table], eagle_round_s=1.0, dflash_round_s=1.0)
    router.use(1)
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router=router)
    out = target.generate(prompt, assistant_model=bundle, speculative_mode="whiflash", eagle_top_k=1,
                          num_draft_tokens=3, max_new_tokens=30, do_sample=False, return_dict_in_generate=True)
    assert out.sequences.tolist() == target.generate(prompt, max_new_tokens=30, do_sample=False).tolist()
    stats = out.speculative_stats
    starts = [20 + sum(stats.acceptance_lengths[:r]) for r in range(stats.num_rounds)]  # slot of the last committed
    expected = ["eagle3" if start % 3 == 0 else "dflash" for start in starts]
    assert stats.drafter_per_round == expected and "eagle3" in expected and "dflash" in expected
    # a slower EAGLE-3 round flips ties of accepted length per second
    assert StepOracle([{5: (2.0, 1.5)}], eagle_round_s=2.0, dflash_round_s=1.0)({"position": 5}) == "dflash"
    assert StepOracle([{5: (2.0, 1.5)}], eagle_round_s=1.0, dflash_round_s=1.0)({"position": 5}) == "eagle3"


def test_a_batchs_neural_vote_is_its_rows_votes_in_one_forward():
    """The neural router reads a batch's rows in one forward: the vote is the majority of what each row's own route()
    says (DFlash on a tie)."""
    from types import SimpleNamespace

    from hf_specgen.drafters.whiflash import AR, PARALLEL, WhiFlashProposer, cpu_router, route

    torch.manual_seed(0)
    mlp = hf_specgen.WhiFlashRouter(64).eval()
    settings = SimpleNamespace(router="neural", neural_router=mlp, neural_threshold=0.0)
    proposer = WhiFlashProposer.__new__(WhiFlashProposer)
    proposer.settings, proposer._rng, proposer._router = settings, random.Random(0), cpu_router(mlp)
    assert proposer._router is mlp  # an fp32 router runs as it is
    seen = set()
    for rows in (1, 2, 3, 4, 7, 16):
        for _ in range(10):
            proposer.signals = [{"hidden": torch.randn(64) * 4, "logits": None, "position": 0} for _ in range(rows)]
            each = [route(settings, signal, proposer._rng) for signal in proposer.signals]
            expected = AR if 2 * each.count(AR) > rows else PARALLEL
            assert proposer.vote() == expected
            seen.add(expected)
    assert seen == {AR, PARALLEL}


def test_a_bf16_neural_router_votes_through_an_fp32_copy_on_a_cpu():
    """On a CPU a call runs a bf16 router's fp32 copy (its small products cost the library's bf16 kernels about 130 us
    a round in the tiny world's loop): the copy has the router's own weights, leaves the bundle's router as it is, and
    votes as the bf16 router does wherever its prediction is not within bf16 rounding of the threshold. A copy is made
    per call (start), so a router changed between calls is the one the next call runs."""
    from hf_specgen.drafters.whiflash import PARALLEL, cpu_router, neural_choices

    torch.manual_seed(0)
    mlp = hf_specgen.WhiFlashRouter(64).eval().to(torch.bfloat16)
    copy = cpu_router(mlp)
    assert copy is not mlp and copy.dtype == torch.float32 and mlp.dtype == torch.bfloat16
    for ours, theirs in zip(copy.state_dict().values(), mlp.state_dict().values()):
        assert torch.equal(ours, theirs.float())
    hidden = (torch.randn(256, 64) * 4).to(torch.bfloat16)
    with torch.no_grad():
        predicted = mlp(hidden).float()
    threshold = float(predicted.median())
    settings = SimpleNamespace(router="neural", neural_router=mlp, neural_threshold=threshold)
    bf16_votes, fp32_votes = neural_choices(settings, hidden), neural_choices(settings, hidden, copy)
    near = (predicted - threshold).abs() < 0.05 * predicted.abs().max()
    assert all(a == b for a, b, n in zip(bf16_votes, fp32_votes, near.tolist()) if not n)
    assert sum(not n for n in near.tolist()) > 128

    with torch.no_grad():
        mlp.net[3].bias.fill_(-1e4)  # trained since: every row now votes DFlash
    assert set(neural_choices(settings, hidden, cpu_router(mlp))) == {PARALLEL}
