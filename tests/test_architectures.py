"""Every decoder-only causal LM type of the installed transformers, built small: exact in every mode, or refused
before decoding with a ValueError that says why; never different tokens, never an error from deep inside a model.
The README's support table is this walk's result."""

from __future__ import annotations

from pathlib import Path

import transformers

from hf_specgen.architectures import readme_block, support_table, walk_architectures

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_decoder_only_type_is_exact_or_refused_and_the_readme_says_which():
    results = walk_architectures()
    broken = {r.model_type: {m: r.notes.get(m) for m, o in r.outcomes.items() if o in ("WRONG", "CRASH")}
              for r in results if r.status == "BROKEN"}
    assert not broken, broken
    exact = [r for r in results if r.status == "exact in every mode"]
    assert len(exact) >= 66, [r.model_type for r in results if r not in exact]
    for result in results:
        for mode, outcome in result.outcomes.items():
            if outcome == "refused":  # the reason is named, with the model type or the drafter mismatch
                assert "model type" in result.notes[mode] or "drafter" in result.notes[mode], result.notes[mode]
    table = support_table(results, transformers.__version__)
    readme = readme_block(README.read_text())
    if f"transformers {transformers.__version__} " in readme:  # the release the table was generated with
        assert readme == table, "README support table is stale: run `specgen architectures --write-readme`"
