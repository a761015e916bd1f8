"""``specgen bench`` / ``specgen compare``: every method on the same prompts and the same target, in one run.

Protocol (also in the README): each prompt is one user turn of the target's chat template (``--thinking`` sets
Qwen3's ``enable_thinking``; off by default), greedy decoding unless ``--temperature`` > 0, ``--max-new-tokens``
per prompt, one warm-up call per method, decode time from the first new token to the end (prefill excluded, the
DFlash paper's convention), medians over ``--repeats``, speedups against autoregressive decoding measured in the
same process. tau = committed tokens per verify round: pooled (all tokens / all rounds) and the per-prompt mean
(the papers' convention).
"""

from __future__ import annotations

import copy
import json
import random
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import DEFAULT_NUM_DRAFT_TOKENS
from ..dtypes import machine_description
from ..engine.graphs import CACHE_BUCKET, allow_a_graph_per_decoder
from ..engine.narrow_rows import describe_routes
from ..engine.width_policy import costs_of
from ..embedded import hub_models_dir
from ..reports import has_compiled_baseline, markdown_table
from .choices import ALL_METHODS, DTYPE_NAMES, LOSSLESS_DEFAULT  # noqa: F401 (re-exported)
from .harness import MethodResult, run_method, run_methods_in_turns, tap_cost

DTYPES = dict(zip(DTYPE_NAMES, (torch.bfloat16, torch.float32, torch.float16)))


@dataclass
class BenchModels:
    target: torch.nn.Module
    tokenizer: object | None = None
    dflash: torch.nn.Module | None = None
    draft_lm: torch.nn.Module | None = None
    synthetic: bool = False
    eagle3: torch.nn.Module | None = None
    whiflash: torch.nn.Module | None = None
    names: dict = field(default_factory=dict)


# The model families shipped in hub_models/: a target and the drafters trained for it (folder names). The tiny world
# needs nothing; the real target is a packaged model prepared once (``specgen prepare``, see hf_specgen/targets.py).
WORLDS = {
    "tiny": {"target": "specgen-tiny", "dflash": "specgen-tiny-dflash-b16", "draft_lm": "specgen-tiny-draft",
             "eagle3": "specgen-tiny-eagle3", "whiflash": "specgen-tiny-whiflash", "prompts": ["tinyworld"]},
    "smollm2-135m-instruct": {"dflash": "smollm2-135m-instruct-dflash-b16", "eagle3": "smollm2-135m-instruct-eagle3",
                              "whiflash": "smollm2-135m-instruct-whiflash", "prompts": ["specbench", "humaneval"],
                              "compare_categories": ["humaneval", "math_reasoning", "mt_bench"]},
}
REAL_WORLD = "smollm2-135m-instruct"


def real_world_ready() -> bool:
    """Whether the real target is prepared here and its DFlash drafter ships in hub_models/."""
    from ..targets import is_prepared

    return is_prepared(REAL_WORLD) and (hub_models_dir() / WORLDS[REAL_WORLD]["dflash"] / "config.json").exists()


def resolve_world(args) -> str | None:
    """Which shipped world the run uses for its defaults: the named packaged target, the tiny world when no target
    is given (``specgen compare`` prefers the real target when it is ready), or None for a user's own target."""
    if args.target in WORLDS:
        return args.target
    if args.target:
        return None
    if getattr(args, "command", None) == "compare" and real_world_ready():
        return REAL_WORLD
    return "tiny"


def apply_world_defaults(args) -> str | None:
    """Fill ``--prompts`` and ``--dtype`` left unset from the world's defaults; returns the world's name."""
    world = None if args.synthetic else resolve_world(args)
    defaults = WORLDS.get(world, {"prompts": ["tinyworld"]})
    if args.prompts is None:
        args.prompts = defaults["prompts"]
        if getattr(args, "command", None) == "compare" and not args.categories:  # a few prompts to read side by side
            args.categories = defaults.get("compare_categories")
    # Fixed DFlash widths run beside the default call in bench; compare shows them only when asked for.
    args.fixed_blocks = getattr(args, "block_sizes", None) is not None
    if not args.fixed_blocks:
        args.block_sizes = [16]  # the block of the other methods that take one (WhiFlash, FLy, trees)
    if args.dtype == "auto":  # by the device, for every world: bf16 on a GPU or a CPU with bf16 units, else fp32
        from ..dtypes import preferred_dtype

        args.dtype = preferred_dtype(args.device)
    return world


@contextmanager
def _flag_errors(flag: str, value):
    """A model that cannot be loaded ends the command with one line naming the flag and the fix, not a traceback
    (a mistyped name otherwise surfaces as transformers' "couldn't connect to huggingface.co")."""
    try:
        yield
    except (OSError, ValueError) as error:
        from ..targets import KNOWN_TARGETS

        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        takes = ["a local model folder", "a Hub id (when the Hub can be reached)"]
        if flag == "--target":
            takes.append(f"a packaged target ({', '.join(KNOWN_TARGETS)}; `specgen prepare` converts it)")
        raise SystemExit(f"{flag} {value}: {detail}\n  {flag} takes {', '.join(takes[:-1])} or {takes[-1]}; leave the "
                         "model flags out for the shipped models, or use --synthetic tiny for random ones") from None


