"""The DFlash drafter saves and loads in z-lab's published format, with or without hf_specgen installed."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel

import hf_specgen
from hf_specgen.models.dflash import default_target_layer_ids, read_dflash_settings
from conftest import make_dflash, make_target, random_prompt


def expected_tensor_names(n_layers: int) -> set[str]:
    per_layer = [f"self_attn.{p}_proj.weight" for p in "qkvo"] + ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    per_layer += [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
    per_layer += ["input_layernorm.weight", "post_attention_layernorm.weight"]
    names = {f"layers.{i}.{name}" for i in range(n_layers) for name in per_layer}
    return names | {"fc.weight", "hidden_norm.weight", "norm.weight"}


@pytest.fixture()
def saved_drafter(tmp_path):
    target = make_target("qwen3", dtype=torch.bfloat16)
    drafter = make_dflash(target, block_size=16, num_layers=3, layer_ids=[0, 1, 2])
    drafter.save_pretrained(tmp_path)
    return target, drafter, tmp_path


def test_saved_files_config_keys_and_tensor_names(saved_drafter):
    target, drafter, path = saved_drafter
    assert {p.name for p in path.iterdir()} == {"config.json", "model.safetensors", "dflash.py"}
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen3"
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}
    assert config["block_size"] == 16 and config["num_target_layers"] == 4
    assert config["dflash_config"] == {"mask_token_id": 255, "target_layer_ids": [0, 1, 2]}
    with safe_open(path / "model.safetensors", "pt") as f:
        names = set(f.keys())
        assert names == expected_tensor_names(3)  # no prefix, no embedding, no lm_head, no rotary buffers
        assert f.get_tensor("fc.weight").shape == (64, 3 * 64)
        assert f.get_tensor("norm.weight").dtype == torch.bfloat16


def test_dflash_py_imports_only_torch_and_transformers(saved_drafter):
    """Besides Python's standard library, the Hub file needs torch and transformers alone."""
    source = (saved_drafter[2] / "dflash.py").read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports - set(sys.stdlib_module_names) <= {"torch", "transformers"}, imports
    assert {"torch", "transformers"} <= imports


def test_loads_through_automodel_without_hf_specgen(saved_drafter, tmp_path_factory):
    """A Hub user with only transformers: AutoModel + trust_remote_code, in a process where hf_specgen can't import."""
    target, drafter, path = saved_drafter
    target_dir = tmp_path_factory.mktemp("target")
    target.save_pretrained(target_dir)
    prompt = random_prompt(random.Random(0), 9)
    expected = drafter.spec_generate(prompt, target, max_new_tokens=12).tolist()
    script = textwrap.dedent(f"""
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "hf_specgen":
                    raise ImportError("hf_specgen is blocked in this process")
        sys.meta_path.insert(0, Block())
        import torch
        from transformers import AutoModel, AutoModelForCausalLM
        drafter = AutoModel.from_pretrained({str(path)!r}, trust_remote_code=True, dtype=torch.bfloat16)
        target = AutoModelForCausalLM.from_pretrained({str(target_dir)!r}, dtype=torch.bfloat16)
        assert type(drafter).__name__ == "DFlashDraftModel" and "hf_specgen" not in type(drafter).__module__
        out = drafter.spec_generate(input_ids=torch.tensor({prompt.tolist()}), target=target, max_new_tokens=12,
                                    temperature=0.0, stop_token_ids=None)
        print(out.tolist())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(expected)


def test_load_drafter_ignores_zlab_code_and_roundtrips(saved_drafter):
    target, drafter, path = saved_drafter
    # A z-lab folder ships its own dflash.py: load_drafter must not run it.
    (path / "dflash.py").write_text("raise RuntimeError('remote code must not run')\n")
    loaded = hf_specgen.load_drafter(str(path), dtype=torch.bfloat16)
    assert isinstance(loaded, hf_specgen.DFlashDraftModel)
    for (name, a), (_, b) in zip(sorted(drafter.state_dict().items()), sorted(loaded.state_dict().items())):
        assert torch.equal(a, b), name
    assert (loaded.block_size, loaded.mask_token_id, loaded.target_layer_ids) == (16, 255, [0, 1, 2])


def test_remote_code_instance_works_as_assistant(saved_drafter):
    """AutoModel(..., trust_remote_code=True) builds the checkpoint's own class; the engine adapts it losslessly."""
    target, drafter, path = saved_drafter
    remote = AutoModel.from_pretrained(str(path), trust_remote_code=True, dtype=torch.bfloat16)
    assert not isinstance(remote, hf_specgen.DFlashDraftModel)
    prompt = random_prompt(random.Random(1), 13)
    ours = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=20, do_sample=False)
    theirs = target.generate(prompt, assistant_model=remote, speculative_mode="dflash", max_new_tokens=20, do_sample=False)
    assert ours.tolist() == theirs.tolist()
    twin = remote._hf_specgen_twin
    assert twin.fc.weight.data_ptr() == remote.fc.weight.data_ptr()  # weights shared, not copied


