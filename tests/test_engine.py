"""Engine bookkeeping: acceptance, rollback, stop handling, streaming, padding, stock behaviour."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList, TextIteratorStreamer
from transformers.generation.streamers import BaseStreamer

import hf_specgen
from hf_specgen.engine.cache import cache_tensor_addresses
from hf_specgen.engine.loop import SpeculativeDecoder
from hf_specgen.engine.support import engine_probe_reason
from conftest import MASK_TOKEN, VOCAB, make_dflash, make_target, random_prompt


class ScriptedProposer:
    """Proposes the target's own greedy continuation (known in advance), optionally corrupted at random."""

    tapped_layer_ids = None

    def __init__(self, reference: torch.Tensor, block_size: int, corrupt: float = 0.0, seed: int = 0):
        self.reference = reference[0].tolist()
        self.block_size = block_size
        self.corrupt = corrupt
        self.rng = random.Random(seed)

    def start(self, session, prompt_features):
        self.session = session

    def propose(self):
        start = self.session.last_slot
        draft = [int(self.session.tokens[0, start])]
        for slot in range(start + 1, start + self.block_size):
            tok = self.reference[slot] if slot < len(self.reference) else 3
            if self.rng.random() < self.corrupt:
                tok = (tok + 1) % MASK_TOKEN
            draft.append(tok)
        return torch.tensor(draft)

    def commit(self, features, n_committed):
        pass


def run_decoder(target, proposer, prompt, max_new_tokens, eos=None):
    decoder = SpeculativeDecoder(target, proposer, "test", compile_steps=False)
    config = GenerationConfig(max_length=prompt.shape[1] + max_new_tokens, do_sample=False, eos_token_id=eos,
                              return_dict_in_generate=True)
    return decoder.generate(prompt, None, config, LogitsProcessorList(), StoppingCriteriaList())


@pytest.mark.parametrize("block", [2, 5, 16])
def test_oracle_drafter_accepts_whole_blocks(block):
    target = make_target("llama")
    prompt = random_prompt(random.Random(block), 11)
    max_new = 60
    ref = target.generate(prompt, max_new_tokens=max_new, do_sample=False, eos_token_id=None)
    out = run_decoder(target, ScriptedProposer(ref, block), prompt, max_new)
    lengths = out.speculative_stats.acceptance_lengths
    assert out.sequences.tolist() == ref.tolist()
    assert all(a == block for a in lengths[:-1]), lengths
    assert 1 + sum(lengths) >= max_new and 1 + sum(lengths[:-1]) < max_new  # last round capped by max_new_tokens


@pytest.mark.parametrize("corrupt", [0.1, 0.3, 0.6])
def test_partial_acceptance_and_rollback_stay_exact(corrupt):
    target = make_target("qwen3", seed=3)
    rng = random.Random(int(corrupt * 10))
    for case in range(6):
        prompt = random_prompt(rng, rng.randint(1, 40))
        max_new = rng.randint(20, 70)
        ref = target.generate(prompt, max_new_tokens=max_new, do_sample=False, eos_token_id=None)
        out = run_decoder(target, ScriptedProposer(ref, 8, corrupt, seed=case), prompt, max_new)
        assert out.sequences.tolist() == ref.tolist()
        assert len(set(out.speculative_stats.acceptance_lengths)) > 2  # many different acceptance lengths


