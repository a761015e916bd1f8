"""Speculation that never loses: each round's verify width chosen from measured costs and running acceptance.

A round that verifies w rows (the last committed token and w - 1 drafts) commits, in expectation,

    E[c(w)] = 1 + sum_{k=1}^{w-1} prod_{j<=k} p_j          p_j = P(draft j accepted | drafts 1..j-1 accepted)

tokens and costs ``draft + verify(w)`` seconds (a width-1 round drafts nothing: it is a plain decoding step through
the same engine). The policy picks the width with the most expected tokens per second:

- ``verify(w)`` is measured once per (device, dtype, batch bucket, compiled) on the target's own cache, at each
  width bucket, and then follows the rounds actually run (an exponential average of their clocks); it is kept on
  the model (``save_costs`` / ``load_costs`` write and read it, so a Space or a server measures once);
- ``draft`` is the fastest of the first call's first DRAFT_TIMING_ROUNDS steady drafting rounds (drafts of the
  whole block, verified at the width that would pay best were drafting free), and follows the rounds likewise; a
  DFlash round of w rows drafts only its w - 1 tokens through the lm_head, so it costs ``draft`` less that share of
  ``draft_head`` (the lm_head over the whole block's rows, timed once); a batch that shrank mid-call into a bucket
  whose ``draft`` was never timed chooses by the larger bucket's (``WidthPolicy.draft_fallback``);
- a compiled step's first calls at a new shape compile and record a CUDA graph (seconds, where a replay takes
  milliseconds): measurements start after warm-ups, and a call teaches the table the median of its rounds at each
  width, never more than twice the cost it had, so such a one-off never makes drafting look slow (measured on an
  H100: with every round's clock averaged in, the default call fell back to plain steps and ran at 0.42x the fixed
  block's speed);
- ``p_j`` are discounted counts over the rounds run (this call's and, decayed, earlier calls' with the same
  drafter), started from an even prior so a new drafter is tried.

When plain steps win, a probe round drafts after 8 plain rounds, then after 16, 32, up to 64 while probes keep
failing (where a probe costs little more than a plain step, the gap stops growing once a failed one wastes at most
1/96 of it: 20 plain rounds for a round 0.2 plain steps dearer; the next call of the same target and drafter goes on
from the gap reached, after one opening probe in a call of one prompt: a new call is a new prompt, and a predictable
one must not wait 64 plain rounds), at the widest
width that costs at most a quarter more than a plain step (so a failed probe wastes little; where every drafting
round costs more, at most a tenth more than the narrowest one, so a probe's evidence is more than one token), and
only where some width would pay if every draft were accepted (never, say, in a compute-bound batch). Where a probe
costs more than a quarter more than a plain step (fp32 on a CPU without bf16 units: about 1.9 plain steps, and the
opening one also runs the drafter over the prompt), opening probes back off across calls as scheduled ones do within
a call: while they keep failing, a call opens with one only every 2, 4, up to 8 calls (the others wait for the
schedule), and any probe that pays brings them back to every call. A probe that
keeps at least half its drafts means the text changed (code, copying, lists): the old evidence is dropped and drafting
resumes at once, widening at most twice per round past the widest round the new evidence holds (a probe of 2 rows says
nothing about slot 10); the estimate then follows the new rounds. Where plain steps still rate best after it (a 2-row
probe leaves every slot past the first at its prior), the next round is a probe of the next wider width, whose evidence
is added to the first's, until drafting rates best or one fails (follow_up_width). A plain step's target is free
evidence too: once the target gave SURE_PROBABILITY or more to each of the last ``sure_after`` plain steps' tokens (4,
doubled after each such probe that fails, back to 4 once any probe pays), a probe runs whatever the schedule. Where a
probe costs much more than a plain step, scheduled probes are further apart, so that failed ones waste at most 1/32 of
the time. A probe's cost includes its drafter's read of the committed rows it has not seen (a draft LM reads the
prompt and plain steps' rows in one forward before it drafts), charged at the share of recent probes that failed.

The clock overrules the cost model: once this call has run 3 rounds of a width, that width costs the median of its
last 8 whole rounds (drafting, verify, commit and the host sync: what the model's forwards leave out), and widths
without such rounds cost the model's figure times the median ratio clock / model of the widths with them. A call
that drafts from its first round, while drafting rates less than 1.5 plain steps, runs a plain round after every 8
drafting ones until 3 plain rounds give plain steps a clock of their own. Any sequence of widths is lossless: the
verify of a prefix of the block accepts exactly what the full verify would have, up to that prefix.

A batch's call lasts until its slowest row is done: there a width's rate is the mean row's tokens left over the
seconds until every row is done (``WidthPolicy.set_rows``), from each row's own estimate (the batch's as its prior),
the spread of its finishing round, and what the rows still going cost each round. Only a drafting round that follows
another teaches the drafting cost: the first after plain steps also catches the drafter up on their rows.

Draft trees (EAGLE-3) choose a node budget instead: the tree of the drafter's best n - 1 candidates, whose
expected accepted drafts ``TreeAcceptanceEstimate`` keeps per budget from what each verify says about every smaller
budget; every EXPLORE_EVERY-th drafting round verifies a wider tree for evidence about the budgets in between.

WhiFlash's default call also chooses each round's drafter (``RoutedWidthPolicy``): one policy per drafter, an
acceptance estimate per drafter and router vote, and the drafter whose best width pays most under the current vote.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import weakref
from collections import deque
from copy import copy as shallow_copy
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .support import _remembered

WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
COMPILED_WIDTH_BUCKETS = (1, 4)  # compiled steps: one graph per width, so fewer widths (the full block is added)
# the one-time cost measurement stops repeating past this: per call, over all its timings (an eager call's warm-ups
# included), so that a call whose drafter needs a table of its own and copies' widths too spends about a second
# timing (EAGLE-3's first call on the real target, bf16: 1.3 s when each timing had a second of its own)
MEASURE_BUDGET_SECONDS = 1.0
COST_AVERAGING = 0.2  # weight of a new call's clock in the running cost of a width
MAX_LEARNED_RATIO = 2.0  # a call moves a cost towards at most this multiple of the old one (a compile is no round)
DRAFT_TIMING_ROUNDS = 3  # drafting rounds timed before the policy chooses (compiled: compile, record, replay)
ACCEPTANCE_DECAY = 0.97  # per round: older rounds weigh less, so the estimate follows the text
# at most this many rounds' worth of a block's or chain's evidence carried into the next call: enough to open it at
# the width the last calls paid at, little enough that a new text's own rounds outweigh it within a few (16 before
# 2026-11-27: replayed on three sets of the real target's prompts, 4 gained EAGLE-3's chain 0.7-1.8% on four of seven
# categories and moved DFlash by 0.2% at most; docs/width-policy.md). A tree's estimate, which no replay has measured
# and whose gains lean on a prior the lighter they are carried, keeps 16.
CARRIED_WEIGHT, TREE_CARRIED_WEIGHT = 4.0, 16.0
PRIOR_ACCEPT, PRIOR_WEIGHT = 0.5, 1.0
# rounds' worth of the prior of a block's or chain's slots past the first (AcceptanceEstimate.rates: each one's prior
# is the rate of the slot before it; slot 1's, PRIOR_ACCEPT at PRIOR_WEIGHT, so that a drafter whose every draft is
# wrong still falls back to plain steps within a few rounds). A deep slot is reached in few rounds: at one round's
# worth a single miss there set its rate, and every slot past it inherited that rate. On the tiny world's math,
# DFlash's slots past 8 (kept about 85% of the times they were reached) were rated 0.5-0.7 after such misses, and the
# call verified rounds of 8 rows that kept all their drafts. Replayed without a clock (scripts/policy_replay.py
# --world tiny, a round of 16 rows costing 1.2 rounds of 8 as the engine clocked them in fp32 on an AVX2 CPU):
# DFlash's math 2.85x stock against 2.77x at one round's worth (its fixed block 2.86x), code and prose within 1.5%,
# EAGLE-3's chain level; the real target's replays level for all three default calls. At 4, the tiny world's math
# read 2.91x but the real target's DFlash math 4% less (docs/width-policy.md, "A block's deep slots lean on the
# slots before them").
SLOT_PRIOR_WEIGHT = 2.0
POOLED_WEIGHT = 4.0  # rounds' worth of a pooled estimate's rates as a contextual estimate's prior (WhiFlash)
# WhiFlash's default call: in each router vote, the drafter that has not run for this many of the vote's rounds
# (counted across calls) drafts once (an exploring round, as wide as EXPLORE_WIDENING allows), so its estimate under
# that vote follows the text too. Each such round that leaves it behind doubles its gap under that vote, up to
# LAST_OTHER_DRAFTER_EVERY (carried into later calls, as the probe schedule is); one that puts it ahead or keeps every
# draft of a round narrower than its widest, or a probe of its that passes, brings the gap back to
# OTHER_DRAFTER_EVERY; one whose tokens over its cost beat the preferred drafter's rate drops that drafter's evidence
# and explores again at the vote's next round (RoutedWidthPolicy.observe).
OTHER_DRAFTER_EVERY = 16
LAST_OTHER_DRAFTER_EVERY = 128
# A call is new text: in its first drafting round, the drafter not preferred under the round's router vote explores,
# whatever its gap, every ``opening_explore_every``-th call (1, doubled after each such round that leaves it behind
# up to LAST_OPENING_EXPLORE_EVERY, back to 1 once one beats the leader or the drafter leads under that vote; carried
# with its estimate under the vote), if its exploring round costs at most OPENING_EXPLORE_COST times the preferred
# drafter's round (RoutedWidthPolicy._drafter_for).
LAST_OPENING_EXPLORE_EVERY, OPENING_EXPLORE_COST = 8, 1.25
# An exploring round verifies the widest width whose round costs at most EXPLORE_WIDENING times a round at the
# drafter's best width (WidthPolicy.exploring_width): a block drafter's wider rows cost little more, and test slots its
# stale estimate no longer reaches.
EXPLORE_WIDENING = 1.25
# rounds' worth of the batch's rates as each batch row's prior (WidthPolicy.set_rows): a row's own rounds outweigh it
# only after a dozen or so, since one round's count says little (with 4, one unlucky first round sent the tiny
# world's EAGLE-3 batch of 8 to plain steps, 1.63x stock against 1.79x for the mean row's rate)
ROW_PRIOR_WEIGHT = 16.0
FIRST_PROBE_AFTER, LAST_PROBE_AFTER = 8, 64
# While plain steps win, the target's own confidence is free evidence of the text: a plain step whose token the target
# gave SURE_PROBABILITY or more is a sure one, and once the last ``sure_after`` plain steps were all sure, a probe runs
# then, whatever the schedule (WidthPolicy.choose). ``sure_after`` starts at FIRST_SURE_RUN, doubles after each such
# probe that fails (up to LAST_PROBE_AFTER) and is back at FIRST_SURE_RUN once any probe pays; carried with the
# estimate. On the tiny world's answers the target was that sure of 92% of the math tokens, 26% of code's and 5% of
# prose's, so after unpredictable prompts a math prompt drafts within a few tokens, where the schedule (about 44 plain
# rounds apart where a probe costs two plain steps, fp32 on an AVX2 CPU) and opening probes backed off across calls
# left whole answers in plain steps.
SURE_PROBABILITY, FIRST_SURE_RUN = 0.9, 4
# Where probes cost more than PROBE_COST plain steps, a call opens with a probe only every opening_every calls: 1, then
# doubled after each failed opening probe up to LAST_OPENING_EVERY, back to 1 once a probe pays (WidthPolicy.choose).
LAST_OPENING_EVERY = 8
# A probe verifies the widest width whose round costs at most PROBE_COST plain steps, or at most PROBE_WIDENING times
# the narrowest drafting round where that round alone costs more (WidthPolicy.probe_width).
PROBE_COST, PROBE_WIDENING = 1.25, 1.1
# Scheduled probes are at least this many plain rounds apart that a failed one costs at most this share of their time
# (WidthPolicy.probe_gap): 1/32, so a probe costing 1.25 plain steps keeps the schedule's first gap of 8.
PROBE_OVERHEAD = 1 / 32
# After each failed scheduled probe the gap doubles (up to LAST_PROBE_AFTER), but only while a failed probe would still
# waste more than this share of the plain rounds between them (WidthPolicy.longest_probe_gap): where DFlash's probe
# costs 0.2 plain steps more (SmolLM2, bf16 on a CPU with bf16 units) the gap stops at 20, since 64 plain rounds left
# a call whose opening probe failed in plain steps to its end (docs/width-policy.md, "Cheap probes back off less");
# where a probe costs 0.72 plain steps more or over (fp32 on an AVX2 CPU) it still reaches 64.
PROBE_BACKOFF_OVERHEAD = 1 / 96
# A width's clocked cost is the median of its last CLOCKED_ROUNDS rounds in the call (a one-off compile or stall moves
# no median), taken once it has MIN_CLOCKED_ROUNDS of them.
CLOCKED_ROUNDS, MIN_CLOCKED_ROUNDS = 8, 3
# A drafter that reads the committed rows it has not seen before it drafts (a draft LM: the prompt, then the rows
# of plain steps, in one forward of the whole model over every batch row; DFlash and EAGLE-3: the target's features
# at those rows, PendingContextRows.unread_rows) makes a probe after plain steps cost that read too: on the tiny
# world's batch of 16 in bf16, a draft LM's probe took 116 ms where a plain step took 7, and on the real target's
# batch of 16 after 245-token prompts (fp32, AVX2) a DFlash probe 0.77 s where a plain step took 0.23 s. The read's
# seconds per row are learned from drafting rounds that read at least this many rows (CostTable.read). Where a
# probe passes, drafting needed that read anyway: a probe is charged the read at the share of recent probes that
# failed (PROBES_FAILING: its start, and the weight of each probe's outcome). The tiny world's batch of 4 in fp32
# with AVX2 kernels, whose probes pass, waits longer for them all the same: 9-12% slower with the read charged in
# full, 6-8% at the share (A/Bs in docs/benchmarks/draft_lm_lazy_prompt), where batch 16 gains 13-24%.
MIN_READ_ROWS = 8
PROBES_FAILING, PROBE_OUTCOME_WEIGHT = 0.5, 0.25
# A call that drafts from its first round has no plain rounds of its own to hold its drafting rounds against: while
# the model rates drafting less than REFERENCE_MARGIN times a plain step, every REFERENCE_EVERY-th drafting round is
# a plain one, until MIN_CLOCKED_ROUNDS of them give plain steps a clock of their own.
REFERENCE_EVERY, REFERENCE_MARGIN = 8, 1.5
# Trees: a budget's gain over the one below it averages the rounds that covered it, each older one GAIN_DECAY less
# (every round covers the narrow budgets, so their gains follow the text within a few rounds; see
# TreeAcceptanceEstimate), and every EXPLORE_EVERY-th drafting round verifies the widest budget costing at most
# EXPLORE_COST times the chosen one's round (WidthPolicy.exploring).
EXPLORE_EVERY, EXPLORE_COST = 8, 2.0
GAIN_DECAY = 0.9
# The context of the rounds whose rows all have copied tokens at hand (prompt_lookup: their last 3 tokens occurred
# earlier): the copies' acceptance, and WhiFlash's drafters' in such rounds, are kept apart from the others', since a
# copy of a quoted passage runs on for many tokens where a drafter's guesses do not.
COPIED = "copied"
COPY_WIDTH = 16  # the widest verify of copied tokens alone (CopyingWidthPolicy), whatever the drafter's block
# A drafter that drafts token by token (an EAGLE-3 chain, WhiFlash's EAGLE-3 rounds, a draft LM) on a CPU, in the
# default call (mixin.stops_when_unsure), stops drafting once the chance that all its drafts so far are right (the
# product of its probabilities of them) is below UNSURE_STOP, and the round then verifies the width that pays for
# those drafts (WidthPolicy.confident_width). The average acceptance of each slot is all the
# policy knows before a round; the drafter's own probabilities say which rounds are the likely ones, and they track
# acceptance closely (SmolLM2's EAGLE-3 drafter: drafts at probability 0.5-0.6 were kept 53% of the time, at 0.9+
# 93%). Replayed on the real target's benchmark answers (docs/width-policy.md, "Drafts that stop when unsure"), 0.5
# did best of 0.3-0.7 and lifted the worst category from 0.946x to 0.977x stock; it needs a host read per draft,
# which only a CPU gives for free.
UNSURE_STOP = 0.5


def width_buckets(max_width: int, compiled: bool, every_width: bool = False) -> tuple[int, ...]:
    """The verify widths a policy chooses among: 1 (plain step), powers of two below the block, the block itself.
    ``every_width``: eager steps of a drafter that drafts token by token (an EAGLE-3 chain, a draft LM) take every
    width up to the block: such a drafter stops where it turns unsure (UNSURE_STOP), after any number of drafts,
    and with buckets a round that drafted 5 or 6 tokens before that verified 4 of them."""
    if every_width and not compiled:
        return tuple(range(1, max_width + 1))
    buckets = COMPILED_WIDTH_BUCKETS if compiled else WIDTH_BUCKETS
    return tuple(sorted({w for w in buckets if w < max_width} | {max_width}))


def batch_bucket(batch_size: int) -> int:
    """1, 2, 4, 8, ...: the batch sizes whose costs one measurement serves (a batch of 5-8 rows counts as 8)."""
    return 1 << (batch_size - 1).bit_length()


def cost_key(device: torch.device, dtype: torch.dtype, batch_size: int, compiled: bool | str,
             drafter: str = "") -> str:
    """The cost table's key. ``compiled``: False, True or "max-autotune" (inductor's own GEMMs: other costs).
    ``drafter``: the kind of drafter (its proposer's name), whose drafting cost the table also holds; empty for the
    DFlash block (the keys saved before other drafters adapted their width)."""
    bucket = batch_bucket(batch_size)
    step = "eager" if not compiled else "compiled" if compiled is True else f"compiled-{compiled}"
    key = f"{device.type}|{str(dtype).removeprefix('torch.')}|batch{bucket}|{step}"
    return f"{key}|{drafter}" if drafter else key


def _forward_key(key: str) -> str:
    """A ``cost_key`` less its drafter: the target forward (device, dtype, batch bucket, step) its verifies time."""
    return "|".join(key.split("|")[:4])


@dataclass
class CostTable:
    """Seconds of one target verify forward of w rows (``verify[w]``, the whole batch) and of one drafter forward."""

    verify: dict[int, float] = field(default_factory=dict)
    draft: float | None = None  # a drafter forward over the whole block
    # the lm_head over the block's drafted rows, for a drafter that drafts only the verified prefix through it
    # (DFlash): a round of w rows then drafts for ``draft`` less the (W - w) / (W - 1) share of this
    draft_head: float | None = None
    # seconds per committed row a drafter reads before it drafts where it has not seen them (a draft LM's catch-up
    # over the prompt and plain steps' rows, the whole batch at once): the read a probe after plain steps costs
    read: float | None = None

    def learn_verify(self, width: int, seconds: float) -> None:
        """One call's typical verify clock at ``width`` (its median round) moves that cost a step towards it."""
        self.verify[width] = _towards(self.verify.get(width), seconds)

    def learn_draft(self, seconds: float) -> None:
        """One call's typical drafting clock moves the drafting cost a step towards it (once it was measured)."""
        if self.draft is not None:
            self.draft = _towards(self.draft, seconds)

    def learn_read(self, seconds_per_row: float) -> None:
        """One call's typical read clock per unseen row moves the read cost a step towards it."""
        self.read = _towards(self.read, seconds_per_row)


def _towards(old: float | None, seen: float) -> float:
    if old is None:
        return seen
    return old + COST_AVERAGING * (min(seen, MAX_LEARNED_RATIO * old) - old)


class CostModel:
    """The cost tables of one target, by ``cost_key``; lives on the model (``costs_of``)."""

    def __init__(self, tables: dict[str, CostTable] | None = None):
        self.tables = tables or {}
        # by (device, name of a kind in narrow_rows.KINDS): whether the target's eager forwards of that kind (fp32
        # one-row steps over the weights' halves; fp32 or bf16 forwards over packed weights) run faster
        # (engine/narrow_rows.py);
        # timed by the first such call of each process, not saved (the tables' costs were timed either way)
        self.narrow_rows: dict[tuple[str, str], bool] = {}

    def table(self, key: str) -> CostTable:
        return self.tables.setdefault(key, CostTable())

    def table_sharing_verifies(self, key: str) -> CostTable:
        """The table under ``key``, given each verify width it lacks from the other drafters' tables of the same
        target forward (device, dtype, batch bucket and step: the key less its drafter): a verify of w rows is the
        target's forward whichever drafter drafted them, so a drafter's first call times only the widths no other
        drafter's calls have. (Before, each kind of drafter timed every width again: on the real target in bf16 an
        EAGLE-3 chain's first call after a DFlash call spent about 1.6 s timing verifies the DFlash call had
        timed.) Each table's later clocks still refine its own copy."""
        table = self.table(key)
        forward = _forward_key(key)
        for other_key, other in self.tables.items():
            if other is not table and _forward_key(other_key) == forward:
                for width, seconds in other.verify.items():
                    table.verify.setdefault(width, seconds)
        return table

    def to_dict(self) -> dict:
        return {key: {"verify": {str(w): s for w, s in sorted(t.verify.items())}, "draft": t.draft,
                      "draft_head": t.draft_head, "read": t.read} for key, t in self.tables.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "CostModel":
        if not isinstance(data, dict):
            raise ValueError("a cost model file holds a JSON object {key: {'verify': {...}, 'draft': ...}}")
        return cls({key: CostTable({int(w): float(s) for w, s in entry["verify"].items()}, entry.get("draft"),
                                   entry.get("draft_head"), entry.get("read")) for key, entry in data.items()})


_COSTS: "weakref.WeakKeyDictionary[torch.nn.Module, CostModel]" = weakref.WeakKeyDictionary()
# target -> {drafter: {context: what the calls of that pair have learned}} (context: see call_acceptance)
_ACCEPTANCE: "weakref.WeakKeyDictionary[torch.nn.Module, weakref.WeakKeyDictionary]" = weakref.WeakKeyDictionary()


def costs_of(model) -> CostModel:
    """The target's cost model (created empty on first use), remembered beside it like the engine probe."""
    return _remembered(_COSTS, model, CostModel)


def save_costs(model, path) -> None:
    """Write the verify / draft costs measured on ``model`` to a JSON file (``load_costs`` reads it back), so a Space or
    a server measures once."""
    Path(path).write_text(json.dumps(costs_of(model).to_dict(), indent=2) + "\n")


def load_costs(model, path) -> None:
    """Give ``model`` the costs saved by ``save_costs`` (the same model, device and dtype): no measurement then."""
    _COSTS[model] = CostModel.from_dict(json.loads(Path(path).read_text()))


def measure_verify_costs(run_verify, widths: tuple[int, ...], device: torch.device,
                         warmups: int = 1, budget: float = MEASURE_BUDGET_SECONDS, min_passes: int = 1,
                         warmups_in_budget: bool = False) -> dict[int, float]:
    """Seconds of ``run_verify(w)`` for each width: ``warmups`` untimed calls at every width (allocations; a compiled
    step compiles on its first call and records its CUDA graph on the second), then timed passes, the fastest kept,
    at least ``min_passes`` and repeated while the timed passes (``warmups_in_budget``: and the warm-ups) stay within
    ``budget`` seconds (0: no more)."""

    def timed(w: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run_verify(w)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    warming = time.perf_counter()
    for _ in range(warmups):
        for w in widths:
            run_verify(w)
    start = warming if warmups_in_budget else time.perf_counter()
    best = {w: timed(w) for w in widths}
    passes = 1
    while passes < min_passes or (passes < 5 and time.perf_counter() - start + sum(best.values()) <= budget):
        for w in widths:
            best[w] = min(best[w], timed(w))
        passes += 1
    return best


class ProbeSchedule:
    """The schedules an acceptance estimate (either kind) keeps beside its evidence: its probes' and, under WhiFlash,
    its drafter's exploring rounds'. Its carried copy for the next call keeps them as they were (``carry_schedule``),
    so a drafter whose probes keep failing on this target is not re-probed from scratch every call."""

    # carried as they are, with the widest round the evidence holds
    CARRIED = ("probe_after", "sure_after", "explore_after", "rounds_without", "explore_width", "opening_every",
               "calls_since_opening", "opening_explore_every", "calls_since_opening_explore", "probes_failing",
               "widest")

    def start_schedule(self) -> None:
        self.probe_after = FIRST_PROBE_AFTER  # plain rounds before the next probe
        self.sure_after = FIRST_SURE_RUN  # sure plain steps in a row that call a probe (SURE_PROBABILITY)
        # WhiFlash: the other drafter's rounds before it next drafts once where this estimate's drafter is not the
        # preferred one (RoutedWidthPolicy)
        self.explore_after = OTHER_DRAFTER_EVERY
        # WhiFlash: the drafting rounds under this estimate's vote since its drafter last drafted there; carried, so
        # that calls shorter than explore_after rounds still add up to an exploring round (counted per call, none
        # came in the tiny world's calls of about 13 rounds: a DFlash drafter whose first round of a fresh bundle kept
        # nothing was rated below EAGLE-3 and never drafted again, and math ran at 1.6x stock, not 3.4x)
        self.rounds_without = 0
        # WhiFlash: the width of this drafter's exploring round at the vote's next round, where its last one beat the
        # preferred drafter's expected rate (0: none due, and exploring rounds draft at WidthPolicy.exploring_width)
        self.explore_width = 0
        # calls between opening probes where probes are dear, and the calls since the last one
        self.opening_every, self.calls_since_opening = 1, 0
        # WhiFlash: calls between the drafter's opening exploring rounds under this estimate's vote, and the calls
        # since the last one (RoutedWidthPolicy)
        self.opening_explore_every, self.calls_since_opening_explore = 1, 0
        # the share of recent probes (or runs of follow-ups) that failed (see PROBES_FAILING)
        self.probes_failing = PROBES_FAILING

    def carry_schedule(self, copy: "ProbeSchedule") -> None:
        for name in self.CARRIED:
            setattr(copy, name, getattr(self, name))


class AcceptanceEstimate(ProbeSchedule):
    """Discounted per-slot acceptance: slot k (1-based draft position) was reached ``reached[k]`` times and accepted
    ``accepted[k]`` times (older rounds weigh ACCEPTANCE_DECAY less per round)."""

    def __init__(self, max_width: int):
        self.reached = [0.0] * max_width
        self.accepted = [0.0] * max_width
        self.start_schedule()
        # the widest round the evidence holds: slots past it were never verified, and their rate is only the prior
        # chained from the slots before them, so the policy widens at most twice past it per round
        self.widest = 0
        # an estimate over more rounds (WhiFlash: the drafter's, whatever the router voted), whose rates are this
        # one's prior, worth POOLED_WEIGHT rounds: a context this drafter has seldom run in starts from what it
        # does elsewhere, not from an even guess
        self.pooled: AcceptanceEstimate | None = None
        self.pooled_weight = POOLED_WEIGHT  # rounds' worth of the pooled estimate's rates as this one's prior
        # a batch's rows, each with an estimate of its own whose prior is this one (row id in the caller's batch ->
        # estimate): rows of one batch accept very differently (GSM8K beside MT-Bench), and the call lasts until the
        # slowest is done (WidthPolicy.set_rows). Never carried into another call (its rows are other prompts).
        self.row_estimates: dict[int, AcceptanceEstimate] = {}

    def rates(self, width: int) -> list[float]:
        """p_1 .. p_{width-1}. A slot's prior is the rate of the slot before it, worth SLOT_PRIOR_WEIGHT rounds (an
        even one for slot 1, worth PRIOR_WEIGHT): acceptance falls along a block, and slots a failing drafter never
        reaches must not keep a hopeful prior. With a pooled estimate, its rate at the slot is the prior instead."""
        rates, prior = [], PRIOR_ACCEPT
        pooled = self.pooled.rates(width) if self.pooled is not None else None
        for k in range(1, width):
            if pooled is None:
                weight = PRIOR_WEIGHT if k == 1 else SLOT_PRIOR_WEIGHT
                prior = (self.accepted[k] + prior * weight) / (self.reached[k] + weight)
            else:
                prior = (self.accepted[k] + pooled[k - 1] * self.pooled_weight) / (self.reached[k] + self.pooled_weight)
            rates.append(prior)
        return rates

    def expected_tokens(self, width: int) -> float:
        total, reach = 1.0, 1.0
        for rate in self.rates(width):
            reach *= rate
            total += reach
        return total

    def row_round_moments(self, row: int, width: int) -> list[tuple[float, float]]:
        """For one batch row (its own estimate, or this one's where the row has none yet), the mean and variance of
        the tokens a round of w rows commits, for w = 1 .. ``width``: P(c >= k + 1) = p_1 ... p_k, so
        E[c] = sum_k P(c >= k + 1) and E[c^2] = sum_k (2k + 1) P(c >= k + 1), k = 0 .. w - 1."""
        moments, mean, square, reach = [(1.0, 0.0)], 1.0, 1.0, 1.0
        for k, rate in enumerate((self.row_estimates.get(row) or self).rates(width), start=1):
            reach *= rate
            mean += reach
            square += (2 * k + 1) * reach
            moments.append((mean, max(square - mean * mean, 0.0)))
        return moments

    def observe(self, width: int, accepted_per_row: list[int], row_ids: list[int] | None = None) -> None:
        """One round of ``width`` rows: each row accepted its first ``a`` drafts (the rest of the block not).
        ``row_ids``: the rows' places in the caller's batch, whose own estimates learn their row's count."""
        if row_ids is not None:
            for row, accepted in zip(row_ids, accepted_per_row):
                estimate = self.row_estimates.get(row)
                if estimate is None:
                    estimate = self.row_estimates[row] = AcceptanceEstimate(len(self.reached))
                    estimate.pooled, estimate.pooled_weight = self, ROW_PRIOR_WEIGHT
                estimate.observe(width, [accepted])
        self.widest = max(self.widest, width)
        for k in range(1, len(self.reached)):
            self.reached[k] *= ACCEPTANCE_DECAY
            self.accepted[k] *= ACCEPTANCE_DECAY
        for a in accepted_per_row:
            for k in range(1, min(a + 1, width - 1) + 1):
                self.reached[k] += 1
                self.accepted[k] += k <= a

    def observe_unverified(self, first_draft_probabilities: list[float]) -> None:
        """A round that drafted but verified no draft (none was worth its verify: WidthPolicy.confident_width): each
        row's first slot counts as reached and accepted as often as the drafter's probability of its draft says
        (a round that left the estimate as it was would let a text of unsure drafts draft on forever; one counted
        as a failed draft would stop drafting where unsure rounds are common but the sure ones pay, as on GSM8K)."""
        for k in range(1, len(self.reached)):
            self.reached[k] *= ACCEPTANCE_DECAY
            self.accepted[k] *= ACCEPTANCE_DECAY
        for p in first_draft_probabilities:
            self.reached[1] += 1
            self.accepted[1] += p

    @property
    def shape(self) -> tuple:
        return ("block", len(self.reached))

    def reach(self) -> int:
        """The widest width worth a round now: twice the widest the evidence holds (slots past it have a prior only),
        or, with a pooled estimate, at least the widest round of its evidence, whose rates are this one's prior
        (WhiFlash: a vote's estimate held a drafter the router seldom sends rounds to at 2 rows under that vote,
        however wide it ran under the other; the tiny world's neural router then gave its EAGLE-3 votes on math to
        chains keeping 2-3 tokens where DFlash's blocks kept 8+. Twice the pooled widest instead cost the real
        target's WhiFlash replay with bf16 costs 0.5%, which this does not)."""
        return max(2 * self.widest, self.pooled.widest if self.pooled is not None else 0, 2)

    def draft_slots(self, width: int) -> int:
        """The most drafts a round of ``width`` rows can get accepted."""
        return width - 1

    def forget(self) -> None:
        """Back to the prior: the rounds seen so far say nothing about the text from here on."""
        self.reached = [0.0] * len(self.reached)
        self.accepted = [0.0] * len(self.accepted)
        self.widest = 0
        self.row_estimates = {}

    def carried(self) -> "AcceptanceEstimate":
        """A copy for the next call, its evidence scaled down to at most CARRIED_WEIGHT rounds' worth."""
        copy = AcceptanceEstimate(len(self.reached))
        scale = min(1.0, CARRIED_WEIGHT / max(self.reached[1], 1e-9))
        copy.reached = [r * scale for r in self.reached]
        copy.accepted = [a * scale for a in self.accepted]
        self.carry_schedule(copy)
        return copy


class TreeAcceptanceEstimate(ProbeSchedule):
    """A draft tree's expected accepted drafts at each budget of n nodes (the tree of the drafter's best n - 1
    candidates), from the rounds run.

    A verify of n nodes says exactly what every smaller budget would have kept (``tree.accepted_within_budgets``: the
    smaller tree is part of this one), as a verify of w block rows does for every narrower width. The estimate is a
    sum of gains: what the smallest budget keeps, then what each budget keeps beyond the one below it, each from the
    rounds whose verify covered it. Narrow budgets are covered by every round and
    follow the text at once; a wide budget's gain is only judged by the rounds that verified it (each gain is a
    discounted average over the last ten or so rounds that covered its budget, GAIN_DECAY). A gain without
    evidence is guessed as the one below it (each doubling of the budget adds what the last one did: trees gain
    less and less per node, so the guess errs towards trying a wider tree); before any round the first budget
    expects PRIOR_ACCEPT drafts."""

    def __init__(self, widths: tuple[int, ...], depth: int):
        self.budgets = tuple(w for w in widths if w > 1)
        self.depth = depth
        self.forget()
        self.start_schedule()

    @property
    def shape(self) -> tuple:
        return ("tree", self.budgets, self.depth)

    def draft_slots(self, width: int) -> int:
        return min(width - 1, self.depth)

    def reach(self) -> int:
        return max(2 * self.widest, 2)

    def expected_tokens(self, width: int) -> float:
        if width == 1:
            return 1.0
        total, gain = 0.0, PRIOR_ACCEPT
        for n in self.budgets:
            gain = max((self.gains[n] + gain * PRIOR_WEIGHT) / (self.reached[n] + PRIOR_WEIGHT), 0.0)
            total = min(total + gain, self.draft_slots(n))
            if n == width:
                return 1.0 + total
        raise KeyError(width)

    def observe(self, width: int, accepted_per_row: list[int], within: dict[int, list[int]] | None = None) -> None:
        """One round of a ``width``-node tree: each active row accepted ``accepted_per_row`` drafts; ``within``:
        {budget n <= width: each active row's drafts kept within the best n - 1 candidates}."""
        self.widest = max(self.widest, width)
        below = [0] * len(accepted_per_row)
        for n, kept in sorted((within or {width: accepted_per_row}).items()):
            self.gains[n] = self.gains[n] * GAIN_DECAY + sum(k - b for k, b in zip(kept, below))
            self.reached[n] = self.reached[n] * GAIN_DECAY + len(kept)
            below = kept

    def forget(self) -> None:
        self.gains = dict.fromkeys(self.budgets, 0.0)  # discounted drafts kept within budget n beyond the one below
        self.reached = dict.fromkeys(self.budgets, 0.0)  # discounted rows whose verify covered budget n
        self.widest = 0

    def carried(self) -> "TreeAcceptanceEstimate":
        copy = TreeAcceptanceEstimate((1, *self.budgets), self.depth)
        scale = min(1.0, TREE_CARRIED_WEIGHT / max(self.reached[self.budgets[0]], 1e-9))
        copy.gains = {n: g * scale for n, g in self.gains.items()}
        copy.reached = {n: r * scale for n, r in self.reached.items()}
        self.carry_schedule(copy)
        return copy


def call_acceptance(target, drafter, fresh_estimate: AcceptanceEstimate | TreeAcceptanceEstimate,
                    context: str = ""):
    """This call's acceptance estimate: what earlier calls of ``target`` with ``drafter`` learned, in the shape of
    ``fresh_estimate`` (which a new pair gets: the prior), kept as the pair's estimate, so this call's rounds are
    carried into the next. ``context`` keeps several estimates for one pair (WhiFlash: each of its drafters under
    each router vote)."""
    by_drafter = _remembered(_ACCEPTANCE, target, weakref.WeakKeyDictionary)
    by_context = by_drafter.setdefault(drafter, {})
    known = by_context.get(context)
    fresh = known is None or known.shape != fresh_estimate.shape
    by_context[context] = estimate = fresh_estimate if fresh else known.carried()
    return estimate


class WidthPolicy:
    """Chooses each round's verify width (see the module docstring). ``widths`` includes 1 (a plain step)."""

    def __init__(self, widths: tuple[int, ...], costs: CostTable,
                 acceptance: AcceptanceEstimate | TreeAcceptanceEstimate, draft_share=None, refeeds: bool = False,
                 drafts: bool = True, opening_probe: bool = True, draft_fallback: float | None = None):
        self.widths = widths
        # drafts=False: its rounds verify tokens that cost nothing to propose (copied tokens, CopyingWidthPolicy):
        # no drafting cost, none timed, none learned
        self.drafts = drafts
        # refeeds: the target has recurrent layers (linear attention, convolutions), so a round that commits fewer
        # rows than it verified re-feeds the committed ones in one more forward (loop._roll_back_states)
        self.refeeds = refeeds
        # draft_share(w): the share of the whole block's drafting a round of w rows costs, for a drafter that runs
        # one forward per draft token (a draft LM, an EAGLE-3 chain: (w - 1) / (W - 1)) or per tree level; None: one
        # forward drafts the block, less the lm_head rows past w (DFlash)
        self.draft_share = draft_share
        self.costs = costs
        # the drafting cost to choose by while ``costs`` has none: a batch that shrank mid-call into a bucket whose
        # drafting was never timed takes the larger batch's (fewer rows draft for no more). Without it the call's
        # last rounds drafted untimed, never a plain step, and could not time drafting for the next call either (a
        # tail is shorter than DRAFT_TIMING_ROUNDS): the tiny world's batch of 8 with EAGLE-3 ended every call with
        # rounds of 8 and 4 rows that cost 3.4 and 2.5 plain steps where its rounds before were plain
        self.draft_fallback = draft_fallback
        self.acceptance = acceptance
        self.plain_streak = 0
        self.sure_run = 0  # the plain steps in a row, up to the last, whose token the target was sure of (observe_sure)
        # this round's probe: "scheduled" (after plain_streak), "opening", "sure" or "follow-up" (a wider one after a
        # probe that passed, where plain steps still rate best: follow_up_width)
        self.probing: str | None = None
        self.passed_width: int | None = None  # the width of the last round, where it was a probe that passed
        self.follows_up = True  # whether a probe that passed is followed by wider ones (not under a router)
        # a call of one prompt is new text: where the carried evidence says plain steps, its first round that would
        # be plain probes instead, outside the backed-off schedule (a failed one leaves the gap as it is), so a
        # predictable prompt after unpredictable ones drafts from its start, not after up to 64 plain rounds. Not in
        # a batch (the loop's choice): there a probe's drafter first catches up on every row's prompt, which cost the
        # real target's batch of 8 about 3% of its call where the drafts failed
        self.opening_probe = opening_probe
        self.draft_timings: list[float] = []
        self.whole_block_rounds: set[int] = set()  # the call's rounds that drafted the whole block (timing it)
        self.refed_rounds: set[int] = set()  # the call's rounds that re-fed a recurrent target (expected_refeed)
        # the call's rounds whose drafter drafted another count of rows than they verified (a chain that stopped
        # unsure, then verified fewer: confident_width): round -> the rows drafted, the root included
        self.drafted_rows: dict[int, int] = {}
        # the committed rows the drafter has not read (set by the loop each round: a draft LM reads the prompt and
        # plain steps' rows when it next drafts), and the call's drafting rounds that read some: round -> rows
        self.unread_rows = 0
        self.read_rows: dict[int, int] = {}
        # width -> seconds of its last whole rounds in this call: what a round of that width costs on this machine
        # now, whatever the costs measured once say
        self.clocked: dict[int, deque] = {}
        self.drafted_since_plain = 0  # drafting rounds since this call's last plain one
        self.since_explored = EXPLORE_EVERY - 2  # a tree's drafting rounds since the last wider one (the 2nd explores)
        # a batch's active rows this round: (row id in the caller's batch, tokens it may still commit), and whether
        # finished rows leave the batch (set_rows); None: one row, or a policy that rates the mean row
        self.rows: list[tuple[int, int]] | None = None
        self.rows_leave = False
        self._batch_rates: dict[int, float] | None = None  # rate() of each width for self.rows, until they change

    @property
    def needs_draft_timing(self) -> bool:
        return self.drafts and self.whole_block_draft_seconds is None

    @property
    def whole_block_draft_seconds(self) -> float | None:
        """Seconds of drafting the whole block: the table's, else the fallback (None: not yet timed)."""
        return self.costs.draft if self.costs.draft is not None else self.draft_fallback

    def timed_draft(self, seconds: float) -> None:
        """One steady drafting round's clock; the fastest of DRAFT_TIMING_ROUNDS becomes the drafting cost."""
        self._batch_rates = None
        self.draft_timings.append(seconds)
        if len(self.draft_timings) >= DRAFT_TIMING_ROUNDS:
            self.costs.draft = min(self.draft_timings)

    def draft_cost(self, width: int) -> float:
        """Seconds of drafting for a round of ``width`` rows (none for a plain step)."""
        if width == 1 or not self.drafts:
            return 0.0
        if self.draft_share is not None:
            return self.whole_block_draft_seconds * self.draft_share(width)
        return max(self.whole_block_draft_seconds - self._skipped_head(width), 0.0)

    def _skipped_head(self, width: int) -> float:
        block = self.widths[-1]
        return (self.costs.draft_head or 0.0) * (block - width) / max(block - 1, 1)

    def whole_block_draft(self, width: int, seconds: float) -> float:
        """A round of ``width`` rows drafted in ``seconds``: what drafting the whole block would have taken."""
        if self.draft_share is not None:
            return seconds / self.draft_share(width)
        return seconds + self._skipped_head(width)

    def model_seconds(self, width: int) -> float:
        """The cost model's seconds for a round of ``width`` rows: its target forward, its drafting and, on a target
        with recurrent layers, its expected re-feed."""
        return self.costs.verify[width] + self.draft_cost(width) + self.expected_refeed(width)

    def expected_refeed(self, width: int) -> float:
        """Seconds a round of ``width`` rows spends, in expectation, re-feeding its committed rows into a recurrent
        target: it commits exactly c < width rows with probability p_1 ... p_{c-1} (1 - p_c), and then runs a forward
        of c rows (costed as the narrowest measured width holding them). A round that commits every row re-feeds
        nothing; an attention-only target never re-feeds (its rollback moves a length). On such a target a failing
        slot costs twice (its verify row, and the re-feed a rejection brings), so the best width is narrower."""
        if not self.refeeds or width == 1 or not isinstance(self.acceptance, AcceptanceEstimate):
            return 0.0  # (trees are refused on recurrent targets)
        expected, reach = 0.0, 1.0
        for committed, rate in enumerate(self.acceptance.rates(width), start=1):
            holding = min(w for w in self.widths if w >= committed)
            expected += reach * (1.0 - rate) * self.costs.verify[holding]
            reach *= rate
        return expected

    def clocked_seconds(self, width: int) -> float | None:
        """The median of this call's last rounds of ``width`` (None before MIN_CLOCKED_ROUNDS of them)."""
        times = self.clocked.get(width, ())
        return statistics.median(times) if len(times) >= MIN_CLOCKED_ROUNDS else None

    def round_seconds(self, width: int) -> float:
        """What a round of ``width`` rows costs: its clock where this call has one, else the model's seconds scaled
        as the clocked widths are (the model's forwards leave out what the loop spends around them)."""
        clocked = self.clocked_seconds(width)
        if clocked is not None:
            return clocked
        ratios = [c / self.model_seconds(w) for w in self.clocked if (c := self.clocked_seconds(w)) is not None]
        return self.model_seconds(width) * (statistics.median(ratios) if ratios else 1.0)

    def rate(self, width: int) -> float:
        """Expected committed tokens per second of a round of ``width`` rows (a batch's: see ``set_rows``)."""
        if self.rows is not None and isinstance(self.acceptance, AcceptanceEstimate):
            if self._batch_rates is None:
                self._batch_rates = self._rates_until_done()
            return self._batch_rates[width]
        return self.acceptance.expected_tokens(width) / self.round_seconds(width)

    def set_rows(self, row_ids: list[int], tokens_left: list[int], rows_leave: bool) -> None:
        """This round's active rows of a batch: their places in the caller's batch and the tokens each may still
        commit (up to ``max_new_tokens``); ``rows_leave``: finished rows leave the batch (an eager call), so later
        rounds compute fewer rows. With two rows or more, ``rate`` is the batch's until its last row is done."""
        self.rows = list(zip(row_ids, tokens_left)) if len(row_ids) > 1 else None
        self.rows_leave = rows_leave
        self._batch_rates = None

    def _rates_until_done(self) -> dict[int, float]:
        """Each width's rate for a batch: the mean row's tokens left over the seconds until every row is done,
        were every round from now of that width. A call lasts until its slowest row is done, and the mean row's rate
        drafts where that row's rounds lose: rows of one batch accept differently (the real target's batch of 8 at
        EAGLE-3 width 4: GSM8K rows 2.4-3.4 tokens a round, MT-Bench rows 1.6-1.9), and rows of equal rates finish
        rounds apart, since each round commits a random count. Row r needs about left_r / mu_r rounds, give or take
        sqrt(left_r var_r / mu_r^3) (mu_r, var_r: the mean and variance of its round's tokens, from its own
        estimate); the k-th row to finish is placed that many spreads from its mean as the k-th of B normal draws
        lies (Blom's rank), and with these finishing rounds n_(1) <= ... <= n_(B) the call spends
        sum_k (n_(k) - n_(k-1)) * cost(rows still going, w). Where finished rows leave, a round of a rows costs
        what the measured verify of a * w / B rows per batch row costs (the forward's token count; never less than
        a plain step of the whole batch: a CPU's or GPU's small forwards cost about what reading the weights does);
        where they stay (compiled steps, FLy), every round costs the whole batch's. Plain steps commit one token a
        row per round, so their rows finish together where they have equal tokens left; rows of equal estimates,
        tokens left and no spread give the mean row's rate exactly."""
        widths, batch = self.widths, len(self.rows)
        mean_left = sum(max(left, 1) for _, left in self.rows) / batch
        per_row = [(self.acceptance.row_round_moments(row, widths[-1]), max(left, 1)) for row, left in self.rows]
        ranks = [_NORMAL.inv_cdf((k + 1 - 0.375) / (batch + 0.25)) for k in range(batch)]  # Blom: E[k-th of B]
        verify = self.costs.verify
        measured = sorted(w for w in widths if w in verify)
        rates = {}
        for width in widths:
            seconds = self.round_seconds(width)
            finishing = []  # (rounds to finish, their spread) per row
            for moments, left in per_row:
                mean, variance = moments[width - 1]
                finishing.append((left / mean, math.sqrt(left * variance / mean ** 3)))
            total, done = 0.0, 0.0
            for k, ((rounds, spread), rank) in enumerate(zip(sorted(finishing), ranks)):
                finish = max(rounds + rank * spread, done, 1.0)
                going = batch - k
                share = 1.0
                if self.rows_leave and going < batch and width in verify:
                    share = _interpolated(verify, measured, going * width / batch) / verify[width]
                total += (finish - done) * seconds * share
                done = finish
            rates[width] = mean_left / total
        return rates

    def best_rate(self) -> float | None:
        """The most expected tokens per second of any width within reach (a plain step included); None while
        drafting is not yet timed."""
        if self.needs_draft_timing:
            return None
        return max(self.rate(w) for w in self.widths if w <= self.acceptance.reach())

    def skip_round(self) -> None:
        """A round of the call this policy did not choose (another policy of a CopyingWidthPolicy did)."""

    def confident_width(self, chosen: int, confidences: list[list[float]], call_rate: float | None) -> int:
        """The width to verify once the round has drafted: ``confidences`` [rows][n] are the drafter's probabilities
        of each row's n drafts (n <= chosen - 1, fewer where drafting stopped unsure). A width w of at most n + 1 rows
        commits, per row, 1 + sum_k prod_{j<=k} p_j tokens in expectation (the probabilities standing in for the
        acceptance rates); the drafting is spent, so the round verifies the width whose expected tokens exceed what
        its verify's seconds would commit at the call's rate so far (``call_rate``: the tokens of all the rows per
        second; a plain step's rate before any) by the most: a round worth 1.3 tokens does not buy a 4-row verify
        that costs two plain steps. Width 1 verifies the round's last committed token alone, as a plain step."""
        rate = call_rate or len(confidences) / self.round_seconds(1)  # tokens of all the rows per second
        drafted = min(len(row) for row in confidences) if confidences else 0

        def expected(width: int) -> float:
            total = 0.0
            for row in confidences:
                reach = 1.0
                total += 1.0
                for p in row[: width - 1]:
                    reach *= p
                    total += reach
            return total

        candidates = [w for w in self.widths if w <= min(chosen, drafted + 1)]
        # a round's seconds less its drafting: the verify as this call's clocks see it (or the model's figure)
        width = max(candidates, key=lambda w: expected(w) - rate * (self.round_seconds(w) - self.draft_cost(w)))
        if width == 1:  # no draft worth its verify: the estimate still learns what the drafter expected
            self.acceptance.observe_unverified([row[0] for row in confidences])
        return width

    def unsure_drafting_width(self, chosen: int) -> int:
        """The most rows a drafter that stops once unsure (UNSURE_STOP) drafts for in a round ``chosen`` rows wide:
        the widest width within reach. The chosen width rates the average round, and where the drafter is sure its
        drafts are kept further than that average says: on the tiny world's GSM8K prompts the draft LM's default
        call chose 4 rows in 66 of 152 rounds, which committed 3.6 tokens of a possible 4. Its own probabilities stop
        it where it doubts, and confident_width then verifies what those drafts are worth. (Up to twice the chosen
        width instead: fp32 with AVX2 kernels, where the chosen widths are narrower, math fell from 1.53x stock to
        1.38x, tau 3.4 to 2.7.) A batch drafts until every row is unsure, which at 8 rows seldom comes before the
        block: it drafts the chosen width (the tiny world's draft LM at batch 8 read 1.20x stock drafting on to the
        reach, 1.30x in the run before)."""
        if self.rows is not None:  # (set_rows: two rows or more)
            return chosen
        return max(w for w in self.widths if w <= max(self.acceptance.reach(), chosen))

    def best_drafting_width(self) -> int:
        """The drafting width (more than one row) with the most expected tokens per second, within reach."""
        reach = self.acceptance.reach()
        return max((w for w in self.widths[1:] if w <= reach), key=self.rate, default=self.widths[1])

    def exploring_width(self) -> int:
        """A WhiFlash exploring round's width: the widest drafting width whose round costs at most EXPLORE_WIDENING
        times one at the best drafting width, past the estimate's reach too. Drafting at its best width alone, the
        tiny world's DFlash, its carried estimate gone bad on code, explored math at 2 or 4 rows: a round of 2 rows
        that kept nothing doubled its gap, and one that kept 3 of 3 drafts committed 4 tokens in 12.8 ms where a
        round of 16 rows cost 14.3 ms and commits 7 on math (bf16, one thread); it drafted 21 of 101 math rounds, at
        2.0x stock where its blocks run at 4x."""
        best = self.best_drafting_width()
        affordable = EXPLORE_WIDENING * self.round_seconds(best)
        return max(w for w in self.widths[1:] if w == best or (w > best and self.round_seconds(w) <= affordable))

    def choose(self, copying: bool = False) -> int:
        """The round's width (``copying``, whether the round's rows copy, is for the policies that keep copies' rounds
        apart: ``CopyingWidthPolicy``, ``RoutedWidthPolicy``; one policy's rounds share its one estimate)."""
        reach = self.acceptance.reach()
        if self.needs_draft_timing:  # drafting not yet timed (the loop times these rounds' drafts of the whole
            # block): verify the width that would pay best if drafting were free, never a plain step
            self.opening_probe = False  # (these rounds draft anyway)
            drafted = [w for w in self.widths[1:] if w <= reach] or [self.widths[1]]
            return max(drafted, key=lambda w: self.acceptance.expected_tokens(w) / self.costs.verify[w])
        best = max((w for w in self.widths if w <= reach), key=self.rate)
        if best > 1 and self.needs_plain_reference(best):
            self.drafted_since_plain = 0
            return 1  # a reference round: the probe schedule and the plain streak are left as they are
        if best > 1:
            self.drafted_since_plain += 1
            self.plain_streak = self.sure_run = 0
            if self.probing:  # the probe paid: come back quickly next time plain steps win, and open every call
                self._probe_outcome(passed=True)
                self.acceptance.probe_after = FIRST_PROBE_AFTER
                self.acceptance.opening_every = 1
                self.acceptance.sure_after = FIRST_SURE_RUN
            self.probing, self.opening_probe = None, False
            return self.exploring(best)
        wider = self.follow_up_width()
        if wider is not None:  # the last probe passed, yet says too little to draft on: a wider one follows
            self.probing, self.plain_streak, self.sure_run = "follow-up", 0, 0
            return wider
        if self.probing:  # the probe (or its run of follow-ups) did not pay
            self._probe_outcome(passed=False)
        if self.probing == "scheduled":  # the probe did not pay: wait twice as long before the next
            self.acceptance.probe_after = min(2 * self.acceptance.probe_after, LAST_PROBE_AFTER)
        elif self.probing == "opening":  # likewise, counted in calls (read only where probes are dear)
            self.acceptance.opening_every = min(2 * self.acceptance.opening_every, LAST_OPENING_EVERY)
        elif self.probing == "sure":  # likewise, counted in sure plain steps
            self.acceptance.sure_after = min(2 * self.acceptance.sure_after, LAST_PROBE_AFTER)
        self.probing = None
        self.plain_streak += 1
        self.drafted_since_plain = 0
        opening, self.opening_probe = self.opening_probe, False
        opening = opening and self.opening_due()
        # (both gaps are at least FIRST_PROBE_AFTER: the cheap test first spares most plain rounds the probe's costing)
        scheduled = (self.plain_streak > FIRST_PROBE_AFTER
                     and self.plain_streak > min(self.acceptance.probe_after, self.longest_probe_gap())
                     and self.plain_streak > self.probe_gap())
        sure = self.sure_run >= self.acceptance.sure_after
        if (opening or scheduled or sure) and self.drafting_could_pay():
            self.plain_streak = self.sure_run = 0
            self.probing = "opening" if opening else "scheduled" if scheduled else "sure"
            return self.probe_width()
        return 1

    def follow_up_width(self) -> int | None:
        """After a probe that passed (kept half its drafts or more) where plain steps still rate best: the next wider
        width within reach, for one more probe, or None. A passed probe drops the old evidence, and a narrow one
        leaves the new estimate at its prior past its few slots: where a probe costs about two plain steps (fp32 on
        an AVX2 CPU, where it verifies 2 rows) that prior rated drafting below plain steps after every probe that
        passed, and the tiny world's draft LM ran its math prompts in plain steps (tau 1.03, 1.00x stock) where a
        fixed 7 drafts gave 1.14x. Each follow-up that passes widens once more (its evidence is kept: the text
        changed at the first); one that fails, or one at the widest width within reach, ends the run of probes."""
        if not (self.follows_up and self.probing and self.passed_width is not None and self.drafting_could_pay()):
            return None
        reach = self.acceptance.reach()
        return min((w for w in self.widths[1:] if self.passed_width < w <= reach), default=None)

    def observe_sure(self, sure: bool) -> None:
        """A plain round's verdict on the target's confidence: whether it gave its token (every active row's)
        SURE_PROBABILITY or more. Sure plain steps in a row call a probe (``choose``)."""
        self.sure_run = self.sure_run + 1 if sure else 0

    def opening_due(self) -> bool:
        """Whether this call's opening probe runs (asked once per call, at its first round that would be plain). Where
        a probe costs at most PROBE_COST plain steps (probe_gap within the schedule's first gap), always; where it
        costs more, every ``opening_every``-th call: on an AVX2-only CPU in fp32 an opening probe of 8 rows, which
        also runs the drafter over the prompt, cost DFlash's drafter alone about 9% of a 36-token translation, and
        on chat prompts such a drafter's opening probes nearly always fail."""
        if self.probe_gap() <= FIRST_PROBE_AFTER:
            return True
        estimate = self.acceptance
        estimate.calls_since_opening += 1
        if estimate.calls_since_opening < estimate.opening_every:
            return False
        estimate.calls_since_opening = 0
        return True

    def exploring(self, best: int) -> int:
        """``best``, or every EXPLORE_EVERY-th drafting round a wider tree: a tree's verify tells exactly what every
        smaller budget would have kept, so one wide round brings evidence for all the budgets up to it, where a guess
        would otherwise stand (trees of a few nodes spread over siblings, and say little about what deep ones get).
        The widest budget whose round costs at most EXPLORE_COST times the best's (none for blocks, whose estimate
        widens by itself)."""
        if not isinstance(self.acceptance, TreeAcceptanceEstimate):
            return best
        self.since_explored += 1
        affordable = EXPLORE_COST * self.round_seconds(best)
        wider = [w for w in self.widths if w > best and self.round_seconds(w) <= affordable]
        if wider and self.since_explored >= EXPLORE_EVERY:
            self.since_explored = 0
            return max(wider)
        return best

    def needs_plain_reference(self, width: int) -> bool:
        """Whether this round should be a plain step so that plain steps get a clock of this call to be compared
        with ``width``'s: the call lacks MIN_CLOCKED_ROUNDS plain rounds, has drafted REFERENCE_EVERY rounds since
        its last plain one, and the case for drafting is not overwhelming (where it is, a plain step's cost off by
        half would still leave drafting ahead, and a reference round would only cost)."""
        return (len(self.clocked.get(1, ())) < MIN_CLOCKED_ROUNDS and self.drafted_since_plain >= REFERENCE_EVERY
                and self.rate(width) < REFERENCE_MARGIN * self.rate(1))

    def drafting_could_pay(self) -> bool:
        """Whether some drafting width would beat a plain step even if every draft were accepted. When none would
        (a batch whose verify cost grows with its width as fast as the tokens it could commit: compute-bound), a
        probe can only lose, so none is run; the streak keeps counting, so one runs as soon as the costs, which
        follow the rounds, say otherwise."""
        plain_rate = 1.0 / self.round_seconds(1)
        return any(w / self.round_seconds(w) > plain_rate for w in self.widths[1:])

    def probe_gap(self) -> int:
        """The fewest plain rounds between scheduled probes for which a failed probe wastes at most PROBE_OVERHEAD of
        their time: a probe's round costs more than a plain step by ``extra`` plain steps, so at least extra /
        PROBE_OVERHEAD plain rounds. Where a probe costs at most 1.25 plain steps this is FIRST_PROBE_AFTER or less
        (the schedule alone decides); on a CPU without bf16 units, where a probe of 8 rows and its drafting cost
        about 1.9 plain steps, about 30 (gaps from 8 let a drafter that keeps nothing waste up to 11% there)."""
        return math.ceil(self._probe_extra() / PROBE_OVERHEAD - 1e-9)

    def longest_probe_gap(self) -> int:
        """The most plain rounds the backed-off schedule waits between scheduled probes: LAST_PROBE_AFTER, or fewer
        where a failed probe wastes at most PROBE_BACKOFF_OVERHEAD of that many plain rounds (a cheap probe), never
        fewer than FIRST_PROBE_AFTER."""
        cheap = math.ceil(self._probe_extra() / PROBE_BACKOFF_OVERHEAD - 1e-9)
        return max(FIRST_PROBE_AFTER, min(LAST_PROBE_AFTER, cheap))

    def _probe_extra(self) -> float:
        """What a probe's round costs more than a plain step, in plain steps: its verify and drafting, and the read
        of the rows its drafter has not seen (``read_seconds``)."""
        return (self.round_seconds(self.probe_width()) + self.read_seconds()) / self.round_seconds(1) - 1.0

    def read_seconds(self) -> float:
        """Seconds a probe's drafter spends reading the committed rows it has not seen, where that is waste: at the
        share of recent probes that failed (one that passes needed the read for the drafting it brings back)."""
        if not self.drafts:
            return 0.0
        return (self.costs.read or 0.0) * self.unread_rows * self.acceptance.probes_failing

    def _probe_outcome(self, passed: bool) -> None:
        estimate = self.acceptance
        estimate.probes_failing += PROBE_OUTCOME_WEIGHT * ((not passed) - estimate.probes_failing)

    def set_unread(self, rows: int | dict[str, int]) -> None:
        """The committed rows the drafter reads before it next drafts (the loop's, each round); per drafter where a
        router picks the drafter itself (WhiFlash's trees, under one policy): the fewer, the read at least made."""
        self.unread_rows = rows if isinstance(rows, int) else min(rows.values())

    def note_read(self, round_index: int) -> None:
        """Round ``round_index`` drafted: its drafting clock holds the read of the rows set by ``set_unread``."""
        if self.unread_rows:
            self.read_rows[round_index] = self.unread_rows

    def probe_width(self) -> int:
        """The widest drafting width whose round costs at most PROBE_COST plain steps, or, where even the narrowest
        drafting round costs more, at most PROBE_WIDENING times that round. On a CPU without bf16 units a forward of
        2 rows cost 1.6 single-row ones (fp32, SmolLM2-135M, AVX2) and one of 8 rows 1.7: a probe of 2 rows, one
        draft, kept it about as often as the drafter's first-slot rate (a third of the time on chat prompts), and
        each such success restarted drafting on the evidence of one token; a probe of 8 rows costs little more and
        only passes where the text has become predictable."""
        narrowest, plain = self.round_seconds(self.widths[1]), self.round_seconds(1)
        affordable = PROBE_COST * plain if narrowest <= PROBE_COST * plain else PROBE_WIDENING * narrowest
        cheap = [w for w in self.widths[1:] if self.round_seconds(w) <= affordable]
        return max(cheap) if cheap else self.widths[1]

    def learn_costs(self, round_widths: list[int], round_seconds: list[float], round_draft_seconds: list[float],
                    rounds=None) -> None:
        """The call's median round at each width refines that width's costs (``rounds``: the indices of the rounds
        this policy chose; all by default). Only a round that follows one of this policy's drafting rounds teaches
        the drafting cost: the first round drafts over the whole prompt, and the first after plain steps (a probe),
        a copy's round or another drafter's first catches up on every row committed meanwhile, which is no steady
        round's drafting: where most drafting rounds are probes (a batch in plain steps), their median would make
        drafting look dearer with every call. A round that re-fed a recurrent target is no verify's clock, since
        the policy adds the re-feed on its own."""
        verify, draft, read = {}, {}, []
        chosen = range(len(round_widths)) if rounds is None else rounds
        drafting = {i for i in chosen if self.drafted_rows.get(i, round_widths[i]) > 1}
        for i in chosen:
            width = round_widths[i]
            if i not in self.refed_rounds:
                verify.setdefault(width, []).append(round_seconds[i] - round_draft_seconds[i])
            drafted = self.drafted_rows.get(i, width)
            # as the whole block's (a narrow round drafts less); not a round whose drafter first read rows it had not
            # seen (a draft LM re-reading the copies a round kept in place of its drafts): that read is no drafting
            if i in drafting and i - 1 in drafting and i not in self.read_rows and self.drafts:
                seconds = round_draft_seconds[i]
                whole = seconds if i in self.whole_block_rounds else self.whole_block_draft(drafted, seconds)
                draft.setdefault(width, []).append(whole)
            rows_read = self.read_rows.get(i, 0)
            if i in drafting and rows_read >= MIN_READ_ROWS and self.whole_block_draft_seconds is not None:
                # the read: the round's drafting clock less what drafting its rows costs
                read.append(max(round_draft_seconds[i] - self.draft_cost(drafted), 0.0) / rows_read)
        drafts = [t for times in draft.values() for t in times]
        for width, times in verify.items():
            self.costs.learn_verify(width, statistics.median(times))
        if drafts:
            self.costs.learn_draft(statistics.median(drafts))
        if read:
            self.costs.learn_read(statistics.median(read))

    def probe_passed(self, width: int, accepted_per_row: list[int], rows: int | None = None) -> bool:
        """Whether this round was a probe that kept half its drafts or more."""
        slots = self.acceptance.draft_slots(min(width, rows or width))
        return width > 1 and bool(self.probing) and 2 * sum(accepted_per_row) >= slots * len(accepted_per_row)

    def text_changed(self, width: int, accepted_per_row: list[int], rows: int | None = None) -> bool:
        """Whether this round was a probe that passed after plain steps (not a follow-up of one that did): the text
        has changed, and the evidence from before says nothing about it."""
        return self.probing != "follow-up" and self.probe_passed(width, accepted_per_row, rows)

    def observe(self, width: int, accepted_per_row: list[int], seconds: float | None = None,
                within: dict[int, list[int]] | None = None, rows: int | None = None) -> None:
        """One round of ``width`` rows: each active row accepted ``accepted_per_row`` drafts; ``seconds``: the whole
        round's clock (drafting, verify, commit); ``within``: a tree's drafts kept within each smaller budget (see
        TreeAcceptanceEstimate); ``rows``: the rows actually verified, where the drafter had fewer than ``width``
        (a router's shorter block)."""
        self._batch_rates = None
        self.passed_width = width if self.probe_passed(width, accepted_per_row, rows) else None
        if self.text_changed(width, accepted_per_row, rows):
            self.acceptance.forget()  # judge the new text on its own
        if seconds:
            self.clocked.setdefault(width, deque(maxlen=CLOCKED_ROUNDS)).append(seconds)
        if width > 1:
            if isinstance(self.acceptance, AcceptanceEstimate):  # each batch row's own estimate learns too
                self.acceptance.observe(min(width, rows or width), accepted_per_row,
                                        [row for row, _ in self.rows] if self.rows is not None else None)
            else:
                self.acceptance.observe(min(width, rows or width), accepted_per_row,
                                        *([within] if within is not None else []))


_NORMAL = statistics.NormalDist()


def _interpolated(costs: dict[int, float], measured: list[int], width: float) -> float:
    """``costs`` (measured at the widths ``measured``, ascending) at a fractional ``width``, linear between the
    measured widths around it; below the narrowest, the narrowest's cost."""
    if width <= measured[0]:
        return costs[measured[0]]
    for low, high in zip(measured, measured[1:]):
        if width <= high:
            return costs[low] + (costs[high] - costs[low]) * (width - low) / (high - low)
    return costs[measured[-1]]


class PolicyOfPolicies:
    """A policy made of width policies, one of which (``current``) chooses each round: the round's drafting is timed
    and its outcome observed by that one."""

    current: "WidthPolicy | PolicyOfPolicies"

    @property
    def needs_draft_timing(self) -> bool:
        return self.current.needs_draft_timing

    @property
    def probing(self) -> str | None:
        return getattr(self.current, "probing", None)

    def timed_draft(self, seconds: float) -> None:
        self.current.timed_draft(seconds)

    def observe(self, width: int, accepted_per_row: list[int], seconds: float | None = None, within=None,
                rows: int | None = None) -> None:
        self.current.observe(width, accepted_per_row, seconds, within, rows)

    def confident_width(self, chosen: int, confidences: list[list[float]], call_rate: float | None) -> int:
        return self.current.confident_width(chosen, confidences, call_rate)

    def unsure_drafting_width(self, chosen: int) -> int:
        return self.current.unsure_drafting_width(chosen)

    def observe_sure(self, sure: bool) -> None:
        """The target's confidence in a plain round is a fact of the text: every part's count follows it (``parts``:
        each subclass's policies)."""
        for part in self.parts():
            part.observe_sure(sure)

    def set_unread(self, rows: int | dict[str, int]) -> None:
        for part in self.parts():
            part.set_unread(rows)

    def note_read(self, round_index: int) -> None:
        self.current.note_read(round_index)

    def set_rows(self, row_ids: list[int], tokens_left: list[int], rows_leave: bool) -> None:
        """Not used by the copying policy, which runs for one prompt only (a router's overrides it)."""


class RoutedWidthPolicy(PolicyOfPolicies):
    """WhiFlash's default call: each round's drafter, and its width (or a plain step).

    The router's vote is the round's context, not the last word. Each drafter keeps an acceptance estimate per vote
    (how it did in the rounds the router sent to EAGLE-3, and in those it sent to DFlash) and its own costs (an
    EAGLE-3 chain drafts token by token, a DFlash block in one forward through a large lm_head). Each round, under
    the current vote, the drafter whose best width promises the most tokens per second drafts, and its own
    ``WidthPolicy`` then chooses the width, the plain steps and the probes as it would alone. A router is trained on
    acceptance only (which drafter keeps more tokens here); where one drafter's rounds cost more on this machine, or
    it keeps less than the router expects, the clock decides. Until both drafters' drafting has been timed (each
    times its own first rounds), the vote decides. While drafting pays, every OTHER_DRAFTER_EVERY-th round of a vote
    in which one drafter ran (counted across calls), the other drafts once, as wide as costs little more than its
    best width (``WidthPolicy.exploring_width``); each such round that leaves it behind doubles that gap, up to
    LAST_OTHER_DRAFTER_EVERY (before, it stayed at OTHER_DRAFTER_EVERY: replayed on the real target, whose EAGLE-3
    drafter keeps about twice DFlash's drafts under either vote, WhiFlash ran at 0.986 of the better drafter alone's
    speed with bf16 costs and 0.976 with an AVX2 CPU's fp32 ones; backing off, 0.999 and 0.983). An exploring round
    whose own tokens over its cost beat the preferred drafter's expected rate says that drafter's estimate is behind
    its text: its evidence under every vote and over all goes, as after a probe that passes, and the vote's next round
    explores again (wider where it kept every draft) until one does not beat the leader or the drafter leads. A call
    is new text: where exploring costs little more than the leader's round, its first drafting round explores with
    the drafter not preferred under the round's vote, every call at first and backing off (in calls) while such
    rounds leave it behind (LAST_OPENING_EXPLORE_EVERY).
    While plain steps pay best for both, the plain rounds and their probes go to the most promising drafter's policy,
    and after each probe to the other's (unless no drafting width of its could pay), so that probes take turns
    between the drafters (before, the drafter rated the more promising ran every probe, and the other, whose estimate
    only its own rounds move, never drafted again: with a router that tells the drafters' texts apart, replayed,
    WhiFlash ran at 2.0x stock where taking turns gives 4.2x). Each vote's plain rounds count towards that vote's
    probes (before, a drafter's one plain streak counted every vote's, and its drafting rounds under another vote
    reset it, so no probe ran under a vote whose estimate had fallen under plain steps). A probe that passes
    drops the drafter's evidence under every vote and over all, as a drafter alone drops its one estimate (before,
    only the vote's: the drafter's estimate over all its rounds, the prior of every vote's, held the new text to
    the old one's rates past the probe's width). A router fixed to one drafter ("eagle3" / "dflash") keeps it. Any
    routing and any widths are lossless: the target verifies whatever was drafted.

    The loop talks to this as to a ``WidthPolicy``: ``choose``, ``observe``, the drafting timing and the cost
    learning go to the round's drafter's policy."""

    def __init__(self, policies: dict[str, WidthPolicy], estimates: dict[str, dict[str, AcceptanceEstimate]],
                 pooled: dict[str, AcceptanceEstimate], vote, use_drafter, fixed: str | None = None):
        self.policies = policies  # drafter -> its width policy (its own costs and clocks)
        self.estimates = estimates  # drafter -> router vote -> its acceptance in the rounds of that vote
        self.pooled = pooled  # drafter -> its acceptance in all its rounds: the prior of its estimate under each vote
        for name, by_vote in estimates.items():
            for estimate in by_vote.values():
                estimate.pooled = pooled[name]
        self.vote = vote  # () -> the router's vote this round
        self.use_drafter = use_drafter  # (drafter) -> None: the round's proposal comes from that drafter
        self.fixed = fixed
        # the records of the call's rounds that every drafter's policy shares (_share_records)
        self.whole_block_rounds: set[int] = set()
        self.refed_rounds: set[int] = set()
        self.drafted_rows: dict[int, int] = {}  # (EAGLE-3's rounds that stopped unsure: WidthPolicy.drafted_rows)
        self.read_rows: dict[int, int] = {}  # (WidthPolicy.read_rows: the drafting round's drafter's unseen rows)
        self._share_records()
        self.round_drafters: list[str | None] = []  # per round: the drafter whose policy chose it (None: none did)
        self._round = None  # the prepared round's (vote, context)
        self.last_prober: str | None = None  # the drafter whose policy ran the call's last probe (_drafter_for)
        # (drafter, context) -> the plain rounds its policy has chosen under that context since it last drafted
        # there (WidthPolicy.plain_streak, swapped in by prepare)
        self.plain_streaks: dict[tuple[str, str | None], int] = {}
        self.streak_context: str | None = None  # the context whose streaks the policies hold
        self.opened = False  # whether this call has had a drafting round
        # the estimates (drafter, context) that hold rounds of earlier calls (their texts): this call's opening may
        # explore with them; this call counts towards their next opening exploring round (_drafter_for)
        self.carried_in = {(name, context) for name, by_vote in estimates.items()
                           for context, estimate in by_vote.items() if estimate.widest > 0}
        for name, context in self.carried_in:
            estimates[name][context].calls_since_opening_explore += 1
        self.explored: tuple[str, str, str] | None = None  # this round's (drafter, preferred drafter, context) where
        # the drafter not preferred drafts once (_drafter_for); its outcome sets that drafter's next gap (observe)
        self.opening_explored = False  # whether that round is the call's opening one

    def _share_records(self) -> None:
        """Plain steps are the target's own forward whichever drafter's policy chose them: the drafters' policies
        share one clock of them, and the call's records of the rounds that drafted a whole block (timing), re-fed a
        recurrent target, stopped unsure or read rows."""
        plain_clock = deque(maxlen=CLOCKED_ROUNDS)
        for policy in self.policies.values():
            # no follow-up probes (WidthPolicy.follow_up_width): here the other drafter's estimate is the rival, and a
            # chain's short probes pass easily. Following up at the drafter's next turn, the tiny world's math
            # (fp32, AVX2 kernels) read 1.29x stock, tau 2.72, where the bench before read 2.39x, 6.73; following up
            # at once (the next round theirs), math tau went from 7.04 to 4.06 in bf16 (EAGLE-3's follow-ups took
            # rounds DFlash's blocks would have drafted)
            policy.follows_up = False
            policy.clocked[1] = plain_clock
            policy.whole_block_rounds, policy.refed_rounds = self.whole_block_rounds, self.refed_rounds
            policy.drafted_rows = self.drafted_rows
            policy.read_rows = self.read_rows
        self.current = next(iter(self.policies.values()))

    def with_policies(self, policies: dict[str, WidthPolicy]) -> "RoutedWidthPolicy":
        """This call's policy with each drafter's policy replaced (a batch whose dropped rows put it in a smaller
        bucket: that bucket's costs): the call's state goes on (its rounds' drafters, the call's opening, the votes'
        plain streaks and the one in progress), so the new policies' rounds count as this call's."""
        narrower = shallow_copy(self)
        narrower.policies = policies
        narrower._share_records()
        for name, policy in policies.items():
            policy.plain_streak = self.policies[name].plain_streak
        return narrower

    def set_rows(self, row_ids: list[int], tokens_left: list[int], rows_leave: bool) -> None:
        """A batch: each drafter's policy rates the batch until its slowest row is done, as a drafter alone's does
        (``WidthPolicy.set_rows``; its finished rows leave it, as they do a drafter alone's). Rating the mean row
        instead, the tiny world's WhiFlash kept drafting at batch 8 and 16 and ran at 0.85x and 0.95x stock batched
        generate."""
        for policy in self.policies.values():
            policy.set_rows(row_ids, tokens_left, rows_leave)

    def unsure_drafting_width(self, chosen: int) -> int:
        """The chosen width: here the drafters' estimates are rivals, and rounds that run on only where the chain was
        sure would teach its estimate's deep slots those rounds alone, the bias that made WhiFlash's EAGLE-3 side
        outbid DFlash's blocks when rated over every width (SpeculativeDecoder._drafter_policy). Kept for that
        reason; not measured on its own."""
        return chosen

    def parts(self) -> list:
        return list(self.policies.values())

    def set_unread(self, rows: int | dict[str, int]) -> None:
        """``rows``: per drafter (WhiFlashProposer.unread_rows: each one's backlog), or one count for all."""
        for name, policy in self.policies.items():
            policy.set_unread(rows[name] if isinstance(rows, dict) else rows)

    def _drafter_for(self, vote: str, context: str) -> tuple[str, bool]:
        """(the round's drafter, whether it explores: drafts once, at ``WidthPolicy.exploring_width``)."""
        if self.fixed is not None:
            return self.fixed, False
        if any(policy.needs_draft_timing for policy in self.policies.values()):
            return vote, False
        rates = self._drafting_rates()
        best = max(rates, key=lambda name: (rates[name], name == vote))
        other = next(name for name in self.policies if name != best)
        if rates[best] <= self.policies[best].rate(1):
            # plain steps pay best: one drafter's policy takes the round and runs its probe when one is due, the
            # most promising drafter's unless it ran the last probe, so that probes take turns between the drafters
            # at the rate of one drafter's schedule; not to a drafter that never probes here (no drafting width of
            # its could pay even if every draft were kept), which would hold the turn for good
            if best == self.last_prober and self.policies[other].drafting_could_pay():
                return other, False
            return best, False
        waiting = self.estimates[other][context]
        waiting.rounds_without += 1
        # (the call's first drafting round: a new text, on which a gap grown on earlier texts says little. Waiting out
        # a gap of 64 rounds carried from code, the tiny world's math ran 130 rounds on EAGLE-3's chains at tau 3
        # with AVX2 fp32 costs, where DFlash's blocks, once they drafted, ran at tau 7; opening a call under each vote
        # once the vote had gone 16 rounds without DFlash, its first three math prompts of about 11 rounds each
        # still ran on the chains in one pass of three. Not where exploring costs much more than the leader's round:
        # there the gap's backing off pays)
        opening, self.opened = not self.opened, True
        opens = (opening and (other, context) in self.carried_in
                 and waiting.calls_since_opening_explore >= waiting.opening_explore_every
                 and self._cheap_to_explore(other, best))
        due = waiting.explore_width or waiting.rounds_without >= waiting.explore_after or opens
        if due and self.policies[other].drafting_could_pay():
            waiting.rounds_without = 0
            self.explored = (other, best, context)
            if opening:
                waiting.calls_since_opening_explore, self.opening_explored = 0, True
            return other, True
        preferred = self.estimates[best][context]
        # (it leads here: its exploring rounds start afresh)
        preferred.rounds_without = preferred.explore_width = 0
        preferred.opening_explore_every = 1
        return best, False

    def _cheap_to_explore(self, other: str, best: str) -> bool:
        """Whether ``other``'s exploring round costs at most OPENING_EXPLORE_COST times ``best``'s round at its best
        width."""
        explorer, leader = self.policies[other], self.policies[best]
        return (explorer.round_seconds(explorer.exploring_width())
                <= OPENING_EXPLORE_COST * leader.round_seconds(leader.best_drafting_width()))

    def _drafting_rate(self, name: str) -> float:
        """A drafter's expected tokens per second at its best drafting width, under the prepared context."""
        policy = self.policies[name]
        return policy.rate(policy.best_drafting_width())

    def _drafting_rates(self) -> dict[str, float]:
        return {name: self._drafting_rate(name) for name in self.policies}

    def prepare(self, copying: bool = False) -> None:
        """The round's vote and context (the vote, and whether its rows have a copy at hand, where the call keeps
        such rounds apart), and each drafter's estimate under it; ``choose`` follows (asks the router once)."""
        vote = self.fixed or self.vote()
        copied = f"{vote}|{COPIED}"
        context = copied if copying and copied in next(iter(self.estimates.values())) else vote
        for name, policy in self.policies.items():
            policy.acceptance = self.estimates[name][context]
            # each vote's plain rounds count towards its own probes, as its estimate is its own
            self.plain_streaks[name, self.streak_context] = policy.plain_streak
            policy.plain_streak = self.plain_streaks.get((name, context), 0)
        self.streak_context = context
        self._round = (vote, context)

    def best_rate(self) -> float | None:
        """After ``prepare``: the most expected tokens per second of any drafter's best width under the round's
        context (None while a drafter's drafting is not yet timed)."""
        rates = [policy.best_rate() for policy in self.policies.values()]
        return None if None in rates else max(rates)

    def skip_round(self) -> None:
        self.round_drafters.append(None)  # round indices stay the call's (learn_costs)
        self._round = None

    def choose(self, copying: bool = False) -> int:
        if self._round is None:
            self.prepare(copying)
        (vote, context), self._round = self._round, None
        name, explores = self._drafter_for(vote, context)
        self.current = self.policies[name]
        if explores:  # as wide as pays to explore (exploring_width), or as its last exploring round asked
            width = max(self.current.exploring_width(), self.estimates[name][context].explore_width)
        else:
            width = self.current.choose()
        if not explores and self.current.probing:  # (an exploring round asks no choose: its probing is stale)
            self.last_prober = name
        self.round_drafters.append(name)
        self.use_drafter(name)
        return width

    def observe(self, width: int, accepted_per_row: list[int], seconds: float | None = None, within=None,
                rows: int | None = None) -> None:
        name = self.round_drafters[-1]
        explored, self.explored = self.explored, None
        opening, self.opening_explored = self.opening_explored, False
        beat = explored is not None and self._beats_the_leader(explored, width, accepted_per_row)
        # (an exploring round that follows one that beat the leader builds on the evidence that one left)
        again = explored is not None and self.estimates[explored[0]][explored[2]].explore_width > 0
        if (beat and not again) or self.current.text_changed(width, accepted_per_row, rows):
            # the text changed for this drafter (a probe of its passed after plain steps, or an exploring round of its
            # beat the preferred drafter's expected rate): its evidence under every vote goes, and over all (the prior
            # of each vote's estimate: kept, it would hold the new text to the old one's rates past the probe's
            # width), and it drafts once again soon where the other drafter leads. (Where an exploring round that beat
            # the leader kept the evidence, the tiny world's DFlash, its evidence made bad after the code prompts,
            # came to lead math under one router vote and stayed behind EAGLE-3's chains under the other, whose
            # evidence only that vote's exploring rounds moved, one per gap: 1.1-2.1x stock where its blocks run at
            # 3-4x.)
            for estimate in (self.pooled[name], *self.estimates[name].values()):
                estimate.forget()
                estimate.explore_after = OTHER_DRAFTER_EVERY
        super().observe(width, accepted_per_row, seconds, within, rows)
        if width > 1:
            self.pooled[name].observe(min(width, rows or width), accepted_per_row)
        if explored is not None:
            # the drafter not preferred drafted once: still behind under this vote, it waits twice as long next time
            # (a drafter that keeps about half the other's drafts gains nothing from rounds that confirm it); ahead,
            # or having kept every draft of a round narrower than its widest width (which says nothing yet of the
            # rows past it: backing off there, a drafter that led at its widest took 47 rounds to get there, not 31),
            # it has its first gap back. And where the round itself, its tokens over its cost, beat
            # the preferred drafter's expected rate, the vote's next round explores again, one width wider where
            # every draft was kept, and so on while its rounds do so: its estimate is behind its text. With one such
            # round per gap, the tiny world's DFlash, its evidence gone bad on a fresh bundle's first code rounds,
            # stayed behind EAGLE-3's chains on math for 130 rounds (each exploring round kept every draft of 4
            # rows, and its best width stayed 4), at 1.6x stock where its blocks run at 3.4x.
            other, best, context = explored
            estimate = self.estimates[other][context]
            wider = [w for w in self.policies[other].widths if w > width]
            # (a one-row round, a chain that stopped unsure before its first draft, kept nothing: it backs off)
            all_kept = bool(wider) and width > 1 and min(accepted_per_row) >= width - 1
            if opening:  # the call's opening exploring round: a round that leaves it behind backs the next one off
                estimate.opening_explore_every = (1 if beat else
                                                  min(2 * estimate.opening_explore_every, LAST_OPENING_EXPLORE_EVERY))
            if beat:
                # (and its first gap back, as a round that put it ahead: kept as it was, a run of such rounds that
                # ended in a poor one doubled it, and a DFlash whose rounds had just kept 7 of 8 rows waited 128
                # rounds for its next one)
                estimate.explore_width = wider[0] if all_kept else width
                estimate.explore_after = OTHER_DRAFTER_EVERY
            else:
                rates = self._drafting_rates()
                estimate.explore_width = 0
                estimate.explore_after = (min(2 * estimate.explore_after, LAST_OTHER_DRAFTER_EVERY)
                                          if rates[other] < rates[best] and not all_kept else OTHER_DRAFTER_EVERY)

    def _beats_the_leader(self, explored: tuple[str, str, str], width: int, accepted_per_row: list[int]) -> bool:
        """Whether an exploring round's own tokens over its cost beat the preferred drafter's expected rate (its
        slowest row's, as a batch commits)."""
        other, best, _ = explored
        return (min(accepted_per_row) + 1) / self.policies[other].round_seconds(width) > self._drafting_rate(best)

    def learn_costs(self, round_widths, round_seconds, round_draft_seconds, rounds=None) -> None:
        """Each drafter's policy learns from its drafting rounds, and every policy from the plain steps (``rounds``:
        the call's rounds to learn from; all by default)."""
        for name, policy in self.policies.items():
            mine = [i for i, drafter in enumerate(self.round_drafters) if drafter is not None
                    and (drafter == name or round_widths[i] == 1) and (rounds is None or i in rounds)]
            policy.learn_costs(round_widths, round_seconds, round_draft_seconds, mine)


class CopyingWidthPolicy(PolicyOfPolicies):
    """The default call's rounds for one prompt with copied tokens (``prompt_lookup``): the drafter's, or the copy's.

    Where the row's last 3 tokens occurred earlier, the tokens after that occurrence are a draft that costs nothing
    to make, and, in quoted passages, one that runs on for many tokens where the drafter's guesses do not. Such a
    round may verify the copy alone (``copies_alone``: no drafter forward; the drafter catches up on the committed
    rows as after a plain step). Each kind of round has its own ``WidthPolicy``, acceptance estimate and clock; the
    copy's policy charges no drafting and may verify wider blocks than the drafter drafts. Where a copy is at hand,
    the round goes to whichever promises more tokens per second at its best width (the copy while the drafter's
    drafting is not yet timed). Where the drafter leads, the copy's estimate learns what the copy would have kept of
    the round's tokens (``observe_unused_copy``), so it follows the text without rounds spent trying it. Elsewhere the
    drafter's policy chooses as it would alone (its blocks may still take a 2-token copy that agrees with its first
    draft: ``PromptLookup.overlay``). Lossless either way: only proposals change.

    The loop talks to this as to a ``WidthPolicy``; after ``choose`` it reads ``copies_alone`` (verify the copy) and
    ``overlays_copies`` (the drafter's block may take copied tokens)."""

    def __init__(self, drafter: "WidthPolicy | RoutedWidthPolicy", copy: WidthPolicy):
        self.drafter, self.copy = drafter, copy
        # plain steps are the target's own forward whichever policy chose them: one clock, and one record of the
        # rounds that drafted a whole block (timing) or re-fed a recurrent target
        first = next(iter(getattr(drafter, "policies", {"": drafter}).values()))  # a router's share theirs already
        copy.clocked[1] = first.clocked.setdefault(1, deque(maxlen=CLOCKED_ROUNDS))
        self.whole_block_rounds, self.refed_rounds = drafter.whole_block_rounds, drafter.refed_rounds
        copy.whole_block_rounds, copy.refed_rounds = self.whole_block_rounds, self.refed_rounds
        self.drafted_rows = getattr(drafter, "drafted_rows", {})
        self.read_rows = getattr(drafter, "read_rows", {})
        self.current = drafter
        self.copies_alone = False
        self.overlays_copies = True
        self.round_policies: list[WidthPolicy] = []  # per round: the policy that chose it

    def parts(self) -> list:
        return [self.drafter, self.copy]

    def _copy_leads(self) -> bool:
        drafter_rate = self.drafter.best_rate()
        return drafter_rate is None or self.copy.best_rate() >= drafter_rate

    def observe_unused_copy(self, agreed: int, committed: int) -> None:
        """A round with a copy at hand that verified the drafter's block or a plain step: the copy matched the first
        ``agreed`` of the round's tokens, of which the round committed ``committed``. The copy would have kept
        min(agreed, committed) drafts, and its next one was wrong where agreed < committed (where it matched every
        committed token, the target's tokens past them say nothing). Its estimate learns that as from a round of
        its own: trying the copy every 16th such round instead cost a strong drafter's block each time (on the tiny
        world's math prompts, answers of 46 tokens, such a round kept 2 tokens where DFlash's block kept 8)."""
        kept = min(agreed, committed)
        width = kept + 1 if agreed >= committed else kept + 2  # rows whose verdicts the round knows
        self.copy.acceptance.observe(min(width, len(self.copy.acceptance.reached)), [kept])

    def choose(self, copying: bool = False) -> int:
        """``copying``: the round's row has a copy at hand (its last 3 tokens occurred earlier)."""
        prepare = getattr(self.drafter, "prepare", None)  # a router's: its vote and estimates for the round
        if prepare is not None:
            prepare(copying)
        self.current = self.copy if copying and self._copy_leads() else self.drafter
        if self.current is self.copy:
            self.drafter.skip_round()
        width = self.current.choose()
        self.copies_alone = self.current is self.copy and width > 1
        self.overlays_copies = not copying  # where the drafter was preferred to the copy, its block stays its own
        self.round_policies.append(self.current)
        return width

    def learn_costs(self, round_widths, round_seconds, round_draft_seconds, rounds=None) -> None:
        """Each policy learns from the rounds it chose (``rounds``: the call's rounds to learn from; all by default);
        the copy's verify costs only."""
        for policy in (self.drafter, self.copy):
            mine = [i for i, chooser in enumerate(self.round_policies) if chooser is policy
                    and (rounds is None or i in rounds)]
            policy.learn_costs(round_widths, round_seconds, round_draft_seconds, mine)
