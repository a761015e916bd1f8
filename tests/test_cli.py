"""The README's main job and the benchmark command, on the tiny synthetic models."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hf_specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_compare_prints_side_by_side(capsys):
    assert main(["compare", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "2", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "random-weight" in out  # clearly labelled when no trained models are used
    # The default DFlash call (adaptive width) beside stock; fixed widths only when --block-sizes asks for them.
    assert "| autoregressive " in out and "| dflash " in out and "dflash b16" not in out
    assert "[identical to autoregressive]" in out and "differs" not in out  # fp32: identical tokens
    # fp32 on a CPU: the report says whether each kind of decoding forward took its way (either verdict)
    assert "decoding linears (engine/narrow_rows.py): fp32 forwards of 1 row as a batched product" in out


def test_bench_runs_every_method_and_writes_json_and_chart(tmp_path):
    assert main(["bench", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "2", "--max-new-tokens", "12",
                 "--repeats", "2", "--block-sizes", "4", "8", "--num-draft-tokens", "3", "--dflash-tree-nodes", "6",
                 "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    assert set(report["methods"]) == {"autoregressive", "dflash", "dflash, drafter alone", "dflash b4", "dflash b8",
                                      "dflash b8 tree 6",
                                      "dflash b8 tree <=6, adaptive", "classic", "classic k3",
                                      "classic k20 conf0.4",
                                      "hf assisted",
                                      "hf prompt lookup", "hf dflash", "eagle3", "eagle3, drafter alone",
                                      "eagle3 tree 4/6/16",
                                      "whiflash entropy", "whiflash entropy, default call",
                                      "whiflash oracle per step (hindsight)"}
    assert report["oracles"]["oracle per prompt"]["decode_tokens_per_second"] > 0
    assert report["oracles"]["oracle per step"]["decode_tokens_per_second"] > 0
    assert report["memory_mb"]["whiflash"] > report["memory_mb"]["dflash"] > report["memory_mb"]["autoregressive"]
    for name, method in report["methods"].items():
        entry = method["by_category"]["random"]
        assert entry["identical_to_autoregressive"] == 2, name  # every method is lossless in fp32
        assert entry["decode_tokens_per_second"] > 0
        if name.startswith(("dflash", "classic")):
            assert set(method["time_split_seconds"]) == {"draft", "verify", "other"}
            assert entry["pooled_tau"] >= 1.0
            assert method["verify_ms_per_row"] > 0
    assert report["tap_cost"]["verify_ms"] > 0
    assert (tmp_path / "speedup.png").stat().st_size > 1000
    assert (tmp_path / "tree_budgets.png").stat().st_size > 1000
    # 2 repeats of 2 x 12 tokens: the run says it is too short to trust
    assert any("2 repeat(s)" in note for note in report["unreliable"])
    assert any("fewer than 256 decoded tokens in random" in note for note in report["unreliable"])


def test_quick_bench_settings_yield_to_explicit_flags():
    from argparse import Namespace

    from hf_specgen.cli import QUICK, apply_quick

    args = Namespace(quick=True, num_prompts=10, repeats=3, max_new_tokens=192)
    apply_quick(args, ["bench", "--quick", "--repeats", "3"])
    assert (args.num_prompts, args.repeats, args.max_new_tokens) == (QUICK["num_prompts"], 3, QUICK["max_new_tokens"])


def test_reliability_notes_flag_short_runs_and_answers_that_could_not_finish():
    from hf_specgen.bench.runner import format_table, reliability_notes

    def entry(tokens, cut):
        return {"decode_tokens_per_second": 10.0, "speedup": 20.3, "pooled_tau": 1.0, "mean_tau": 1.0, "prompts": 2,
                "identical_to_autoregressive": 2, "decode_tokens": tokens, "accuracy": 0.0, "recovery": None,
                "answers_cut": cut, "answers_checked": 2}

    report = {"autoregressive": {"by_category": {"math": entry(40, 2), "code": entry(900, 1)}}}
    notes = reliability_notes(report, repeats=3)
    assert notes == ["fewer than 256 decoded tokens in math: too few to time (--num-prompts, --max-new-tokens)",
                     "every answer in math hit --max-new-tokens before it could finish: its accuracy means nothing"]
    table = format_table(report)
    assert "| cut " in table and "| 0% " in table  # math's 0% is shown as "cut"; code (one answer finished) is a result
    assert reliability_notes({"autoregressive": {"by_category": {"code": entry(900, 1)}}}, repeats=3) == []


def test_fly_sweep_runs_the_ablation_set(tmp_path):
    assert main(["bench", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "1", "--max-new-tokens", "8",
                 "--repeats", "1", "--fly-sweep", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    names = set(report["methods"])
    assert {"fly W=0", "fly W=6 (default)", "fly theta=0", "fly W=6 without MLA", "classic k15 (exact)",
            "fly over dflash b16"} <= names
    for name in names:
        if not name.startswith("fly"):  # the exact baselines stay lossless
            assert report["methods"][name]["by_category"]["random"]["identical_to_autoregressive"] == 1


def test_tiny_world_prompt_sets_are_shipped():
    from hf_specgen.bench.prompt_sets import load_prompt_set, pick_prompts

    assert len(load_prompt_set("humaneval")) == 164
    assert len(load_prompt_set("specbench")) == 480
    tiny = load_prompt_set("tinyworld")
    assert {r["category"] for r in tiny} == {"code", "math", "prose"}
    assert all("answer" in r for r in tiny if r["category"] == "math")
    picked = pick_prompts(["tinyworld", "specbench"], 2)
    assert len(picked) == 2 * 3 + 2 * len({r["category"] for r in load_prompt_set("specbench")})


def test_chat_ids_are_the_templates_tokens_with_no_special_token_added_twice():
    from transformers import AutoTokenizer

    from hf_specgen.bench.prompt_sets import chat_ids

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "hub_models" / "specgen-tiny")
    tokenizer.bos_token, tokenizer.add_bos_token = "<|user|>", True  # prepends BOS to any text, as Llama's does
    assert tokenizer("hi")["input_ids"][0] == tokenizer.bos_token_id  # the template's text starts with it as well
    ids = chat_ids(tokenizer, "Write a function that adds two numbers.")
    templated = tokenizer.apply_chat_template([{"role": "user", "content": "Write a function that adds two numbers."}],
                                              add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids.shape == (1, len(templated)) and ids[0].tolist() == list(templated)


def test_shipped_tiny_world_decodes_losslessly_and_its_drafters_accept(tmp_path, capsys):
    """The committed tiny world: its side-by-side comparison, and every shipped drafter accepting on held-out
    prompts."""
    assert main(["compare", "--target", "tiny", "--dtype", "fp32", "--max-new-tokens", "40"]) == 0
    out = capsys.readouterr().out
    # the default call of each lossless method with a shipped drafter, none of the fixed widths; fp32: exact
    assert out.count("[identical to autoregressive]") == 3 * 3 and "differs" not in out
    assert all(out.count(f"--- {name} (") == 3 for name in ("dflash", "eagle3", "whiflash neural, default call"))
    assert "dflash b16" not in out and "eagle3 tree" not in out
    assert main(["bench", "--dtype", "fp32", "--num-prompts", "1", "--repeats", "1", "--max-new-tokens", "40",
                 "--methods", "autoregressive", "dflash", "classic", "eagle3", "whiflash", "--block-sizes", "16",
                 "--num-draft-tokens", "4", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    for name, method in report["methods"].items():
        overall = method["by_category"]["all"]
        assert overall["identical_to_autoregressive"] == 3, name
        # The default calls ("dflash", "classic", "eagle3", WhiFlash's, and each "drafter alone": the default call
        # without copies) pick each round's width by this machine's clock and may take plain steps on a busy CPU, so
        # their tau is not the drafter's; every fixed-width method shows it accepting.
        default_call = name in ("dflash", "classic", "eagle3") or name.endswith(("default call", "drafter alone"))
        if name != "autoregressive" and not default_call:
            assert overall["pooled_tau"] > 1.5, (name, overall["pooled_tau"])  # trained drafters really accept


def test_decode_clock_counts_only_tokens_made_inside_the_decode_window():
    """transformers' assisted loops put several tokens at once with the prefill: those are not decode tokens."""
    import torch

    from hf_specgen.bench.harness import DecodeClock

    clock = DecodeClock()
    clock.put(torch.zeros(1, 30, dtype=torch.long))  # the prompt
    clock.put(torch.zeros(4, dtype=torch.long))  # prefill + first verify: 4 tokens before the window opens
    clock.put(torch.zeros(3, dtype=torch.long))
    clock.put(torch.zeros(1, dtype=torch.long))
    clock.end()
    assert clock.decode_tokens == 4 and clock.decode_seconds >= 0