@pytest.mark.parametrize("draft_vocab", [False, True])
def test_dflash_drafts_equal_full_recomputation(qwen3_pair, draft_vocab, monkeypatch):
    """Cached drafter context (appended per round, rolled back) == drafter run on the full context from scratch.
    With a draft vocabulary the drafts are the best of its tokens under the target's lm_head, and still lossless.
    Each round's width is drawn at random (the widths the policy picks follow this machine's costs: on an AVX2-only
    CPU its probes verified the whole block), so whole blocks, prefixes and plain steps all occur on any machine."""
    from hf_specgen.engine.width_policy import WidthPolicy

    rng = random.Random(0)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: rng.choice(self.widths))
    target, drafter = qwen3_pair
    vocab = None
    if draft_vocab:  # a drafter of its own (the pair is shared): every third token id is proposable
        drafter = make_dflash(target)
        vocab = torch.arange(1, VOCAB, 3)
        drafter.set_draft_vocab(vocab.flip(0))  # any order: kept sorted
        assert drafter.draft_vocab.tolist() == vocab.tolist()
    prompt = random_prompt(random.Random(5), 23)
    records = []
    # the drafter alone: copied tokens (tests/test_prompt_lookup.py) would change which widths the policy picks
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=50,
                          do_sample=False, return_dict_in_generate=True, prompt_lookup=False)
    sequence = out.sequences
    # Record each round's proposals, then recompute them with no cache from the committed prefix.
    from hf_specgen.drafters.dflash import DFlashProposer
    original = DFlashProposer.propose

    def recording(self, width=None, whole_block=False):  # the default call drafts each round's verified prefix
        draft = original(self, width, whole_block)
        records.append((self.session.last_slot, draft[0].clone()))
        return draft

    DFlashProposer.propose = recording
    try:
        again = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=50,
                                do_sample=False, prompt_lookup=False)
    finally:
        DFlashProposer.propose = original
    assert again.tolist() == sequence.tolist()
    embed, width = target.get_input_embeddings(), drafter.block_size
    for start, draft in records:
        with torch.no_grad():
            hidden = target(sequence[:, :start], output_hidden_states=True).hidden_states
            context = torch.cat([hidden[i + 1] for i in drafter.target_layer_ids], dim=-1)  # [1, start, n*H]
            block = torch.tensor([[int(sequence[0, start])] + [MASK_TOKEN] * (width - 1)])
            positions = torch.arange(start + width)[None]
            h = drafter(embed(block), context, positions)  # no cache, no mask: block sees all context + itself
            logits = target.lm_head(h[:, 1:])[0]  # [W-1, V]
            expected = logits.argmax(-1) if vocab is None else vocab[logits[:, vocab].argmax(-1)]
        assert draft[1:].tolist() == expected[: len(draft) - 1].tolist(), start
    assert {len(draft) for _, draft in records} != {width}  # some rounds drafted a prefix of the block
    if vocab is not None:
        assert sequence.tolist() == target.generate(prompt, max_new_tokens=50, do_sample=False).tolist()
        drafted = torch.cat([draft[1:] for _, draft in records])
        assert drafted.numel() and bool(torch.isin(drafted, vocab).all())


