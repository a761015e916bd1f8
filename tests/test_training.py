"""Trainers: the DFlash training forward equals inference, masks and labels follow the recipe, runs resume, exports load."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from collections import Counter
from pathlib import Path

import pytest
import torch

import hf_specgen
from hf_specgen.training import dflash_trainer as dt
from hf_specgen.training.corpus import format_chat, read_jsonl, response_text
from hf_specgen.training.lm import chat_examples, pad_chat_batch
from hf_specgen.training.loop import BudgetBatches, lr_factor

from conftest import load_repo_module, make_dflash, make_target


def test_slot_weights_follow_the_recipe():
    w = dt.slot_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1
    assert torch.allclose(w[5], torch.exp(torch.tensor(-4 / 7.0)))
    assert dt.default_gamma(16) == 7 and dt.default_gamma(8) == 4 and dt.default_gamma(10) == 5


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    assert lr_factor(0.0, 0.04, 0.1) < 0.01
    assert lr_factor(0.04, 0.04, 0.1) == pytest.approx(1.0)
    assert lr_factor(0.5, 0.04, 0.1) < 1.0
    assert lr_factor(1.0, 0.04, 0.1) == pytest.approx(0.1)


def test_budget_batches_cover_every_item_once_per_epoch_within_the_budget():
    costs = [1 + (i * 37) % 50 for i in range(300)]
    batches = BudgetBatches(costs, budget=120, seed=3, pool=64)
    epoch0 = batches.epoch(0)
    assert sorted(i for b in epoch0 for i in b) == list(range(300))  # each item exactly once
    assert all(len(b) * max(costs[i] for i in b) <= 120 for b in epoch0)
    assert max(len(b) for b in epoch0) > 3 * min(len(b) for b in epoch0)  # short items share bigger batches
    n0 = len(epoch0)
    # global indices run through epochs; a fresh object (a resumed run) replays the same batches
    again = BudgetBatches(costs, budget=120, seed=3, pool=64)
    assert again.batch(n0 + 2) == batches.epoch(1)[2] and batches.batch(5) == epoch0[5]
    assert batches.epoch(1) != epoch0  # a new order every epoch
    with pytest.raises(ValueError, match="raise the budget"):
        BudgetBatches(costs, budget=10, seed=0)


def test_anchor_count_matches_the_sampled_anchors():
    ids = list(range(10, 30))
    batch = dt.build_anchor_batch([(ids, 6)], 4, 100, 0, torch.Generator().manual_seed(0))
    assert dt.anchor_count((ids, 6), 100) == int(batch.anchor_valid.sum()) == 13
    assert dt.anchor_count((ids, 6), 5) == 5 and dt.anchor_count((ids, 19), 5) == 1


def test_anchor_labels_are_same_position_tokens_inside_the_response():
    ids = list(range(10, 30))  # 20 tokens, prompt = first 6
    batch = dt.build_anchor_batch([(ids, 6)], block_size=4, max_anchors=100, pad_id=0,
                                  generator=torch.Generator().manual_seed(0))
    anchors = batch.anchors[0][batch.anchor_valid[0]].tolist()
    assert anchors == list(range(6, 19))  # response tokens with a scored next token
    for j, a in enumerate(anchors):
        row = batch.labels[0, j].tolist()
        assert row[0] == -100  # slot 0 is the given token
        for k in range(1, 4):
            assert row[k] == (ids[a + k] if a + k < len(ids) else -100)
    few = dt.build_anchor_batch([(ids, 6)], 4, 5, 0, torch.Generator().manual_seed(0))
    assert int(few.anchor_valid.sum()) == 5


def test_block_visibility_is_prefix_context_plus_own_block():
    anchors = torch.tensor([[2, 5]])
    vis = dt.block_visibility(anchors, torch.tensor([7]), context_len=7, block_size=3)[0, 0]  # [6, 7 + 6]
    for row in range(6):
        blk = row // 3
        anchor = anchors[0, blk].item()
        assert vis[row, :7].tolist() == [j < anchor for j in range(7)]
        assert vis[row, 7:].tolist() == [j // 3 == blk for j in range(6)]


@pytest.mark.parametrize("attention", ["blocks", "dense"])
def test_training_forward_equals_inference_forward(attention):
    """Each block of the batched training forward equals the drafter run as at inference on that anchor alone."""
    torch.manual_seed(0)
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=2, layer_ids=[0, 2])
    ids = torch.randint(3, 250, (30,)).tolist()
    other = torch.randint(3, 250, (22,)).tolist()
    batch = dt.build_anchor_batch([(ids, 8), (other, 5)], 4, 6, 0, torch.Generator().manual_seed(3))
    with torch.no_grad():
        trained = dt.drafter_block_states(drafter, target, batch, attention)  # [2, A*4, H]
        for row, seq in enumerate((ids, other)):
            seq_t = torch.tensor([seq])
            hs = target.model(input_ids=seq_t, output_hidden_states=True).hidden_states
            taps = torch.cat([hs[i + 1] for i in drafter.target_layer_ids], dim=-1)
            for j in range(int(batch.anchor_valid[row].sum())):
                a = int(batch.anchors[row, j])
                block = torch.tensor([[seq[a]] + [drafter.mask_token_id] * 3])
                positions = torch.arange(a + 4)[None]
                single = drafter(noise_embedding=target.get_input_embeddings()(block), target_hidden=taps[:, :a],
                                 position_ids=positions)
                torch.testing.assert_close(trained[row, 4 * j: 4 * j + 4], single[0], atol=2e-5, rtol=1e-4)


def test_flex_and_anchored_blocks_match_the_dense_mask():
    torch.manual_seed(0)
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=1, layer_ids=[1])
    ids = torch.randint(3, 250, (40,)).tolist()
    batch = dt.build_anchor_batch([(ids, 4), (ids[:33], 10)], 4, 8, 0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        dense = dt.drafter_block_states(drafter, target, batch, "dense")
        flex = dt.drafter_block_states(drafter, target, batch, "flex")
        blocks = dt.drafter_block_states(drafter, target, batch, "blocks")
    valid = batch.anchor_valid.repeat_interleave(4, dim=1)
    torch.testing.assert_close(flex[valid], dense[valid], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(blocks[valid], dense[valid], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="attention must be one of"):
        dt.drafter_block_states(drafter, target, batch, "sparse")


def test_anchored_blocks_give_the_dense_masks_gradients():
    """The CPU training path (only visible scores) trains exactly as the dense mask would: same loss, same
    gradient for every drafter weight, with grouped-query heads and padded sequences of different lengths."""
    torch.manual_seed(0)
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=2, layer_ids=[0, 2])
    attention = drafter.layers[0].self_attn
    assert attention.num_heads > attention.num_kv_heads  # grouped-query attention is exercised
    ids = torch.randint(3, 250, (37,)).tolist()
    batch = dt.build_anchor_batch([(ids, 6), (ids[:21], 9)], 4, 10, 0, torch.Generator().manual_seed(2))
    weights = dt.slot_weights(4, 2.0)
    grads = {}
    for kind in ("dense", "blocks"):
        drafter.zero_grad()
        loss, _ = dt.dflash_loss(drafter, target, batch, weights, kind)
        loss.backward()
        grads[kind] = (float(loss.detach()), {name: p.grad.clone() for name, p in drafter.named_parameters()})
    assert grads["blocks"][0] == pytest.approx(grads["dense"][0], rel=1e-5)
    for name, grad in grads["dense"][1].items():
        torch.testing.assert_close(grads["blocks"][1][name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_soft_labels_are_the_targets_own_next_token_distribution():
    """--soft-label-weight 1: the loss is the slot-weighted KL from the target's distribution for each predicted
    position (its logits one row before it) to the drafter's; an off-by-one source row would fail this."""
    torch.manual_seed(0)
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=1, layer_ids=[1])
    ids = torch.randint(3, 250, (26,)).tolist()
    batch = dt.build_anchor_batch([(ids, 6)], 4, 9, 0, torch.Generator().manual_seed(5))
    weights = dt.slot_weights(4, 2.0)
    with torch.no_grad():
        loss, n = dt.dflash_loss(drafter, target, batch, weights, soft_label_weight=1.0)
        hard, _ = dt.dflash_loss(drafter, target, batch, weights, soft_label_weight=0.0)
        teacher = torch.log_softmax(target(torch.tensor([ids])).logits[0].float(), -1)  # [S, V]
        student = torch.log_softmax(target.lm_head(dt.drafter_block_states(drafter, target, batch)[0]).float(), -1)
    total, weight_sum = 0.0, 0.0
    for row, label in enumerate(batch.labels[0].flatten().tolist()):
        if label == -100:
            continue
        predicted = int(batch.anchors[0, row // 4]) + row % 4  # the position whose token this row predicts
        p = teacher[predicted - 1]
        total += float(weights[row % 4]) * float((p.exp() * (p - student[row])).sum())
        weight_sum += float(weights[row % 4])
    assert n == int((batch.labels != -100).sum()) and n > 10
    assert float(loss) == pytest.approx(total / weight_sum, rel=1e-4)
    assert float(loss) != pytest.approx(float(hard), rel=1e-2)
    with pytest.raises(ValueError, match="soft_label_weight must be in"):
        dt.dflash_loss(drafter, target, batch, weights, soft_label_weight=1.5)


def test_dflash_loss_trains_only_the_drafter():
    torch.manual_seed(0)
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=1, layer_ids=[1])
    drafter.train()
    target.requires_grad_(False)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    ids = torch.randint(3, 250, (24,)).tolist()
    batch = dt.build_anchor_batch([(ids, 4)], 4, 12, 0, torch.Generator().manual_seed(0))
    weights = dt.slot_weights(4, 4.0)
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        loss, n = dt.dflash_loss(drafter, target, batch, weights)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert n == int((batch.labels != -100).sum())
    assert float(loss) < 0.5 * first  # a fixed batch is memorized: gradients reach the drafter
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_init_from_target_layers_reproduces_the_targets_own_context_values():
    """The warm start copies the target's last layers and wires the tap below them through unchanged: the first
    drafter layer's context values are the target's values at that layer, for any weights."""
    torch.manual_seed(0)
    target = make_target("llama")  # 4 layers; a Llama layer has no q/k norm, the drafter's keep theirs
    drafter = make_dflash(target, block_size=4, num_layers=2, layer_ids=[0, 1])
    assert dt.init_from_target_layers(drafter, target) == [2, 3]
    for mine, theirs in zip(drafter.layers, target.model.layers[2:]):
        for name, weight in theirs.state_dict().items():
            assert torch.equal(mine.state_dict()[name], weight), name
    assert torch.equal(drafter.norm.weight, target.model.norm.weight)
    ids = torch.randint(3, 250, (1, 12))
    seen = {}
    hook = target.model.layers[2].self_attn.v_proj.register_forward_hook(lambda m, i, o: seen.setdefault("v", o))
    with torch.no_grad():
        hidden_states = target.model(input_ids=ids, output_hidden_states=True).hidden_states
        taps = torch.cat([hidden_states[i + 1] for i in drafter.target_layer_ids], dim=-1)  # [1, 12, 2H]
        context = drafter.hidden_norm(drafter.fc(taps))
        values = drafter.layers[0].self_attn.v_proj(context)
    hook.remove()
    torch.testing.assert_close(values, seen["v"], atol=1e-5, rtol=1e-5)

    without_tap = make_dflash(target, block_size=4, num_layers=2, layer_ids=[0, 2])
    with pytest.raises(ValueError, match="include 1 in --target-layer-ids"):
        dt.init_from_target_layers(without_tap, target)


# ----------------------------------------------------------------------------------------------------------------
# End to end on a miniature world: tokenizer, target, regenerate, train lm (pretrain + distill), train dflash.
# ----------------------------------------------------------------------------------------------------------------

PROMPTS = [f"Solve: {a} + {b}" for a in range(1, 9) for b in range(2, 6)]


@pytest.fixture(scope="module")
def mini_world(tmp_path_factory):
    from transformers import Qwen3ForCausalLM

    from hf_specgen.training.lm import LMShape
    from hf_specgen.training.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("mini")
    texts = [format_chat(p, f"It is {eval(p.split(': ')[1])}.") for p in PROMPTS] * 3
    tokenizer = train_tokenizer(texts, root / "tokenizer", vocab_size=300)
    docs = [{"text": t, "domain": "math"} for t in texts]
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p, "domain": "math"}) + "\n" for p in PROMPTS))
    torch.manual_seed(0)
    shape = LMShape(hidden_size=64, num_hidden_layers=4, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    target = Qwen3ForCausalLM(shape.config(tokenizer))
    target.save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    return root


def _lm_args(root: Path, out: Path, **kw) -> Namespace:
    base = dict(tokenizer=str(root / "tokenizer"), pretrain_data=None, chat_data=None, eval_corpus=None, out=str(out),
                hidden_size=64, layers=1, intermediate_size=128, heads=4, kv_heads=2, init_embeddings_from=None,
                seq_len=64, batch_size=4, lr=3e-3, warmup_fraction=0.1, max_steps=6, time_budget_minutes=None,
                mixed_precision="no", seed=0, no_resume=False, threads=0, eval_every_minutes=None)
    base.update(kw)
    return Namespace(**base)


def test_train_lm_resumes_where_it_stopped(mini_world):
    from hf_specgen.training.lm import train_lm

    out = mini_world / "lm"
    first = train_lm(_lm_args(mini_world, out, pretrain_data=str(mini_world / "docs.jsonl"), max_steps=4))
    assert first["steps"] == 4 and (out / "loss.png").exists() and (out / "log.json").exists()
    resumed = train_lm(_lm_args(mini_world, out, pretrain_data=str(mini_world / "docs.jsonl"), max_steps=7))
    assert resumed["steps"] == 7  # continued from step 4, not from scratch
    assert resumed["tokens_seen"] == 7 * 4 * 64


@pytest.fixture(scope="module")
def trained_runs(mini_world):
    """Regenerate, distill a draft LM, pretrain a 1-layer LM and train a DFlash drafter: a miniature build."""
    from hf_specgen.cli import main
    from hf_specgen.training.lm import train_lm

    runs = mini_world / "runs"
    regen = runs / "regen.jsonl"
    main(["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(mini_world / "prompts.jsonl"),
          "--out", str(regen), "--max-new-tokens", "12", "--batch-size", "8", "--samples-per-prompt", "1"])
    train_lm(_lm_args(mini_world, runs / "target", pretrain_data=str(mini_world / "docs.jsonl"), max_steps=3))
    train_lm(_lm_args(mini_world, runs / "draft", chat_data=str(regen), max_steps=3,
                      init_embeddings_from=str(mini_world / "target")))
    main(["train", "dflash", "--target", str(mini_world / "target"), "--data", str(regen), "--out", str(runs / "dflash"),
          "--block-size", "4", "--layers", "1", "--max-anchors", "8", "--batch-size", "4", "--max-steps", "3",
          "--heldout", "8", "--mixed-precision", "no"])
    # continue that drafter on length-grouped batches (the tiny world's second DFlash run), proposing only the 50
    # most frequent answer tokens
    main(["train", "dflash", "--target", str(mini_world / "target"), "--data", str(regen), "--out",
          str(runs / "dflash_more"), "--block-size", "4", "--max-anchors", "8", "--anchor-budget", "24",
          "--init-from", str(runs / "dflash" / "model"), "--max-steps", "2", "--heldout", "8", "--mixed-precision", "no",
          "--draft-vocab-size", "50"])
    main(["train", "eagle3", "--target", str(mini_world / "target"), "--data", str(regen), "--out",
          str(runs / "eagle3"), "--draft-vocab-size", "200", "--ttt-steps", "3", "--batch-size", "4", "--max-steps", "3",
          "--heldout", "8", "--eval-depth", "3", "--mixed-precision", "no"])
    main(["train", "router", "--target", str(mini_world / "target"), "--eagle3", str(runs / "eagle3" / "model"),
          "--dflash", str(runs / "dflash" / "model"), "--data", str(regen), "--out", str(runs / "whiflash"),
          "--eagle-depth", "3", "--max-steps", "5", "--batch-size", "8"])
    return runs


def test_evaluations_during_training_make_a_curve_without_changing_the_training(mini_world, trained_runs, tmp_path):
    from safetensors.torch import load_file

    from hf_specgen.cli import main

    def run(out, *extra):
        main(["train", "dflash", "--target", str(mini_world / "target"), "--data", str(trained_runs / "regen.jsonl"),
              "--out", str(out), "--block-size", "4", "--max-anchors", "8", "--batch-size", "4", "--init-from",
              str(trained_runs / "dflash" / "model"), "--max-steps", "3", "--heldout", "8", "--mixed-precision", "no",
              *extra])
        return json.loads((out / "log.json").read_text()), load_file(out / "model" / "model.safetensors")

    plain_log, plain_weights = run(tmp_path / "plain")
    curve_log, curve_weights = run(tmp_path / "curve", "--eval-every-minutes", "1e-9")
    assert "evals" not in plain_log
    assert [e["step"] for e in curve_log["evals"]] == [1, 2, 3]  # one point per step at this tiny interval
    assert curve_log["evals"][-1]["offline_tau"] == curve_log["eval"]["offline_tau"] == plain_log["eval"]["offline_tau"]
    assert all(e["cpu_minutes"] > 0 and e["tokens_seen"] > 0 for e in curve_log["evals"])
    # evaluating in between (eval mode, no gradients) leaves the optimisation bit for bit as it was
    assert plain_weights.keys() == curve_weights.keys()
    assert all(torch.equal(plain_weights[k], curve_weights[k]) for k in plain_weights)


def test_regenerated_greedy_rows_are_the_targets_own_answers(mini_world, trained_runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = [json.loads(line) for line in (trained_runs / "regen.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(PROMPTS) and sum(r["sampled"] for r in rows) == len(PROMPTS)
    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    target = AutoModelForCausalLM.from_pretrained(mini_world / "target")
    for row in [r for r in rows if not r["sampled"]][:4]:
        prompt = tok(format_chat(row["prompt"]), return_tensors="pt", add_special_tokens=False)
        expect = target.generate(**prompt, max_new_tokens=12, do_sample=False)[0, prompt["input_ids"].shape[1]:].tolist()
        if tok.eos_token_id in expect:
            expect = expect[: expect.index(tok.eos_token_id)]
        assert row["response_ids"] == expect and row["response"] == response_text(tok.decode(expect))
    assert json.loads((trained_runs / "draft" / "log.json").read_text())["examples"] == len(rows)


def test_heldout_loss_command_scores_a_corpus_folder(mini_world, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_specgen.cli import main
    from hf_specgen.training.lm import heldout_loss

    records = [{"prompt": p, "response": f"It is {eval(p.split(': ')[1])}.", "domain": "math"} for p in PROMPTS[:6]]
    (tmp_path / "eval_math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "heldout.json"
    main(["data", "heldout-loss", "--model", str(mini_world / "target"), "--corpus", str(tmp_path), "--out", str(out)])
    loss = json.loads(out.read_text())["loss"]
    target = AutoModelForCausalLM.from_pretrained(mini_world / "target")
    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    assert list(loss) == ["math"] and loss["math"] == pytest.approx(heldout_loss(target, tok, records), rel=1e-5)
    with pytest.raises(ValueError, match="corpus folder"):
        main(["data", "heldout-loss", "--model", str(mini_world / "target"), "--corpus", str(mini_world)])


def test_mix_regen_adds_the_turn_newline_once_and_drops_domains(mini_world, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    answer = tok("It is 3.", add_special_tokens=False)["input_ids"]
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    first, second = tmp_path / "new.jsonl", tmp_path / "old.jsonl"
    first.write_text(json.dumps({"domain": "code", "response_ids": newline + answer}) + "\n")
    second.write_text(json.dumps({"domain": "code", "response_ids": answer}) + "\n"
                      + json.dumps({"domain": "math", "response_ids": answer}) + "\n")
    out = tmp_path / "mix.jsonl"
    script = Path(__file__).resolve().parents[1] / "scripts" / "mix_regen.py"
    res = subprocess.run([sys.executable, str(script), "--tokenizer", str(mini_world / "target"), "--drop-domains",
                          "code", "--out", str(out), str(first), str(second)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["domain"], r["response_ids"]) for r in rows] == [("code", newline + answer), ("math", newline + answer)]


def test_regenerate_keeps_only_the_asked_domains(mini_world, tmp_path):
    from hf_specgen.cli import main

    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "domain": d}) + "\n"
                            for p, d in [(PROMPTS[0], "math"), ("Continue the text:\nThe", "prose")]))
    out = tmp_path / "math.jsonl"
    main(["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(data), "--out", str(out),
          "--domains", "math", "--max-new-tokens", "4", "--samples-per-prompt", "0"])
    assert [json.loads(line)["domain"] for line in out.read_text().splitlines()] == ["math"]
    with pytest.raises(ValueError, match="--domains"):
        main(["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(data), "--out", str(out),
              "--domains", "code"])


def test_trained_dflash_exports_in_zlab_format_and_decodes_losslessly(mini_world, trained_runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = trained_runs / "dflash"
    log = json.loads((out / "log.json").read_text())
    assert log["steps"] == 3 and log["eval"]["offline_tau"] >= 1.0
    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["auto_map"]["AutoModel"] == "dflash.DFlashDraftModel"
    assert config["block_size"] == 4 and config["dflash_config"]["mask_token_id"] == tok.mask_token_id
    assert (out / "model" / "dflash.py").exists()
    more = json.loads((trained_runs / "dflash_more" / "log.json").read_text())
    assert more["steps"] == 2 and more["anchor_budget"] == 24 and more["init_from"].endswith("model")
    assert more["draft_vocab"] == 50 and "draft_vocab" not in config["dflash_config"]
    restricted = hf_specgen.load_drafter(trained_runs / "dflash_more" / "model")
    # the answers of the training split (the 8 held-out ones are not counted), as the trainer tokenizes them
    train = chat_examples(tok, read_jsonl(trained_runs / "regen.jsonl"), 3072)[8:]
    answers = Counter(t for ids, n_prompt in train for t in ids[n_prompt:])
    vocab = restricted.draft_vocab.tolist()
    assert len(vocab) == 50 and vocab == sorted(set(vocab)) and all(answers[t] > 0 for t in vocab)
    assert min(answers[t] for t in vocab) >= max(n for t, n in answers.items() if t not in vocab)  # the most frequent
    from hf_specgen.cli import main

    with pytest.raises(ValueError, match="--block-size 4"):  # --init-from keeps the trained drafter's geometry
        main(["train", "dflash", "--target", str(mini_world / "target"), "--data", str(trained_runs / "regen.jsonl"),
              "--out", str(trained_runs / "dflash_bad"), "--block-size", "8", "--init-from", str(out / "model"),
              "--max-steps", "1"])
    with pytest.raises(ValueError, match="pass one of them"):  # two starts at once: refused, not silently one
        main(["train", "dflash", "--target", str(mini_world / "target"), "--data", str(trained_runs / "regen.jsonl"),
              "--out", str(trained_runs / "dflash_bad"), "--block-size", "4", "--init-from", str(out / "model"),
              "--init-layers-from-target", "--max-steps", "1"])

    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(mini_world / "target"))
    drafter = hf_specgen.load_drafter(out / "model")
    ids = tok(format_chat(PROMPTS[3]), return_tensors="pt", add_special_tokens=False)["input_ids"]
    stock = target.generate(ids, max_new_tokens=20, do_sample=False)
    for assistant in (drafter, restricted):
        spec = target.generate(ids, assistant_model=assistant, speculative_mode="dflash", max_new_tokens=20,
                               do_sample=False)
        assert torch.equal(spec, stock)

    # The exported folder loads through AutoModel + trust_remote_code where hf_specgen is not importable.
    code = ("import sys; sys.modules['hf_specgen'] = None\n"
            "from transformers import AutoModel\n"
            f"m = AutoModel.from_pretrained({str(out / 'model')!r}, trust_remote_code=True)\n"
            "print(type(m).__name__, m.block_size)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["DFlashDraftModel", "4"]


def test_world_export_writes_hub_folders_with_cards(trained_runs, tmp_path):
    """The tiny world's export; the real target's (export_real.py) is checked on the shipped folders in
    test_real_target.py."""
    from hf_specgen.training.export import DRAFT_LM, DRAFTER, EAGLE3, TARGET, WHIFLASH, export_world

    (trained_runs / "commands.txt").write_text("target\tspecgen train lm --the-exact-flags\n")
    (trained_runs / "target" / "heldout.json").write_text(json.dumps({"loss": {"code": 1.234}}))
    export_world(trained_runs, tmp_path / "hub")
    for name in (TARGET, DRAFTER, DRAFT_LM, EAGLE3, WHIFLASH):
        card = (tmp_path / "hub" / name / "README.md").read_text()
        assert card.startswith("---\nlibrary_name: transformers")
        assert (tmp_path / "hub" / name / "model.safetensors").exists()
    bundle = hf_specgen.load_drafter(str(tmp_path / "hub" / WHIFLASH))  # self-contained: both drafters inside
    assert bundle.router == "neural" and bundle.ar.dtype == torch.bfloat16
    assert not json.loads((tmp_path / "hub" / WHIFLASH / "config.json").read_text()).get("drafter_paths")
    target_card = (tmp_path / "hub" / TARGET / "README.md").read_text()
    assert "specgen train lm --the-exact-flags" in target_card
    assert "| code | 1.234 |" in target_card  # a re-measured held-out loss wins over the training log's
    steps = json.loads((trained_runs / "target" / "log.json").read_text())["steps"]
    assert f"{steps} steps" in target_card
    assert "base_model: hf-specgen/specgen-tiny" in (tmp_path / "hub" / DRAFTER / "README.md").read_text()
    config = json.loads((tmp_path / "hub" / DRAFTER / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["auto_map"]["AutoModel"] == "dflash.DFlashDraftModel"
    # the continued run (dflash_more) is the shipped drafter, and its card lists both training stages
    shipped = hf_specgen.load_drafter(str(tmp_path / "hub" / DRAFTER))
    final = hf_specgen.load_drafter(str(trained_runs / "dflash_more" / "model"), dtype=torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(shipped.state_dict().values(), final.state_dict().values()))
    drafter_card = (tmp_path / "hub" / DRAFTER / "README.md").read_text()
    assert "- stage 1:" in drafter_card and "- stage 2:" in drafter_card and "grouped by answer length" in drafter_card


def test_chat_examples_mask_only_the_response(mini_world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mini_world / "tokenizer")
    records = [{"prompt": "Solve: 1 + 2", "response": "It is 3."},
               {"prompt": "Complete this function:\ndef f(x):", "response": "    return x"}]
    examples = chat_examples(tok, records, 64)
    input_ids, labels = pad_chat_batch(examples, tok.pad_token_id)
    for row, record in enumerate(records):
        scored = tok.decode(labels[row][labels[row] != -100])
        assert scored == "\n" + record["response"] + tok.eos_token  # the turn's opening newline is the first answer token
        # The ids are those of the whole chat text, as the target saw it in pretraining (no split at the boundary).
        length = len(examples[row][0])
        assert input_ids[row, :length].tolist() == tok(format_chat(record["prompt"], record["response"]),
                                                       add_special_tokens=False)["input_ids"]


def test_trained_eagle3_loads_and_decodes_losslessly(mini_world, trained_runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log = json.loads((trained_runs / "eagle3" / "log.json").read_text())
    assert log["steps"] == 3 and log["draft_vocab_size"] == 200
    assert log["heldout_sequences"] == 8  # kept out of training, judged by the offline chain estimate
    assert log["eval"]["rounds_judged"] > 0 and 1 <= log["eval"]["offline_tau"] <= 1 + 3  # chains of 3 drafts
    drafter = hf_specgen.load_drafter(str(trained_runs / "eagle3" / "model"))
    assert isinstance(drafter, hf_specgen.Eagle3DraftModel) and int(drafter.t2d.sum()) == 200
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(mini_world / "target"))
    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    ids = tok(format_chat(PROMPTS[5]), return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = target.generate(ids, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=16, do_sample=False)
    assert torch.equal(out, target.generate(ids, max_new_tokens=16, do_sample=False))


def test_router_training_writes_a_whiflash_bundle(mini_world, trained_runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log = json.loads((trained_runs / "whiflash" / "router_run" / "log.json").read_text())
    assert log["positions"] > 0 and log["oracle_token_al"] >= max(log["mean_al_eagle"], log["mean_al_dflash"])
    bundle = hf_specgen.load_drafter(str(trained_runs / "whiflash"))
    assert isinstance(bundle, hf_specgen.WhiFlash) and bundle.router == "neural"
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(mini_world / "target"))
    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    ids = tok(format_chat(PROMPTS[7]), return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", eagle_top_k=2, eagle_depth=3,
                          eagle_total_tokens=5, max_new_tokens=16, do_sample=False)
    assert torch.equal(out, target.generate(ids, max_new_tokens=16, do_sample=False))


def test_regenerate_resumes_after_a_kill_and_matches_an_uninterrupted_run(mini_world, tmp_path):
    from hf_specgen.cli import main

    args = ["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(mini_world / "prompts.jsonl"),
            "--max-new-tokens", "6", "--batch-size", "5", "--samples-per-prompt", "0", "--limit", "12"]
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    main(args + ["--out", str(whole)])
    lines = whole.read_text().splitlines(keepends=True)
    assert len(lines) == 12
    cut.write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])  # killed while writing the sixth answer
    main(args + ["--out", str(cut)])
    rows = lambda path: sorted((json.loads(x)["job"], json.loads(x)["response_ids"])  # noqa: E731
                               for x in path.read_text().splitlines())
    assert rows(cut) == rows(whole)  # each job once, the same answers
    main(args + ["--out", str(cut)])  # a finished file: nothing is asked again
    assert len(cut.read_text().splitlines()) == 12
    main(args + ["--out", str(cut), "--no-resume", "--limit", "3"])
    assert len(cut.read_text().splitlines()) == 3


def test_regenerate_decoders_give_the_same_answers_in_batches_whose_rows_end_apart(tmp_path, monkeypatch):
    """--decoder engine (the default: finished rows leave the batch mid-call) writes stock batched generate's
    answers. The tiny world's target ends its answers at different steps, and some run past the token limit."""
    from hf_specgen.cli import main
    from hf_specgen.engine.loop import SpeculativeDecoder

    drops = []
    drop = SpeculativeDecoder._drop_finished_rows
    monkeypatch.setattr(SpeculativeDecoder, "_drop_finished_rows",
                        lambda self, session, finished, active: drops.append(len(active)) or drop(self, session,
                                                                                                finished, active))

    prompts = ["Write a Python function that checks whether a number is prime.", "Hi", "What is 17 times 23?",
               "Explain why the sky is blue.", "Write a Python class for a stack.", "def fib(n):",
               "Summarize: the cat sat on the mat all day.", "List three colors.", "Solve: 3 + 4",
               "Translate to French: good morning"]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "domain": "general"}) + "\n" for p in prompts))
    tiny = Path(__file__).resolve().parents[1] / "hub_models" / "specgen-tiny"
    answers = {}
    for decoder in ("stock", "engine"):
        out = tmp_path / f"{decoder}.jsonl"
        main(["data", "regenerate", "--target", str(tiny), "--data", str(data), "--out", str(out),
              "--max-new-tokens", "20", "--batch-size", "5", "--samples-per-prompt", "0", "--decoder", decoder])
        answers[decoder] = sorted((row["job"], row["response_ids"], row["finished"])
                                  for row in map(json.loads, out.read_text().splitlines()))
    assert len(answers["engine"]) == len(prompts) and answers["engine"] == answers["stock"]
    ended = [len(ids) for _, ids, finished in answers["engine"] if finished]
    assert len(set(ended)) > 1 and len(ended) < len(prompts)  # rows ended apart, and some ran to the limit
    assert drops  # the engine decoded and dropped finished rows mid-call
    from hf_specgen.training import regenerate

    with pytest.raises(ValueError, match="enable_engine=hf_specgen.enable"):  # the training layer has no mixin
        regenerate.regenerate(Namespace(decoder="engine"))


def test_sharded_regenerate_writes_a_dataset_folder_that_resumes_and_trainers_read(mini_world, tmp_path):
    """--shard-size: finished shards are compressed and never rewritten; a killed run leaves a partial shard that
    the next run completes; the folder reads back as the plain file's records, in the prompt file's order."""
    import gzip

    from hf_specgen.cli import main

    args = ["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(mini_world / "prompts.jsonl"),
            "--max-new-tokens", "6", "--batch-size", "3", "--samples-per-prompt", "0", "--limit", "10"]
    whole, folder = tmp_path / "whole.jsonl", tmp_path / "dataset"
    main(args + ["--out", str(whole)])
    main(args + ["--out", str(folder), "--shard-size", "4"])
    shards = sorted((folder / "data").glob("*.jsonl.gz"))
    assert [p.name for p in shards] == ["train-00000.jsonl.gz", "train-00001.jsonl.gz", "train-00002.jsonl.gz"]
    by_job = {row["job"]: row["response_ids"] for row in read_jsonl(whole)}
    rows = read_jsonl(folder)
    assert {row["job"]: row["response_ids"] for row in rows} == by_job and len(rows) == 10
    # Killed while answering shard 1: its compressed file is gone, two answers sit in partial/.
    first_two = gzip.decompress(shards[1].read_bytes()).decode().splitlines(keepends=True)[:2]
    shards[1].unlink()
    (folder / "partial" / "train-00001.jsonl").write_text("".join(first_two))
    stamp = shards[0].stat().st_mtime_ns
    main(args + ["--out", str(folder), "--shard-size", "4"])
    assert shards[0].stat().st_mtime_ns == stamp  # a finished shard is not rewritten
    assert read_jsonl(folder) == rows and not list((folder / "partial").iterdir())
    assert json.loads((folder / "summary.json").read_text())["answer_tokens"] == sum(map(len, by_job.values()))
    # --worker K/N: two processes share a run, each answering its own shards (0 and 2, then 1) into one folder.
    shared = tmp_path / "shared"
    main(args + ["--out", str(shared), "--shard-size", "4", "--worker", "0/2"])
    assert sorted(p.name for p in (shared / "data").iterdir()) == ["train-00000.jsonl.gz", "train-00002.jsonl.gz"]
    main(args + ["--out", str(shared), "--shard-size", "4", "--worker", "1/2"])
    assert read_jsonl(shared) == rows
    with pytest.raises(SystemExit):
        main(args + ["--out", str(shared), "--shard-size", "4", "--worker", "2/2"])


def test_a_second_regenerate_into_the_same_folder_is_refused_and_no_shard_is_written_short(mini_world, tmp_path,
                                                                                           monkeypatch):
    """The same command run twice (2026-11-29: two runs answered the real target's shard 263 into one partial file;
    the second to finish found it gone and wrote the shard with no answers): a run that finds another writing the
    same worker's shards is refused before it answers anything; a shard whose partial file lost answers is not
    written (the next run answers what is missing)."""
    from hf_specgen.cli import main
    from hf_specgen.training import regenerate

    args = ["data", "regenerate", "--target", str(mini_world / "target"), "--data", str(mini_world / "prompts.jsonl"),
            "--max-new-tokens", "6", "--batch-size", "3", "--samples-per-prompt", "0", "--limit", "8",
            "--shard-size", "4"]
    folder = tmp_path / "dataset"
    with regenerate._only_run_writing(folder / "partial" / "worker-0-of-1.lock", "a test's shards"):
        with pytest.raises(RuntimeError, match="another `specgen data regenerate` is writing"):
            main(args + ["--out", str(folder)])
    assert not (folder / "data").exists() or not list((folder / "data").iterdir())

    answer = regenerate._answer

    def answer_then_lose_the_partial_file(model, tokenizer, jobs, partial, *rest):
        answer(model, tokenizer, jobs, partial, *rest)
        if partial.name == "train-00001.jsonl":
            partial.unlink()  # what the other run did

    monkeypatch.setattr(regenerate, "_answer", answer_then_lose_the_partial_file)
    with pytest.raises(RuntimeError, match="hold 0 answers where shard 1 needs one for each of its 4 jobs"):
        main(args + ["--out", str(folder)])
    assert [p.name for p in (folder / "data").iterdir()] == ["train-00000.jsonl.gz"]
    monkeypatch.undo()
    main(args + ["--out", str(folder)])  # resumes: shard 1 answered whole
    assert len(read_jsonl(folder)) == 8 and not list((folder / "partial").iterdir())


def test_prompts_appended_to_a_sharded_run_extend_its_short_last_shard_and_fill_new_ones(mini_world, tmp_path):
    """`specgen data prompts --append` then the same regenerate command: the last shard, which the prompt file ended
    inside, keeps its answers and gets the next prompts' answers; the rest go to new shards; full shards are not
    touched; the folder equals a run over the longer file. A prompt file changed other than by appending is refused
    before anything is answered."""
    from hf_specgen.cli import main

    prompts = read_jsonl(mini_world / "prompts.jsonl")
    records = [{**r, "id": f"p-{i}"} for i, r in enumerate(prompts)]
    short, longer = tmp_path / "short.jsonl", tmp_path / "longer.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in records[:10]))
    longer.write_text("".join(json.dumps(r) + "\n" for r in records[:15]))
    args = ["data", "regenerate", "--target", str(mini_world / "target"), "--max-new-tokens", "6", "--batch-size", "3",
            "--samples-per-prompt", "0", "--shard-size", "4"]
    folder, reference = tmp_path / "dataset", tmp_path / "reference"
    main(args + ["--data", str(short), "--out", str(folder)])
    last = folder / "data" / "train-00002.jsonl.gz"
    assert len(read_jsonl(last)) == 2
    kept, stamp = read_jsonl(last), (folder / "data" / "train-00001.jsonl.gz").stat().st_mtime_ns
    main(args + ["--data", str(longer), "--out", str(folder)])
    assert read_jsonl(last)[:2] == kept and [r["id"] for r in read_jsonl(last)] == ["p-8", "p-9", "p-10", "p-11"]
    assert [r["id"] for r in read_jsonl(folder / "data" / "train-00003.jsonl.gz")] == ["p-12", "p-13", "p-14"]
    assert (folder / "data" / "train-00001.jsonl.gz").stat().st_mtime_ns == stamp
    main(args + ["--data", str(longer), "--out", str(reference)])
    assert read_jsonl(folder) == read_jsonl(reference)

    reordered = tmp_path / "reordered.jsonl"
    reordered.write_text("".join(json.dumps(r) + "\n" for r in records[1:16]))
    with pytest.raises(ValueError, match="changed other than by appending"):
        main(args + ["--data", str(reordered), "--out", str(folder)])
    assert not list((folder / "partial").iterdir())  # refused before answering anything


def test_the_committed_distillation_prompts_share_nothing_with_a_benchmark():
    """The real target's data set: its prompt file (and so every answered shard) is disjoint from every benchmark
    prompt, in the proportions its card states."""
    from hf_specgen.bench.prompt_sets import shares_text_with_a_benchmark

    folder = Path(__file__).resolve().parents[1] / "datasets" / "smollm2-135m-instruct-distill"
    prompts = read_jsonl(folder / "prompts.jsonl.gz")
    # The first 23,854 (the card's first build), then 4,306 appended with --seed 1, 3,840 with --seed 2 (1,500 math
    # variants each time), 3,840 with --seed 3 and --seed 4 each (1,700 math variants, no code: the standard library's
    # are spent) and 4,608 with --seed 5 to 25 each (2,000 math variants).
    assert Counter(r["domain"] for r in prompts) == {"math": 55873, "code": 8000, "general": 33821, "long": 38754}
    starts = [23854, 28160, 32000, 35840, 39680, 44288, 48896, 53504, 58112, 62720, 67328, 71936, 76544, 81152,
              85760, 90368, 94976, 99584, 104192, 108800, 113408, 118016, 122624, 127232, 131840, len(prompts)]
    assert [sum(r["id"].startswith("gsm8k-variant-") for r in prompts[a:b])
            for a, b in zip(starts, starts[1:])] == [1500, 1500, 1700, 1700] + [2000] * 21
    assert len(prompts) % 256 == 0  # whole shards
    assert not [r["id"] for r in prompts if shares_text_with_a_benchmark(r["prompt"])]
    shards = sorted((folder / "data").glob("train-*.jsonl.gz"))
    assert shards
    for shard in shards:  # shard N holds prompts 256 N .. 256 N + 255, in order (shards land out of order)
        first = 256 * int(shard.name.removeprefix("train-").removesuffix(".jsonl.gz"))
        answered = [r["id"] for r in read_jsonl(shard)]
        assert answered == [r["id"] for r in prompts[first: first + 256]], shard.name


def test_chat_examples_use_the_exact_prompt_ids_of_a_real_chat_template(mini_world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mini_world / "target")
    record = {"prompt": "ignored when prompt_ids are present", "prompt_ids": [5, 6, 7], "response_ids": [8, 9],
              "finished": True}
    plain = {"prompt": PROMPTS[0], "response": "It is 3."}
    (ids, n_prompt), (plain_ids, plain_n) = chat_examples(tok, [record, plain], 64)
    assert ids == [5, 6, 7, 8, 9, tok.eos_token_id] and n_prompt == 3
    assert plain_ids[:plain_n] == tok(format_chat(PROMPTS[0]), add_special_tokens=False)["input_ids"]


def test_training_softmax_over_the_seen_vocabulary_remaps_labels():
    """--train-vocab seen: with every id kept the loss is the full-vocabulary loss; with a subset that holds every
    label, the softmax has fewer competitors, so the loss can only drop."""
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4, num_layers=1, layer_ids=[1, 2])
    examples = [([5 + (i * 7 + j) % 200 for j in range(30)], 8) for i in range(3)]
    batch = dt.build_anchor_batch(examples, 4, 16, 0, torch.Generator().manual_seed(0))
    weights = dt.slot_weights(4, 2.0)
    full, n = dt.dflash_loss(drafter, target, batch, weights)
    every_id, n_all = dt.dflash_loss(drafter, target, batch, weights, "blocks", torch.arange(target.config.vocab_size))
    assert torch.allclose(full, every_id, atol=1e-5) and n == n_all
    seen = dt.seen_vocabulary(examples, target.config.vocab_size)
    assert set(seen.tolist()) == {t for ids, _ in examples for t in ids}
    subset, _ = dt.dflash_loss(drafter, target, batch, weights, "blocks", seen)
    assert subset < full


