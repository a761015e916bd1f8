"""``specgen world export``: copy the tiny world's trained models into Hub-style folders with model cards.

Weights are stored in bf16 (the tiny world is benchmarked in bf16, and it keeps ``hub_models/`` small). Every figure
in a card is read from the run's own ``log.json`` / summary files, next to the command that produced it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..reports import has_compiled_baseline

TARGET, DRAFTER, DRAFT_LM = "specgen-tiny", "specgen-tiny-dflash-b16", "specgen-tiny-draft"
EAGLE3, WHIFLASH = "specgen-tiny-eagle3", "specgen-tiny-whiflash"


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _commands(runs: Path) -> dict:
    """The exact command lines recorded by the build scripts (``NAME<TAB>command`` per line), as a reader would type
    them: ``specgen`` by name (not the path of the build's virtual environment) and ``~`` for the home folder."""
    path = runs / "commands.txt"
    if not path.exists():
        return {}
    home = str(Path.home())
    commands = {}
    for line in path.read_text().splitlines():
        if "\t" in line:
            name, command = line.split("\t", 1)
            program, _, rest = command.partition(" ")
            if program.endswith("/specgen"):
                command = f"specgen {rest}"
            commands[name] = command.replace(home + "/", "~/")
    return commands


def _front_matter(**fields) -> str:
    lines = ["---"]
    for key, value in fields.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines += [f"- {v}" for v in value]
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines + ["---", ""])


def _fmt_settings(log: dict) -> str:
    s = log.get("settings", {})
    budget = f"{s.get('time_budget_minutes')} min time budget" if s.get("time_budget_minutes") else f"{s.get('max_steps')} steps"
    return (f"AdamW (betas 0.9/0.95, weight decay {s.get('weight_decay')}), peak lr {s.get('lr')}, "
            f"{100 * s.get('warmup_fraction', 0):.0f}% warmup then cosine to {s.get('min_lr_ratio')}x, grad clip "
            f"{s.get('grad_clip')}, {budget}, mixed precision {s.get('mixed_precision')}")


TINY_USAGE = '''```python
import hf_specgen
from transformers import AutoModelForCausalLM, AutoTokenizer

target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained("hub_models/{target}"))
tokenizer = AutoTokenizer.from_pretrained("hub_models/{target}")
input_ids = tokenizer.apply_chat_template([{{"role": "user", "content": "Solve: Ava buys 3 pens at 4 dollars each. How "
                                           "much does she pay?"}}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
{load}out = target.generate(input_ids, {call}max_new_tokens=64, do_sample=False)
print(tokenizer.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True))
```'''


def tiny_usage(folder: str | None = None, mode: str | None = None) -> str:
    """A complete, runnable usage snippet for a tiny-world card (the tests execute every card's snippet)."""
    if folder is None:
        return TINY_USAGE.format(target=TARGET, load="", call="")
    loader = ("AutoModelForCausalLM.from_pretrained" if mode == "classic" else "hf_specgen.load_drafter")
    return TINY_USAGE.format(target=TARGET, load=f'assistant = {loader}("hub_models/{folder}")\n',
                             call=f'assistant_model=assistant, speculative_mode="{mode}", ')