def test_rollback_never_reallocates(qwen3_pair):
    target, drafter = qwen3_pair
    Decoder = SpeculativeDecoder

    seen = []
    original = Decoder._verify_step

    def spying(self, *args):
        result = original(self, *args)
        seen.append((tuple(cache_tensor_addresses(self.cache)), tuple(cache_tensor_addresses(self.proposer.cache))))
        return result

    call = dict(assistant_model=drafter, speculative_mode="dflash", adaptive_width=False, max_new_tokens=60,
                do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    # a process's first call on a CPU times the linears' kinds through verify steps of its own (narrow_rows.py):
    # done here, so the spy counts the call's rounds alone
    target.generate(random_prompt(random.Random(2), 9), **call)
    Decoder._verify_step = spying
    try:
        out = target.generate(random_prompt(random.Random(1), 9), **call)
    finally:
        Decoder._verify_step = original
    assert len(seen) == out.speculative_stats.num_rounds > 5
    assert len(set(seen)) == 1 and all(len(a) > 0 for a in seen[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cache_writes_put_each_rows_tokens_at_its_own_slots(dtype):
    from hf_specgen.engine.cache import RowStaticLayer, write_slots

    generator = torch.Generator().manual_seed(0)
    buffer = torch.randn(3, 2, 40, 8, generator=generator).to(dtype)  # [B, heads, S, head_dim]
    rows = torch.randn(3, 2, 5, 8, generator=generator).to(dtype)  # [B, heads, T, head_dim]
    slots = torch.tensor([[0, 1, 2, 3, 4], [17, 18, 19, 20, 21], [35, 36, 37, 38, 39]])  # ragged rows
    expected = buffer.clone()
    for b in range(3):
        for t in range(5):
            expected[b, :, slots[b, t]] = rows[b, :, t]
    write_slots(buffer, slots, rows)
    assert torch.equal(buffer, expected)

    layer = RowStaticLayer(max_cache_len=40, batch_size=3)
    layer.update(rows[:, :, :2], rows[:, :, :2])
    layer.row_lengths.copy_(torch.tensor([2, 10, 38]))  # rows at different lengths, as after a ragged acceptance
    keys, _ = layer.update(rows[:, :, 2:], rows[:, :, 2:])
    assert torch.equal(keys[0, :, :5], rows[0]) and torch.equal(keys[1, :, 10:13], rows[1, :, 2:])
    # row 2 runs past the end: its rows go to the last slot (which one lands there is unspecified), nothing fails
    assert torch.equal(keys[2, :, 38], rows[2, :, 2]) and layer.row_lengths.tolist() == [5, 13, 41]

    # one row (its own write path), and a write of more rows than the cache has slots (a ragged catch-up's padding)
    single = RowStaticLayer(max_cache_len=4, batch_size=1)
    keys, values = single.update(rows[:1], -rows[:1])  # 5 rows into 4 slots
    assert torch.equal(keys[0, :, :3], rows[0, :, :3]) and torch.equal(values[0, :, :3], -rows[0, :, :3])
    single.row_lengths.fill_(1)
    keys, _ = single.update(rows[:1, :, 3:4], rows[:1, :, 3:4])
    assert torch.equal(keys[0, :, 1], rows[0, :, 3]) and single.row_lengths.tolist() == [2]


def test_exact_max_new_tokens_and_stop_tokens(qwen3_pair):
    target, drafter = qwen3_pair
    rng = random.Random(11)
    for _ in range(10):
        prompt = random_prompt(rng, rng.randint(1, 30))
        free = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)[0, prompt.shape[1]:]
        for max_new in (1, 2, 7, 40):
            out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=max_new,
                                  do_sample=False, eos_token_id=None)
            assert out.shape[1] - prompt.shape[1] == max_new
        # Stop on a token that occurs mid-output: single id and list of ids, output cut right after it.
        stop = int(free[len(free) // 2])
        cut = free.tolist().index(stop) + 1
        for eos in (stop, [MASK_TOKEN - 1, stop]):
            ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=eos)
            out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=40,
                                  do_sample=False, eos_token_id=eos)
            assert out.tolist() == ref.tolist()
            assert out.shape[1] - prompt.shape[1] == cut


class RecordingStreamer(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, value):
        self.chunks.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


def test_streamer_receives_new_tokens_in_order(qwen3_pair):
    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(2), 12)
    stock, ours = RecordingStreamer(), RecordingStreamer()
    ref = target.generate(prompt, max_new_tokens=30, do_sample=False, streamer=stock)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=30,
                          do_sample=False, streamer=ours)
    assert out.tolist() == ref.tolist()
    assert ours.ended and ours.chunks[0] == prompt[0].tolist() == stock.chunks[0]
    assert sum(ours.chunks[1:], []) == sum(stock.chunks[1:], []) == ref[0, 12:].tolist()


