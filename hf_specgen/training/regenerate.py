"""``specgen data regenerate``: answer training prompts with the target itself.

Drafters learn to predict *the target's* continuation, not the dataset's (DFlash, EAGLE and classic draft LMs all
train on target-regenerated responses). Each prompt is answered greedily and, with ``--samples-per-prompt``, also by
temperature sampling, so the drafter sees the target's sampled behaviour too. Prompts are batched by length with left
padding and decoded by hf_specgen's own plain steps (``--decoder stock``: transformers' ``generate``, the same
answers). Each record keeps the exact prompt and answer token ids, so training sees the tokens the target saw and
wrote (any chat template). Answers are appended batch by batch and a rerun resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .corpus import check_answer, read_jsonl, response_text


def _pick_records(records: list[dict], limit: int | None, seed: int) -> list[dict]:
    """Up to ``limit`` records, domains in equal shares where the data allows (a seeded choice)."""
    if limit is None or limit >= len(records):
        return records
    by_domain: dict[str, list[dict]] = {}
    for record in records:
        by_domain.setdefault(record.get("domain", "all"), []).append(record)
    rng = random.Random(seed)
    picked: list[dict] = []
    domains = sorted(by_domain, key=lambda d: len(by_domain[d]))  # small domains first: their unused share moves on
    for n, domain in enumerate(domains):
        rows = by_domain[domain]
        rng.shuffle(rows)
        share = (limit - len(picked)) // (len(domains) - n)
        picked += rows[:share]
    rng.shuffle(picked)
    return picked


def _job_key(record: dict, sample_index: int) -> str:
    """Names one answer to write: the record's id (or, without one, a digest of its prompt) and which sample."""
    name = record.get("id") or hashlib.sha1(record["prompt"].encode()).hexdigest()[:16]
    return f"{name}#{'greedy' if sample_index < 0 else f'sample{sample_index}'}"


@contextlib.contextmanager
def _only_run_writing(lock_path: Path, what: str):
    """Hold an exclusive lock on ``lock_path`` while this run writes ``what``; refuse if another run holds it. Two
    runs of one command into one place answer the same prompts into one partial file, and the one that finishes a
    shard second finds its partial file gone: before this lock, it then wrote that shard with none of its answers
    (it happened to the real target's data set, 2026-11-29). The OS drops the lock with its process, so a killed run
    leaves nothing that blocks the next."""
    from filelock import FileLock, Timeout

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RuntimeError(f"another `specgen data regenerate` is writing {what} (it holds {lock_path}): wait for it "
                           "to finish, or stop it and run this again to resume") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # removed while still held (Windows refuses: the file stays)
            lock_path.unlink()
        lock.release()


def _read_finished(out_path: Path) -> list[dict]:
    """Records already written by an interrupted run; a torn last line (the process was killed mid-write) is cut."""
    if not out_path.exists():
        return []
    rows, good_bytes = [], 0
    with open(out_path, "rb") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good_bytes += len(line)
    with open(out_path, "r+b") as handle:
        handle.truncate(good_bytes)
    return rows


def is_correct(record: dict, answer: str) -> bool:
    """Grade a math answer: the tiny world's strict ``#### N`` marker, or, for records marked
    ``answer_format="last_number"`` (GSM8K asked of a real instruct model), the last number in the text."""
    if record.get("answer_format") == "last_number":
        value = last_number(answer)
        return value is not None and abs(value - float(record["answer"])) < 1e-6
    return check_answer(record, answer)


def last_number(text: str) -> float | None:
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if not numbers:
        return None
    try:
        return float(numbers[-1].replace(",", "").rstrip("."))
    except ValueError:
        return None


def _summarize(rows: list[dict], records_by_prompt: dict) -> dict:
    counts: Counter[str] = Counter()
    for row in rows:
        counts["sampled" if row["sampled"] else "greedy"] += 1
        counts["finished"] += row["finished"]
        record = records_by_prompt.get(row["prompt"], {})
        if "answer" in record and not row["sampled"]:  # math problems: score the greedy answer
            counts["graded"] += 1
            counts["correct"] += is_correct(record, row["response"])
    summary = dict(counts)
    if counts["graded"]:
        summary["greedy_accuracy"] = counts["correct"] / counts["graded"]
    return summary


def _load_target(args, enable_engine=None):
    from ..targets import resolve_target

    args.target = resolve_target(args.target)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:  # batches need one; the GGUF tokenizer of some transformers versions has none
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ValueError(f"{args.target} has no chat template; regenerate needs one to format prompts")
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    if args.decoder == "engine":
        enable_engine(model)
    return model, tokenizer


