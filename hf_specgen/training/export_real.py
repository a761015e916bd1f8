"""``specgen world export --world smollm2-135m-instruct``: the real target's drafters as Hub folders with cards.

The target itself is not exported (it is the packaged SmolLM2-135M-Instruct, prepared by ``specgen prepare``); its
drafters are, each loadable with ``hf_specgen.load_drafter`` and with ``AutoModel.from_pretrained(...,
trust_remote_code=True)`` in a process without hf_specgen. Weights in bf16 (half the size; they load in any dtype).
Every figure in a card is read from the build's own logs and benchmark, next to the command that produced it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .export import _commands, _fmt_settings, _front_matter, _read, bench_table

WORLD = "smollm2-135m-instruct"
BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DFLASH, EAGLE3, WHIFLASH = f"{WORLD}-dflash-b16", f"{WORLD}-eagle3", f"{WORLD}-whiflash"
BUILD = "scripts/build_smollm2.sh"
# Run folders of a drafter, first stage first: a later stage continues the previous one (--init-from), and the
# last stage that finished is the one exported.
STAGES = {"dflash": ("dflash", "dflash2"), "eagle3": ("eagle3", "eagle3_2")}


def final_stage(runs: Path, drafter: str) -> Path:
    finished = [runs / name for name in STAGES[drafter] if (runs / name / "model").exists()]
    return finished[-1] if finished else runs / STAGES[drafter][0]


def _stages_line(runs: Path, drafter: str) -> str:
    """One sentence per continuation stage: steps, minutes and what changed."""
    lines = []
    for name in STAGES[drafter][1:]:
        log = _read(runs / name / "log.json")
        if log:
            tau = log.get("eval", {}).get("offline_tau")
            lines.append(f"Then continued from it (`--init-from`, a fresh schedule, the same answers): "
                         f"{log.get('steps')} steps, {log.get('train_minutes', 0):.0f} minutes; {_fmt_settings(log)}"
                         + (f"; offline tau afterwards **{tau:.2f}**" if tau else "") + ".")
    return " ".join(lines)

USAGE = '''```python
import hf_specgen

target, tokenizer = hf_specgen.load_target("{world}")  # first use: prepares the packaged target
assistant = hf_specgen.load_drafter("hub_models/{folder}", dtype=target.dtype)  # one dtype for both
messages = [{{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome."}}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
out = target.generate(input_ids, assistant_model=assistant, speculative_mode="{mode}", max_new_tokens=48,
                      do_sample=False, return_dict_in_generate=True)
print(tokenizer.decode(out.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
print("tokens per round:", out.speculative_stats.acceptance_lengths)
```'''


def _usage(folder: str, mode: str) -> str:
    return USAGE.format(world=WORLD, folder=folder, mode=mode)


def _remote_code_note(folder: str) -> str:
    return (f"Without hf_specgen: `AutoModel.from_pretrained(\"hub_models/{folder}\", trust_remote_code=True)` loads "
            "it from the modeling file in this folder, which imports only torch and transformers.")


def _data_line(runs: Path, log: dict) -> str:
    summary = _read(runs / "regen.jsonl.summary.json")
    if not summary:  # trained on the distillation set (datasets/smollm2-135m-instruct-distill) instead of a build's
        answers = log.get("train_sequences") or log.get("sequences") or 0
        return (f"{answers:,} greedy answers of the target (chat template, at most 256 new tokens) from its "
                "distillation set, `datasets/smollm2-135m-instruct-distill` in hf_specgen's repository (its card lists "
                "the prompt sources: GSM8K training problems, Python standard-library code requests, general "
                "instructions, long-context tasks over Python's documentation; none shares a 12-word run with a "
                "benchmark prompt)")
    return (f"{summary.get('greedy', 0)} greedy answers of the target (chat template, at most 192 new tokens; "
            f"{summary.get('finished', 0)} finished before the limit) to training prompts that share nothing with "
            "the benchmark prompts: GSM8K training problems, requests built from documented functions and classes of "
            "the Python standard library, and general instructions from this project's templates "
            "(`hf_specgen/training/instructions.py`)")


def _status(runs: Path) -> str:
    """Says plainly how far the drafters are trained, from the router's measured accepted lengths."""
    router = _read(runs / "whiflash" / "router_run" / "log.json")
    if not router:
        return ""
    return (f"**Status: still in training (hf_specgen issue 26).** On {router.get('positions')} positions of the "
            f"target's own answers a round accepts on average {router.get('mean_al_dflash', 0):.2f} tokens with DFlash "
            f"and {router.get('mean_al_eagle', 0):.2f} with the EAGLE-3 chain (1.00 = no draft token accepted; "
            "teacher-forced on the training answers, so above what held-out prompts give), against the 3-6 of "
            "published drafters trained on 15-50x more answers for far longer. The decoding figures below are what "
            "these drafters give on held-out prompts.")