def test_time_in_turns_warms_each_call_once_then_alternates_them():
    from hf_specgen.bench.harness import time_in_turns

    order = []

    def call(name):
        def run():
            order.append(name)
            return len(order)
        return run

    seconds, outputs = time_in_turns({"stock": call("stock"), "dflash": call("dflash")}, repeats=3)
    # the warm-up pass, then 3 passes taking turns, the order turning each pass
    assert order == ["stock", "dflash"] * 2 + ["dflash", "stock"] + ["stock", "dflash"]
    assert {name: len(times) for name, times in seconds.items()} == {"stock": 3, "dflash": 3}
    assert all(t >= 0 for times in seconds.values() for t in times)
    assert outputs == {"stock": 7, "dflash": 8}  # what the last pass returned


def test_shipped_remote_code_files_are_the_package_model_files():
    """save_pretrained copies each model's module next to its weights (trust_remote_code loads it from there):
    the shipped copies must be today's model code, not a stale one."""
    copies = sorted((ROOT / "hub_models").glob("*/*.py"))
    assert {p.name for p in copies} >= {"dflash.py", "eagle3.py", "whiflash.py"}
    for shipped in copies:
        assert shipped.read_text() == (ROOT / "hf_specgen" / "models" / shipped.name).read_text(), shipped