@torch.no_grad()
def _answer(model, tokenizer, jobs: list[tuple[dict, int]], out_path: Path, args, bar) -> None:
    """Append the answer of every job to ``out_path``, batch by batch (a killed run loses the batch in flight).
    Prompts are batched by length with left padding. ``--decoder engine`` decodes them with the engine's plain
    steps (static cache; each finished row leaves the batch, where stock ``generate`` computes it to the last step):
    on SmolLM2-135M (batch 64, 256 new tokens, one thread, fp32, a 2-core AVX2 CPU) it took 0.62-0.73 of stock
    batched ``generate``'s time for the same answers (scripts/regen_decoder_ab.py; the data set card, datasets/).
    Before finished rows left the batch, stock had been the faster (102 tok/s against 94; transformers' continuous
    batching 38)."""
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                             add_generation_prompt=True) for r, _ in jobs]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"] if prompts else []
    lengths = [len(ids) for ids in prompt_ids]
    # Group greedy and sampled jobs separately (different generate arguments), each sorted by prompt length.
    batches = []
    for sampled in (False, True):
        group = sorted((i for i in range(len(jobs)) if (jobs[i][1] >= 0) == sampled), key=lambda i: lengths[i])
        batches += [group[i: i + args.batch_size] for i in range(0, len(group), args.batch_size)]
    with open(out_path, "a", encoding="utf-8") as handle:
        for batch in batches:
            sampled = jobs[batch[0]][1] >= 0
            enc = tokenizer([prompts[i] for i in batch], return_tensors="pt", padding=True,
                            add_special_tokens=False).to(model.device)
            kwargs = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p) if sampled else dict(
                do_sample=False)
            if args.decoder == "engine":
                kwargs["speculative_mode"] = "autoregressive"
            generated = model.generate(**enc, max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                       **kwargs)[:, enc["input_ids"].shape[1]:]
            for row, i in enumerate(batch):
                tokens = generated[row].tolist()
                finished = tokenizer.eos_token_id in tokens
                if finished:
                    tokens = tokens[: tokens.index(tokenizer.eos_token_id)]
                elif tokenizer.pad_token_id != tokenizer.eos_token_id:
                    tokens = [t for t in tokens if t != tokenizer.pad_token_id]
                record = jobs[i][0]
                handle.write(json.dumps({
                    "id": record.get("id"), "job": _job_key(*jobs[i]), "domain": record.get("domain"),
                    "prompt": record["prompt"], "response": response_text(tokenizer.decode(tokens)),
                    "prompt_ids": prompt_ids[i], "response_ids": tokens, "finished": finished, "sampled": sampled,
                }, ensure_ascii=False) + "\n")
            handle.flush()
            bar.update(len(batch))


def _jobs(records: list[dict], samples_per_prompt: int, done: set[str]) -> list[tuple[dict, int]]:
    jobs = [(record, -1) for record in records]
    jobs += [(record, k) for record in records for k in range(samples_per_prompt)]
    return [job for job in jobs if _job_key(*job) not in done]


@torch.no_grad()
def regenerate(args, enable_engine=None) -> None:
    """Answer every prompt (greedy, plus sampled answers), appending to ``--out``; an interrupted run resumes where it
    stopped (answers already in the file are kept and not asked again) unless ``--no-resume``.

    With ``--shard-size N``, ``--out`` is a dataset folder: prompts are taken in the data file's order, N at a time;
    each group is answered into ``partial/`` and, once complete, compressed into ``data/train-NNNNN.jsonl.gz``
    (append-only: a finished shard is never rewritten, so finished shards can be committed while the run goes on;
    only a last shard the prompt file ended inside is extended, its answers kept, once prompts are appended).
    ``enable_engine``: ``hf_specgen.enable``, for ``--decoder engine``."""
    if args.decoder == "engine" and enable_engine is None:
        # training sits below the mixin (ARCHITECTURE.md's layers): the caller hands down the mixin's ``enable``
        raise ValueError("--decoder engine decodes through hf_specgen's generate: call regenerate with "
                         "enable_engine=hf_specgen.enable (`specgen data regenerate` does), or use --decoder stock")
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    records = read_jsonl(args.data)
    if args.domains:
        records = [r for r in records if r.get("domain") in args.domains]
        if not records:
            raise ValueError(f"{args.data} has no records of domains {args.domains}; check --domains")
    records = _pick_records(records, args.limit, args.seed)
    model, tokenizer = _load_target(args, enable_engine)
    from tqdm.auto import tqdm

    out_path = Path(args.out)
    if getattr(args, "worker", (0, 1)) != (0, 1) and not args.shard_size:
        raise ValueError("--worker splits a sharded run; pass --shard-size too")
    if args.shard_size:
        _regenerate_shards(model, tokenizer, records, out_path, args)
        return
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with _only_run_writing(out_path.with_name(out_path.name + ".lock"), str(out_path)):
        if args.no_resume and out_path.exists():
            out_path.unlink()
        done = {row["job"] for row in _read_finished(out_path) if "job" in row}
        jobs = _jobs(records, args.samples_per_prompt, done)
        with tqdm(total=len(jobs) + len(done), initial=len(done), desc="regenerating", unit="resp") as bar:
            _answer(model, tokenizer, jobs, out_path, args, bar)
    summary = _summarize(_read_finished(out_path), {r["prompt"]: r for r in records})
    Path(str(out_path) + ".summary.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out_path}: {summary}")


