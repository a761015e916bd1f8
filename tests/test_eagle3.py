"""EAGLE-3 drafter: published layouts load, chain drafting is lossless."""

from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig

import hf_specgen
from hf_specgen.models.eagle3 import Eagle3DraftModel, default_eagle3_layer_ids

from conftest import VOCAB, make_target, random_prompt


def make_eagle3(target, draft_vocab: int | None = None, seed: int = 3) -> Eagle3DraftModel:
    t = target.config
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                         num_hidden_layers=1, num_attention_heads=t.num_attention_heads,
                         num_key_value_heads=t.num_key_value_heads, head_dim=t.hidden_size // t.num_attention_heads,
                         draft_vocab_size=draft_vocab or t.vocab_size, rope_theta=10000.0)
    model = Eagle3DraftModel(config)
    if draft_vocab:  # keep every other target id: draft id i -> target id 2i
        model.d2t.copy_(torch.arange(draft_vocab))
        model.t2d.zero_()
        model.t2d[torch.arange(draft_vocab) * 2] = True
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model.eval()


def test_default_taps_follow_the_hidden_states_convention():
    assert default_eagle3_layer_ids(32) == [1, 15, 28]  # hidden_states [2, 16, 29] for Llama-3.1-8B
    assert default_eagle3_layer_ids(36) == [1, 17, 32]  # [2, 18, 33] for Qwen3-8B


@pytest.mark.parametrize("family", ["qwen3", "llama", "mistral"])
def test_eagle3_chain_greedy_equals_stock(family):
    target = make_target(family)
    rng = random.Random(11)
    for draft_vocab in (None, 128):
        drafter = make_eagle3(target, draft_vocab)
        for _ in range(4):
            prompt = random_prompt(rng, rng.randint(1, 90))
            k = rng.choice((1, 3, 6))
            max_new = rng.randint(1, 50)
            ref = target.generate(prompt, max_new_tokens=max_new, do_sample=False)
            out = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", eagle_top_k=1,
                                  num_draft_tokens=k, max_new_tokens=max_new, do_sample=False)
            assert out.tolist() == ref.tolist(), (family, draft_vocab, k)
            top_k, depth = rng.choice(((2, 3), (4, 5), (10, 8)))
            total = rng.randint(2, 1 + top_k * depth)
            tree = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", eagle_top_k=top_k,
                                   eagle_depth=depth, eagle_total_tokens=total, max_new_tokens=max_new,
                                   do_sample=False)
            assert tree.tolist() == ref.tolist(), (family, draft_vocab, top_k, depth, total)


