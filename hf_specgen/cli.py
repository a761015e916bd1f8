"""``specgen``: side-by-side comparison and benchmarks from the command line."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def _models(args):
    from .bench.models import load_pair, synthetic_pair

    if args.target:
        if not args.drafter:
            raise SystemExit("--target needs --drafter (a DFlash drafter folder or Hub id).")
        return load_pair(args.target, args.drafter, DTYPES[args.dtype], args.device), False
    return synthetic_pair(args.synthetic, dtype=DTYPES[args.dtype]), True


def _prompts(target, args) -> list[torch.Tensor]:
    rng = random.Random(args.seed)
    vocab = target.config.vocab_size
    lengths = [rng.randint(16, 96) for _ in range(args.num_prompts)]
    return [torch.tensor([[rng.randrange(3, vocab - 1) for _ in range(n)]], device=target.device) for n in lengths]


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _run(args, *, show_texts: bool) -> dict:
    from tqdm.auto import tqdm

    from .bench.harness import run_method, tap_cost

    if args.threads:
        torch.set_num_threads(args.threads)
    (target, drafter), synthetic = _models(args)
    if synthetic:
        print(f"NOTE: random-weight '{args.synthetic}' target and drafter built on the fly (no trained models yet). "
              "The drafter accepts almost nothing, so this shows the mechanics and the engine's costs, not speedups.\n")
    prompts = _prompts(target, args)
    base = dict(max_new_tokens=args.max_new_tokens, do_sample=False)
    methods = [("autoregressive", base)] + [
        (f"dflash b{b}", {**base, "assistant_model": drafter, "speculative_mode": "dflash", "block_size": b})
        for b in args.block_sizes
    ]
    results = []
    with tqdm(total=len(methods) * len(prompts), desc="decoding", unit="prompt") as bar:
        for name, kwargs in methods:
            results.append(run_method(target, prompts, kwargs, args.repeats, name, bar))
    baseline = results[0]
    rows, report = [], {"settings": vars(args).copy(), "synthetic": synthetic, "methods": {}}
    for res in results:
        speedup = res.tokens_per_second / baseline.tokens_per_second
        same = sum(a == b for a, b in zip(res.sequences, baseline.sequences))
        split = res.time_split
        total = sum(split.values()) if split else 0.0
        shares = "/".join(f"{100 * split[k] / total:.0f}" for k in ("draft", "verify", "other")) if total else "-"
        rows.append([res.name, f"{res.tokens_per_second:.1f}", f"{speedup:.2f}x",
                     f"{res.pooled_tau:.2f}" if res.pooled_tau else "-", f"{res.mean_tau:.2f}" if res.mean_tau else "-",
                     shares, f"{same}/{len(prompts)}"])
        report["methods"][res.name] = {
            "decode_tokens_per_second": res.tokens_per_second, "speedup": speedup, "pooled_tau": res.pooled_tau,
            "mean_tau": res.mean_tau, "time_split_seconds": split, "prompts_identical_to_autoregressive": same,
            "decode_seconds": res.decode_seconds, "decode_tokens": res.decode_tokens,
        }
    print(_table(rows, ["method", "decode tok/s", "speedup", "tau (pooled)", "tau (mean)", "draft/verify/other %",
                        "prompts with identical tokens"]))
    if synthetic and args.dtype != "fp32":
        print("(in bf16 a multi-token verify rounds differently from 1-token steps; random weights have many near-ties, "
              "so outputs can differ there. --dtype fp32 gives identical tokens.)")
    if drafter.target_layer_ids:
        taps = tap_cost(target, drafter.target_layer_ids, max(args.block_sizes))
        report["tap_cost"] = taps
        print(f"\nhidden-state capture: verify of {max(args.block_sizes)} tokens {taps['verify_ms']:.2f} ms, "
              f"with taps {taps['verify_with_taps_ms']:.2f} ms ({100 * taps['tap_overhead']:+.1f}%)")
    if show_texts:
        print("\nfirst prompt, new tokens (ids; synthetic models have no tokenizer):" if synthetic else "")
        for res in results:
            print(f"  {res.name:>16}: {res.sequences[0][:24]}{' ...' if len(res.sequences[0]) > 24 else ''}")
    return report


def _save(report: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2, default=str))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"\nwrote {out_dir / 'results.json'} (install matplotlib for the chart: pip install 'hf-specgen[bench]')")
        return
    names = list(report["methods"])
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.5))
    speedups = [report["methods"][n]["speedup"] for n in names]
    ax.bar(names, speedups, color=["grey"] + ["tab:blue"] * (len(names) - 1))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("decode speedup vs autoregressive")
    ax.set_title("synthetic random-weight models" if report["synthetic"] else "decode speedup")
    for i, s in enumerate(speedups):
        ax.text(i, s, f"{s:.2f}x", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(out_dir / "speedup.png", dpi=120)
    print(f"\nwrote {out_dir / 'results.json'} and {out_dir / 'speedup.png'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="specgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("compare", "quick side-by-side: autoregressive vs dflash on a few prompts"),
                            ("bench", "benchmark: decode speed, tau and time split, saved as JSON + PNG")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--target", help="target model folder or Hub id (default: random synthetic models)")
        p.add_argument("--drafter", help="DFlash drafter folder or Hub id")
        p.add_argument("--synthetic", default="small", choices=["tiny", "small"], help="size of the random stand-ins")
        p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
        p.add_argument("--device", default="cpu")
        p.add_argument("--block-sizes", type=int, nargs="+", default=[8, 16] if name == "bench" else [16])
        p.add_argument("--max-new-tokens", type=int, default=128 if name == "bench" else 64)
        p.add_argument("--num-prompts", type=int, default=8 if name == "bench" else 3)
        p.add_argument("--repeats", type=int, default=3 if name == "bench" else 1)
        p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
        p.add_argument("--seed", type=int, default=0)
        if name == "bench":
            p.add_argument("--out", type=Path, default=Path("bench_results"))
    _add_training_commands(sub)
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        args.handler(args)
        return 0
    report = _run(args, show_texts=args.command == "compare")
    if args.command == "bench":
        _save(report, args.out)
    return 0


def _add_training_commands(sub) -> None:
    """``specgen data ...`` and ``specgen train ...``; their modules are imported only when used."""
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

    regen = data_sub.add_parser("regenerate", help="replace responses with the target's own (drafter training data)")
    from .training import regenerate

    regenerate.add_arguments(regen)
    regen.set_defaults(handler=lambda a: regenerate.regenerate(a))

    train = sub.add_parser("train", help="train a target LM, a draft LM or a DFlash drafter")
    train_sub = train.add_subparsers(dest="train_command", required=True)
    from .training import dflash_trainer, lm

    lm_parser = train_sub.add_parser("lm", help="pretrain a Qwen3-style LM, or distill a draft LM (--chat-data)")
    lm.add_arguments(lm_parser)
    lm_parser.set_defaults(handler=lambda a: lm.train_lm(a))
    dflash_parser = train_sub.add_parser("dflash", help="train a DFlash drafter for a target (z-lab format)")
    dflash_trainer.add_arguments(dflash_parser)
    dflash_parser.set_defaults(handler=lambda a: dflash_trainer.train_dflash(a))


def _data_corpus(args) -> None:
    from .training.corpus import build_corpus

    stats = build_corpus(args.out, args.seed, args.max_code_files)
    print(json.dumps(stats["records"], indent=2))


def _data_tokenizer(args) -> None:
    from .training.corpus import iter_pretraining_text, read_jsonl
    from .training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(iter_pretraining_text(read_jsonl(Path(args.corpus) / "pretrain.jsonl")), args.out,
                                vocab_size=args.vocab_size)
    print(f"tokenizer with {len(tokenizer)} tokens written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