def test_default_layer_ids_and_config_precedence():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert default_target_layer_ids(36, 1) == [18]
    from transformers import Qwen3Config

    newer = Qwen3Config(block_size=16, dflash_config={"block_size": 10, "mask_token_id": 7}, num_target_layers=36,
                        num_hidden_layers=5)
    settings = read_dflash_settings(newer)
    assert settings["block_size"] == 10 and settings["target_layer_ids"] == [1, 9, 17, 25, 33]
    with pytest.raises(ValueError, match="num_target_layers"):
        read_dflash_settings(Qwen3Config(dflash_config={"mask_token_id": 7}))


def test_draft_vocabulary_saves_loads_and_serves_through_every_loader(saved_drafter, tmp_path):
    """hf_specgen's optional draft vocabulary: one more config key (the weights file stays z-lab's, which vLLM's
    loader needs: it refuses unknown tensors), read back by load_drafter, by the folder's own remote code and inside
    a WhiFlash bundle; the decode stays the target's."""
    from test_eagle3 import make_eagle3

    target, drafter, _ = saved_drafter
    vocab = torch.arange(3, 200, 2)
    drafter.set_draft_vocab(vocab)
    drafter.save_pretrained(tmp_path / "restricted")
    path = tmp_path / "restricted"
    assert {p.name for p in path.iterdir()} == {"config.json", "model.safetensors", "dflash.py"}
    config = json.loads((path / "config.json").read_text())
    assert config["dflash_config"] == {"mask_token_id": 255, "target_layer_ids": [0, 1, 2],
                                       "draft_vocab": vocab.tolist()}
    with safe_open(path / "model.safetensors", "pt") as f:
        assert set(f.keys()) == expected_tensor_names(3)
    ours = hf_specgen.load_drafter(str(path), dtype=torch.bfloat16)
    remote = AutoModel.from_pretrained(str(path), trust_remote_code=True, dtype=torch.bfloat16)
    assert ours.draft_vocab.tolist() == remote.draft_vocab.tolist() == vocab.tolist()
    bundle_path = tmp_path / "bundle"
    hf_specgen.WhiFlash(ar=make_eagle3(target).to(torch.bfloat16), parallel=ours).save_pretrained(bundle_path)
    assert hf_specgen.load_drafter(str(bundle_path)).parallel.draft_vocab.tolist() == vocab.tolist()
    prompt = random_prompt(random.Random(2), 11)
    # (bf16: the same as stock greedy up to near-ties, which test_engine checks in fp32)
    ours_out, remote_out = (target.generate(prompt, assistant_model=assistant, speculative_mode="dflash",
                                            max_new_tokens=20, do_sample=False, block_size=4).tolist()
                            for assistant in (ours, remote))
    assert ours_out == remote_out
    assert remote._hf_specgen_twin.draft_vocab.tolist() == vocab.tolist()
    ours.set_draft_vocab(None)  # lifted again: the config is z-lab's
    assert ours.draft_vocab is None and ours.config.dflash_config == {"mask_token_id": 255, "target_layer_ids": [0, 1, 2]}
    for bad in ([], [5, 5], [-1, 2], [3, 256]):
        with pytest.raises(ValueError, match="distinct token ids in \\[0, 256\\)"):
            drafter.set_draft_vocab(bad)