def _write_eagle_checkpoint(model: Eagle3DraftModel, folder, names: str, with_d2t: bool, fmt: str):
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
              "hidden_size": model.config.hidden_size, "intermediate_size": model.config.intermediate_size,
              "num_attention_heads": model.config.num_attention_heads,
              "num_key_value_heads": model.config.num_key_value_heads, "head_dim": model.config.head_dim,
              "vocab_size": model.vocab_size, "draft_vocab_size": model.draft_vocab_size, "rope_theta": 10000.0,
              "rms_norm_eps": model.config.rms_norm_eps}
    (folder / "config.json").write_text(json.dumps(config))
    state = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("rotary")}
    if not with_d2t:
        state.pop("d2t"), state.pop("t2d")
    if names == "vllm":
        state = {k.replace("midlayer.", "layers.0.").replace("d2t", "draft_id_to_target_id"): v for k, v in state.items()}
        state.pop("t2d", None)
    state["embed_tokens.weight"] = torch.zeros(model.vocab_size, model.config.hidden_size)  # present in some repos
    if fmt == "safetensors":
        save_file(state, str(folder / "model.safetensors"))
    elif fmt == "sharded":  # save_pretrained(max_shard_size=...)'s layout: shards named by an index
        names_sorted = sorted(state)
        weight_map = {}
        for i, part in enumerate((names_sorted[::2], names_sorted[1::2])):
            shard = f"model-0000{i + 1}-of-00002.safetensors"
            save_file({k: state[k] for k in part}, str(folder / shard))
            weight_map.update({k: shard for k in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        torch.save(state, folder / "pytorch_model.bin")


@pytest.mark.parametrize("names, with_d2t, fmt", [
    ("eagle", True, "safetensors"), ("vllm", True, "bin"), ("eagle", False, "bin"), ("vllm", False, "safetensors"),
    ("eagle", True, "sharded"),
])
def test_published_layouts_load_and_decode_losslessly(tmp_path, names, with_d2t, fmt):
    target = make_target("llama")
    original = make_eagle3(target, draft_vocab=128 if with_d2t else None)
    _write_eagle_checkpoint(original, tmp_path / "ckpt", names, with_d2t, fmt)
    loaded = hf_specgen.load_drafter(str(tmp_path / "ckpt"))
    assert isinstance(loaded, Eagle3DraftModel)
    for key, value in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    prompt = random_prompt(random.Random(0), 30)
    out = target.generate(prompt, assistant_model=loaded, speculative_mode="eagle3", max_new_tokens=30, do_sample=False)
    assert out.tolist() == target.generate(prompt, max_new_tokens=30, do_sample=False).tolist()


def test_engine_specific_tap_convention_must_be_made_explicit(tmp_path):
    target = make_target("llama")
    model = make_eagle3(target)
    _write_eagle_checkpoint(model, tmp_path / "ckpt", "eagle", True, "safetensors")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="target_layer_ids"):
        hf_specgen.load_drafter(str(tmp_path / "ckpt"))
    loaded = hf_specgen.load_drafter(str(tmp_path / "ckpt"), target_layer_ids=[0, 1, 2])
    assert loaded.target_layer_ids == [0, 1, 2]


def test_eagle3_errors_name_the_fix():
    target = make_target("qwen3")
    other = make_target("qwen3", hidden_size=32, head_dim=8)
    prompt = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="hidden size"):
        target.generate(prompt, assistant_model=make_eagle3(other), speculative_mode="eagle3", max_new_tokens=4)
    with pytest.raises(ValueError, match="EAGLE-3 drafter"):
        target.generate(prompt, assistant_model=make_target("qwen3", seed=2, num_hidden_layers=1),
                        speculative_mode="eagle3", max_new_tokens=4)
    with pytest.raises(ValueError, match="speculative_mode='eagle3'"):
        target.generate(prompt, assistant_model=make_eagle3(target), speculative_mode="classic", max_new_tokens=4)
    assert VOCAB == target.config.vocab_size


@torch.no_grad()
def _reference_chain(target, drafter, committed: torch.Tensor, k: int) -> list[int]:
    """Draft k tokens from scratch: every row recomputed over the full context with a causal mask, no cache."""
    layer_ids = drafter.target_layer_ids or default_eagle3_layer_ids(target.config.num_hidden_layers)
    hs = target(committed, output_hidden_states=True).hidden_states
    start = committed.shape[1] - 1
    features = torch.cat([hs[i + 1] for i in layer_ids], dim=-1)[:, :start]  # f_0..f_{start-1}
    hidden_in = drafter.fc(features)  # context rows use target features
    tokens = committed[:, 1:]  # x_1..x_start
    drafts = []
    for _ in range(k):
        n = tokens.shape[1]
        causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = drafter(target.get_input_embeddings()(tokens), hidden_in, torch.arange(n)[None], None, causal)
        nxt = drafter.to_target_ids(drafter.draft_logits(out[:, -1]).argmax(-1))
        drafts.append(int(nxt))
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        hidden_in = torch.cat([hidden_in, out[:, -1:]], dim=1)  # the drafter's own output stands in for f
    return drafts