def test_text_streamer_works():
    """The transformers text streamers accept multi-token chunks."""

    class CharTokenizer:
        def decode(self, ids, **kwargs):
            return "".join(chr(65 + i % 26) for i in ids)

    target = make_target("qwen3")
    drafter = make_dflash(target)
    streamer = TextIteratorStreamer(CharTokenizer(), skip_prompt=True)
    out = target.generate(random_prompt(random.Random(3), 5), assistant_model=drafter, speculative_mode="dflash",
                          max_new_tokens=20, do_sample=False, streamer=streamer)
    assert "".join(streamer) == CharTokenizer().decode(out[0, 5:].tolist())


def test_padded_prompts_match_stock(qwen3_pair):
    """Pad tokens inside the prompt, hidden by an explicit attention_mask, behave as in stock generate."""
    target, drafter = qwen3_pair
    rng = random.Random(4)
    for pads in ((0, 3), (4, 0), (2, 2)):
        body = random_prompt(rng, 15)
        left, inner = pads
        ids = torch.cat([torch.zeros(1, left, dtype=torch.long), body[:, :7], torch.zeros(1, inner, dtype=torch.long), body[:, 7:]], 1)
        mask = (torch.arange(ids.shape[1]) >= left).long()[None]
        mask[:, left + 7 : left + 7 + inner] = 0
        ref = target.generate(ids, attention_mask=mask, max_new_tokens=30, do_sample=False, pad_token_id=0)
        out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                              max_new_tokens=30, do_sample=False, pad_token_id=0)
        assert out.tolist() == ref.tolist(), pads


def test_stock_generate_untouched():
    plain = make_target("qwen3", seed=9)
    prompt = random_prompt(random.Random(6), 10)
    before = plain.generate(prompt, max_new_tokens=20, do_sample=False)
    cls = type(plain)
    hf_specgen.enable(plain)  # already enabled by make_target; enabling twice is a no-op
    assert type(plain) is cls and isinstance(plain, hf_specgen.SpecGenMixin)
    assert plain.generate(prompt, max_new_tokens=20, do_sample=False).tolist() == before.tolist()
    torch.manual_seed(0)
    a = plain.generate(prompt, max_new_tokens=20, do_sample=True, top_k=5)
    torch.manual_seed(0)
    stock = type(plain).__mro__[2].generate(plain, prompt, max_new_tokens=20, do_sample=True, top_k=5)
    assert a.tolist() == stock.tolist()


def test_enable_keeps_class_name_for_save_pretrained(tmp_path):
    target = make_target("llama")
    assert type(target).__name__ == "LlamaForCausalLM"
    target.save_pretrained(tmp_path)
    import json

    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_logits_processors_and_scores_match_stock(qwen3_pair):
    """Row-dependent processors (repetition penalty, min length) see the sequence stock generate would."""
    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(8), 14)
    kwargs = dict(max_new_tokens=40, do_sample=False, repetition_penalty=1.5, min_new_tokens=10, eos_token_id=[2, 5],
                  return_dict_in_generate=True, output_scores=True, output_logits=True)
    ref = target.generate(prompt, **kwargs)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", **kwargs)
    assert out.sequences.tolist() == ref.sequences.tolist()
    assert len(out.scores) == len(ref.scores) == ref.sequences.shape[1] - 14
    for mine, theirs in zip(out.scores, ref.scores):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(out.logits, ref.logits):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_generation_config_object_and_stats(qwen3_pair):
    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(10), 20)
    config = GenerationConfig(max_new_tokens=25, do_sample=False, return_dict_in_generate=True, eos_token_id=None)
    out = target.generate(prompt, generation_config=config, assistant_model=drafter, speculative_mode="dflash")
    stats = out.speculative_stats
    assert out.sequences.shape[1] == 45
    assert stats.new_tokens == 25  # each round's accepted drafts + 1; the last may pass max_new_tokens (cut there)
    assert 1 + sum(stats.acceptance_lengths[:-1]) < 25 <= 1 + sum(stats.acceptance_lengths)
    assert stats.num_rounds == len(stats.acceptance_lengths)
    assert stats.decode_time >= stats.draft_time + stats.verify_time > 0 and stats.prefill_time > 0
    assert stats.decode_tokens_per_second > 0
    assert set(stats.as_dict()) >= {"acceptance_lengths", "draft_time", "verify_time", "other_time"}


