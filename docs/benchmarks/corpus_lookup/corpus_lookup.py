"""Would a datastore of the target's own answers draft for it? (REST-style retrieval; tried 2026-11-28, not kept.)

Stock `generate`'s greedy answers (fp32, 96 new tokens) to 4 benchmark prompts of each category (seed 0, the
benchmark's), and after every answer token: what the shipped drafters' drafts would keep (teacher-forced, as
scripts/policy_replay.py computes it), what a copy of the row's own text keeps (the engine's prompt lookup: the
latest earlier occurrence of its last 3 tokens), and what the distillation data's answers keep: the longest match
(at most 16 tokens, at least 3) of the context's end among all 32,000 answers, continued by the most frequent next
token among the matches, token by token. Then rounds as the default call plays them: a copy where one is at hand,
else the datastore's continuation where its match is at least MIN_MATCH tokens long, else the drafter; tau (tokens a
round) and the share of rounds that ran the drafter, without and with the datastore.

    python docs/benchmarks/corpus_lookup/corpus_lookup.py
"""

import collections
import glob
import gzip
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import policy_replay  # noqa: E402
from hf_specgen.bench.prompt_sets import pick_prompts  # noqa: E402

DATA = "datasets/smollm2-135m-instruct-distill/data"
END = 2  # the target's end-of-turn token, which ends every answer in the datastore
DRAFTS, LONGEST, MIN_MATCHES = 15, 16, (4, 6, 8)


class Datastore:
    """Every answer of the distillation data, one array; an index of every 3-token run (three 16-bit ids in a key)."""

    def __init__(self):
        answers = [json.loads(line)["response_ids"] + [END, -1] for path in sorted(glob.glob(f"{DATA}/train-*.jsonl.gz"))
                   for line in gzip.open(path, "rt")]
        self.tokens = np.array([t for answer in answers for t in answer], dtype=np.int64)
        ids = np.where(self.tokens < 0, 65535, self.tokens).astype(np.uint64)
        keys = (ids[:-2] << np.uint64(32)) | (ids[1:-1] << np.uint64(16)) | ids[2:]
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]

    def continuation(self, context: list[int]) -> tuple[list[int], int]:
        """(the most frequent continuation of the longest match of the context's end, the match's length)."""
        key = np.uint64((context[-3] << 32) | (context[-2] << 16) | context[-1])
        starts = self.order[np.searchsorted(self.keys, key, "left"): np.searchsorted(self.keys, key, "right")]
        if len(starts) == 0:
            return [], 0
        matched = np.zeros(len(starts), dtype=np.int64)  # tokens matched before the 3-token run
        alive = np.ones(len(starts), dtype=bool)
        for back in range(1, min(LONGEST - 3, len(context) - 3) + 1):
            slots = starts - back
            alive &= (slots >= 0) & (self.tokens[np.maximum(slots, 0)] == context[-3 - back])
            matched += alive
        longest = int(matched.max())
        follow = starts[matched == longest] + 3
        drafts = []
        while len(drafts) < DRAFTS and len(follow):
            values, counts = np.unique(self.tokens[follow], return_counts=True)
            token = int(values[counts.argmax()])
            if token < 0:
                break
            drafts.append(token)
            follow = follow[self.tokens[follow] == token] + 1
        return drafts, longest + 3


def kept(drafts: list[int], truth: list[int]) -> int:
    n = 0
    while n < min(len(drafts), len(truth)) and drafts[n] == truth[n]:
        n += 1
    return n


def own_copy(context: list[int]) -> list[int] | None:
    """The engine's prompt lookup: what followed the latest earlier occurrence of the last 3 tokens (repeating)."""
    for start in range(len(context) - 4, -1, -1):
        if context[start: start + 3] == context[-3:]:
            period = len(context) - start - 3
            return [context[start + 3 + i % period] for i in range(DRAFTS)]
    return None


def main() -> None:
    torch.set_num_threads(2)
    target, tokenizer, drafters = policy_replay.load_models(SimpleNamespace(target="smollm2-135m-instruct"),
                                                            torch.float32)
    store = Datastore()
    print(f"datastore: {len(store.tokens):,} tokens")
    rounds = collections.defaultdict(collections.Counter)
    for record in pick_prompts(["specbench", "humaneval"], 4, seed=0):
        ids, n_prompt = policy_replay.answered_example(target, tokenizer, record, 96)
        pad = tokenizer.pad_token_id
        drafter_kept = {"dflash": policy_replay.dflash_acceptance(drafters["dflash"], target, (ids, n_prompt), pad)[0],
                        "eagle3": policy_replay.eagle3_acceptance(drafters["eagle3"], target, (ids, n_prompt), pad,
                                                                  6)[0]}
        answer = len(ids) - n_prompt
        positions = []
        for i in range(answer):
            context, truth = ids[: n_prompt + i + 1], ids[n_prompt + i + 1:]
            copy = own_copy(context)
            drafts, match = store.continuation(context)
            positions.append((None if copy is None else kept(copy, truth), kept(drafts, truth), match))
        for mode, cap in (("dflash", 15), ("eagle3", 6)):
            for min_match in (None, *MIN_MATCHES):
                i = n_rounds = drafter_rounds = 0
                while i < answer:
                    copy, store_kept, match = positions[i]
                    if copy is not None:
                        took = copy
                    elif min_match is not None and match >= min_match:
                        took = store_kept
                    else:
                        took, drafter_rounds = drafter_kept[mode][i], drafter_rounds + 1
                    n_rounds += 1
                    i += min(took, cap) + 1
                cell = rounds[(mode, min_match, record["category"])]
                cell.update(tokens=answer, rounds=n_rounds, drafter=drafter_rounds)
    categories = sorted({c for _, _, c in rounds})
    print("tau (share of rounds that ran the drafter) by category; copies first, then the datastore where its match"
          " has at least N tokens, else the drafter")
    print(f"{'rounds':22s} " + " ".join(f"{c[:13]:>13s}" for c in categories) + f" {'all':>13s}")
    for mode in ("dflash", "eagle3"):
        for min_match in (None, *MIN_MATCHES):
            cells, total = [], collections.Counter()
            for c in categories:
                cell = rounds[(mode, min_match, c)]
                total.update(cell)
                cells.append(f"{cell['tokens'] / cell['rounds']:.2f} ({cell['drafter'] / cell['rounds']:.2f})")
            cells.append(f"{total['tokens'] / total['rounds']:.2f} ({total['drafter'] / total['rounds']:.2f})")
            name = f"{mode}, " + ("no datastore" if min_match is None else f"datastore >= {min_match}")
            print(f"{name:22s} " + " ".join(f"{c:>13s}" for c in cells))


if __name__ == "__main__":
    main()
