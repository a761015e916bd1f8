"""Benchmark harness: plain autoregressive vs speculative decoding, same prompts, same target, one run.

Protocol: every method decodes every prompt ``repeats`` times after one warm-up call; the reported decode
time excludes the prefill (the DFlash paper's convention): it runs from the arrival of the first new tokens
to the end and counts the tokens that arrive after them, timed by a streamer for every method alike. Speedup = baseline decode s/token / method's,
medians over repeats, ratios measured in the same process.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
from transformers.generation.streamers import BaseStreamer

from ..engine.cache import restore_states, set_cache_length, snapshot_states, static_cache
from ..engine.session import DecodingSession
from ..engine.stats import PLAIN
from ..engine.support import cache_keyword, rollback_layer_indices
from ..engine.taps import HiddenStateTap, decoder_layers


class DecodeClock(BaseStreamer):
    """Timestamps generate's streamer calls: the 1st put is the prompt, the 2nd the first new tokens.

    The decode window runs from the 2nd put to the end and counts the tokens put after it. Our engine's 2nd put is
    the prefill's single token; transformers' assisted loops verify the prompt together with the first drafts, so
    their 2nd put already carries several tokens, produced before the window opened: counting them would inflate
    their speed, so only tokens that arrive inside the window count, for every method alike.
    """

    def __init__(self):
        self.puts: list[float] = []
        self.sizes: list[int] = []
        self.finished = 0.0

    def put(self, value):
        self.puts.append(time.perf_counter())
        self.sizes.append(int(value.numel()))

    def end(self):
        self.finished = time.perf_counter()

    @property
    def decode_seconds(self) -> float:
        return self.finished - self.puts[1] if len(self.puts) > 1 else 0.0

    @property
    def decode_tokens(self) -> int:
        return sum(self.sizes[2:])


@dataclass
class MethodResult:
    name: str
    decode_seconds: list[float] = field(default_factory=list)  # per prompt: its median-rate pass's (of the repeats)
    decode_tokens: list[int] = field(default_factory=list)  # per prompt: tokens produced inside the decode window
    acceptance: list[list[int]] = field(default_factory=list)  # per prompt: committed tokens per round
    time_split: dict[str, float] = field(default_factory=dict)  # summed over prompts (last repeat)
    counters: dict[str, int] = field(default_factory=dict)  # FLy rescues, mismatches, draft forwards (last repeat)
    rounds: list[tuple[str, bool, float, float]] = field(default_factory=list)  # WhiFlash: drafter, switched, s, s
    verified_rows: int = 0  # rows the target verified, summed over prompts (last repeat)

    @property
    def switch_cost_share(self) -> float | None:
        """WhiFlash: extra drafting time of a round right after a switch (the catch-up), as a share of the mean
        round latency, against rounds of the same drafter without a switch."""
        switched = [r for r in self.rounds if r[1]]
        if not switched:
            return None
        steady: dict[str, list[float]] = {}
        for drafter, was_switch, draft_s, _ in self.rounds:
            if not was_switch:
                steady.setdefault(drafter, []).append(draft_s)
        extra = [draft_s - statistics.mean(steady[d]) for d, _, draft_s, _ in switched if d in steady]
        mean_round = statistics.mean(r[3] for r in self.rounds)
        return statistics.mean(extra) / mean_round if extra and mean_round else None
    sequences: list[list[int]] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return sum(self.decode_tokens) / max(1e-9, sum(self.decode_seconds))

    @property
    def pooled_tau(self) -> float | None:
        rounds = sum(len(a) for a in self.acceptance)
        return sum(map(sum, self.acceptance)) / rounds if rounds else None

    @property
    def mean_tau(self) -> float | None:
        per_prompt = [sum(a) / len(a) for a in self.acceptance if a]
        return statistics.mean(per_prompt) if per_prompt else None


def time_in_turns(calls: dict, repeats: int) -> tuple[dict[str, list[float]], dict]:
    """Wall-clock seconds of whole calls (``calls``: name -> a function of no arguments), for the scripts that time
    ``generate`` calls side by side: each call once to warm up (the width policy measures its costs in its first
    call), then ``repeats`` passes in which the calls take turns, so a change of load reaches them all alike, their
    order turning by one each pass (none always first). Returns ({name: seconds per pass}, {name: what its call
    returned in the last pass})."""
    for call in calls.values():
        call()
    seconds, outputs = {name: [] for name in calls}, {}
    names = list(calls)
    for repeat in range(repeats):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            call = calls[name]
            start = time.perf_counter()
            outputs[name] = call()
            seconds[name].append(time.perf_counter() - start)
    return seconds, outputs


def run_method(target, prompts, gen_kwargs: dict, repeats: int, name: str, progress=None,
               before_prompt=None) -> MethodResult:
    """Decode every prompt with ``target.generate(**gen_kwargs)``; speculative kwargs make it speculative.
    ``before_prompt(i)`` runs before prompt i (e.g. a WhiFlash bundle picking its category's threshold)."""
    return run_methods_in_turns(target, prompts, [(name, gen_kwargs, before_prompt)], repeats, progress)[0]


def run_methods_in_turns(target, prompts, methods: list[tuple], repeats: int, progress=None) -> list[MethodResult]:
    """``run_method`` for several methods ((name, generate kwargs, before_prompt or None) each), taking turns: every
    pass decodes each prompt with every method back to back, so a change of load on a shared machine (another job,
    a slow minute) reaches all methods alike instead of one method's prompts or passes; the methods' order turns by
    one each pass, so none always runs first or last (what ran just before moves a call's time by a few percent on
    a 2-core CPU). Each method still meets the prompts in their order (its carried estimates see the same calls).
    Per prompt, a method's time, tokens and statistics come from one pass: the one with the median rate (tokens per
    second; the lower middle one of an even number). Greedy passes give the same tokens, so that is the median time;
    but in bf16 a call whose widths differ can part from the others at a near-tie and end sooner or later (seen: 96,
    20 and 80 tokens in three passes of one prompt), and a median time over passes with the last pass's tokens read
    0.54x where each pass ran at 1.5-2x. ``progress`` advances once per decode."""
    results = [MethodResult(name) for name, _, _ in methods]
    passes = [[[] for _ in prompts] for _ in methods]  # [method][prompt] -> (output, clock) per pass
    splits = [{"draft": 0.0, "verify": 0.0, "other": 0.0} for _ in methods]
    for (_, gen_kwargs, before_prompt) in methods:
        if before_prompt is not None:
            before_prompt(0)
        target.generate(prompts[0], **gen_kwargs)  # warm-up (allocations, lazy inits, compile)
    for repeat in range(repeats):
        turn = [(repeat + k) % len(methods) for k in range(len(methods))]
        for index, prompt in enumerate(prompts):
            for m in turn:
                name, gen_kwargs, before_prompt = methods[m]
                if progress is not None and hasattr(progress, "set_postfix_str"):
                    progress.set_postfix_str(f"pass {repeat + 1}/{repeats}, prompt {index + 1}/{len(prompts)}, {name}")
                if before_prompt is not None:
                    before_prompt(index)
                clock = DecodeClock()
                out = target.generate(prompt, streamer=clock, return_dict_in_generate=True, **gen_kwargs)
                passes[m][index].append((out, clock))
                if progress is not None:
                    progress.update(1)
    for result, split, per_prompt in zip(results, splits, passes):
        for prompt, runs in zip(prompts, per_prompt):
            by_rate = sorted(runs, key=lambda run: run[1].decode_tokens / max(run[1].decode_seconds, 1e-9))
            out, clock = by_rate[(len(by_rate) - 1) // 2]
            _record_decode(result, split, prompt, out, clock)
            result.decode_seconds.append(clock.decode_seconds)
        if result.acceptance:
            result.time_split = split
    return results


def _record_decode(result: MethodResult, split: dict, prompt, out, clock) -> None:
    """One prompt's tokens and round statistics into ``result`` (from the pass ``run_methods_in_turns`` takes)."""
    result.decode_tokens.append(clock.decode_tokens)
    result.sequences.append(out.sequences[0, prompt.shape[1]:].tolist())
    stats = getattr(out, "speculative_stats", None)
    if stats is None:
        return
    result.acceptance.append(list(stats.acceptance_lengths))
    result.verified_rows += stats.num_rounds * stats.block_size  # rows (tree nodes) through the target
    split["draft"] += stats.draft_time
    split["verify"] += stats.verify_time
    split["other"] += stats.other_time
    for key in ("rescued_tokens", "initial_mismatches", "draft_forwards", "switches"):
        result.counters[key] = result.counters.get(key, 0) + getattr(stats, key)
    last = None  # the last drafting round's drafter (plain steps draft nothing, switch nothing)
    for i, name in enumerate(stats.drafter_per_round):
        result.rounds.append((name, name != PLAIN and last is not None and last != name,
                              stats.round_draft_seconds[i], stats.round_seconds[i]))
        last = name if name != PLAIN else last


@torch.no_grad()
def tap_cost(target, layer_ids: list[int], width: int, repeats: int = 30) -> dict[str, float]:
    """Median time of one W-token verify forward on a static cache, with and without hidden-state taps."""
    prompt = torch.randint(3, target.config.vocab_size - 1, (1, 64), device=target.device)
    dtype = target.get_input_embeddings().weight.dtype
    session = DecodingSession(prompt, None, 64 + 2 * width, width, dtype)
    cache = static_cache(session.capacity, len(decoder_layers(target)), 1, target.device,
                         rollback_layer_indices(target))
    target(input_ids=prompt, position_ids=session.positions[:, :64], attention_mask=session.prefill_mask(),
           **{cache_keyword(target): cache}, use_cache=True)
    block = torch.randint(3, target.config.vocab_size - 1, (1, width), device=target.device)
    args = dict(input_ids=block, position_ids=session.positions[:, 64 : 64 + width],
                attention_mask=session.causal_mask(64, width), **{cache_keyword(target): cache}, use_cache=True)

    def timed(with_taps: bool) -> float:
        samples = []
        states = snapshot_states(cache)  # recurrent layers (hybrid targets) start every repeat from the prompt
        for _ in range(repeats):
            set_cache_length(cache, 64)
            restore_states(cache, states)
            t0 = time.perf_counter()
            if with_taps:
                with HiddenStateTap(target, layer_ids) as tap:
                    target(**args)
                    tap.features()
            else:
                target(**args)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    timed(False)  # warm-up
    plain, tapped = timed(False), timed(True)
    return {"verify_ms": plain * 1e3, "verify_with_taps_ms": tapped * 1e3, "tap_overhead": tapped / plain - 1.0}