@pytest.mark.parametrize("mode", ["eagle3", "fly-accept-all"])
def test_chain_drafts_equal_a_from_scratch_recomputation(mode):
    """Catches any misalignment of features, tokens, positions or cache rows across rounds. A random drafter is
    rarely accepted, so FLy with its gate and window off (every draft accepted) exercises multi-token commits."""
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer

    target = make_target("llama")
    drafter = make_eagle3(target, draft_vocab=128)
    seen = []
    original = Eagle3ChainProposer.propose

    def recording(self):
        drafts = original(self)
        seen.append((self.session.committed().clone(), drafts[0, 1:].tolist()))
        return drafts

    Eagle3ChainProposer.propose = recording
    try:
        prompt = random_prompt(random.Random(4), 25)
        extra = dict(speculative_mode="fly", fly_window=0, fly_entropy_threshold=0.0) if mode != "eagle3" else dict(
            speculative_mode="eagle3", eagle_top_k=1)
        out = target.generate(prompt, assistant_model=drafter, num_draft_tokens=4, max_new_tokens=30,
                              do_sample=False, return_dict_in_generate=True, **extra)
    finally:
        Eagle3ChainProposer.propose = original
    assert len(seen) > 3
    if mode != "eagle3":
        assert max(out.speculative_stats.acceptance_lengths) == 5
    for committed, drafts in seen:
        assert drafts == _reference_chain(target, drafter, committed, 4)


@torch.no_grad()
def test_ttt_steps_equal_what_decoding_computes():
    """Training-time test step s for row t == the drafter run at inference on real rows 0..t, then a chain of
    s-1 rows fed with the true next tokens and its own previous outputs."""
    from hf_specgen.training.eagle3_trainer import ttt_forward

    target = make_target("llama", num_hidden_layers=6)
    drafter = make_eagle3(target)
    layer_ids = default_eagle3_layer_ids(6)
    ids = torch.randint(3, 250, (1, 24))
    steps, rows = 3, 24 - 3 - 1
    hs = target(ids, output_hidden_states=True).hidden_states
    features = torch.cat([hs[i + 1][:, :rows] for i in layer_ids], dim=-1)
    embed = target.get_input_embeddings()
    outputs = ttt_forward(drafter, embed, ids, features, steps)
    for t in (0, 5, rows - 1):
        tokens = ids[:, 1: t + 2]  # x_1..x_{t+1} with f_0..f_t
        hidden_in = drafter.fc(features[:, : t + 1])
        for s in range(1, steps + 1):
            n = tokens.shape[1]
            causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
            out = drafter(embed(tokens), hidden_in, torch.arange(n)[None], None, causal)
            torch.testing.assert_close(outputs[s - 1][0, t], out[0, -1], atol=1e-4, rtol=1e-4)
            tokens = torch.cat([tokens, ids[:, t + s + 1: t + s + 2]], dim=1)  # the true next token
            hidden_in = torch.cat([hidden_in, out[:, -1:]], dim=1)


def test_draft_vocabulary_keeps_the_most_frequent_tokens():
    from hf_specgen.training.eagle3_trainer import draft_vocabulary

    examples = [([1, 2, 9, 9, 9, 7, 7, 4], 2)]  # response tokens: 9 x3, 7 x2, 4 x1
    d2t, t2d = draft_vocabulary(examples, 12, 3)
    kept = (torch.arange(3) + d2t).tolist()
    assert kept == [4, 7, 9] and t2d.nonzero().flatten().tolist() == [4, 7, 9]