def target_card(runs: Path) -> str:
    log = _read(runs / "target" / "log.json")
    math = _read(runs / "eval_math_greedy.jsonl.summary.json")
    cmds = _commands(runs)
    # Re-measured after training when heldout.json exists (``specgen data heldout-loss``), else the training log's.
    losses = (_read(runs / "target" / "heldout.json") or log.get("eval", {})).get("loss", {})
    loss_rows = "\n".join(f"| {d} | {v:.3f} |" for d, v in losses.items())
    return _front_matter(library_name="transformers", license="apache-2.0", pipeline_tag="text-generation",
                         tags=["hf_specgen", "tiny-world", "qwen3"]) + f"""
# specgen-tiny

A {log.get('parameters', 0) / 1e6:.1f}M-parameter Qwen3-architecture causal LM
({log.get('non_embedding_parameters', 0) / 1e6:.1f}M without the tied embedding), pretrained from scratch on a CPU
in {log.get('train_minutes', 0):.0f} minutes. It is the target model of hf_specgen's *tiny world*: a model family
trained offline so speculative decoding can be measured on machines without a GPU or a model hub. It is not a useful
assistant; it continues Python code, explains stdlib code in docstring English, and solves small arithmetic word
problems.

## Usage
{tiny_usage()}

## Data
The corpus is built by `specgen data corpus` (seed 0) from what every Python install has: standard-library source
files (code), their docstrings and comments (prose), and generated multi-step arithmetic word problems with worked
solutions (math). Whole files and 500 problems are held out. Pretraining mixes raw files, passages and chat-formatted
instruction pairs (`<|user|>` / `<|assistant|>` / `<|end|>`), joined with `<|endoftext|>`. Tokenizer: byte-level BPE,
{log.get('stream_tokens', 0) / 1e6:.1f}M training tokens, 8192 entries, digits split one per token, `<|mask|>`
reserved for DFlash drafters.

The chat template's generation prompt ends with `<|assistant|>`: the model writes the newline that opens its answer
itself, because the tokenizer merges that newline with a code answer's indentation. (A prompt ending in a lone newline
token makes the model answer "Complete this function" requests in prose.) Decoded answers therefore start with a newline.

## Training
{log.get('steps')} steps of 16 x 512 tokens, {log.get('tokens_seen', 0) / 1e6:.1f}M tokens seen; {_fmt_settings(log)}.

```
{cmds.get('target', '(see scripts/build_tiny_world.sh)')}
```

## Results
Held-out loss (response tokens of held-out chat records, 200 per domain):

```
{cmds.get('heldout_loss', '')}
```

| domain | loss |
|---|---|
{loss_rows}

Greedy accuracy on the {math.get('graded', 0)} held-out arithmetic problems: **{100 * math.get('greedy_accuracy', 0):.1f}%**
(exact final answer after `####`).

```
{cmds.get('eval_math', '')}
```

Speculative decoding figures for this target are in the drafters' cards and in the repository README.
"""


DFLASH_COMMANDS = ("regenerate", "dflash", "dflash_resume", "regenerate_more", "mix_data", "dflash_more",
                   "regenerate_code", "mix_data_2", "dflash_stage3")
# Training order of the DFlash run folders: each later one continued the one before on new data (``--init-from``).
DFLASH_STAGES = ("dflash", "dflash_more", "dflash_stage3")


def dflash_runs(runs: Path) -> list[Path]:
    """The DFlash run folders that exist, in training order; the last one's model is the shipped drafter."""
    return [runs / name for name in DFLASH_STAGES if (runs / name / "log.json").exists()]


def drafter_card(runs: Path, bench: dict) -> str:
    stages = [_read(folder / "log.json") for folder in dflash_runs(runs)] or [{}]
    log, final = stages[0], stages[-1]
    cmds = _commands(runs)
    minutes = sum(stage.get("train_minutes", 0) for stage in stages)
    stage_lines = "\n".join(
        f"- stage {i + 1}: {stage.get('train_sequences')} target-regenerated sequences (`{stage.get('data')}`), "
        f"{stage.get('steps')} steps, {stage.get('train_minutes', 0):.0f} minutes, "
        + (f"batches of about {stage['anchor_budget']} anchors grouped by answer length, "
           if stage.get("anchor_budget") else "")
        + f"{_fmt_settings(stage)}; offline tau afterwards **{stage.get('eval', {}).get('offline_tau', 0):.2f}** "
          f"({stage.get('eval', {}).get('blocks_judged', 0)} blocks judged)"
        for i, stage in enumerate(stages))
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=f"hf-specgen/{TARGET}",
                         tags=["hf_specgen", "dflash", "speculative-decoding", "tiny-world"]) + f"""
# specgen-tiny-dflash-b16

A DFlash block-diffusion drafter (block 16, {log.get('drafter_parameters', 0) / 1e6:.2f}M parameters, 2 layers) for
[specgen-tiny](../{TARGET}). It drafts 15 tokens in one forward from the target's hidden states (tapped layers in
`config.json`, `dflash_config.target_layer_ids`) and borrows the target's embedding and lm_head. The checkpoint uses
z-lab's DFlash format (`DFlashDraftModel`, `dflash.py` next to the weights), so it loads with hf_specgen, with
`AutoModel.from_pretrained(..., trust_remote_code=True)`, and in engines that read that format.

{tiny_usage(DRAFTER, 'dflash')}

## Training
The paper's recipe: the target's own responses to training prompts (greedy and sampled, `specgen data
regenerate`), loss on response tokens only; up to {final.get('max_anchors')} random anchors per sequence; block mask
(context strictly before the anchor, own block bidirectional, other blocks hidden; dense on CPU, flex attention on
GPU); slot k predicts the token at anchor+k with weight exp(-(k-1)/{final.get('gamma')}); frozen target embedding and
lm_head. {minutes:.0f} CPU minutes in all:
{stage_lines}

Offline tau = 1 + leading matches of the greedy block against the target's own text, teacher-forced, on
{final.get('heldout_sequences')} held-out sequences (block 16), over the blocks that fit inside an answer: a quick
proxy that judges few blocks when answers are short (stage 2's held-out answers are). The decoding results below
are the measure that counts. Stages 1 and 2 trained on answers generated through the target's earlier chat template,
whose generation prompt ended with a newline token: the target then answered code prompts in prose. Stage 3 trains on
the target's code answers under the current template (the other domains' answers are the same tokens).

```
{chr(10).join(cmds[name] for name in DFLASH_COMMANDS if name in cmds)}
```

## Decoding results
{bench_table(bench, ('dflash',))}
"""


