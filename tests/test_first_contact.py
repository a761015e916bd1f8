"""What a new user copies, installs and types: README snippets, examples, a wheel install, load errors, the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen import dtypes, targets

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "hub_models" / "specgen-tiny"
TINY_DFLASH = ROOT / "hub_models" / "specgen-tiny-dflash-b16"
# The README's Hub snippet runs here on the embedded tiny world: same code, local stand-ins for the Hub ids and GPU.
HUB_STAND_INS = {'"Qwen/Qwen3-8B"': repr(str(TINY)), '"z-lab/Qwen3-8B-DFlash-b16"': repr(str(TINY_DFLASH)),
                 '"cuda"': '"cpu"'}


# The README's example, then the usage guide's examples, then the methods page's WhiFlash snippet: one walk-through.
SNIPPET_PAGES = ["README.md", "docs/usage.md", "docs/methods.md"]


def test_every_readme_snippet_runs_as_written():
    """All python blocks of the README and of the docs pages it sends users to, page after page and in order, in one
    namespace (later blocks reuse earlier names): no undefined name, no stale API. Only Hub ids/GPU are swapped for
    local stand-ins and long generations shortened."""
    targets.prepare_target("smollm2-135m-instruct")
    blocks = [(page, block) for page in SNIPPET_PAGES
              for block in re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)]
    assert sum(page == "README.md" for page, _ in blocks) >= 1 and len(blocks) >= 5
    namespace: dict = {}
    for number, (page, block) in enumerate(blocks):
        for hub, local in HUB_STAND_INS.items():
            block = block.replace(hub, local)
        block = re.sub(r"max_new_tokens=\d+", "max_new_tokens=24", block)
        exec(compile(block, f"{page} python block {number}", "exec"), namespace)  # noqa: S102
    assert namespace["out"].speculative_stats.drafter_per_round  # the last block decoded with WhiFlash


def test_examples_run_offline_as_written(tmp_path):
    """Every example file, in one interpreter (imports paid once), each in a fresh namespace. The real target is
    hidden (an empty cache folder), so the quickstart takes its last fallback, the tiny world; examples/smollm2.py
    runs on the real target in test_real_target.py."""
    names = ["quickstart", "classic", "eagle3", "whiflash", "fly", "streaming"]
    script = ("import runpy, sys\n"
              "for name in sys.argv[1:]:\n"
              "    print(f'=== {name}', flush=True)\n"
              "    runpy.run_path(f'examples/{name}.py', run_name='__main__')\n")
    env = {**os.environ, "HF_SPECGEN_CACHE": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT, capture_output=True, text=True,
                            timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = {part.split("\n", 1)[0]: part for part in result.stdout.split("=== ")[1:]}
    # The default calls' widths follow this machine's clock; in bf16 a wide verify may part from stock's text at a
    # near-tie, and the examples say so (fp32, the auto dtype without bf16 units, must be exact)
    said = "identical to stock greedy generate: "
    exact = re.compile(said + "True" + ("" if hf_specgen.auto_dtype() == torch.float32 else
                                        "|" + said + r"False \(bf16 near-tie"))
    assert len(exact.findall(out["quickstart"])) == 1
    assert "using the models embedded in hf_specgen" in out["quickstart"]  # no GPU here, and it says so
    assert "using the 8M-parameter tiny world" in out["quickstart"]
    assert re.search(r"tokens/s with the prefill: stock generate [\d.]+, DFlash [\d.]+ in the first call .*, [\d.]+ in "
                     r"the next", out["quickstart"])
    assert "identical to stock greedy generate: True" in out["classic"]
    assert out["eagle3"].count("identical to stock greedy generate: True") == 2
    assert len(exact.findall(out["whiflash"])) == 2
    assert out["fly"].count("lossy=True") == 2
    assert re.search(r"\d+ rounds for 64 tokens", out["streaming"])


def test_wheel_install_carries_the_embedded_models(tmp_path):
    """A non-editable install: build the wheel, install it into a bare folder, and from outside the checkout find
    and load the shipped models (the wheel is the only copy of hf_specgen on that path)."""
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("hf_specgen-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for folder in ("specgen-tiny", "specgen-tiny-dflash-b16", "smollm2-135m-instruct-dflash-b16",
                   "speculative-generate"):
        assert any(n.startswith(f"hf_specgen/_hub_models/{folder}/") for n in names), folder
    assert "hf_specgen/_hub_models/specgen-tiny-dflash-b16/model.safetensors" in names
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    probe = ("import hf_specgen, torch, sys\n"
             "folder = hf_specgen.embedded_model('specgen-tiny-dflash-b16')\n"
             "draft = hf_specgen.load_drafter(folder, dtype=torch.float32)\n"
             "print(hf_specgen.__file__, folder, type(draft).__name__)\n")
    # -I would drop the venv's site-packages (torch); PYTHONPATH puts the installed wheel first instead
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    module_file, folder, kind = ran.stdout.split()[-3:]
    assert module_file.startswith(str(site)) and folder.startswith(str(site)) and kind == "DFlashDraftModel"


def test_load_errors_name_the_folder_the_file_and_the_fix(tmp_path):
    no_config = tmp_path / "no_config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"no_config has no config.json \(it holds: model.safetensors\)"):
        hf_specgen.load_drafter(no_config)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("config.json", "dflash.py"):
        (damaged / name).write_bytes((TINY_DFLASH / name).read_bytes())
    weights = (TINY_DFLASH / "model.safetensors").read_bytes()
    (damaged / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match=r"damaged/model.safetensors cannot be read; the download or copy was"):
        hf_specgen.load_drafter(damaged)
    with pytest.raises(FileNotFoundError, match="no drafter folder at .*does/not/exist.*check the path"):
        hf_specgen.load_drafter(str(tmp_path / "does" / "not" / "exist"))
    with pytest.raises(FileNotFoundError, match="check the path"):
        hf_specgen.load_drafter("./missing-folder")


def test_dflash_drafter_for_another_vocabulary_is_refused_before_decoding():
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32))
    drafter = hf_specgen.load_drafter(TINY_DFLASH, dtype=torch.float32)
    drafter.config.vocab_size = target.config.vocab_size + 1000  # as if trained for another tokenizer
    with pytest.raises(ValueError, match=r"trained for a \d+-token vocabulary, the target has \d+ tokens"):
        target.generate(torch.tensor([[1, 2, 3]]), assistant_model=drafter, speculative_mode="dflash",
                        max_new_tokens=4)


def test_our_dflash_drafter_runs_in_transformers_own_dflash_path():
    """speculation_type="dflash" (transformers' DFlashTokenCandidateGenerator) with the shipped folder loaded by
    AutoModel + trust_remote_code: the stock greedy tokens, with fewer target forwards than tokens; the plain
    assisted path gets an error naming both ways to run it."""
    target = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(TINY)
    draft = AutoModel.from_pretrained(TINY_DFLASH, trust_remote_code=True, dtype=torch.float32)
    assert type(draft).__module__.startswith("transformers_modules")  # the shipped file, not hf_specgen's
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Complete this function:\ndef add(a, b):"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    reference = target.generate(ids, max_new_tokens=48, do_sample=False)
    forwards = []
    hook = target.register_forward_hook(lambda *args: forwards.append(1))
    out = target.generate(ids, max_new_tokens=48, do_sample=False, assistant_model=draft, speculation_type="dflash")
    hook.remove()
    assert torch.equal(out, reference)
    assert len(forwards) < out.shape[1] - ids.shape[1]  # drafts were accepted
    with pytest.raises(AttributeError, match='speculation_type="dflash".*speculative_mode="dflash"'):
        target.generate(ids, max_new_tokens=4, assistant_model=draft)
    config = json.loads((TINY_DFLASH / "config.json").read_text())
    assert config["target_layer_ids"] == config["dflash_config"]["target_layer_ids"]
    assert config["mask_token_id"] == config["dflash_config"]["mask_token_id"]


def test_cli_help_imports_no_torch_and_shows_defaults():
    """`specgen --help` must answer at once: it may not import torch or transformers (26 s on a cold disk before)."""
    probe = ("import sys\nfrom hf_specgen.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "calibrate" in result.stdout and "HEAVY []" in result.stdout, result.stdout[-500:] + result.stderr[-2000:]
    bench = subprocess.run([sys.executable, "-m", "hf_specgen.cli", "bench", "--help"], capture_output=True,
                           text=True, timeout=60).stdout
    assert "(default: [4, 6, 16])" in bench and "--quick" in bench
    assert "default: 0" in subprocess.run([sys.executable, "-m", "hf_specgen.cli", "train", "dflash", "--help"],
                                          capture_output=True, text=True, timeout=120).stdout


def test_auto_dtype_follows_the_cpu_and_bf16_on_an_emulating_cpu_warns_once(monkeypatch):
    """`auto` is fp32 on a CPU without bf16 units and bf16 with them, for every world (bench/compare included); a
    speculative call in bf16 on the first kind warns once, naming the fix."""
    from types import SimpleNamespace

    from hf_specgen.bench.runner import apply_world_defaults

    for fast, expected in ((False, torch.float32), (True, torch.bfloat16)):
        monkeypatch.setattr(dtypes, "cpu_runs_bf16_fast", lambda fast=fast: fast)
        assert hf_specgen.auto_dtype("cpu") is expected
        args = SimpleNamespace(synthetic=None, target=None, prompts=None, categories=None, dtype="auto",
                               device="cpu", command="compare")
        monkeypatch.setattr("hf_specgen.bench.runner.resolve_world", lambda args: "tiny")
        apply_world_defaults(args)
        assert args.dtype == ("bf16" if fast else "fp32")
    assert hf_specgen.auto_dtype("cuda") is torch.bfloat16
    monkeypatch.setattr(dtypes, "cpu_runs_bf16_fast", lambda: False)
    monkeypatch.setattr(dtypes, "_WARNED_SLOW_BF16", False)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.bfloat16))
    drafter = hf_specgen.load_drafter(TINY_DFLASH, dtype=torch.bfloat16)
    ids = torch.tensor([[5, 6, 7, 8]])
    with pytest.warns(UserWarning, match="no bf16 units") as record:
        target.generate(ids, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=4)
        target.generate(ids, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=4)
    assert sum("no bf16 units" in str(w.message) for w in record) == 1


def test_measured_tables_name_the_machine_kind_they_ran_on(monkeypatch):
    """A speed ratio on a CPU with bf16 units and one on a CPU without them differ several-fold: the bench records the
    machine (CPU model, cores, bf16 units or the ISA it has instead) and every card table built from it names it."""
    from hf_specgen.training.export import bench_table

    for amx, avx512_bf16, kernels, kind in ((True, True, "AVX512", "with AMX"),
                                            (False, True, "AVX512", "with AVX512-BF16"),
                                            (False, True, "AVX2", "with AVX512-BF16, kernels capped at AVX2"),
                                            (False, False, "AVX2", "without bf16 units (AVX2)")):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda fast=avx512_bf16: fast, raising=False)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda kernels=kernels: kernels)
        machine = dtypes.machine_description("cpu")
        assert re.fullmatch(rf"\d+-core \S.* {re.escape(kind)}", machine), machine
    bench = {"machine": machine, "settings": {"threads": 1, "dtype": "fp32"},
             "methods": {"autoregressive": {"by_category": {"all": {"decode_tokens_per_second": 20.0,
                                                                     "speedup": 1.0}}}}}
    table = bench_table(bench, ("dflash",))
    assert table.startswith(f"fp32 on a {machine}, 1 torch thread, greedy")
    # the card refresher finds tables written before and after the machine was recorded
    refresh = (ROOT / "scripts" / "refresh_card_tables.py").read_text()
    pattern = re.compile(re.search(r'TABLE = re.compile\(r"(.*?)", re.S \| re.M\)', refresh).group(1), re.S | re.M)
    for line in (table, table.replace(f"on a {machine}, 1 torch thread", "on a 2-core CPU")):
        assert pattern.fullmatch(line)


def test_our_own_calls_raise_no_deprecation_warnings_on_the_installed_transformers():
    """Every mode, and the Hub drafter's spec_generate, pass the cache under the keyword the installed transformers
    takes (`cache` where it renamed `past_key_values`): no FutureWarning from our side."""
    import warnings

    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32))
    drafter = hf_specgen.load_drafter(TINY_DFLASH, dtype=torch.float32)
    small = AutoModelForCausalLM.from_pretrained(ROOT / "hub_models" / "specgen-tiny-draft", dtype=torch.float32)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for kwargs in ({"assistant_model": drafter, "speculative_mode": "dflash"},
                       {"speculative_mode": "autoregressive"},
                       {"assistant_model": small, "speculative_mode": "classic"}):
            target.generate(ids, max_new_tokens=6, **kwargs)
        drafter.spec_generate(ids, target, max_new_tokens=6)


def test_readme_is_a_front_door_whose_two_commands_ci_and_users_run():
    """The README stays short, starts with the two commands (main job, tests), and `.ci/run` runs the test command
    as written there."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "keep the README a front door: move depth into docs/"

    def command_after(marker: str) -> str:
        block = re.search(re.escape(marker) + r"\n```bash\n(.*?)\n```", readme, re.S)
        assert block, f"the README has no bash block after {marker}"
        return block.group(1)

    main_job, tests = command_after("<!-- main-command -->"), command_after("<!-- test-command -->")
    assert readme.index("<!-- main-command -->") < readme.index("<!-- test-command -->") < readme.index("## Example")
    assert "specgen prepare" in main_job and main_job.endswith("specgen compare")
    assert "torch==2.13.0" in main_job and "torch==2.13.0" in tests and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci and 'bash -c "$test_command"' in ci


def test_links_between_pages_lead_to_files_and_headings_that_exist():
    """Every relative link of the README, the docs, the cards, the data set's card and the Space's page opens a file
    that exists, and its #anchor a heading of that file (as GitHub and the Hub make anchors from headings)."""
    def anchors(page: Path) -> set[str]:
        seen: dict[str, int] = {}
        headings, fenced = [], False
        for line in page.read_text().splitlines():
            fenced ^= line.lstrip().startswith("```")  # a line opening or closing a code block
            if not fenced and re.match(r"#+ ", line):
                headings.append(line.split(" ", 1)[1])
        for heading in headings:
            slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            seen[slug + (f"-{seen[slug]}" if slug in seen else "")] = 0
            seen[slug] = seen.get(slug, 0) + 1
        return set(seen)

    pages = [ROOT / "README.md", ROOT / "space" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "hub_models").glob("*/README.md")), *sorted((ROOT / "datasets").glob("*/README.md"))]
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(((?!https?:|mailto:)[^)\s#]*)(?:#([^)\s]+))?\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, broken