@torch.no_grad()
def _reference_tree(target, drafter, committed: torch.Tensor, top_k: int, depth: int, total: int):
    """The EAGLE-2 dynamic tree from scratch, node by node in Python, no cache: each frontier node's distribution is
    the drafter run over the committed rows plus its own ancestor path. Returns (tokens, parents) of the proposal."""
    layer_ids = drafter.target_layer_ids or default_eagle3_layer_ids(target.config.num_hidden_layers)
    hs = target(committed, output_hidden_states=True).hidden_states
    start = committed.shape[1] - 1
    context_hidden = drafter.fc(torch.cat([hs[i + 1] for i in layer_ids], dim=-1)[:, :start])
    embed = target.get_input_embeddings()

    def expand(path_tokens, path_hidden):  # -> (log-probs after the path [draft_vocab], the drafter's last output)
        tokens = torch.cat([committed[:, 1:], torch.tensor([path_tokens], dtype=torch.long)], dim=1)
        hidden_in = torch.cat([context_hidden, *path_hidden], dim=1)
        n = tokens.shape[1]
        causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = drafter(embed(tokens), hidden_in, torch.arange(n)[None], None, causal)
        return torch.log_softmax(drafter.draft_logits(out[0, -1]).float(), dim=-1), out[:, -1:]

    # node: (score, target token, parent node or -1, depth, tokens from the root's child down, outputs along it)
    logprobs, out = expand([], [])
    scores, ids = logprobs.topk(top_k)
    nodes = [(float(s), int(drafter.to_target_ids(i)), -1, 1, [int(drafter.to_target_ids(i))], [out])
             for s, i in zip(scores, ids)]
    frontier = list(range(top_k))
    for _ in range(1, depth):
        children = []
        for parent in frontier:
            score, _, _, level, path, outs = nodes[parent]
            logprobs, out = expand(path, outs)
            child_scores, child_ids = logprobs.topk(top_k)
            for s, i in zip(child_scores, child_ids):
                token = int(drafter.to_target_ids(i))
                children.append((score + float(s), token, parent, level + 1, path + [token], outs + [out]))
        first = len(nodes)
        nodes += children
        best = sorted(range(len(children)), key=lambda c: -children[c][0])[:top_k]
        frontier = [first + c for c in best]
    chosen = sorted(sorted(range(len(nodes)), key=lambda n: (-nodes[n][0], nodes[n][3], n))[: total - 1])
    index = {n: i + 1 for i, n in enumerate(chosen)}
    tokens = [int(committed[0, -1])] + [nodes[n][1] for n in chosen]
    parents = [-1] + [index[nodes[n][2]] if nodes[n][2] >= 0 else 0 for n in chosen]
    return tokens, parents


def test_device_built_trees_equal_a_from_scratch_tree():
    """The tree built on the device with fixed-shape tensor ops (candidate table, per-row ancestor views of the
    drafter's cache, stable sort) equals the EAGLE-2 tree built node by node from scratch, round after round."""
    from hf_specgen.drafters.eagle3 import Eagle3TreeProposer

    target = make_target("llama")
    drafter = make_eagle3(target, draft_vocab=128)
    with torch.no_grad():
        drafter.lm_head.weight.mul_(30)  # peaked distributions: deep nodes outscore shallow ones and make the tree
    seen = []
    original = Eagle3TreeProposer.propose

    def recording(self):
        tree = original(self)
        seen.append((self.session.committed().clone(), tree.tokens[0].tolist(), tree.parents[0].tolist()))
        return tree

    Eagle3TreeProposer.propose = recording
    try:
        prompt = random_prompt(random.Random(5), 21)
        target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", eagle_top_k=3, eagle_depth=4,
                        eagle_total_tokens=9, max_new_tokens=16, do_sample=False)
    finally:
        Eagle3TreeProposer.propose = original
    assert len(seen) > 3
    depths = set()
    for committed, tokens, parents in seen:
        assert (tokens, parents) == _reference_tree(target, drafter, committed, 3, 4, 9)
        depth = [0] * len(parents)
        for i in range(1, len(parents)):
            depth[i] = depth[parents[i]] + 1
        depths.add(max(depth))
    assert max(depths) == 4  # trees reached the last level: every level's ancestor views were exercised


@torch.no_grad()
def test_offline_chain_tau_counts_the_drafts_a_greedy_chain_would_have_accepted():
    """The trainer's held-out estimate on a sequence built from the drafter's own chain: every draft counts while the
    text follows the chain, and the count stops at the first token that does not (any misaligned row, step or label
    offset gives another count)."""
    from hf_specgen.training.eagle3_trainer import offline_chain_acceptance

    target = make_target("llama", num_hidden_layers=6)
    drafter = make_eagle3(target)
    committed = torch.randint(3, 250, (1, 20))
    depth = 4
    chain = _reference_chain(target, drafter, committed, depth)
    for wrong_at in (None, 0, 2):
        text = list(chain)
        if wrong_at is not None:
            text[wrong_at] = 3 + (text[wrong_at] - 2) % 240  # another token
        ids = committed[0].tolist() + text
        # the last committed token opens the response: exactly one round (row 18) has depth + 1 response tokens
        stats = offline_chain_acceptance(drafter, target, [(ids, 19)], pad_id=0, depth=depth)
        assert stats["rounds_judged"] == 1
        assert stats["offline_tau"] == 1 + (depth if wrong_at is None else wrong_at), (wrong_at, chain)