def _warm_start_line(log: dict) -> str:
    if log.get("init_from"):
        return _continued_line(log)
    if not log.get("init_layers_from_target"):
        return ""
    return ("; the drafter's two layers start as copies of the target's last two, and `fc` first passes the tap just "
            "below them through unchanged (`--init-layers-from-target`)")


def _continued_line(log: dict) -> str:
    """A run that continued a drafter trained before: what the card's step count covers."""
    if not log.get("init_from"):
        return ""
    return ("; this run continues a drafter trained before (`--init-from`, a fresh learning-rate schedule), so the "
            "steps below add to that drafter's")


def _draft_vocab_line(log: dict) -> str:
    """The card's sentence on the drafter's draft vocabulary, when its training gave it one."""
    size = log.get("draft_vocab")
    if not isinstance(size, int):
        return ""
    return (f" It proposes only the {size:,} most frequent answer tokens of its training data (`dflash_config."
            "draft_vocab`, an hf_specgen addition that other readers ignore): the lm_head product over each drafted "
            f"slot covers {size:,} rows instead of the whole vocabulary, and the target still verifies every token.")


def dflash_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "dflash" / "log.json")
    cmds = _commands(runs)
    ev = log.get("eval", {})
    last = _read(final_stage(runs, "dflash") / "log.json")
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=BASE_MODEL,
                         pipeline_tag="text-generation",
                         tags=["hf_specgen", "dflash", "speculative-decoding", "smollm2"]) + f"""
# {DFLASH}

A DFlash block-diffusion drafter for [SmolLM2-135M-Instruct](https://huggingface.co/{BASE_MODEL}): block 16,
{last.get('drafter_parameters', 0) / 1e6:.1f}M parameters (2 decoder layers of the target's width), reading 4 of the
target's layers (`dflash_config.target_layer_ids` in `config.json`) and borrowing its embedding and lm_head. One
forward drafts 15 tokens; the target verifies them in one forward, so the output is exactly the target's.{_draft_vocab_line(last)}
z-lab's checkpoint format (`DFlashDraftModel`, `dflash.py`, `auto_map`). {_remote_code_note(DFLASH)}

{_usage(DFLASH, "dflash")}

## Training
{_data_line(runs, log)}. The DFlash paper's recipe (random anchors in the answers, block mask, slot k weighted
exp(-(k-1)/{log.get('gamma')}), frozen target embedding and lm_head){_warm_start_line(log)}, on
{log.get('device', 'a 2-core CPU')}:
{log.get('steps')} steps, {log.get('train_minutes', 0):.0f} minutes, about {log.get('anchor_budget')} anchors per step
grouped by answer length; the softmax runs over the {log.get('train_vocab')} tokens present in the data (a
saving; inference uses the full lm_head); {_fmt_settings(log)}. Offline tau afterwards (teacher-forced, full lm_head,
{log.get('heldout_sequences')} held-out answers, {ev.get('blocks_judged', 0)} blocks): **{ev.get('offline_tau', 0):.2f}**.
{_stages_line(runs, "dflash")}

```
{cmds.get('regenerate', '')}
{cmds.get('dflash', '')}
{cmds.get('dflash2', '')}
```

## Decoding results
{_status(runs)}

{bench_table(bench, ('dflash', 'hf dflash'))}
"""


def eagle3_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "eagle3" / "log.json")
    cmds = _commands(runs)
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=BASE_MODEL,
                         pipeline_tag="text-generation",
                         tags=["hf_specgen", "eagle3", "speculative-decoding", "smollm2"]) + f"""
# {EAGLE3}

An EAGLE-3 drafter for [SmolLM2-135M-Instruct](https://huggingface.co/{BASE_MODEL}):
{log.get('drafter_parameters', 0) / 1e6:.1f}M parameters, one decoder layer reading the target's hidden states at
three depths, its own lm_head over a {log.get('draft_vocab_size')}-token draft vocabulary (`d2t`/`t2d`), the target's
embedding. EAGLE layout (`midlayer.*`). Drafts a dynamic tree (`eagle_top_k` > 1) or a chain (`eagle_top_k=1`);
`speculative_mode="eagle3"` alone drafts a chain on a CPU and a tree on a GPU, each round's width chosen by the
width policy; used alone and inside [WhiFlash](../{WHIFLASH}). {_remote_code_note(EAGLE3)}

{_usage(EAGLE3, "eagle3")}

## Training
{_data_line(runs, log)}. Training-time test with {log.get('ttt_steps')} unrolled steps{_continued_line(log)}, on
{log.get('device', 'a 2-core CPU')}:
{log.get('steps')} steps, {log.get('train_minutes', 0):.0f} minutes; {_fmt_settings(log)}. {_stages_line(runs, "eagle3")}

```
{cmds.get('regenerate', '')}
{cmds.get('eagle3', '')}
{cmds.get('eagle3_2', '')}
```

## Decoding results
{_status(runs)}

{bench_table(bench, ('eagle3',))}
"""