def draft_lm_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "draft" / "log.json")
    cmds = _commands(runs)
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=f"hf-specgen/{TARGET}",
                         pipeline_tag="text-generation", tags=["hf_specgen", "draft-model", "tiny-world"]) + f"""
# specgen-tiny-draft

A {log.get('parameters', 0) / 1e6:.1f}M-parameter, 2-layer Qwen3 causal LM with the tokenizer of
[specgen-tiny](../{TARGET}), distilled from the target's own responses (token embeddings initialized from the
target). It is the draft model for classic speculative decoding (`speculative_mode="classic"`), for transformers'
assisted generation, and for FLy.

## Usage
{tiny_usage(DRAFT_LM, 'classic')}

## Training
{log.get('examples')} target-regenerated responses, loss on response tokens only; {log.get('steps')} steps,
{log.get('train_minutes', 0):.0f} minutes on a CPU; {_fmt_settings(log)}.

```
{cmds.get('draft', '')}
```

## Decoding results
{bench_table(bench, ('classic', 'hf assisted'))}
"""


def eagle3_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "eagle3" / "log.json")
    cmds = _commands(runs)
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=f"hf-specgen/{TARGET}",
                         tags=["hf_specgen", "eagle3", "speculative-decoding", "tiny-world"]) + f"""
# specgen-tiny-eagle3

An EAGLE-3 drafter ({log.get('drafter_parameters', 0) / 1e6:.2f}M parameters: one decoder layer reading the
target's hidden states at three depths, its own lm_head over a {log.get('draft_vocab_size')}-token draft vocabulary)
for [specgen-tiny](../{TARGET}). EAGLE layout (`midlayer.*`, `d2t`, `t2d`), loaded with `hf_specgen.load_drafter`.
Used alone (`speculative_mode="eagle3"`, tree or chain) and inside [WhiFlash](../{WHIFLASH}).

## Usage
{tiny_usage(EAGLE3, 'eagle3')}

## Training
Training-time test with {log.get('ttt_steps')} unrolled steps on the target's own responses to
{log.get('sequences')} prompts (`specgen data regenerate`), frozen target embedding; {log.get('steps')} steps,
{log.get('train_minutes', 0):.0f} minutes on a CPU; {_fmt_settings(log)}.

```
{cmds.get('eagle3', '')}
```

## Decoding results
{bench_table(bench, ('eagle3',))}
"""


def whiflash_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "whiflash" / "router_run" / "log.json")
    cmds = _commands(runs)
    config = _read(runs / "whiflash" / "config.json")
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=f"hf-specgen/{TARGET}",
                         tags=["hf_specgen", "whiflash", "speculative-decoding", "tiny-world"]) + f"""
# specgen-tiny-whiflash

WhiFlash routing for [specgen-tiny](../{TARGET}): every round a router picks [EAGLE-3](../{EAGLE3}) or
[DFlash](../{DRAFTER}). This folder holds the router (an MLP on the target's final-layer state predicting
AL_eagle - AL_dflash, threshold {config.get('neural_threshold')}), the entropy thresholds per prompt category
calibrated by `specgen calibrate` ({config.get('entropy_thresholds')}), and both drafters: one
self-contained folder. Load with `hf_specgen.load_drafter("hub_models/{WHIFLASH}")`, or without hf_specgen
with `AutoModel.from_pretrained(..., trust_remote_code=True)`. Lossless whatever the router does.

## Usage
{tiny_usage(WHIFLASH, 'whiflash')}

## Router training
Both drafters drafted from each of {log.get('positions')} positions of the target's greedy text
({log.get('sequences')} sequences): mean AL EAGLE-3 chain (depth {log.get('eagle_depth')})
{log.get('mean_al_eagle', 0):.2f}, DFlash {log.get('mean_al_dflash', 0):.2f}, per-step oracle
{log.get('oracle_token_al', 0):.2f}. MSE, {log.get('steps')} steps; {_fmt_settings(log)}.

```
{cmds.get('router', '')}
{cmds.get('calibrate', '')}
```

## Decoding results
{bench_table(bench, ('whiflash', 'eagle3', 'dflash'))}
"""


