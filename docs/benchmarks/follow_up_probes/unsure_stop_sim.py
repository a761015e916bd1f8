"""Where the draft LM's chain should stop, simulated offline on its recorded chains (the tiny world, bf16 drafts).

``record``: every round of the default call drafts 7 tokens (the policy fixed at 8 rows, no unsure stop) over the
30 tiny-world prompts, and each round's draft probabilities and the drafts the target kept go to
draft_lm_chains.json. ``simulate``: for each cap on the round's rows and each UNSURE_STOP threshold, the chain stops
once the product of its drafts' probabilities falls below the threshold, the round verifies the width
``WidthPolicy.confident_width``'s rule picks at the call's rate, and keeps what the recorded round kept within it;
each round costs O + d * drafts + verify(width) ms. Prints tokens per second against a plain step's.

    python docs/benchmarks/follow_up_probes/unsure_stop_sim.py record
    python docs/benchmarks/follow_up_probes/unsure_stop_sim.py simulate '{"1": 4.5, "2": 6.62, "4": 7.05, "8": 7.87}' 2.4 0.6
    python docs/benchmarks/follow_up_probes/unsure_stop_sim.py simulate '{"1": 4.15, "2": 4.57, "4": 4.78, "8": 5.11}' 1.45 0.6

(the first costs: fp32 with the kernels capped at AVX2; the second: bf16; verify and per-draft ms from traced calls'
cost tables and clocks on a 2-core AMD EPYC with AVX512-BF16)
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHAINS = Path(__file__).with_name("draft_lm_chains.json")


def record() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(ROOT))
    import hf_specgen
    from hf_specgen.bench.prompt_sets import chat_ids, load_prompt_set
    from hf_specgen.engine import loop, width_policy

    torch.set_num_threads(1)
    models = ROOT / "hub_models"
    tokenizer = AutoTokenizer.from_pretrained(models / "specgen-tiny")
    target = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=torch.bfloat16)
    hf_specgen.enable(target)
    draft = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=torch.bfloat16)
    loop.UNSURE_STOP = 0.0  # the chain drafts all 7
    width_policy.WidthPolicy.choose = lambda self, copying=False: 8
    pending, chains, category = [None], [], [None]

    def confident_width(self, chosen, confidences, rate):
        pending[0] = confidences[0]
        return chosen

    observe = width_policy.WidthPolicy.observe

    def observed(self, width, accepted, *rest, **named):
        if pending[0] is not None:
            chains.append((category[0], pending[0], accepted[0]))
        pending[0] = None
        return observe(self, width, accepted, *rest, **named)

    width_policy.WidthPolicy.confident_width = confident_width
    width_policy.WidthPolicy.observe = observed
    for category[0] in ("code", "math", "prose"):
        for prompt in [p for p in load_prompt_set("tinyworld") if p["category"] == category[0]][:10]:
            target.generate(chat_ids(tokenizer, prompt["prompt"]), assistant_model=draft, speculative_mode="classic",
                            max_new_tokens=192, prompt_lookup=False)
    CHAINS.write_text(json.dumps(chains))
    print(f"{len(chains)} rounds -> {CHAINS}")


def simulate(verify: dict[int, float], per_draft: float, overhead: float) -> None:
    chains, widths = json.loads(CHAINS.read_text()), sorted(verify)

    def rate(threshold: float, category: str, call_rate: float, cap: int) -> float:
        tokens = seconds = 0.0
        for kind, probabilities, kept in chains:
            if kind != category:
                continue
            product, drafted = 1.0, 0
            for p in probabilities[: cap - 1]:
                drafted += 1
                product *= p
                if product < threshold:
                    break

            def expected(width: int) -> float:
                total, reach = 1.0, 1.0
                for p in probabilities[: width - 1]:
                    reach *= p
                    total += reach
                return total

            candidates = [w for w in widths if w <= min(drafted + 1, cap)]
            width = (max(candidates, key=lambda w: expected(w) - call_rate * (overhead + verify[w]) / 1000)
                     if threshold > 0 else max(candidates))
            tokens += min(kept, width - 1) + 1
            seconds += overhead + per_draft * drafted + verify[width]
        return tokens / seconds * 1000

    for category in ("code", "math", "prose"):
        cells = []
        for cap in (2, 4, 8):
            for threshold in (0.0, 0.3, 0.4, 0.5, 0.6):
                call_rate = 1000 / verify[1]
                for _ in range(5):  # the call's rate, which the width rule weighs against, to its fixed point
                    call_rate = rate(threshold, category, call_rate, cap)
                cells.append(f"cap {cap} stop {threshold}: {call_rate:.0f}")
        print(f"{category} (plain step {1000 / verify[1]:.0f} tok/s): " + ", ".join(cells))


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record()
    else:
        simulate({int(w): ms for w, ms in json.loads(sys.argv[2]).items()}, float(sys.argv[3]), float(sys.argv[4]))