def _load_model(path: str, **kwargs):
    """A causal LM from a folder or Hub id; a path that is plainly local and missing fails at once (transformers would
    first spend about 30 s asking the Hub for it)."""
    from transformers import AutoModelForCausalLM

    from ..loading import plainly_local

    folder = Path(path).expanduser()
    if not folder.is_dir() and plainly_local(path):
        raise FileNotFoundError(f"no model folder at {folder.resolve()}")
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def load_models(args) -> BenchModels:
    from transformers import AutoTokenizer

    from ..loading import load_drafter
    from ..mixin import enable
    from ..targets import resolve_target
    from .models import synthetic_pair

    world_name = apply_world_defaults(args)
    dtype = DTYPES[args.dtype]
    if args.synthetic:
        from ..models.whiflash import WhiFlash

        target, drafter, draft_lm, eagle = synthetic_pair(args.synthetic, dtype=dtype)
        bundle = WhiFlash(ar=eagle, parallel=drafter, router="entropy")
        return BenchModels(target, None, drafter, draft_lm, synthetic=True, names={"target": f"random {args.synthetic}"},
                           eagle3=eagle, whiflash=bundle)
    folders = hub_models_dir()
    world = WORLDS.get(world_name, {})

    def shipped(role: str):
        """The world's folder for a role, if it ships here (a user's own target has no defaults)."""
        path = folders / world[role] if role in world else None
        return path if path is not None and path.exists() else None

    if world_name == "tiny" and shipped("target") is None:
        raise SystemExit(f"The tiny world's models are not in {folders}: pass --target/--drafter/--draft-model, "
                         "or --synthetic tiny for random stand-ins.")
    with _flag_errors("--target", args.target):
        target_path = shipped("target") if world_name == "tiny" else resolve_target(args.target or world_name)
    drafter_path = args.drafter or shipped("dflash")
    draft_path = args.draft_model or shipped("draft_lm")
    eagle_path = getattr(args, "eagle3", None) or shipped("eagle3")
    whiflash_path = getattr(args, "whiflash", None) or shipped("whiflash")

    def load(flag: str, path, loader):
        if not path:
            return None
        with _flag_errors(flag, path):
            return loader(str(path), dtype=dtype).to(args.device).eval()

    target = load("--target", target_path, _load_model)
    with _flag_errors("--target", target_path):
        tokenizer = AutoTokenizer.from_pretrained(target_path)
    drafter = load("--drafter", drafter_path, load_drafter)
    draft_lm = load("--draft-model", draft_path, _load_model)
    eagle = load("--eagle3", eagle_path, load_drafter)
    bundle = load("--whiflash", whiflash_path, load_drafter)
    names = {"target": world_name if world_name and world_name != "tiny" else str(target_path),
             "dflash": str(drafter_path), "draft_lm": str(draft_path), "eagle3": str(eagle_path),
             "whiflash": str(whiflash_path), "dtype": args.dtype}
    return BenchModels(enable(target), tokenizer, drafter, draft_lm, synthetic=False, names=names, eagle3=eagle,
                       whiflash=bundle)


def encode_prompts(models: BenchModels, args) -> tuple[list[torch.Tensor], list[dict]]:
    """Token ids [1, P] per prompt, and the prompt records (category, text, answer)."""
    from .prompt_sets import chat_ids, pick_prompts

    device = models.target.device
    if models.synthetic:
        rng = random.Random(args.seed)
        vocab = models.target.config.vocab_size
        records = [{"id": str(i), "category": "random", "prompt": ""} for i in range(args.num_prompts)]
        ids = [torch.tensor([[rng.randrange(3, vocab - 1) for _ in range(rng.randint(16, 96))]], device=device)
               for _ in records]
        return ids, records
    records = pick_prompts(args.prompts, args.num_prompts, args.seed, getattr(args, "skip_first", 0))
    if args.categories:
        records = [r for r in records if r["category"] in args.categories]
        if not records:
            raise SystemExit(f"no prompt of categories {args.categories} in {args.prompts}")
    ids = [chat_ids(models.tokenizer, r["prompt"], enable_thinking=args.thinking).to(device) for r in records]
    return ids, records


COMPILED_BASELINE = "autoregressive (engine, compiled)"
# transformers' assisted-generation defaults (K = 20, stop below 0.4 confidence), run in our classic mode
ASSISTED_POLICY = {"num_draft_tokens": 20, "draft_confidence_threshold": 0.4}


