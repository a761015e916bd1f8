"""Refresh the decoding-results tables of the real target's cards from a new benchmark run.

`scripts/build_smollm2.sh` writes the cards from its run folder (training logs, commands, benchmark). When only the
engine changed, a new `specgen bench` run is all there is to redo: this replaces each card's table (from its
"bf16 on a <machine>, greedy, prefill excluded" line through the command block after it) with the same table built
from the new results, and copies the results and plot into docs/benchmarks/smollm2/ (whose commands.txt then names
this run's command).

    python scripts/refresh_card_tables.py BENCH_OUT_DIR "specgen bench ... (the command that made it)"
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from hf_specgen.training.export import bench_table

CARDS = {  # card folder -> the methods its table shows (as export_real writes them)
    "smollm2-135m-instruct-dflash-b16": ("dflash", "hf dflash"),
    "smollm2-135m-instruct-eagle3": ("eagle3",),
    "smollm2-135m-instruct-whiflash": ("whiflash", "eagle3", "dflash"),
}
TABLE = re.compile(r"^\S+ on a [^\n]*?, greedy, prefill excluded.*?\n```\n.*?\n```", re.S | re.M)


def main(bench_dir: str, command: str) -> None:
    root = Path(__file__).resolve().parent.parent
    bench = json.loads((Path(bench_dir) / "results.json").read_text())
    bench["command"] = command
    for folder, prefixes in CARDS.items():
        card = root / "hub_models" / folder / "README.md"
        text = card.read_text()
        if len(TABLE.findall(text)) != 1:
            raise SystemExit(f"{card}: expected one benchmark table to replace")
        card.write_text(TABLE.sub(lambda _: bench_table(bench, prefixes), text))
        print(f"refreshed {card}")
    docs = root / "docs" / "benchmarks" / "smollm2"
    for name in ("results.json", "speedup.png"):
        shutil.copy(Path(bench_dir) / name, docs / name)
    # the build's commands stay; its bench line becomes this run's
    lines = (docs / "commands.txt").read_text().splitlines()
    refreshed = f"bench\t{command}  # refreshed after an engine change: scripts/refresh_card_tables.py"
    (docs / "commands.txt").write_text("\n".join(refreshed if line.startswith("bench\t") else line
                                                for line in lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