def bench_table(bench: dict, prefixes: tuple[str, ...]) -> str:
    """Rows of the repository benchmark for the given methods (plus the autoregressive baselines), with its command.
    "speedup" is over stock generate; "vs compiled AR" (when the run compiled) over our engine's compiled
    autoregressive decoding."""
    if not bench:
        return "(run `specgen bench` to measure)"
    compiled = has_compiled_baseline(bench["methods"])
    rows = ["| method | category | decode tok/s | speedup | " + ("vs compiled AR | " if compiled else "")
            + "tau pooled | tau mean |", "|---|---|---|---|" + ("---|" if compiled else "") + "---|---|"]
    for name, method in bench["methods"].items():
        if name.startswith(("autoregressive", *prefixes)):
            for group, e in method["by_category"].items():
                tau = f"{e['pooled_tau']:.2f} | {e['mean_tau']:.2f}" if e.get("pooled_tau") else "- | -"
                versus = f" {e['speedup_vs_compiled_ar']:.2f}x |" if compiled else ""
                rows.append(f"| {name} | {group} | {e['decode_tokens_per_second']:.1f} | {e['speedup']:.2f}x |"
                            f"{versus} {tau} |")
    command = bench.get("command", "specgen bench")
    dtype = bench.get("models", {}).get("dtype") or bench.get("settings", {}).get("dtype", "bf16")
    note = ""
    if any(name.endswith("drafter alone") for name in bench["methods"]):
        note = ("\n\nA method's default call (its bare name) verifies copied tokens where a row repeats its prompt or "
                "itself (`prompt_lookup`); \"drafter alone\" is the same call with `prompt_lookup=False`.")
    machine = bench.get("machine") or "2-core CPU"  # runs from before the machine was recorded
    threads = bench.get("settings", {}).get("threads")
    machine += f", {threads} torch thread{'s' if threads != 1 else ''}" if threads else ""
    return (f"{dtype} on a {machine}, greedy, prefill excluded, medians of repeats, all methods in one run:\n\n"
            + "\n".join(rows) + note + f"\n\n```\n{command}\n```")


def export_world(runs: str | Path, out: str | Path, bench_json: str | Path | None = None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models.dflash import DFlashDraftModel

    runs, out = Path(runs), Path(out)
    bench = _read(Path(bench_json)) if bench_json else {}
    if bench:
        bench["command"] = _commands(runs).get("bench", "specgen bench")
    for name, src, card in ((TARGET, runs / "target" / "model", target_card(runs)),
                            (DRAFT_LM, runs / "draft" / "model", draft_lm_card(runs, bench))):
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
        model.generation_config.eos_token_id = model.config.eos_token_id
        model.generation_config.pad_token_id = model.config.pad_token_id
        model.save_pretrained(out / name)
        AutoTokenizer.from_pretrained(src).save_pretrained(out / name)
        (out / name / "README.md").write_text(card)
    drafter = DFlashDraftModel.from_pretrained(dflash_runs(runs)[-1] / "model", dtype=torch.bfloat16)
    drafter.save_pretrained(out / DRAFTER)
    (out / DRAFTER / "README.md").write_text(drafter_card(runs, bench))
    exported = [TARGET, DRAFTER, DRAFT_LM]
    if (runs / "eagle3" / "model").exists():
        from ..loading import load_drafter

        load_drafter(str(runs / "eagle3" / "model"), dtype=torch.bfloat16).save_pretrained(out / EAGLE3)
        (out / EAGLE3 / "README.md").write_text(eagle3_card(runs, bench))
        exported.append(EAGLE3)
        if (runs / "whiflash" / "config.json").exists():
            bundle = load_drafter(str(runs / "whiflash"), dtype=torch.bfloat16)
            bundle.save_pretrained(out / WHIFLASH)  # self-contained: a Hub copy needs no other folder
            (out / WHIFLASH / "README.md").write_text(whiflash_card(runs, bench))
            exported.append(WHIFLASH)
    print(f"exported {', '.join(exported)} to {out}")