def compiled_settings(args, longest_prompt: int) -> dict:
    """generate() kwargs that compile our engine's steps, with one cache size for every prompt of the run (so one
    graph per step serves them all, compiled during the warm-up call)."""
    if not getattr(args, "compile", False):
        return {}
    # rows per verify + the slots a drafter writes past them (a DFlash block, an EAGLE-3 tree's rows, MLA candidates)
    top_k, depth, total = args.eagle_tree
    widest = max([2 * b for b in args.block_sizes]
                 + [k + 17 for k in (*args.num_draft_tokens, ASSISTED_POLICY["num_draft_tokens"])]
                 + [total + top_k * depth]
                 + [n + max(args.block_sizes) for n in getattr(args, "dflash_tree_nodes", [])])
    slots = longest_prompt + args.max_new_tokens + widest
    return {"speculative_compile": args.compile, "max_cache_len": -(-slots // CACHE_BUCKET) * CACHE_BUCKET}


def method_bases(args, longest_prompt: int) -> tuple[dict, dict]:
    """generate() kwargs shared by all methods: (stock, ours). Ours add compilation when asked (transformers' own
    methods stay eager: stock generate does not compile on CPU)."""
    stock = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0)
    if args.temperature > 0:
        stock["temperature"] = args.temperature
    return stock, {**stock, **compiled_settings(args, longest_prompt)}


def eagle_tree_kwargs(args) -> dict:
    return dict(zip(("eagle_top_k", "eagle_depth", "eagle_total_tokens"), args.eagle_tree))


def whiflash_kwargs(args, base: dict) -> dict:
    return {**base, "speculative_mode": "whiflash", "block_size": max(args.block_sizes), **eagle_tree_kwargs(args)}


def build_methods(models: BenchModels, args, longest_prompt: int = 0) -> list[tuple[str, dict]]:
    stock, base = method_bases(args, longest_prompt)
    compiled = base != stock
    wanted = set(args.methods)
    # `specgen compare` without --block-sizes shows each method's default call only: no fixed widths or variants
    defaults_only = not getattr(args, "fixed_blocks", True)
    methods = [("autoregressive", stock)]
    if compiled:
        methods.append((COMPILED_BASELINE, {**base, "speculative_mode": "autoregressive"}))
    if models.dflash is not None and "dflash" in wanted:
        # The default call (each round's width chosen by the width policy, copied tokens where a row repeats its text),
        # then the fixed widths beside it.
        methods.append(("dflash", {**base, "assistant_model": models.dflash, "speculative_mode": "dflash"}))
        if not defaults_only:  # the default call without copied tokens (prompt_lookup): the drafter alone
            methods.append(("dflash, drafter alone", {**base, "assistant_model": models.dflash,
                                                      "speculative_mode": "dflash", "prompt_lookup": False}))
        methods += [(f"dflash b{b}", {**base, "assistant_model": models.dflash, "speculative_mode": "dflash",
                                      "block_size": b})
                    for b in ([] if defaults_only else args.block_sizes)]
        block = max(args.block_sizes)
        for n in getattr(args, "dflash_tree_nodes", []):  # each fixed tree, and trees of at most n nodes whose
            # budget (or a plain step) the width policy chooses each round
            tree = {**base, "assistant_model": models.dflash, "speculative_mode": "dflash", "block_size": block,
                    "dflash_tree_nodes": n}
            methods += [(f"dflash b{block} tree {n}", tree),
                        (f"dflash b{block} tree <={n}, adaptive", {**tree, "adaptive_width": True})]
    if models.draft_lm is not None and "classic" in wanted:
        # the default call (each round's number of drafts chosen by the width policy), then fixed numbers
        methods.append(("classic", {**base, "assistant_model": models.draft_lm, "speculative_mode": "classic"}))
        methods += [(f"classic k{k}", {**base, "assistant_model": models.draft_lm, "speculative_mode": "classic",
                                       "num_draft_tokens": k}) for k in args.num_draft_tokens]
        methods.append(("classic k{num_draft_tokens} conf{draft_confidence_threshold}".format(**ASSISTED_POLICY),
                        {**base, "assistant_model": models.draft_lm, "speculative_mode": "classic",
                         **ASSISTED_POLICY}))
    if models.draft_lm is not None and "hf-assisted" in wanted:
        methods.append(("hf assisted", {**stock, "assistant_model": models.draft_lm}))
    if "hf-prompt-lookup" in wanted:
        methods.append(("hf prompt lookup", {**stock, "prompt_lookup_num_tokens": 10}))
    if models.dflash is not None and "hf-dflash" in wanted and args.temperature == 0:
        # transformers' own DFlash path running our drafter (its class answers that path's call signature too)
        methods.append(("hf dflash", {**stock, "assistant_model": models.dflash, "speculation_type": "dflash"}))
    if models.eagle3 is not None and "eagle3" in wanted:
        # the default call (a chain on a CPU, a tree on a GPU; each round's width or node budget, or a plain step,
        # chosen by the width policy; a chain takes copied tokens too), the drafter alone, then the fixed tree
        methods.append(("eagle3", {**base, "assistant_model": models.eagle3, "speculative_mode": "eagle3"}))
        if not defaults_only:
            methods.append(("eagle3, drafter alone", {**base, "assistant_model": models.eagle3,
                                                      "speculative_mode": "eagle3", "prompt_lookup": False}))
            methods.append((f"eagle3 tree {'/'.join(map(str, args.eagle_tree))}",
                            {**base, "assistant_model": models.eagle3, "speculative_mode": "eagle3",
                             **eagle_tree_kwargs(args)}))
    if models.whiflash is not None and "whiflash" in wanted:
        bundle = models.whiflash
        whi = whiflash_kwargs(args, base)
        variants = (("entropy", "entropy", True), ("neural", "neural", True), ("neural, eager catch-up", "neural", False))
        for label, router, lazy in (() if defaults_only else variants):
            if router == "neural" and bundle.neural_router is None:
                continue
            variant = copy.copy(bundle)  # shares the drafters; only the routing settings differ
            variant.router, variant.lazy = router, lazy
            methods.append((f"whiflash {label}", {**whi, "assistant_model": variant}))
        # the default call: plain steps or the router's drafter, each round chosen by the width policy (the router's
        # EAGLE-3 side drafts a chain on a CPU, a tree on a GPU)
        variant = copy.copy(bundle)
        variant.router = "neural" if bundle.neural_router is not None else "entropy"
        methods.append((f"whiflash {variant.router}, default call",
                        {**base, "speculative_mode": "whiflash", "assistant_model": variant}))
    # FLy's default call (the width policy) beside its fixed width
    if models.draft_lm is not None and "fly" in wanted:
        methods.append(("fly (lossy)", {**base, "assistant_model": models.draft_lm, "speculative_mode": "fly"}))
        k = DEFAULT_NUM_DRAFT_TOKENS["fly"]
        methods.append((f"fly k{k} (lossy)", {**base, "assistant_model": models.draft_lm, "speculative_mode": "fly",
                                              "num_draft_tokens": k}))
    if models.dflash is not None and "fly-dflash" in wanted:
        methods.append(("fly over dflash (lossy)", {**base, "assistant_model": models.dflash,
                                                    "speculative_mode": "fly"}))
        methods.append((f"fly over dflash b{max(args.block_sizes)} (lossy)", {
            **base, "assistant_model": models.dflash, "speculative_mode": "fly", "block_size": max(args.block_sizes)}))
    return methods


def fly_sweep_methods(models: BenchModels, args, longest_prompt: int = 0) -> list[tuple[str, dict]]:
    """FLy's ablations (the seed's table) on the tiny world: window W, gate theta, MLA, against exact verification, all
    at one fixed width (15 draft tokens, or the DFlash block), so that each setting meets exact rounds of its width
    (FLy's default call chooses its widths: ``fly`` in ``--methods``)."""
    stock, base = method_bases(args, longest_prompt)
    if models.draft_lm is None:
        if models.dflash is None:
            raise SystemExit("--fly-sweep needs a draft LM or a DFlash drafter (--draft-model / --drafter)")
        # No draft LM (the real target): FLy's gate and window swept over DFlash blocks.
        block = max(args.block_sizes)
        dflash = {**base, "assistant_model": models.dflash, "block_size": block}
        methods = [("autoregressive", stock), (f"dflash b{block} (exact)", {**dflash, "speculative_mode": "dflash"})]
        for label, extra in (("W=6 theta=0.3 (default)", {}), ("W=0", {"fly_window": 0}), ("W=4", {"fly_window": 4}),
                             ("theta=0", {"fly_entropy_threshold": 0.0}),
                             ("theta=0.6", {"fly_entropy_threshold": 0.6}),
                             ("theta=1.0", {"fly_entropy_threshold": 1.0})):
            methods.append((f"fly over dflash b{block} {label}", {**dflash, "speculative_mode": "fly", **extra}))
        return methods
    lm = {**base, "assistant_model": models.draft_lm, "num_draft_tokens": 15}
    methods = [("autoregressive", stock), ("classic k15 (exact)", {**lm, "speculative_mode": "classic"})]
    for label, extra in (("W=0", {"fly_window": 0}), ("W=4", {"fly_window": 4}), ("W=6 (default)", {}),
                         ("W=8", {"fly_window": 8}), ("theta=0", {"fly_entropy_threshold": 0.0}),
                         ("theta=0.6", {"fly_entropy_threshold": 0.6}),
                         ("theta=1.0", {"fly_entropy_threshold": 1.0}), ("W=6 without MLA", {"fly_ngram": False})):
        methods.append((f"fly {label}", {**lm, "speculative_mode": "fly", **extra}))
    if models.dflash is not None:
        block = max(args.block_sizes)
        dflash = {**base, "assistant_model": models.dflash, "block_size": block}
        methods += [(f"dflash b{block} (exact)", {**dflash, "speculative_mode": "dflash"}),
                    (f"fly over dflash b{block}", {**dflash, "speculative_mode": "fly"})]
    return methods


def memory_report(models: BenchModels) -> dict:
    """Parameter memory (MB) of the target and of each drafter configuration (KV caches scale with the call)."""
    def mb(module) -> float:
        return sum(p.numel() * p.element_size() for p in module.parameters()) / 2**20 if module is not None else 0.0

    target = mb(models.target)
    report = {"autoregressive": target}
    for name, module in (("dflash", models.dflash), ("classic", models.draft_lm), ("eagle3", models.eagle3),
                         ("whiflash", models.whiflash)):
        if module is not None:
            report[name] = target + mb(module)
    return report


def _category_thresholds(assistant, records: list[dict]):
    """For a WhiFlash bundle calibrated per category (``specgen calibrate``): use each prompt's category threshold."""
    thresholds = getattr(getattr(assistant, "config", None), "entropy_thresholds", None)
    if not thresholds:
        return None

    def apply(index: int) -> None:
        category = records[index]["category"]
        if category in thresholds:
            assistant.entropy_threshold = thresholds[category]

    return apply


def distinct_ngram_share(sequences: list[list[int]], n: int = 4) -> float:
    """Distinct n-grams / all n-grams over the outputs: low values mean loops, where prompt lookup shines."""
    grams = [tuple(seq[i: i + n]) for seq in sequences for i in range(len(seq) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def _subset(result: MethodResult, rows: list[int]) -> MethodResult:
    sub = MethodResult(result.name)
    sub.decode_seconds = [result.decode_seconds[i] for i in rows]
    sub.decode_tokens = [result.decode_tokens[i] for i in rows]
    sub.acceptance = [result.acceptance[i] for i in rows] if result.acceptance else []
    sub.sequences = [result.sequences[i] for i in rows]
    return sub


def summarize(results: list[MethodResult], records: list[dict], tokenizer, max_new_tokens: int | None = None) -> dict:
    """Per category and overall: tok/s, speedup vs autoregressive, tau (pooled and mean), lossless check, accuracy.

    ``max_new_tokens`` lets accuracy say how many answers were cut before they could finish."""
    from ..training.corpus import check_answer

    categories = sorted({r["category"] for r in records})
    groups = {c: [i for i, r in enumerate(records) if r["category"] == c] for c in categories}
    if len(categories) > 1:
        groups["all"] = list(range(len(records)))
    baseline = results[0]
    compiled_baseline = next((r for r in results if r.name == COMPILED_BASELINE), None)
    report = {}
    for result in results:
        quality = row_quality(result, baseline, records, tokenizer)
        per_group = {}
        for group, rows in groups.items():
            sub, base = _subset(result, rows), _subset(baseline, rows)
            entry = {
                "decode_tokens_per_second": sub.tokens_per_second,
                "speedup": sub.tokens_per_second / base.tokens_per_second,
                "pooled_tau": sub.pooled_tau, "mean_tau": sub.mean_tau,
                "prompts": len(rows), "decode_tokens": sum(sub.decode_tokens),
                "identical_to_autoregressive": sum(sub.sequences[i] == base.sequences[i] for i in range(len(rows))),
            }
            if compiled_baseline is not None:  # the stricter ratio: same engine and compilation, no drafting
                entry["speedup_vs_compiled_ar"] = (
                    sub.tokens_per_second / _subset(compiled_baseline, rows).tokens_per_second)
            answered = [i for i in rows if "answer" in records[i]]
            if answered and tokenizer is not None:
                entry["accuracy"] = statistics.mean(
                    check_answer(records[i], tokenizer.decode(result.sequences[i])) for i in answered)
                base_accuracy = statistics.mean(
                    check_answer(records[i], tokenizer.decode(baseline.sequences[i])) for i in answered)
                # FLy's "recovery": task accuracy relative to the target alone on the same prompts.
                entry["recovery"] = entry["accuracy"] / base_accuracy if base_accuracy else None
                if max_new_tokens is not None:
                    entry["answers_cut"] = sum(len(result.sequences[i]) >= max_new_tokens for i in answered)
                    entry["answers_checked"] = len(answered)
            for measure, by_row in quality.items():
                scored = [by_row[i] for i in rows if i in by_row]
                if scored:
                    entry[measure] = statistics.mean(scored)
            per_group[group] = entry
        verify_seconds = result.time_split.get("verify")
        report[result.name] = {"by_category": per_group, "time_split_seconds": result.time_split,
                               # what one verified row (block token or tree node) costs: the price of a wider verify
                               "verify_ms_per_row": (1e3 * verify_seconds / result.verified_rows
                                                     if verify_seconds and result.verified_rows else None),
                               "distinct_4gram_share": distinct_ngram_share(result.sequences),
                               "switch_cost_share": result.switch_cost_share, **result.counters}
    return report


def row_quality(result: MethodResult, baseline: MethodResult, records: list[dict], tokenizer) -> dict:
    """Per prompt row: HumanEval pass@1 of the answer (problems with tests) and, on Spec-Bench's math questions,
    whether the answer ends on the autoregressive answer's final number (bench/quality.py)."""
    from .quality import final_number_agreement, humaneval_passes

    if tokenizer is None:
        return {}
    decode = lambda seq: tokenizer.decode(seq, skip_special_tokens=True)  # noqa: E731
    passes = {i: humaneval_passes(r, decode(result.sequences[i])) for i, r in enumerate(records) if "entry_point" in r}
    agreement = {i: final_number_agreement(decode(result.sequences[i]), decode(baseline.sequences[i]))
                 for i, r in enumerate(records) if r["category"] == "math_reasoning"}
    return {"humaneval_pass_at_1": passes, "math_final_number_agreement": agreement}


def single_drafter_runs(results: list[MethodResult], block_size: int):
    """(EAGLE-3 run, DFlash run at the block size WhiFlash uses), or None where a run is missing."""
    eagle = next((r for r in results if r.name.startswith("eagle3 tree")), None)  # the tree WhiFlash drafts
    dflash = next((r for r in results if r.name == f"dflash b{block_size}"), None)
    return eagle, dflash


def oracles(results: list[MethodResult], records: list[dict], block_size: int) -> dict | None:
    """WhiFlash's hindsight baselines: the better of EAGLE-3 and DFlash per category and per prompt, picked from the
    single-drafter runs (decode tok/s and tau of the pick), and per step, decoded with the oracle router
    (bench/oracle.py) when it ran."""
    eagle, dflash = single_drafter_runs(results, block_size)
    if eagle is None or dflash is None:
        return None
    baseline = results[0]
    categories = sorted({r["category"] for r in records})
    rows = lambda c: [i for i, r in enumerate(records) if r["category"] == c]  # noqa: E731

    def pooled(picks: list[tuple[MethodResult, int]]) -> dict:
        tokens = sum(m.decode_tokens[i] for m, i in picks)
        seconds = sum(m.decode_seconds[i] for m, i in picks)
        base = sum(baseline.decode_seconds[i] for _, i in picks) / max(sum(baseline.decode_tokens[i] for _, i in picks), 1)
        committed = sum(sum(m.acceptance[i]) for m, i in picks)
        n_rounds = sum(len(m.acceptance[i]) for m, i in picks)
        return {"decode_tokens_per_second": tokens / seconds, "speedup": (tokens / seconds) * base,
                "pooled_tau": committed / max(n_rounds, 1)}

    per_category, per_prompt = [], []
    for c in categories:
        best = max((eagle, dflash), key=lambda m: _subset(m, rows(c)).tokens_per_second)
        per_category += [(best, i) for i in rows(c)]
        per_prompt += [(min((eagle, dflash), key=lambda m: m.decode_seconds[i] / max(m.decode_tokens[i], 1)), i)
                       for i in rows(c)]
    found = {"oracle per category": pooled(per_category), "oracle per prompt": pooled(per_prompt)}
    step = next((r for r in results if r.name.startswith("whiflash oracle per step")), None)
    if step is not None:
        found["oracle per step"] = pooled([(step, i) for i in range(len(records))])
    return found


MIN_REPEATS = 3  # a speed is the median of at least this many timings
MIN_DECODE_TOKENS = 256  # baseline tokens per table row below which a speed ratio is mostly noise


def reliability_notes(report: dict, repeats: int) -> list[str]:
    """Why a run's figures cannot be trusted (empty when they can): too few repeats, rows with too few tokens,
    accuracy measured on answers that were all cut before they could finish."""
    notes = []
    if repeats < MIN_REPEATS:
        notes.append(f"{repeats} repeat(s): each speed is one timing, not a median of {MIN_REPEATS} (--repeats)")
    baseline = next(iter(report.values()))["by_category"]
    short = [group for group, entry in baseline.items() if entry.get("decode_tokens", 0) < MIN_DECODE_TOKENS]
    if short:
        notes.append(f"fewer than {MIN_DECODE_TOKENS} decoded tokens in {', '.join(short)}: too few to time "
                     "(--num-prompts, --max-new-tokens)")
    cut = [group for group, entry in baseline.items() if _all_answers_cut(entry)]
    if cut:
        notes.append(f"every answer in {', '.join(cut)} hit --max-new-tokens before it could finish: its accuracy "
                     "means nothing")
    return notes


def format_table(report: dict) -> str:
    compiled = has_compiled_baseline(report)
    header = ["method", "category", "decode tok/s", "speedup", *(["vs compiled AR"] if compiled else []),
              "tau pooled", "tau mean", "same as AR", "accuracy", "recovery", "quality"]
    rows = []
    for name, method in report.items():
        for group, e in method["by_category"].items():
            versus = [f"{e['speedup_vs_compiled_ar']:.2f}x"] if compiled else []
            rows.append([name, group, f"{e['decode_tokens_per_second']:.1f}", f"{e['speedup']:.2f}x", *versus,
                         f"{e['pooled_tau']:.2f}" if e["pooled_tau"] else "-",
                         f"{e['mean_tau']:.2f}" if e["mean_tau"] else "-",
                         f"{e['identical_to_autoregressive']}/{e['prompts']}",
                         _accuracy_cell(e),
                         f"{100 * e['recovery']:.1f}%" if e.get("recovery") is not None else "-",
                         _quality_cell(e)])
    return markdown_table(rows, header)


def _all_answers_cut(entry: dict) -> bool:
    """Whether every checked answer of a table row hit --max-new-tokens before it could finish."""
    return bool(entry.get("answers_checked")) and entry.get("answers_cut") == entry["answers_checked"]


def _accuracy_cell(entry: dict) -> str:
    if "accuracy" not in entry:
        return "-"
    if _all_answers_cut(entry):
        return "cut"  # no answer could finish: an accuracy of 0% would be noise, not a finding
    return f"{100 * entry['accuracy']:.0f}%"


def _quality_cell(entry: dict) -> str:
    """HumanEval pass@1 and agreement with the autoregressive answer's final number on math, where measured."""
    cells = []
    if "humaneval_pass_at_1" in entry:
        cells.append(f"pass@1 {100 * entry['humaneval_pass_at_1']:.0f}%")
    if "math_final_number_agreement" in entry:
        cells.append(f"same answer {100 * entry['math_final_number_agreement']:.0f}%")
    return ", ".join(cells) or "-"


def step_oracle(models: BenchModels, args, prompts, results: list[MethodResult], longest: int):
    """WhiFlash's per-step hindsight oracle (bench/oracle.py), when WhiFlash, EAGLE-3 and DFlash all ran greedily."""
    from .oracle import accepted_length_tables, step_oracle_method

    eagle, dflash = single_drafter_runs(results, max(args.block_sizes))
    if (models.whiflash is None or "whiflash" not in args.methods or eagle is None or dflash is None
            or args.temperature > 0 or getattr(args, "fly_sweep", False)):
        return None
    pad_id = getattr(models.tokenizer, "pad_token_id", None) or 0  # only pads the drafters' lookahead
    top_k, depth, _ = args.eagle_tree
    tables = accepted_length_tables(models.target, models.whiflash, prompts, results[0].sequences, top_k, depth,
                                    pad_id)
    return step_oracle_method(models.whiflash, whiflash_kwargs(args, method_bases(args, longest)[1]), tables, eagle,
                              dflash)


def describe_run(models, args) -> str:
    """The first lines of bench / compare: what runs, where, in which dtype, and on which kind of CPU."""
    from ..dtypes import cpu_runs_bf16_fast

    machine = machine_description(args.device)
    if str(args.device).startswith("cpu") and not cpu_runs_bf16_fast():
        machine += ": bf16 is emulated, fp32 is the fast choice"
    lines = [f"target: {models.names.get('target')} | dtype: {args.dtype} | device: {args.device} | "
             f"machine: {machine} | torch threads: {torch.get_num_threads()}"]
    if getattr(args, "command", None) == "compare":
        lines.append("Each method runs its default call: every round verifies the width that pays (WhiFlash: with "
                     "the drafter that pays), from the target's measured costs and the drafter's running "
                     "acceptance (on a CPU an EAGLE-3 chain, WhiFlash's included, also stops drafting when unsure), "
                     "and falls back to plain steps when no draft pays, so a weak drafter runs at about the speed "
                     "of stock generate; where an answer repeats its prompt or itself, a round verifies the copied "
                     "tokens (prompt_lookup), alone where copies pay better than the drafter. The SmolLM2 drafters "
                     "shipped today are young (on held-out prompts DFlash commits about 1.8 tokens a round, EAGLE-3's "
                     "tree about 3.4; the README says what is being trained, docs/width-policy.md how the width is "
                     "chosen); the tiny world's DFlash drafter "
                     "(`--target tiny`, about 4 tokens a round) shows what a trained one gives. In bf16 a "
                     "multi-token verify can round a near-tie differently from stock generate; --dtype fp32 is exact.")
    return "\n".join(lines) + "\n"


def run_bench(args, *, show_texts: bool) -> dict:
    from tqdm.auto import tqdm

    if args.threads:
        torch.set_num_threads(args.threads)
    if getattr(args, "compile", False):
        # Every method compiles the same step functions with its own shapes (block widths, taps), and dynamo keeps
        # graphs per function: the compiled baseline (stock generate's own compile) needs the raised limit too.
        allow_a_graph_per_decoder()
    models = load_models(args)
    print(describe_run(models, args))
    if models.synthetic:
        print(f"NOTE: random-weight '{args.synthetic}' models built on the fly: this shows the mechanics and the "
              "engine's costs, not speedups (a random drafter accepts almost nothing).\n")
    prompts, records = encode_prompts(models, args)
    longest = max(p.shape[1] for p in prompts)
    methods = (fly_sweep_methods(models, args, longest) if getattr(args, "fly_sweep", False)
               else build_methods(models, args, longest))
    with tqdm(total=len(methods) * len(prompts) * args.repeats, desc="decoding", unit="decode") as bar:
        # the methods take turns within every pass (stock generate's time moves with the load as theirs does)
        results = run_methods_in_turns(models.target, prompts, [
            (name, kwargs, _category_thresholds(kwargs.get("assistant_model"), records)) for name, kwargs in methods],
            args.repeats, bar)
        oracle = step_oracle(models, args, prompts, results, longest)  # built from the others' rounds: after them
        if oracle is not None:
            name, kwargs, before_prompt = oracle
            bar.total += len(prompts) * args.repeats
            results.append(run_method(models.target, prompts, kwargs, args.repeats, name, bar,
                                      before_prompt=before_prompt))
    report = summarize(results, records, models.tokenizer, args.max_new_tokens)
    notes = reliability_notes(report, args.repeats)
    print(format_table(report))
    for note in notes if not show_texts else []:  # `specgen compare` is a one-prompt look, not a measurement
        print(f"UNRELIABLE: {note}")
    hindsight = oracles(results, records, max(args.block_sizes))
    if hindsight:
        print("\nhindsight oracles (best drafter per category, per prompt, per step; all prompts):")
        print(markdown_table([[name, f"{o['decode_tokens_per_second']:.1f}", f"{o['speedup']:.2f}x",
                               f"{o['pooled_tau']:.2f}"] for name, o in hindsight.items()],
                             ["oracle", "decode tok/s", "speedup", "tau pooled"]))
    switching = [[name, f"{100 * m['switch_cost_share']:.1f}%", str(m.get("switches", 0))]
                 for name, m in report.items() if m.get("switch_cost_share") is not None]
    if switching:
        print("\nWhiFlash switching cost (extra drafting time of a switch round / mean round latency):")
        print(markdown_table(switching, ["method", "switch cost", "switches"]))
    split_rows = []
    for name, method in report.items():
        split = method["time_split_seconds"]
        total = sum(split.values()) if split else 0
        if total:
            per_row = method.get("verify_ms_per_row")
            split_rows.append([name] + [f"{100 * split[k] / total:.0f}%" for k in ("draft", "verify", "other")]
                              + [f"{per_row:.2f}" if per_row else "-"])
    if split_rows:
        print("\ntime per round (our engine):")
        print(markdown_table(split_rows, ["method", "draft", "verify", "other", "verify ms per row"]))
    routes = [describe_routes(costs_of(models.target).narrow_rows)]
    if models.draft_lm is not None:  # a draft LM times its own (SpeculativeDecoder._draft_model_routes)
        routes.append(describe_routes(costs_of(models.draft_lm).narrow_rows, "the draft LM's linears"))
    if any(routes):
        print("\n" + "\n".join(line for line in routes if line))
    print(f"\ndistinct 4-grams in the autoregressive outputs: {report['autoregressive']['distinct_4gram_share']:.2f}")
    lossy = [[name, str(m["initial_mismatches"]), str(m["rescued_tokens"]), str(m["draft_forwards"])]
             for name, m in report.items() if m.get("rescued_tokens") or name.startswith("fly")]
    if lossy:
        print("\nFLy (lossy) counters, all prompts:")
        print(markdown_table(lossy, ["method", "draft tokens refused by the target", "rescued by FLy",
                                     "draft forwards"]))
    full = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "handler"},
            "models": models.names, "machine": machine_description(args.device), "synthetic": models.synthetic,
            "methods": report, "oracles": hindsight,
            "memory_mb": memory_report(models), "unreliable": notes}
    if models.dflash is not None and not show_texts:
        full["tap_cost"] = tap_cost(models.target, models.dflash.target_layer_ids, max(args.block_sizes))
    if show_texts:
        print_side_by_side(results, records, models.tokenizer, args.dtype)
    return full


def run_batch_bench(args) -> dict:
    """``--batch-sizes``: throughput of every batching method against batch size (see batch_curve.py); prints the
    table and writes batch_curve.json / batch_curve.png under ``--out``."""
    from tqdm.auto import tqdm

    from .batch_curve import batching_methods, curve_table, plot_curve, run_batch_curve

    if args.threads:
        torch.set_num_threads(args.threads)
    models = load_models(args)
    prompts, _ = encode_prompts(models, args)
    sizes = sorted(set(args.batch_sizes))
    # A compiled cache must hold the longest prompt of any batch (left padding makes every row that long).
    methods = batching_methods(build_methods(models, args, max(p.shape[1] for p in prompts)))
    with tqdm(total=len(methods) * len(sizes), desc="batch curve", unit="point") as bar:
        curve = run_batch_curve(models.target, models.tokenizer, prompts, methods, sizes, args.repeats, bar)
    print(curve_table(curve, sizes))
    report = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "handler"},
              "models": models.names, "machine": machine_description(args.device), "synthetic": models.synthetic,
              "batch_curve": {name: {str(size): point for size, point in points.items()}
                              for name, points in curve.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batch_curve.json").write_text(json.dumps(report, indent=2, default=str))
    written = [args.out / "batch_curve.json"]
    try:
        target_name = Path(str(models.names.get("target", ""))).name
        plot_curve(curve, sizes, args.out / "batch_curve.png",
                   f"{target_name}, {args.dtype}, {args.max_new_tokens} new tokens, {len(prompts[:max(sizes)])} prompts")
        written.append(args.out / "batch_curve.png")
    except ImportError:
        print("install matplotlib for the chart: pip install 'hf-specgen[bench]'")
    print(f"\nwrote {', '.join(map(str, written))}")
    return report


def print_side_by_side(results: list[MethodResult], records: list[dict], tokenizer, dtype: str = "fp32") -> None:
    baseline = results[0]
    # Lossless methods are exact in fp32; in bf16 a 16-token verify rounds differently from 1-token steps, so a text
    # may part from the baseline where two tokens were nearly tied.
    differs = "  [differs from autoregressive" + ("]" if dtype == "fp32" else
                                                  f": a {dtype} multi-token verify can round a near-tie "
                                                  "differently; --dtype fp32 is exact]")
    for i, record in enumerate(records):
        print(f"\n=== prompt {i + 1} ({record['category']}) " + "=" * 40)
        if tokenizer is not None:
            print(record["prompt"][:300])
        for result in results:
            seq = result.sequences[i]
            text = tokenizer.decode(seq) if tokenizer is not None else str(seq[:24])
            same = "" if result is baseline else ("  [identical to autoregressive]" if seq == baseline.sequences[i]
                                                  else differs)
            tau = ""
            if result.acceptance:
                tau = f", tau {sum(result.acceptance[i]) / len(result.acceptance[i]):.2f}"
            tps = result.decode_tokens[i] / max(result.decode_seconds[i], 1e-9)
            print(f"--- {result.name} ({tps:.0f} tok/s{tau}){same}")
            if result is baseline or seq != baseline.sequences[i]:
                print(text[:600])


def save_report(report: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2, default=str))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"\nwrote {out_dir / 'results.json'} (install matplotlib for the chart: pip install 'hf-specgen[bench]')")
        return
    methods = [m for m in report["methods"] if m != "autoregressive"]
    groups = list(next(iter(report["methods"].values()))["by_category"])
    fig, axes = plt.subplots(1, 2, figsize=(min(16, max(8, 0.6 * len(groups) * len(methods) / 2 + 4)), 4.5))
    width = 0.8 / max(len(methods), 1)
    for j, name in enumerate(methods):
        cats = report["methods"][name]["by_category"]
        xs = [i + j * width for i in range(len(groups))]
        color = plt.cm.tab20(j % 20)  # one colour per method (the default cycle repeats after ten)
        axes[0].bar(xs, [cats[g]["speedup"] for g in groups], width, label=name, color=color)
        axes[1].bar(xs, [cats[g]["pooled_tau"] or 0 for g in groups], width, label=name, color=color)
    for ax, label in zip(axes, ("decode speedup vs autoregressive", "tau (tokens per verify round)")):
        ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(groups))], groups)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    axes[0].axhline(1.0, color="black", lw=0.8)
    axes[1].legend(fontsize=7)
    target_name = Path(str(report["models"].get("target", ""))).name
    settings = report.get("settings", {})
    fig.suptitle(("TOO SHORT TO TRUST: " if report.get("unreliable") else "")
                 + ("random-weight stand-ins" if report["synthetic"] else
                    f"{target_name}, {report['models'].get('dtype', settings.get('dtype', ''))}, "
                    f"{settings.get('max_new_tokens', '?')} new tokens, {settings.get('repeats', '?')} repeats"))
    fig.tight_layout()
    fig.savefig(out_dir / "speedup.png", dpi=120)
    plt.close(fig)
    written = ["results.json", "speedup.png"]
    if _plot_recovery(report, out_dir / "recovery.png", plt):
        written.append("recovery.png")
    if _plot_tree_budgets(report, out_dir / "tree_budgets.png", plt):
        written.append("tree_budgets.png")
    print(f"\nwrote {', '.join(str(out_dir / name) for name in written)}")


