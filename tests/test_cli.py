"""The README's main job and the benchmark command, on the tiny synthetic models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hf_specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_compare_prints_side_by_side(capsys):
    assert main(["compare", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "2", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "random-weight" in out  # clearly labelled until trained models ship
    assert "| autoregressive |" in out and "| dflash b16" in out
    assert "2/2" in out  # fp32: identical tokens on every prompt


def test_bench_writes_json_and_chart(tmp_path):
    assert main(["bench", "--synthetic", "tiny", "--dtype", "fp32", "--num-prompts", "2", "--max-new-tokens", "12",
                 "--repeats", "2", "--block-sizes", "4", "8", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    assert set(report["methods"]) == {"autoregressive", "dflash b4", "dflash b8"}
    for name, method in report["methods"].items():
        assert method["prompts_identical_to_autoregressive"] == 2
        assert method["decode_tokens_per_second"] > 0
        if name != "autoregressive":
            assert set(method["time_split_seconds"]) == {"draft", "verify", "other"}
    assert report["tap_cost"]["verify_ms"] > 0
    assert (tmp_path / "speedup.png").stat().st_size > 1000


def test_offline_quickstart_runs():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart_offline.py")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "identical to stock greedy generate: True" in result.stdout