def test_real_target_defaults_to_bf16_only_where_the_cpu_has_bf16_units(monkeypatch):
    from argparse import Namespace

    from hf_specgen import dtypes
    from hf_specgen.bench.runner import apply_world_defaults

    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(dtypes, "cpu_runs_bf16_fast", lambda: native)
        args = Namespace(synthetic=None, target="smollm2-135m-instruct", prompts=None, categories=None, dtype="auto",
                         device="cpu", command="bench")
        assert apply_world_defaults(args) == "smollm2-135m-instruct"
        assert args.dtype == expected
        args = Namespace(**{**vars(args), "dtype": "auto", "device": "cuda"})
        apply_world_defaults(args)
        assert args.dtype == "bf16"


def test_batch_curve_decodes_the_same_prompts_at_every_size(tmp_path, capsys):
    """`specgen bench --batch-sizes`: every batching method at every size, stock generate as the baseline, the same
    prompts each time; fp32 greedy, so every lossless method generates exactly as many tokens as stock."""
    assert main(["bench", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "4", "--max-new-tokens", "10",
                 "--repeats", "1", "--block-sizes", "4", "--num-draft-tokens", "3", "--eagle-tree", "2", "3", "5",
                 "--batch-sizes", "1", "2", "4", "--out", str(tmp_path)]) == 0
    curve = json.loads((tmp_path / "batch_curve.json").read_text())["batch_curve"]
    assert set(curve) == {"autoregressive", "dflash", "dflash, drafter alone", "dflash b4", "classic", "classic k3",
                          "classic k20 conf0.4", "eagle3", "eagle3, drafter alone", "eagle3 tree 2/3/5",
                          "whiflash entropy", "whiflash entropy, default call"}
    for name, points in curve.items():
        assert set(points) == {"1", "2", "4"}, name
        for size, point in points.items():
            assert point["tokens"] == curve["autoregressive"][size]["tokens"] > 0, (name, size)
            assert point["tokens_per_second"] > 0
            if name != "autoregressive":
                assert point["tau"] >= 1.0
    assert (tmp_path / "batch_curve.png").stat().st_size > 1000
    assert "| dflash b4 " in capsys.readouterr().out


def test_batch_curve_methods_take_turns_within_each_repeat():
    """At each batch size every method is warmed up, then each batch is decoded by every method back to back, in an
    order that turns each repeat, so a change of load on a shared machine reaches stock generate and the
    speculative calls alike."""
    from types import SimpleNamespace

    import torch

    from hf_specgen.bench.batch_curve import run_batch_curve

    calls = []

    class RecordingTarget:
        generation_config = SimpleNamespace(eos_token_id=None)

        def generate(self, ids, attention_mask=None, pad_token_id=0, return_dict_in_generate=False, tag=None):
            calls.append((tag, ids.shape[0]))
            sequences = torch.cat([ids, ids.new_ones(ids.shape[0], 3)], dim=1)  # 3 new tokens per row
            return SimpleNamespace(sequences=sequences) if return_dict_in_generate else sequences

    prompts = [torch.tensor([[5, 6, 7]])] * 4
    curve = run_batch_curve(RecordingTarget(), None, prompts, [("a", {"tag": "a"}), ("b", {"tag": "b"})], [1, 4],
                            repeats=2)
    assert [tag for tag, rows in calls if rows == 4] == ["a", "b", "a", "b", "b", "a"]
    assert [tag for tag, rows in calls if rows == 1] == ["a", "b"] + ["a", "b"] * 4 + ["b", "a"] * 4
    assert curve["a"][4]["tokens"] == curve["b"][1]["tokens"] == 12