def test_spec_generate_reference_loop_is_lossless(qwen3_pair):
    target, drafter = qwen3_pair
    rng = random.Random(12)
    for _ in range(5):
        prompt = random_prompt(rng, rng.randint(1, 50))
        ref = target.generate(prompt, max_new_tokens=30, do_sample=False, eos_token_id=None)
        assert drafter.spec_generate(prompt, target, max_new_tokens=30).tolist() == ref.tolist()
        stop = int(ref[0, prompt.shape[1] + 10])
        stopped = drafter.spec_generate(input_ids=prompt, target=target, max_new_tokens=30, stop_token_ids=[stop])
        cut = ref[0, prompt.shape[1]:].tolist().index(stop) + 1
        assert stopped.tolist() == ref[:, : prompt.shape[1] + cut].tolist()


def test_user_stopping_criteria_are_judged_after_every_token(qwen3_pair):
    """A custom StoppingCriteria ends the output at the same token as in stock generate, even mid-block."""
    from transformers import StoppingCriteria

    class StopAfterToken(StoppingCriteria):
        def __init__(self, token, prompt_len):
            self.token, self.prompt_len = token, prompt_len

        def __call__(self, input_ids, scores, **kwargs):
            return (input_ids[:, self.prompt_len:] == self.token).any(dim=1)

    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(13), 16)
    free = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)[0, 16:].tolist()
    criteria = StoppingCriteriaList([StopAfterToken(free[25], 16)])
    ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None, stopping_criteria=criteria)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=40,
                          do_sample=False, eos_token_id=None, stopping_criteria=criteria)
    assert out.tolist() == ref.tolist() and out.shape[1] - 16 == free.index(free[25]) + 1