def test_scaling_report_reads_each_run_in_order_of_data(tmp_path):
    """scripts/scaling_report.py (issue 26's study): one row per run, ordered by the shards it trained on, with the
    offline tau that scripts/offline_tau.py printed for it; a run without its tau is an error, not a silent gap."""
    import json

    report = load_repo_module("scripts/scaling_report.py", "scaling_report")
    for shards, answers, tau in ((20, 5056, 1.61), (8, 1984, 1.42)):
        (tmp_path / f"log_{shards}.json").write_text(json.dumps(
            {"train_sequences": answers, "steps": 200, "tokens_seen": 6_500_000, "train_minutes": 1.5,
             "device": "one NVIDIA H100"}))
        (tmp_path / f"tau_{shards}.md").write_text(
            f"| drafter | offline tau | judged |\n|---|---|---|\n| dflash /root/runs/scaling-{shards}/model | {tau} | "
            "10537 blocks |\n")
    runs = report.read_runs(tmp_path)
    assert [(r["shards"], r["answers"], r["offline_tau"]) for r in runs] == [(8, 1984, 1.42), (20, 5056, 1.61)]
    assert report.read_compute(tmp_path) == []  # no compute curve without its file
    points = [{"label": "continued", "tokens_seen": 155_000_000, "minutes": 16.3, "offline_tau": 2.4, "command": "b"},
              {"label": "first run", "tokens_seen": 71_000_000, "minutes": 7.3, "offline_tau": 2.1, "command": "a"},
              {"drafter": "EAGLE-3", "label": "e", "tokens_seen": 17_000_000, "minutes": 3, "offline_tau": 2.1,
               "command": "c"}]  # another drafter's curve
    (tmp_path / "compute.json").write_text(json.dumps({"points": points}))
    assert [p["label"] for p in report.read_compute(tmp_path)] == ["e", "first run", "continued"]
    del points[0]["command"]  # a point without the command that made it is refused
    (tmp_path / "compute.json").write_text(json.dumps({"points": points}))
    with pytest.raises(ValueError, match="lacks \\['command'\\]"):
        report.read_compute(tmp_path)
    (tmp_path / "tau_8.md").unlink()
    with pytest.raises(ValueError, match="no offline tau"):
        report.read_runs(tmp_path)


def test_a_card_of_a_continued_run_says_it_continued():
    """A drafter trained by --init-from (a GPU session continuing the shipped one): its card must not present the
    run's steps as the whole training, nor claim the --init-layers-from-target start of a new drafter."""
    from hf_specgen.training import export_real

    continued = export_real._warm_start_line({"init_from": "hub_models/x", "init_layers_from_target": False})
    assert "--init-from" in continued and "--init-layers-from-target" not in continued
    assert "--init-layers-from-target" in export_real._warm_start_line({"init_layers_from_target": True})
    assert export_real._continued_line({"init_from": None}) == ""


def test_a_card_of_a_drafter_with_a_draft_vocabulary_says_so():
    from hf_specgen.training import export_real

    assert "8,192 most frequent answer tokens" in export_real._draft_vocab_line({"draft_vocab": 8192})
    assert export_real._draft_vocab_line({"draft_vocab": "all"}) == export_real._draft_vocab_line({}) == ""