def whiflash_card(runs: Path, bench: dict) -> str:
    log = _read(runs / "whiflash" / "router_run" / "log.json")
    config = _read(runs / "whiflash" / "config.json")
    cmds = _commands(runs)
    thresholds = config.get("entropy_thresholds")
    calibration = (f"the entropy thresholds per prompt category calibrated by `specgen calibrate` ({thresholds})"
                   if thresholds else f"the entropy router's default threshold ({config.get('entropy_threshold')} "
                   "nats; not calibrated per category yet)")
    return _front_matter(library_name="transformers", license="apache-2.0", base_model=BASE_MODEL,
                         pipeline_tag="text-generation",
                         tags=["hf_specgen", "whiflash", "speculative-decoding", "smollm2"]) + f"""
# {WHIFLASH}

WhiFlash for [SmolLM2-135M-Instruct](https://huggingface.co/{BASE_MODEL}): every round a router picks the
[EAGLE-3](../{EAGLE3}) or the [DFlash](../{DFLASH}) drafter for the next round; the output is the target's own
whatever it picks. One self-contained folder: both drafters, the neural router (an MLP on the target's final-layer
state predicting AL_eagle - AL_dflash, threshold {config.get('neural_threshold')}) and {calibration}.
{_remote_code_note(WHIFLASH)}

{_usage(WHIFLASH, "whiflash")}

## Router training
Both drafters drafted from each of {log.get('positions')} positions of the target's greedy answers
({log.get('sequences')} sequences): mean accepted length of the EAGLE-3 chain (depth {log.get('eagle_depth')})
{log.get('mean_al_eagle', 0):.2f}, of DFlash {log.get('mean_al_dflash', 0):.2f}, of a per-position oracle
{log.get('oracle_token_al', 0):.2f}. MSE, {log.get('steps')} steps; {_fmt_settings(log)}.

```
{cmds.get('router', '')}
{cmds.get('calibrate', '')}
```

## Decoding results
{_status(runs)}

{"" if any(name.startswith("whiflash") for name in bench.get("methods", {})) else
 "WhiFlash itself is not benchmarked on this target yet; its two drafters alone, from the same run:"}
{bench_table(bench, ('whiflash', 'eagle3', 'dflash'))}
"""


def export_real_world(runs: str | Path, out: str | Path, bench_json: str | Path | None = None) -> list[str]:
    from ..loading import load_drafter
    from ..models.dflash import DFlashDraftModel

    runs, out = Path(runs), Path(out)
    bench = _read(Path(bench_json)) if bench_json else {}
    if bench:
        bench["command"] = _commands(runs).get("bench", "specgen bench")
    exported = []
    dflash_run, eagle3_run = final_stage(runs, "dflash"), final_stage(runs, "eagle3")
    if (dflash_run / "model").exists():
        DFlashDraftModel.from_pretrained(dflash_run / "model", dtype=torch.bfloat16).save_pretrained(out / DFLASH)
        (out / DFLASH / "README.md").write_text(dflash_card(runs, bench))
        exported.append(DFLASH)
    if (eagle3_run / "model").exists():
        load_drafter(str(eagle3_run / "model"), dtype=torch.bfloat16).save_pretrained(out / EAGLE3)
        (out / EAGLE3 / "README.md").write_text(eagle3_card(runs, bench))
        exported.append(EAGLE3)
    if (runs / "whiflash" / "config.json").exists():
        # Self-contained (both drafters inside): loads with trust_remote_code alone, from any copy of the folder.
        load_drafter(str(runs / "whiflash"), dtype=torch.bfloat16).save_pretrained(out / WHIFLASH)
        (out / WHIFLASH / "README.md").write_text(whiflash_card(runs, bench))
        exported.append(WHIFLASH)
    print(f"exported {', '.join(exported) or 'nothing (no trained model in ' + str(runs) + ')'} to {out}")
    return exported