def test_eager_steps_attend_only_the_used_cache_prefix(qwen3_pair):
    """Eager verifies see the cache slots in use (rounded up to VISIBLE_BUCKET), not the whole allocation: early
    rounds of a long call attend far fewer keys, and the tokens stay exact. (The prefill, at batch 1, passes no mask
    of ours: it attends the prompt's keys as stock's does; test_width_policy.)"""
    from hf_specgen.engine.graphs import VISIBLE_BUCKET

    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(8), 20)
    widths = []

    engine_probe_reason(target)  # the engine's one-off probe of the model runs before the hook

    def record(module, args, kwargs):
        if kwargs.get("attention_mask") is not None:
            widths.append(kwargs["attention_mask"].shape[-1])

    handle = target.register_forward_pre_hook(record, with_kwargs=True)
    try:  # the fixed block: every round drafts (plain rounds: test_width_policy)
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=300,
                              block_size=drafter.block_size, do_sample=False, eos_token_id=None)
    finally:
        handle.remove()
    assert out.tolist() == target.generate(prompt, max_new_tokens=300, do_sample=False, eos_token_id=None).tolist()
    capacity = 20 + 300 + 2 * drafter.block_size  # the verify block + the drafter block's margin
    bucket = lambda slots: -(-slots // VISIBLE_BUCKET) * VISIBLE_BUCKET  # noqa: E731
    # the first verify: 21 slots + the verify block + the drafter's margin
    assert widths[0] == bucket(21 + 2 * drafter.block_size)
    assert widths == sorted(widths) and all(w % VISIBLE_BUCKET == 0 or w == capacity for w in widths)
    assert widths[-1] == capacity and sum(widths) < 0.7 * capacity * len(widths)


def test_plain_steps_pend_their_feature_rows_without_rejoining_the_whole_context():
    """A plain step adds one row of target features to the drafter's pending context; joining all of it again at
    every step copied O(context) rows a step (4-9% of the real target's batch-16 step). The rows wait as parts and
    are joined once, in order, when the drafter reads them; setting the context replaces them."""
    from hf_specgen.drafters.dflash import DFlashProposer
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer

    prompt, rows = torch.randn(2, 5, 6), [torch.randn(2, 1, 6) for _ in range(3)]
    for cls in (DFlashProposer, Eagle3ChainProposer):
        proposer = cls.__new__(cls)  # the pending rows only: no drafter needed
        assert getattr(proposer, "pending", None) is None  # before start (what the compiled steps' builder asks)
        proposer.pending, proposer.pending_counts = prompt, None
        for row in rows:
            proposer.commit_plain(row, torch.ones(2, dtype=torch.long))
        assert len(proposer._pending_parts) == 1 + len(rows)  # nothing joined yet
        assert torch.equal(proposer.pending, torch.cat([prompt, *rows], dim=1))
        assert len(proposer._pending_parts) == 1  # joined once
        proposer.pending = rows[0]
        assert torch.equal(proposer.pending, rows[0])


@pytest.fixture(scope="module")
def tiny_world_with_tokenizer():
    """The tiny world's trained target in fp32, its tokenizer, DFlash drafter and draft LM (real text, real tokens)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    hub = Path(__file__).resolve().parents[1] / "hub_models"
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hub / "specgen-tiny", dtype=torch.float32).eval())
    drafters = {"dflash": hf_specgen.load_drafter(str(hub / "specgen-tiny-dflash-b16"), dtype=torch.float32),
                "classic": AutoModelForCausalLM.from_pretrained(hub / "specgen-tiny-draft", dtype=torch.float32).eval(),
                "autoregressive": None}
    return target, AutoTokenizer.from_pretrained(hub / "specgen-tiny"), drafters


@pytest.mark.parametrize("mode", ["dflash", "classic", "autoregressive"])
def test_stop_strings_end_a_speculative_call_where_stock_generate_ends_it(tiny_world_with_tokenizer, mode):
    """transformers hands a custom_generate callable none of the caller's tokenizer, so stop strings failed ("could
    not locate a tokenizer") in every speculative call. The mixin makes them a criterion from that tokenizer: given as
    a keyword, in a passed GenerationConfig or in the model's own, the output is stock's, cut inside the free answer;
    without a tokenizer, stock's error asks for one."""
    target, tokenizer, drafters = tiny_world_with_tokenizer
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "A train goes 70 km an hour for 2 hours. How far?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    free = target.generate(ids, max_new_tokens=40, do_sample=False)
    stop = tokenizer.decode(free[0, ids.shape[1] + 10: ids.shape[1] + 13]).strip()[1:]  # starts inside a token
    assert len(stop) >= 2
    call = dict(max_new_tokens=40, do_sample=False, tokenizer=tokenizer)
    reference = target.generate(ids, stop_strings=[stop], **call)
    assert reference.shape[1] < free.shape[1] and tokenizer.decode(reference[0, ids.shape[1]:]).endswith(stop)
    speculative = dict(speculative_mode=mode, assistant_model=drafters[mode])
    assert target.generate(ids, stop_strings=[stop], **speculative, **call).tolist() == reference.tolist()
    config = GenerationConfig(max_new_tokens=40, do_sample=False, stop_strings=[stop])
    assert target.generate(ids, generation_config=config, tokenizer=tokenizer,
                           **speculative).tolist() == reference.tolist()
    assert config.stop_strings == [stop]  # the caller's config is left as it was
    target.generation_config.stop_strings = [stop]
    try:
        assert target.generate(ids, **speculative, **call).tolist() == reference.tolist()
        assert target.generate(ids, stop_strings=None, **speculative, **call).tolist() == free.tolist()
        with pytest.raises(ValueError, match="tokenizer"):
            target.generate(ids, max_new_tokens=40, do_sample=False, **speculative)
    finally:
        target.generation_config.stop_strings = None