def test_bench_methods_take_turns_within_every_pass():
    """A change of load on a shared machine must reach every method alike: after one warm-up each, every pass decodes
    each prompt with every method back to back, in an order that turns each pass; a method's time per prompt is the
    median over its passes, its tokens are the last pass's."""
    from types import SimpleNamespace

    import torch

    from hf_specgen.bench.harness import run_methods_in_turns

    calls, slow = [], iter([0.03] + [0.0] * 11)  # the first decode of the first pass is slow (a, prompt 1)

    class Target:
        def generate(self, prompt, streamer=None, return_dict_in_generate=False, tag=None):
            calls.append((tag, int(prompt[0, 0])))
            if streamer is not None:
                streamer.put(prompt)
                streamer.put(torch.tensor([5]))
                time.sleep(next(slow))
                streamer.put(torch.tensor([6, 7]))
                streamer.end()
            return SimpleNamespace(sequences=torch.cat([prompt, torch.tensor([[5, 6, 7]])], dim=1))

    prompts = [torch.tensor([[1, 2]]), torch.tensor([[3, 4]])]
    methods = [("a", {"tag": "a"}, None), ("b", {"tag": "b"}, None)]
    a, b = run_methods_in_turns(Target(), prompts, methods, repeats=3)
    # warm-up, then per pass each prompt by every method back to back, the methods' order turning each pass
    in_order, turned = [("a", 1), ("b", 1), ("a", 3), ("b", 3)], [("b", 1), ("a", 1), ("b", 3), ("a", 3)]
    assert calls == [("a", 1), ("b", 1)] + in_order + turned + in_order
    assert a.name == "a" and a.sequences == b.sequences == [[5, 6, 7], [5, 6, 7]] and a.decode_tokens == [2, 2]
    assert a.decode_seconds[0] < 0.02  # the slow pass is outvoted by the median


def test_a_bench_prompt_whose_passes_differ_takes_one_pass_whole():
    """In bf16 a call whose widths differ between passes can part from the others at a near-tie and end sooner or
    later: a prompt's time, tokens and statistics then all come from its median-rate pass, never a median time over
    passes beside another pass's tokens."""
    from types import SimpleNamespace

    import torch

    from hf_specgen.bench.harness import run_methods_in_turns

    # per decode (the warm-up first): new tokens after the prefill's one, and the seconds they take; passes at 200, 100
    # and 400 tokens a second, far enough apart that a sleep overshooting by 10 ms on a busy machine keeps their order
    # (at 1500, 1000 and 2000, a fresh clone's run beside a data job took the 8-token pass for the median one)
    runs = iter([(4, 0.0), (30, 0.150), (40, 0.400), (8, 0.020)])

    class Target:
        def generate(self, prompt, streamer=None, return_dict_in_generate=False):
            count, seconds = next(runs)
            new = torch.arange(count + 1)
            if streamer is not None:  # (the warm-up has none)
                streamer.put(prompt)
                streamer.put(new[:1])
                time.sleep(seconds)
                streamer.put(new[1:])
                streamer.end()
            stats = SimpleNamespace(acceptance_lengths=[count], num_rounds=1, block_size=1, draft_time=0.0,
                                    verify_time=seconds, other_time=0.0, drafter_per_round=[], rescued_tokens=0,
                                    initial_mismatches=0, draft_forwards=1, switches=0)
            return SimpleNamespace(sequences=torch.cat([prompt, new[None]], dim=1), speculative_stats=stats)

    (result,) = run_methods_in_turns(Target(), [torch.tensor([[1, 2]])], [("a", {}, None)], repeats=3)
    assert result.decode_tokens == [30] and result.acceptance == [[30]] and len(result.sequences[0]) == 31
    # its own time (the last pass's 8 tokens over the median time read 53 tokens a second, slower than every pass)
    assert 0.149 < result.decode_seconds[0] < 0.25


def test_a_model_flag_that_names_nothing_ends_the_command_with_the_fix(tmp_path):
    """A mistyped --target / --drafter ends with one line naming the flag and what it takes, at once: not a traceback
    from transformers after half a minute of asking an unreachable Hub."""
    import pytest

    missing = tmp_path / "no-such-model"
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--target", str(missing), "--num-prompts", "1", "--max-new-tokens", "4"])
    message = str(exit_info.value.code)
    assert message.startswith(f"--target {missing}: no model folder at {missing}")
    assert "packaged target (smollm2-135m-instruct" in message and "--synthetic tiny" in message
    assert time.perf_counter() - started < 20  # no Hub retries for a path that is plainly local

    no_config = tmp_path / "empty-drafter"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--drafter", str(no_config), "--num-prompts", "1", "--max-new-tokens", "4"])
    message = str(exit_info.value.code)
    assert message.startswith(f"--drafter {no_config}: {no_config} has no config.json (it holds: model.safetensors)")
    assert "packaged target" not in message  # only --target takes one
