"""The scaling study of issue 26 as tables and a plot: offline tau of DFlash drafters trained for the same steps on
more and more answers (``scripts/gpu_session.sh scaling``, which writes ``log_<shards>.json`` and ``tau_<shards>.md``
per run into one folder), and, where the folder has a ``compute.json``, offline tau against the training tokens a
drafter has seen in all (its runs, each continuing the last: ``{"points": [{"label", "tokens_seen", "minutes",
"offline_tau", "command"}]}``, its numbers copied from the runs' logs and scripts/offline_tau.py; a point's optional
``"drafter"`` (default "DFlash") puts it on that drafter's own curve, since each trainer counts its tokens its way).

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


def read_compute(folder: Path) -> list[dict]:
    """The compute curve's points in order of training tokens, or [] without a compute.json."""
    path = folder / "compute.json"
    if not path.exists():
        return []
    points = json.loads(path.read_text())["points"]
    for point in points:
        missing = {"label", "tokens_seen", "minutes", "offline_tau", "command"} - set(point)
        if missing:
            raise ValueError(f"{path}: point {point.get('label', '?')!r} lacks {sorted(missing)}")
        point.setdefault("drafter", "DFlash")
    return sorted(points, key=lambda p: p["tokens_seen"])


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
    compute = read_compute(args.folder)
    if compute:
        print("\n| drafter | run | training tokens seen | training minutes | offline tau (shards 54-55) |")
        print("|---|---|---|---|---|")
        for point in compute:
            print(f"| {point['drafter']} | {point['label']} | {point['tokens_seen'] / 1e6:.1f}M | "
                  f"{point['minutes']:.1f} | {point['offline_tau']:.2f} |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one tau scale from 1 (no draft accepted) for both panels, so that a flat curve looks flat
    fig, axes = plt.subplots(1, 2 if compute else 1, figsize=(10 if compute else 5, 3.5), squeeze=False,
                             sharey=True)
    top = max([r["offline_tau"] for r in runs] + [p["offline_tau"] for p in compute])
    ax = axes[0][0]
    ax.set_ylim(1.0, top + 0.3)
    ax.plot([r["answers"] for r in runs], [r["offline_tau"] for r in runs], marker="o")
    ax.set_xscale("log")
    ax.set_xticks([r["answers"] for r in runs], [f"{r['answers'] / 1000:.1f}k" for r in runs])
    ax.minorticks_off()
    ax.set_xlabel(f"answers trained on ({runs[0]['steps']} steps each)")
    ax.set_ylabel("offline tau, held-out answers")
    ax.set_title("DFlash for SmolLM2-135M: data")
    ax.grid(True, alpha=0.3)
    if compute:
        ax = axes[0][1]
        for drafter in dict.fromkeys(p["drafter"] for p in compute):  # one curve per drafter
            points = [p for p in compute if p["drafter"] == drafter]
            ax.plot([p["tokens_seen"] for p in points], [p["offline_tau"] for p in points], marker="o", label=drafter)
        for point in compute:  # the curve's points named by their training minutes (the table names the runs)
            ax.annotate(f"{point['minutes']:.1f} min", (point["tokens_seen"], point["offline_tau"]), fontsize=8,
                        textcoords="offset points", xytext=(-10, 8))
        ax.set_xscale("log")
        ax.set_xlabel("training tokens seen in all (as each trainer counts them)")
        ax.set_title("SmolLM2-135M drafters: training (H100)")
        ax.legend(loc="lower right")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.folder / "scaling.png", dpi=120)
    print(f"wrote {args.folder / 'scaling.png'}")


if __name__ == "__main__":
    main()
