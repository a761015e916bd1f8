"""The scaling study of issue 26 as a table and a plot: offline tau of DFlash drafters trained for the same steps on
more and more answers (``scripts/gpu_session.sh scaling``, which writes ``log_<shards>.json`` and ``tau_<shards>.md``
per run into one folder).

    python scripts/scaling_report.py docs/benchmarks/scaling   # prints the Markdown table, writes scaling.png there
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def read_runs(folder: Path) -> list[dict]:
    """One record per run: answers trained on, steps, tokens seen, minutes, offline tau on the held-out shards."""
    runs = []
    for log_path in sorted(folder.glob("log_*.json"), key=lambda p: int(p.stem.split("_")[1])):
        shards = int(log_path.stem.split("_")[1])
        log = json.loads(log_path.read_text())
        tau_path = folder / f"tau_{shards}.md"
        # offline_tau.py prints "| dflash FOLDER | TAU | N blocks |"
        match = re.search(r"^\| dflash \S+ \| ([0-9.]+) \|", tau_path.read_text(), re.M) if tau_path.exists() else None
        if match is None:
            raise ValueError(f"{tau_path}: no offline tau row; run scripts/offline_tau.py on that run's model")
        runs.append({"shards": shards, "answers": log["train_sequences"], "steps": log["steps"],
                     "tokens_seen": log["tokens_seen"], "minutes": log["train_minutes"],
                     "device": log.get("device", "?"), "offline_tau": float(match.group(1))})
    if not runs:
        raise ValueError(f"{folder} holds no log_<shards>.json: copy the scaling stage's files there")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    runs = read_runs(args.folder)
    print("| answers trained on | steps | tokens seen | minutes | offline tau (shards 54-55) |")
    print("|---|---|---|---|---|")
    for run in runs:
        print(f"| {run['answers']:,} | {run['steps']} | {run['tokens_seen'] / 1e6:.1f}M | {run['minutes']:.1f} | "
              f"{run['offline_tau']:.2f} |")
    print(f"device: {runs[0]['device']}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["answers"] for r in runs], [r["offline_tau"] for r in runs], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("answers trained on (same steps each)")
    ax.set_ylabel("offline tau, held-out answers")
    ax.set_title("DFlash drafter for SmolLM2-135M: data scaling")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.folder / "scaling.png", dpi=120)
    print(f"wrote {args.folder / 'scaling.png'}")


if __name__ == "__main__":
    main()
