"""``specgen train lm``: pretrain a small Qwen3-architecture causal LM, or distill a draft LM from target outputs.

Two data modes share one trainer:

* pretraining (``--pretrain-data``): JSONL documents ``{"text", "domain"}`` joined with ``<|endoftext|>`` into one
  token stream and cut into fixed windows; every token is a target.
* distillation (``--chat-data``): JSONL chat records ``{"prompt", "response"}``, typically the target's own
  responses from ``specgen data regenerate``; only response tokens are targets. A 1-2 layer model trained this way is
  the draft LM for classic speculative decoding and FLy.

Held-out loss per domain is measured on the corpus' evaluation records (response tokens only) at the end.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from .corpus import END_TOKEN, ENDOFTEXT_TOKEN, format_chat, read_jsonl
from .loop import add_run_arguments, epoch_batch, run_training, settings_from_args, start_run

IGNORE = -100


@dataclass
class LMShape:
    hidden_size: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 768
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 2048

    def config(self, tokenizer) -> Qwen3Config:
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("hidden_size must divide by num_attention_heads, and heads by num_key_value_heads")
        return Qwen3Config(
            vocab_size=len(tokenizer), hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings, rope_theta=10000.0, tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT_TOKEN),
        )


def _cached(path: Path, key: str, build):
    """Tokenizing 25M characters takes a while; resumed runs and reruns reuse the tensor saved next to the run."""
    if path.exists():
        saved = torch.load(path, weights_only=True)
        if saved.get("key") == key:
            return saved["value"]
    value = build()
    torch.save({"key": key, "value": value}, path)
    return value


def _file_key(*paths: str | Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for p in paths:
        stat = Path(p).stat()
        digest.update(f"{Path(p).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def token_stream(tokenizer, documents_path: str | Path) -> torch.Tensor:
    """All documents as one 1-D int32 stream, each followed by ``<|endoftext|>``."""
    docs = read_jsonl(documents_path)
    ids = tokenizer([d["text"] + ENDOFTEXT_TOKEN for d in docs], add_special_tokens=False)["input_ids"]
    return torch.tensor([t for seq in ids for t in seq], dtype=torch.int32)


def chat_examples(tokenizer, records: list[dict], max_length: int) -> list[tuple[list[int], int]]:
    """(token ids, number of prompt tokens) per record; the response (and its ``<|end|>``) is the loss region.

    The prompt ends at ``<|assistant|>`` (a special token, so BPE never merges across it) and the response starts
    with the newline that opens the assistant turn, so the ids are exactly those of the whole chat-formatted text
    and the model produces the same tokens at generation time. Records written by ``specgen data regenerate`` carry
    the generated ``response_ids`` themselves (newline included), which are used as they are, and, when the target has
    its own chat template (a real instruct model), the exact ``prompt_ids`` too.
    """
    templated = [r for r in records if "prompt_ids" not in r]
    encoded = iter(tokenizer([format_chat(r["prompt"]) for r in templated], add_special_tokens=False)["input_ids"]
                   if templated else [])
    # Records of any target's own chat template carry the exact prompt ids it was asked with.
    prompts = [list(r["prompt_ids"]) if "prompt_ids" in r else next(encoded) for r in records]
    out = []
    for record, prompt in zip(records, prompts):
        if "response_ids" in record:
            response = list(record["response_ids"]) + ([tokenizer.eos_token_id] if record.get("finished") else [])
        else:
            response = tokenizer("\n" + record["response"] + END_TOKEN, add_special_tokens=False)["input_ids"]
        if response:
            out.append(((prompt + response)[:max_length], len(prompt)))
    return [(ids, n_prompt) for ids, n_prompt in out if n_prompt < len(ids)]


def most_frequent_answer_tokens(examples: list[tuple[list[int], int]], vocab_size: int, count: int) -> torch.Tensor:
    """[count] sorted ids: the most frequent answer tokens of (ids, prompt length) examples, padded with the lowest
    unused ids when the data has fewer distinct tokens (a drafter's draft vocabulary)."""
    counts = Counter(tok for ids, n_prompt in examples for tok in ids[n_prompt:])
    common = [tok for tok, _ in counts.most_common(count)]
    taken = set(common)
    filler = (t for t in range(vocab_size) if t not in taken)
    while len(common) < count:
        common.append(next(filler))
    return torch.tensor(sorted(common))


def pad_chat_batch(examples: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids [B, T] and labels [B, T] (IGNORE outside each response)."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, n_prompt: len(ids)] = torch.tensor(ids[n_prompt:])
    return input_ids, labels


def causal_lm_loss(model, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Mean next-token cross entropy over labelled positions; labels are aligned with input_ids (shifted here)."""
    # Batches are right-padded: causal attention never lets a real token see a later pad, so no mask is needed.
    logits = model(input_ids=input_ids).logits[:, :-1].float()  # [B, T-1, V]
    targets = labels[:, 1:]
    n_tokens = int((targets != IGNORE).sum())
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)
    return loss, n_tokens


@torch.no_grad()
def heldout_loss(model, tokenizer, records: list[dict], batch_size: int = 16, max_length: int = 1024) -> float:
    """Mean response-token loss of ``records`` (what the model pays per token of a held-out answer)."""
    examples = chat_examples(tokenizer, records, max_length)
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        input_ids, labels = pad_chat_batch(examples[start: start + batch_size], tokenizer.pad_token_id)
        input_ids, labels = input_ids.to(model.device), labels.to(model.device)
        loss, n = causal_lm_loss(model, input_ids, labels)
        total += float(loss) * n
        count += n
    return total / max(count, 1)


def evaluate_domains(model, tokenizer, corpus_dir: str | Path, limit: int = 200) -> dict:
    corpus_dir = Path(corpus_dir)
    losses = {}
    for domain in ("code", "math", "prose"):
        path = corpus_dir / f"eval_{domain}.jsonl"
        if path.exists():
            losses[domain] = heldout_loss(model, tokenizer, read_jsonl(path)[:limit])
    return {"loss": losses, "records_per_domain": limit}


def build_model(args, tokenizer) -> Qwen3ForCausalLM:
    shape = LMShape(hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                    intermediate_size=args.intermediate_size, num_attention_heads=args.heads,
                    num_key_value_heads=args.kv_heads, head_dim=args.hidden_size // args.heads)
    model = Qwen3ForCausalLM(shape.config(tokenizer))
    if args.init_embeddings_from:
        # A draft LM learns faster when it starts from the target's token embeddings (same tokenizer, same width).
        source = Qwen3ForCausalLM.from_pretrained(args.init_embeddings_from, dtype=torch.float32)
        if source.get_input_embeddings().weight.shape != model.get_input_embeddings().weight.shape:
            raise ValueError("--init-embeddings-from needs a model with the same vocabulary and hidden size")
        model.get_input_embeddings().weight.data.copy_(source.get_input_embeddings().weight.data)
    return model


def train_lm(args) -> dict:
    if bool(args.pretrain_data) == bool(args.chat_data):
        raise ValueError("give exactly one of --pretrain-data (documents JSONL) or --chat-data (prompt/response JSONL)")
    out_dir = start_run(args)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = build_model(args, tokenizer)

    if args.pretrain_data:
        stream = _cached(out_dir / "tokens.pt", _file_key(args.pretrain_data),
                         lambda: token_stream(tokenizer, args.pretrain_data))
        window = args.seq_len + 1
        n_windows = (len(stream) - 1) // args.seq_len

        def batch_for_step(index: int):
            picks = epoch_batch(index, n_windows, args.batch_size, args.seed)  # shuffled windows of seq_len + 1
            rows = torch.stack([stream[i * args.seq_len: i * args.seq_len + window] for i in picks]).long()
            return rows, rows.clone()

        data_info = {"data": str(args.pretrain_data), "stream_tokens": len(stream), "windows": n_windows}
    else:
        records = read_jsonl(args.chat_data)
        examples = chat_examples(tokenizer, records, args.seq_len)
        if not examples:
            raise ValueError(f"{args.chat_data} has no records with a non-empty response")

        def batch_for_step(index: int):
            picks = epoch_batch(index, len(examples), args.batch_size, args.seed)
            return pad_chat_batch([examples[i] for i in picks], tokenizer.pad_token_id)

        data_info = {"data": str(args.chat_data), "examples": len(examples)}

    def loss_fn(model, batch):
        input_ids, labels = (t.to(model.device) for t in batch)
        return causal_lm_loss(model, input_ids, labels)

    settings = settings_from_args(args, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    log = run_training(
        model, settings, batch_for_step, loss_fn,
        description="draft LM (distill)" if args.chat_data else "LM pretraining",
        evaluate=(lambda m: evaluate_domains(m, tokenizer, args.eval_corpus)) if args.eval_corpus else None,
        run_info={"parameters": n_params, "non_embedding_parameters":
                  n_params - model.get_input_embeddings().weight.numel(), **data_info},
    )
    model.save_pretrained(out_dir / "model")
    tokenizer.save_pretrained(out_dir / "model")
    print(json.dumps({k: v for k, v in log.items() if k != "history"}, indent=2))
    return log


def add_arguments(parser) -> None:
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (specgen data tokenizer)")
    parser.add_argument("--pretrain-data", help="documents JSONL with a 'text' field (pretraining)")
    parser.add_argument("--chat-data", help="prompt/response JSONL (distillation: loss on responses only)")
    parser.add_argument("--eval-corpus", help="corpus folder with eval_{code,math,prose}.jsonl for held-out losses")
    parser.add_argument("--out", required=True, help="run folder: checkpoint/, log.json, loss.png, model/")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--intermediate-size", type=int, default=768)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--init-embeddings-from", help="copy token embeddings from this model (draft LMs)")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    add_run_arguments(parser, lr=1e-3)