def _regenerate_shards(model, tokenizer, records: list[dict], folder: Path, args) -> None:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "partial").mkdir(exist_ok=True)
    worker, workers = getattr(args, "worker", (0, 1))
    # (per worker: workers of one run share the folder, each writing its own shards)
    with _only_run_writing(folder / "partial" / f"worker-{worker}-of-{workers}.lock",
                           f"the shards of worker {worker}/{workers} into {folder}"):
        _answer_shards(model, tokenizer, records, folder, args, worker, workers)


def _answer_shards(model, tokenizer, records: list[dict], folder: Path, args, worker: int, workers: int) -> None:
    import gzip

    from tqdm.auto import tqdm

    groups = [records[i: i + args.shard_size] for i in range(0, len(records), args.shard_size)]
    per_record = 1 + args.samples_per_prompt
    mine = [i for i in range(len(groups)) if i % workers == worker]

    def shard_path(index: int) -> Path:
        return folder / "data" / f"train-{index:05d}.jsonl.gz"

    # A finished shard holds its whole group. The last one can be short (the prompt file ended inside it); once
    # prompts are appended to the file (`specgen data prompts --append`), its group grows and it is extended.
    # Only the job keys are held for the run (its hours); a shard's rows are read again if it is extended.
    answered = {i: [row["job"] for row in read_jsonl(shard_path(i))] for i in mine if shard_path(i).exists()}
    orders = {i: {_job_key(r, k): n for n, (r, k) in enumerate(_jobs(groups[i], args.samples_per_prompt, set()))}
              for i in mine}
    for index, jobs in answered.items():
        if jobs != list(orders[index])[:len(jobs)]:
            raise ValueError(f"{shard_path(index)} does not hold the first answers of prompts "
                             f"{index * args.shard_size}-{index * args.shard_size + len(groups[index]) - 1} of "
                             f"{args.data}: the prompt file was changed other than by appending, or --shard-size "
                             "differs from the run that wrote it")
    with tqdm(total=sum(len(groups[i]) for i in mine) * per_record,
              initial=sum(len(jobs) for jobs in answered.values()),
              desc=f"answering into {folder}/data" + (f" (worker {worker}/{workers})" if workers > 1 else ""),
              unit="resp") as bar:
        for index in mine:
            group, final, order = groups[index], shard_path(index), orders[index]
            if len(answered.get(index, ())) == len(order):
                continue
            kept = read_jsonl(final) if index in answered else []
            partial = folder / "partial" / f"train-{index:05d}.jsonl"
            done = {row["job"] for row in kept + _read_finished(partial) if "job" in row}
            bar.update(len(done) - len(kept))
            _answer(model, tokenizer, _jobs(group, args.samples_per_prompt, done), partial, args, bar)
            rows = kept + _read_finished(partial)
            if sorted(row["job"] for row in rows) != sorted(order):  # never a shard short of its answers
                raise RuntimeError(f"{partial} and {final} hold {len(rows)} answers where shard {index} needs one "
                                   f"for each of its {len(order)} jobs: was the partial file removed or written by "
                                   "another run? Nothing was written; run again to answer what is missing")
            rows.sort(key=lambda row: order[row["job"]])  # the prompt file's order, whatever the batching was
            tmp = final.with_suffix(".tmp")
            with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
            tmp.replace(final)  # atomic: a shard is either complete (for its prompts then) or as it was
            partial.unlink()
    rows = read_jsonl(folder)
    summary = _summarize(rows, {r["prompt"]: r for r in records})
    summary["answer_tokens"] = sum(len(row["response_ids"]) for row in rows)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {folder}: {summary}")


def add_arguments(parser) -> None:
    parser.add_argument("--target", required=True,
                        help="target model folder (with its tokenizer and chat template), or a packaged target's name")
    parser.add_argument("--data", required=True, help="JSONL with 'prompt' (and 'domain') fields")
    parser.add_argument("--out", required=True, help="output JSONL of prompt/response records")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts, domains balanced")
    parser.add_argument("--domains", nargs="+", default=None, help="only records of these domains (e.g. code)")
    parser.add_argument("--samples-per-prompt", type=int, default=1,
                        help="sampled answers per prompt besides the greedy one (0: greedy only)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--decoder", default="engine", choices=["engine", "stock"],
                        help="engine: hf_specgen's plain decoding (static cache; a batch's finished rows leave it, so "
                             "later steps compute only the rows still answering); stock: transformers' generate. "
                             "Both give the target's greedy tokens (default: engine, the faster one measured)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-resume", action="store_true", help="start over instead of adding to an existing --out")
    parser.add_argument("--shard-size", type=int, default=0,
                        help="write a dataset folder: --out/data/train-NNNNN.jsonl.gz, this many prompts a shard")
    parser.add_argument("--worker", type=_worker, default=(0, 1), metavar="K/N",
                        help="with --shard-size: answer only the shards whose index is K modulo N, so N processes "
                             "(or machines) share one run into the same folder (default: 0/1, every shard)")


def _worker(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N) with 0 <= K < N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--worker takes K/N, e.g. 0/4 (got {text!r})") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--worker K/N needs 0 <= K < N (got {text!r})")
    return k, n