def _plot_recovery(report: dict, path: Path, plt) -> bool:
    """Speedup against accuracy recovery (math prompts), one point per method: FLy's trade-off at a glance."""
    points, measure = [], "accuracy recovery on math (%)"
    for name, method in report["methods"].items():
        entry = method["by_category"].get("math") or method["by_category"].get("all") or {}
        if entry.get("recovery") is not None:
            points.append((name, entry["speedup"], 100 * entry["recovery"]))
        elif "math_final_number_agreement" in entry:  # a real target: same final answer as the target alone
            measure = "same final number as the target on math (%)"
            points.append((name, entry["speedup"], 100 * entry["math_final_number_agreement"]))
    if len(points) < 2:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, speedup, recovery in points:
        ax.scatter(speedup, recovery, color="tab:red" if name.startswith("fly") else "tab:blue")
        ax.annotate(name, (speedup, recovery), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(99, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("decode speedup vs autoregressive")
    ax.set_ylabel(measure)
    ax.set_title("exact (blue) vs FLy (red, lossy)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _plot_tree_budgets(report: dict, path: Path, plt) -> bool:
    """DDTree-style DFlash trees: tau and decode speedup against the node budget (fixed, and adaptive: at most that
    budget), the block's chain as the line to beat (all prompts)."""
    import re

    points, adaptive, chain = [], [], None
    for name, method in report["methods"].items():
        entry = method["by_category"].get("all") or next(iter(method["by_category"].values()))
        match = re.fullmatch(r"dflash b(\d+) tree (\d+)", name)
        capped = re.fullmatch(r"dflash b(\d+) tree <=(\d+), adaptive", name)
        if match:
            points.append((int(match.group(2)), entry["pooled_tau"] or 0, entry["speedup"]))
        elif capped:
            adaptive.append((int(capped.group(2)), entry["pooled_tau"] or 0, entry["speedup"]))
        elif re.fullmatch(r"dflash b\d+", name):
            chain = (entry["pooled_tau"] or 0, entry["speedup"])  # the last (largest) block size listed
    if not points:
        return False
    points.sort()
    adaptive.sort()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, column, label in ((axes[0], 1, "tau (tokens per verify round)"), (axes[1], 2, "decode speedup vs stock")):
        ax.plot([p[0] for p in points], [p[column] for p in points], marker="o", label="tree")
        if adaptive:
            ax.plot([p[0] for p in adaptive], [p[column] for p in adaptive], marker="s",
                    label="adaptive (budget at most)")
        if chain is not None:
            ax.axhline(chain[column - 1], color="grey", ls="--", label="block chain")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree nodes per round (budget)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
