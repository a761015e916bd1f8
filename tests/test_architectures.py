"""Every decoder-only causal LM type of the installed transformers, built small: exact in every mode, or refused
before decoding with a ValueError that says why; never different tokens, never an error from deep inside a model.
The support table in docs/architectures.md is this walk's result."""

from __future__ import annotations

from pathlib import Path

import transformers

from hf_specgen.architectures import readme_block, support_table, walk_architectures

SUPPORT_TABLE_DOC = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"


def test_every_decoder_only_type_is_exact_or_refused_and_the_docs_say_which():
    results = walk_architectures()
    broken = {r.model_type: {m: r.notes.get(m) for m, o in r.outcomes.items() if o in ("WRONG", "CRASH")}
              for r in results if r.status == "BROKEN"}
    assert not broken, broken
    exact = [r for r in results if r.status == "exact in every mode"]
    assert len(exact) >= 66, [r.model_type for r in results if r not in exact]
    for result in results:
        for mode, outcome in result.outcomes.items():
            if outcome == "refused":  # the reason is named, with the model type or the drafter mismatch
                assert "model type" in result.notes[mode].lower() or "drafter" in result.notes[mode], result.notes[mode]
    table = support_table(results, transformers.__version__)
    documented = readme_block(SUPPORT_TABLE_DOC.read_text())  # the block between the architectures markers
    if f"transformers {transformers.__version__} " in documented:  # the release the table was generated with
        assert documented == table, ("docs/architectures.md support table is stale: "
                                     "run `specgen architectures --write-docs`")


def _small(model_type: str, **changes):
    import torch
    from transformers import AutoModelForCausalLM

    import hf_specgen
    from hf_specgen.architectures import small_config

    config = small_config(model_type)
    for name, value in changes.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    return hf_specgen.enable(AutoModelForCausalLM.from_config(config).float().eval())


def test_hidden_state_modes_refuse_embeddings_of_another_width():
    """OPT-350m projects 512-wide embeddings to 1024-wide hidden states: a drafter that embeds tokens with the
    target's table and reads its hidden states cannot fit both, so dflash and eagle3 say so; the modes that do not
    read hidden states decode exactly."""
    import pytest
    import torch

    from hf_specgen.architectures import _assistant

    target = _small("opt", word_embed_proj_dim=32)
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    expected = target.generate(prompt, max_new_tokens=6, do_sample=False).tolist()
    for mode in ("dflash", "eagle3"):
        with pytest.raises(ValueError, match="Model type 'opt'.*embeddings are 32-wide and its hidden states 64-wide"):
            target.generate(prompt, assistant_model=_assistant(mode, target), speculative_mode=mode, max_new_tokens=6)
    for mode in ("autoregressive", "classic"):
        got = target.generate(prompt, assistant_model=_assistant(mode, target), speculative_mode=mode,
                              max_new_tokens=6, do_sample=False)
        assert got.tolist() == expected, mode


def test_the_engine_probe_refuses_attention_that_ignores_its_masks():
    """A model whose attention drops the 4D mask it is given (here: Llama with its attention patched to attend
    everything, causal or not) fails the one-time probe and is refused before decoding, instead of returning wrong
    tokens; the probe's verdict is kept per model, so it runs once."""
    import pytest
    import torch

    from hf_specgen.engine import support
    from conftest import make_target

    target = make_target("llama")
    for layer in target.model.layers:
        forward = layer.self_attn.forward
        layer.self_attn.forward = lambda *args, _f=forward, **kwargs: _f(*args, **{**kwargs, "attention_mask": None})
    with pytest.raises(ValueError, match="model type 'llama'.*differ from a plain forward"):
        target.generate(torch.tensor([[5, 6, 7, 8]]), speculative_mode="autoregressive", max_new_tokens=4)
    assert support.engine_probe_reason(target) is support._PROBED[target]


def test_gemma3n_decodes_exactly_where_it_can_and_says_why_elsewhere():
    """Gemma 3n (built from its own config class: its defaults do not shrink generically) shares K/V across its last
    layers and carries AltUp streams: the modes that do not read hidden states are exact; DFlash and EAGLE-3, whose
    drafters read one [B, T, H] hidden state per layer, are refused with the reason."""
    import pytest
    import torch

    from conftest import make_gemma3n
    from hf_specgen.architectures import _assistant

    target = make_gemma3n()
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]])  # past its sliding window of 8
    expected = target.generate(prompt, max_new_tokens=12, do_sample=False).tolist()
    for mode in ("autoregressive", "classic"):
        got = target.generate(prompt, assistant_model=_assistant(mode, target), speculative_mode=mode,
                              max_new_tokens=12, do_sample=False)
        assert got.tolist() == expected, mode
    for mode in ("dflash", "eagle3"):
        with pytest.raises(ValueError, match="gemma3n_text.*AltUp streams"):
            target.generate(prompt, assistant_model=_assistant(mode, target), speculative_mode=mode, max_new_tokens=4)


def test_the_cli_walks_chosen_types_and_keeps_partial_walks_out_of_the_docs(capsys):
    import pytest

    from hf_specgen.cli import main

    assert main(["architectures", "--types", "llama", "mamba"]) == 0
    out = capsys.readouterr().out
    assert "over the chosen decoder-only causal LM types" in out and "**Exact in every mode (1):** `llama`" in out
    assert "| `mamba` | refused |" in out
    with pytest.raises(SystemExit, match="drop --types"):
        main(["architectures", "--types", "llama", "--write-docs"])
    with pytest.raises(SystemExit, match="drop --types"):  # the old name of the flag still works
        main(["architectures", "--types", "llama", "--write-readme"])
