"""Replay the width policy on the real target without a clock: what each default call's round widths would cost,
from the drafters' acceptance at every position of stock `generate`'s answers and one measured cost table.

Timed benchmarks on a 2-core CPU spread by 5-15% from run to run, more than the differences between versions of
the policy's estimates. This script takes the noise out: for each benchmark prompt it decodes stock's greedy answer
once, then computes, teacher-forced and in fp32, how many drafts the drafter would get accepted in a round that
starts after each answer token (DFlash: the leading matches of its block; EAGLE-3: of its greedy chain, the trainers'
offline estimates at every position). The engine's own ``WidthPolicy`` then chooses every round's width as in a
default call with the drafter alone (``prompt_lookup=False``; batch 1, eager), each round commits what the
acceptance at its start allows within its width and costs what the measured table says (times lognormal noise,
``--noise``), and each call's estimate is carried into the next, in the benchmark's order (``--order round-robin``:
the categories in turns). The ratio is stock's decode time (one plain step per token) over the policy's; prefill is
left out of both. ``--world tiny`` does the same for the tiny world's drafters on its code, math and prose prompts,
in the order `specgen bench --target tiny` takes them.

The data also hold the drafter's probability of every draft (files measured before 2026-11-28 do not): where they
are there, EAGLE-3's replay stops its chain when unsure and verifies ``WidthPolicy.confident_width``'s choice, as the
engine does on a CPU, and prints the replay without that beside it (and DFlash's with it, drafting its whole block).

``--whiflash`` replays WhiFlash's default call too (``RoutedWidthPolicy`` over both drafters, each round's context the
router's vote there, EAGLE-3's rounds stopping when unsure, both drafters on one verify table as in its calls), and
beside it the same with the vote ignored; it needs the router's vote after every answer token, which files measured
before 2026-11-28 (a later session) lack and ``--add-votes`` adds (decoding stock's answers again). ``--add-votes``
also adds the target's verdict on every answer token (whether it gave it SURE_PROBABILITY or more), which a replayed
plain round hands the policy as the engine's does (``WidthPolicy.observe_sure``; files without it replay the calls as
they were before 2026-11-29, a later session).

Variants set the module's constants: ``--variant carried4=CARRIED_WEIGHT:4``. ``--costs FILE`` replays the same
calls under another cost table (this machine's, in ``--costs-dtype``, measured into FILE when it does not exist):
the drafters' acceptance barely depends on the machine, the costs do.

    python scripts/policy_replay.py --per-category 4 --threads 2 --variant carried4=CARRIED_WEIGHT:4
    python scripts/policy_replay.py --world tiny --per-category 10 --max-new-tokens 192 \
        --data docs/benchmarks/policy_replay_tiny/seed0.json --whiflash
    python scripts/policy_replay.py --data docs/benchmarks/unsure_stop_avx2/seed0.json --whiflash --noise 0
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.drafters.dflash import DraftHead
from hf_specgen.drafters.whiflash import route
from hf_specgen.engine import width_policy
from hf_specgen.engine.taps import decoder_layers, tapped
from hf_specgen.targets import resolve_target
from hf_specgen.training.dflash_trainer import block_leading_matches, build_anchor_batch, drafter_block_states
from hf_specgen.training.eagle3_trainer import chain_leading_matches, tapped_features, ttt_batch, ttt_forward
from hf_specgen.training.lm import chat_examples

# per world: its target, its DFlash and EAGLE-3 drafters, its WhiFlash bundle (the same two drafters and a router)
# and the prompt sets its benchmark takes (``--world tiny``: the tiny world's, as `specgen bench --target tiny` runs)
WORLDS = {
    "smollm2": {"target": "smollm2-135m-instruct",
                "drafters": {"dflash": "hub_models/smollm2-135m-instruct-dflash-b16",
                             "eagle3": "hub_models/smollm2-135m-instruct-eagle3"},
                "whiflash": "hub_models/smollm2-135m-instruct-whiflash", "prompts": ["specbench", "humaneval"]},
    "tiny": {"target": "hub_models/specgen-tiny",
             "drafters": {"dflash": "hub_models/specgen-tiny-dflash-b16", "eagle3": "hub_models/specgen-tiny-eagle3"},
             "whiflash": "hub_models/specgen-tiny-whiflash", "prompts": ["tinyworld"]},
}
DRAFTERS = ("dflash", "eagle3")


def _rounded(probabilities: torch.Tensor) -> list[list[float]]:
    return [[round(p, 4) for p in row] for row in probabilities.tolist()]


@torch.no_grad()
def dflash_acceptance(drafter, target, example, pad_id: int) -> tuple[list[int], list[list[float]]]:
    """Drafts DFlash's block gets accepted in a round after each answer token (index i: after answer token i), and
    the drafter's probability of each of the block's drafts there."""
    ids, n_prompt = example
    block = drafter.block_size
    batch = build_anchor_batch([example], block, 10**6, pad_id, torch.Generator().manual_seed(0))
    hidden = drafter_block_states(drafter, target, batch)  # [1, A*B, H]
    head = DraftHead(target.lm_head, drafter.draft_vocab)
    leading = block_leading_matches(hidden, batch, head, block)[0]  # [A]
    probabilities = head(hidden).float().softmax(-1).amax(-1).view(-1, block)[:, 1:]  # [A, B-1]
    by_anchor = dict(zip(batch.anchors[0].tolist(), zip(leading.tolist(), _rounded(probabilities))))
    rows = [by_anchor.get(n_prompt + i, (0, [0.0] * (block - 1))) for i in range(len(ids) - n_prompt)]
    return [count for count, _ in rows], [row for _, row in rows]


@torch.no_grad()
def eagle3_acceptance(drafter, target, example, pad_id: int, depth: int) -> tuple[list[int], list[list[float]]]:
    """The same for EAGLE-3's greedy chain of ``depth`` drafts (row t: x_{t+1} just committed), and the drafter's
    probability of each draft of the chain (as ``chain_leading_matches`` drafts it)."""
    ids, n_prompt = example
    leading = chain_leading_matches(drafter, target, [example], pad_id, depth)[0][0].tolist()  # [T]
    input_ids, _ = ttt_batch([example], pad_id, depth)
    rows = input_ids.shape[1] - depth - 1
    outputs = ttt_forward(drafter, target.get_input_embeddings(), input_ids,
                          tapped_features(drafter, target, input_ids, rows), depth)
    probabilities = torch.stack([drafter.draft_logits(h).float().softmax(-1).amax(-1) for h in outputs], -1)[0]
    chains = _rounded(probabilities)  # [T][depth]
    positions = [n_prompt + i - 1 for i in range(len(ids) - n_prompt)]
    return ([leading[t] if t < len(leading) else 0 for t in positions],
            [chains[t] if t < len(chains) else [0.0] * depth for t in positions])


@torch.no_grad()
def router_votes(bundle, target, example) -> tuple[list[str], list[bool]]:
    """WhiFlash's router vote in a round after each answer token (index i: after answer token i): the router reads
    the target at the newest committed token (its logits and its final decoder layer's output), as in a call; and
    whether the target gave the token that round commits first SURE_PROBABILITY or more (what a plain round there
    tells the policy: WidthPolicy.observe_sure)."""
    ids, n_prompt = example
    with tapped(target, [len(decoder_layers(target)) - 1]) as tap:
        logits = target(torch.tensor([ids])).logits[0]  # [T, V]
        hidden = tap.features()[0]  # [T, H]
    rng = random.Random(0)
    votes = [route(bundle, {"logits": logits[t], "hidden": hidden[t], "position": t}, rng)
             for t in range(n_prompt, len(ids))]
    sure = (logits[n_prompt:].float().softmax(-1).amax(-1) >= width_policy.SURE_PROBABILITY).tolist()
    return votes, sure


def add_votes(args, data: dict) -> None:
    """Router votes (and the target's sure tokens) for the calls of a data file measured without them: stock's answers
    decoded again (fp32 greedy, the file's prompts: ``--per-category`` and ``--seed`` as it was made with; each
    answer's length checked)."""
    torch.set_num_threads(args.threads)
    target, tokenizer, _ = load_models(args, torch.float32)
    bundle = hf_specgen.load_drafter(WORLDS[args.world]["whiflash"], dtype=torch.float32).eval()
    prompts = pick_prompts(WORLDS[args.world]["prompts"], args.per_category, args.seed)
    if [r["category"] for r in prompts] != [c["category"] for c in data["calls"]]:
        raise ValueError("the data file's calls are not these prompts: pass the --per-category and --seed it was "
                         "made with")
    for n, (record, call) in enumerate(zip(prompts, data["calls"])):
        example = answered_example(target, tokenizer, record, args.max_new_tokens)
        if len(example[0]) - example[1] != call["answer_tokens"]:
            raise ValueError(f"call {n}: stock's answer has {len(example[0]) - example[1]} tokens here, "
                             f"{call['answer_tokens']} in the data file")
        call["whiflash_votes"], call["target_sure"] = router_votes(bundle, target, example)
        print(f"{n + 1}/{len(prompts)} {record['category']}: {call['whiflash_votes'].count('eagle3')} of "
              f"{call['answer_tokens']} votes for EAGLE-3", flush=True)


def answered_example(target, tokenizer, record: dict, max_new_tokens: int) -> tuple[list[int], int]:
    """(prompt and stock's greedy answer as token ids, the prompt's length)."""
    ids = chat_ids(tokenizer, record["prompt"])
    answer = target.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)[0, ids.shape[1]:].tolist()
    (example,) = chat_examples(tokenizer, [{"prompt_ids": ids[0].tolist(), "response_ids": answer}], 10**6)
    return example


def measure(args) -> dict:
    """Stock's answers, each drafter's acceptance after every answer token, and the policy's measured costs."""
    torch.set_num_threads(args.threads)
    target, tokenizer, drafters = load_models(args, torch.float32)
    prompts = pick_prompts(WORLDS[args.world]["prompts"], args.per_category, args.seed)
    calls = []
    bundle = hf_specgen.load_drafter(WORLDS[args.world]["whiflash"], dtype=torch.float32).eval()
    for n, record in enumerate(prompts):
        example = answered_example(target, tokenizer, record, args.max_new_tokens)
        answer = example[0][example[1]:]
        pad = tokenizer.pad_token_id
        dflash, dflash_confidences = dflash_acceptance(drafters["dflash"], target, example, pad)
        eagle3, eagle3_confidences = eagle3_acceptance(drafters["eagle3"], target, example, pad, args.eagle3_depth)
        votes, sure = router_votes(bundle, target, example)
        calls.append({"category": record["category"], "answer_tokens": len(answer), "dflash": dflash,
                      "eagle3": eagle3, "dflash_confidences": dflash_confidences,
                      "eagle3_confidences": eagle3_confidences, "whiflash_votes": votes, "target_sure": sure})
        print(f"{n + 1}/{len(prompts)} {record['category']}: {len(answer)} tokens", flush=True)
    return {"calls": calls, "costs": measure_costs(target, tokenizer, drafters)}


def measure_costs(target, tokenizer, drafters: dict) -> dict:
    """Each drafter's cost table as the engine measures and learns it in one default call on this machine."""
    tables = {}
    for mode, drafter in drafters.items():  # one default call each: the costs the engine measures and learns
        before = set(width_policy.costs_of(target).tables)
        ids = tokenizer("Count from one to twenty.", return_tensors="pt")["input_ids"]
        out = target.generate(ids, assistant_model=drafter, speculative_mode=mode, max_new_tokens=48,
                              prompt_lookup=False, return_dict_in_generate=True)
        (key,) = set(width_policy.costs_of(target).tables) - before
        table = width_policy.costs_of(target).tables[key]
        # (widest: the widest round of this timing call, for the record; the replay's widths are the table's)
        tables[mode] = {"verify": {str(w): s for w, s in table.verify.items()}, "draft": table.draft,
                        "draft_head": table.draft_head, "widest": max(out.speculative_stats.round_widths)}
    return tables


def load_models(args, dtype: torch.dtype):
    world = WORLDS[args.world]
    path = resolve_target(world["target"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafters = {mode: hf_specgen.load_drafter(folder, dtype=dtype).eval() for mode, folder in world["drafters"].items()}
    return target, tokenizer, drafters


def call_order(calls: list[dict], order: str) -> list[dict]:
    """The benchmark's order (each category's prompts together) or the categories taking turns (every call on
    another kind of text than the last: the carried estimate is always another category's)."""
    if order == "blocks":
        return calls
    by_category: dict[str, list[dict]] = {}
    for call in calls:
        by_category.setdefault(call["category"], []).append(call)
    turns = [group[i] for i in range(max(map(len, by_category.values()))) for group in by_category.values()
             if i < len(group)]
    return turns


def play_round(policy, mode: str, call: dict, committed: int, width: int, widest: int, noisy: float,
               seconds: float, unsure: bool) -> tuple[int, float]:
    """One round of ``width`` rows after ``committed`` answer tokens, as the engine plays it: the drafts it keeps and
    its seconds (the cost model's times ``noisy``), observed by ``policy``. ``unsure``: a drafting round first drafts,
    then verifies the width ``WidthPolicy.confident_width`` picks from the drafts' probabilities (the engine's
    EAGLE-3 chain on a CPU stops drafting once their running product falls below UNSURE_STOP; DFlash, which the
    engine does not do this for, drafts its whole block to see them)."""
    accepted, total = call[mode], call["answer_tokens"]
    own = getattr(policy, "current", policy)  # a router's round: the round's drafter's policy has the costs
    if (unsure and width > 1 and not policy.needs_draft_timing and not policy.probing
            and f"{mode}_confidences" in call):
        probabilities = call[f"{mode}_confidences"][committed - 1]
        drafts, all_right = (widest - 1 if mode == "dflash" else width - 1), 1.0
        for j, p in enumerate(probabilities[:drafts]):
            if j and all_right < width_policy.UNSURE_STOP and mode == "eagle3":
                drafts = j
                break
            all_right *= p
        width = policy.confident_width(widest if mode == "dflash" else width, [probabilities[:drafts]],
                                       (committed - 1) / seconds if seconds else None)
        kept = min(accepted[committed - 1], width - 1, total - committed - 1)
        round_seconds = (own.draft_cost(drafts + 1 if mode == "eagle3" else widest)
                         + own.costs.verify[width]) * noisy
        policy.observe(width, [kept], seconds=round_seconds if width == drafts + 1 else None)
    else:
        kept = min(accepted[committed - 1], width - 1, total - committed - 1)
        round_seconds = own.model_seconds(width) * noisy
        policy.observe(width, [kept], seconds=round_seconds)
        if width == 1 and "target_sure" in call:  # (files measured before 2026-11-29 lack it)
            policy.observe_sure(call["target_sure"][committed - 1])
    return kept, round_seconds


def replay(data: dict, mode: str, passes: int, noise: float, seed: int, order: str,
           unsure: bool = False) -> dict[str, list[float]]:
    """Stock's time over the policy's for every call, by category, over ``passes`` passes of all the calls.
    ``unsure``: drafting rounds stop when unsure (``play_round``)."""
    costs = data["costs"][mode]
    verify = {int(w): s for w, s in costs["verify"].items()}
    widest = max(verify)
    widths = width_policy.width_buckets(widest, compiled=False)
    share = (lambda w: (w - 1) / (widest - 1)) if mode == "eagle3" else None  # a chain drafts token by token
    rng = random.Random(seed)
    estimate = width_policy.AcceptanceEstimate(widest)
    ratios: dict[str, list[float]] = {}
    for _ in range(passes):
        for call in call_order(data["calls"], order):
            table = width_policy.CostTable(dict(verify), draft=costs["draft"], draft_head=costs["draft_head"])
            policy = width_policy.WidthPolicy(widths, table, estimate, share)
            total = call["answer_tokens"]
            committed, seconds = 1, 0.0  # the prefill commits the first token
            while committed < total:
                width = policy.choose()
                kept, round_seconds = play_round(policy, mode, call, committed, width, widest,
                                                 math.exp(rng.gauss(0.0, noise)), seconds, unsure)
                committed += kept + 1
                seconds += round_seconds
            estimate = policy.acceptance.carried()
            ratios.setdefault(call["category"], []).append((total - 1) * verify[1] / seconds)
    return ratios


def shared_verify(data: dict) -> dict[str, float]:
    """One target, one verify cost per width, as a WhiFlash call has (its DFlash policy borrows the EAGLE-3 policy's
    measured widths and measures the wider ones in the same call): EAGLE-3's table, and DFlash's wider widths scaled
    by the two tables' ratio at EAGLE-3's widest (the data's tables were measured in separate calls, and on a shared
    CPU one call's plain step came out 25% dearer than the other's)."""
    eagle3, dflash = ({int(w): s for w, s in data["costs"][m]["verify"].items()} for m in ("eagle3", "dflash"))
    scale = eagle3[max(eagle3)] / dflash[max(eagle3)]
    return {str(w): eagle3[w] if w in eagle3 else dflash[w] * scale for w in sorted(set(eagle3) | set(dflash))}


def replay_routed(data: dict, passes: int, noise: float, seed: int, order: str,
                  votes: str = "router") -> dict[str, list[float]]:
    """The same ratios for WhiFlash's default call: ``RoutedWidthPolicy`` over both drafters' policies, each round's
    context the router's vote (``votes="router"``: the data's votes; ``"one"``: a single context, the router's vote
    ignored), EAGLE-3's rounds stopping when unsure as on a CPU, every estimate carried into the next call as the
    engine keys them (per drafter, and per drafter and vote). Left out, as for one drafter's probes: the catch-up
    forward of a drafter that sat out rounds (the lazy backlog, one KV-only forward of its committed rows)."""
    names = ("eagle3", "dflash")  # the engine's order (WhiFlashProposer.proposers): the first leads
    rng = random.Random(seed)
    setup = {}
    for name in names:
        costs = data["costs"][name]
        verify = {int(w): s for w, s in costs["verify"].items()}
        widest = max(verify)
        share = (lambda w, widest=widest: (w - 1) / (widest - 1)) if name == "eagle3" else None
        setup[name] = (costs, verify, widest, width_policy.width_buckets(widest, compiled=False), share)
    contexts = names if votes == "router" else names[:1]
    pooled = {name: width_policy.AcceptanceEstimate(setup[name][2]) for name in names}
    estimates = {name: {c: width_policy.AcceptanceEstimate(setup[name][2]) for c in contexts} for name in names}
    ratios: dict[str, list[float]] = {}
    for _ in range(passes):
        for call in call_order(data["calls"], order):
            policies = {}
            for name, (costs, verify, widest, widths, share) in setup.items():
                table = width_policy.CostTable(dict(verify), draft=costs["draft"], draft_head=costs["draft_head"])
                policies[name] = width_policy.WidthPolicy(widths, table, estimates[name][contexts[0]], share)
            at = [1]  # the answer tokens committed: the round's vote is the router's there
            vote = ((lambda: call["whiflash_votes"][at[0] - 1]) if votes == "router" else (lambda: contexts[0]))
            routed = width_policy.RoutedWidthPolicy(policies, estimates, pooled, vote, lambda name: None)
            total, committed, seconds = call["answer_tokens"], 1, 0.0
            while committed < total:
                at[0] = committed
                width = routed.choose()
                name = routed.round_drafters[-1]
                kept, round_seconds = play_round(routed, name, call, committed, width, setup[name][2],
                                                 math.exp(rng.gauss(0.0, noise)), seconds, unsure=name == "eagle3")
                committed += kept + 1
                seconds += round_seconds
            pooled = {name: estimate.carried() for name, estimate in pooled.items()}
            estimates = {name: {c: e.carried() for c, e in by_vote.items()} for name, by_vote in estimates.items()}
            ratios.setdefault(call["category"], []).append((total - 1) * setup[names[0]][1][1] / seconds)
    return ratios


def fixed_width(data: dict, mode: str, width: int) -> dict[str, list[float]]:
    """The same ratios for every round at one width (no policy, no noise): what the policy is measured against."""
    costs = data["costs"][mode]
    verify = {int(w): s for w, s in costs["verify"].items()}
    widest = max(verify)
    drafting = 0.0 if width == 1 else costs["draft"] * ((width - 1) / (widest - 1) if mode == "eagle3" else 1.0)
    ratios: dict[str, list[float]] = {}
    for call in data["calls"]:
        accepted, total = call[mode], call["answer_tokens"]
        committed, seconds = 1, 0.0
        while committed < total:
            committed += min(accepted[committed - 1], width - 1, total - committed - 1) + 1
            seconds += verify[width] + drafting
        ratios.setdefault(call["category"], []).append((total - 1) * verify[1] / seconds)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", choices=sorted(WORLDS), default="smollm2",
                        help="the real target's drafters on its benchmark prompts, or the tiny world's on its own")
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=96, help="(the tiny world's bench takes 192)")
    parser.add_argument("--eagle3-depth", type=int, default=7, help="drafts of the widest EAGLE-3 round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", default="bench_results/policy_replay.json",
                        help="answers, acceptance and costs: made once, read on later runs")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.1, help="sigma of each round's lognormal clock noise")
    parser.add_argument("--order", choices=("blocks", "round-robin"), default="blocks",
                        help="the calls in the benchmark's order, or one category after another in turns")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=CONST:VALUE[,CONST:VALUE]")
    parser.add_argument("--costs", metavar="COSTS.json",
                        help="replay with this cost table instead of the data's (another machine's or dtype's): "
                             "measured here with --costs-dtype and written there if the file does not exist")
    parser.add_argument("--costs-dtype", choices=("fp32", "auto"), default="auto",
                        help="the dtype a new --costs file is measured in (auto: bf16 on a CPU with bf16 units)")
    parser.add_argument("--whiflash", action="store_true",
                        help="replay WhiFlash's default call too (both drafters then share one verify table, as in "
                             "its calls); needs the router's votes, which --add-votes adds to a file made without them")
    parser.add_argument("--add-votes", action="store_true",
                        help="compute the router's votes and the target's sure tokens for the data file's calls "
                             "(decoding stock's answers again: pass the --per-category and --seed the file was made "
                             "with) and write them into it")
    args = parser.parse_args()
    data_path = Path(args.data)
    if data_path.exists():
        data = json.loads(data_path.read_text())
    else:
        data = measure(args)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        data_path.write_text(json.dumps(data))
    if args.add_votes and not {"whiflash_votes", "target_sure"} <= set(data["calls"][0]):
        add_votes(args, data)
        data_path.write_text(json.dumps(data))
    if args.costs:
        costs_path = Path(args.costs)
        if not costs_path.exists():
            torch.set_num_threads(args.threads)
            dtype = torch.float32 if args.costs_dtype == "fp32" else hf_specgen.auto_dtype()
            target, tokenizer, drafters = load_models(args, dtype)
            costs_path.write_text(json.dumps({**measure_costs(target, tokenizer, drafters), "dtype": str(dtype)}))
        data["costs"] = {k: v for k, v in json.loads(costs_path.read_text()).items() if k in DRAFTERS}
    if args.whiflash:
        if "whiflash_votes" not in data["calls"][0]:
            raise ValueError(f"{data_path} holds no router votes: add them with --add-votes")
        verify = shared_verify(data)
        for costs in data["costs"].values():
            costs["verify"] = {w: s for w, s in verify.items() if w in costs["verify"]}
    for mode, costs in data["costs"].items():
        plain = costs["verify"]["1"]
        print(f"{mode}: plain step {plain * 1e3:.1f} ms; verify / plain "
              + ", ".join(f"{w}: {s / plain:.2f}" for w, s in costs["verify"].items())
              + f"; drafting the widest round {costs['draft'] / plain:.2f}")
    variants = {"current": {}}
    for spec in args.variant:
        name, _, settings = spec.partition("=")
        variants[name] = {k: float(v) for k, v in (item.split(":") for item in settings.split(","))}
    defaults = {name: getattr(width_policy, name) for changes in variants.values() for name in changes}
    categories = sorted({call["category"] for call in data["calls"]})
    print("| drafter | variant | " + " | ".join(categories) + " | all |")
    print("|---|---|" + "---|" * (len(categories) + 1))
    for mode in data["costs"]:
        widest = max(int(w) for w in data["costs"][mode]["verify"])
        for width in width_policy.width_buckets(widest, compiled=False)[1:]:
            ratios = fixed_width(data, mode, width)
            print(f"| {mode} | fixed {width} | " + " | ".join(f"{statistics.median(ratios[c]):.3f}" for c in categories)
                  + f" | {statistics.median([r for c in categories for r in ratios[c]]):.3f} |")
        # the engine's EAGLE-3 chain stops drafting when unsure on a CPU; the other way round for each drafter too
        # (DFlash: drafting its whole block to see the probabilities), where the data holds them
        engine_unsure = mode == "eagle3"
        other = ([("without unsure stop" if engine_unsure else "whole block, then confident width", not engine_unsure)]
                 if f"{mode}_confidences" in data["calls"][0] else [])
        rows = [(name, changes, engine_unsure) for name, changes in variants.items()]
        for name, changes, unsure in rows + [(name, {}, unsure) for name, unsure in other]:
            for constant, value in {**defaults, **changes}.items():
                setattr(width_policy, constant, value)
            ratios = replay(data, mode, args.passes, args.noise, args.seed, args.order, unsure)
            cells = [statistics.median(ratios[c]) for c in categories]
            every = statistics.median([r for c in categories for r in ratios[c]])
            print(f"| {mode} | {name} | " + " | ".join(f"{x:.3f}" for x in cells) + f" | {every:.3f} |")
            for constant, value in defaults.items():
                setattr(width_policy, constant, value)
    if args.whiflash:  # both drafters' policies under the router's votes, and under one context (votes ignored)
        for name, changes, votes in [(name, changes, "router") for name, changes in variants.items()] + [
                ("one context", {}, "one")]:
            for constant, value in {**defaults, **changes}.items():
                setattr(width_policy, constant, value)
            ratios = replay_routed(data, args.passes, args.noise, args.seed, args.order, votes)
            cells = [statistics.median(ratios[c]) for c in categories]
            every = statistics.median([r for c in categories for r in ratios[c]])
            print(f"| whiflash | {name} | " + " | ".join(f"{x:.3f}" for x in cells) + f" | {every:.3f} |")
            for constant, value in defaults.items():
                setattr(width_policy, constant, value)


if __name__ == "__main__":
    main()
