"""``specgen train eagle3``: train an EAGLE-3 drafter for any target with training-time test (TTT).

Data: target-regenerated chat sequences (``specgen data regenerate``); loss on response tokens only. Per step:

1. the frozen target runs over the batch; its taps (default hidden_states [2, L//2, L-3]) give features f_t;
2. TTT step 1: row t pairs embed(x_{t+1}) with f_t and predicts x_{t+2} (a causal pass over the sequence);
3. TTT step s >= 2 unrolls what decoding does after the first draft: row t pairs the TRUE token x_{t+s} with the
   drafter's own step s-1 output for row t (not a target feature), sits at position t+s-1 and predicts x_{t+s+1};
   it attends to the step-1 rows j <= t (real context) and to its own chain's rows of steps 2..s, which is exactly
   the attention pattern of a drafted chain at inference;
4. loss = sum over steps of weight^(s-1) * cross entropy, labels mapped into the draft vocabulary (targets outside it
   are not scored).

The draft vocabulary (``--draft-vocab-size``) is the most frequent response tokens of the data; ``d2t``/``t2d`` are
saved with the weights. The target's embedding table is used and never trained. Exported with ``save_pretrained``
in the EAGLE layout (``midlayer.*``, ``d2t``, ``t2d``), loadable by ``hf_specgen.load_drafter``.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from transformers import LlamaConfig

from ..models.eagle3 import Eagle3DraftModel, default_eagle3_layer_ids
from .corpus import read_jsonl
from .lm import IGNORE, chat_examples, most_frequent_answer_tokens, pad_chat_batch
from .loop import add_run_arguments, epoch_batch, load_frozen_target, run_training, settings_from_args, start_run


def draft_vocabulary(examples, vocab_size: int, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t [draft_vocab], t2d [vocab]) keeping the most frequent response tokens, in increasing id order."""
    if draft_vocab_size >= vocab_size:
        return torch.zeros(vocab_size, dtype=torch.long), torch.ones(vocab_size, dtype=torch.bool)
    kept = most_frequent_answer_tokens(examples, vocab_size, draft_vocab_size)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[kept] = True
    return kept - torch.arange(draft_vocab_size), t2d


def ttt_mask(rows: int, steps: int, device) -> torch.Tensor:
    """[rows, steps*rows] bool for step ``steps``: step-1 keys j <= t (causal), then one key per later step (j == t)."""
    t = torch.arange(rows, device=device)
    blocks = [t[None, :] <= t[:, None]] + [t[None, :] == t[:, None]] * (steps - 1)
    return torch.cat(blocks, dim=1)


def ttt_forward(drafter: Eagle3DraftModel, embed, input_ids: torch.Tensor, features: torch.Tensor,
                steps: int) -> list[torch.Tensor]:
    """Drafter outputs [B, T, H] for TTT steps 1..steps. input_ids [B, T+steps] (right-padded); features [B, T, n*H]
    where row t holds f_t. Step s feeds token x_{t+s} at position t+s-1."""
    mid, attn = drafter.midlayer, drafter.midlayer.self_attn
    batch, rows = features.shape[:2]
    hidden = drafter.fc(features)
    keys, values, outputs = [], [], []
    for s in range(1, steps + 1):
        tokens = embed(input_ids[:, s: s + rows])  # [B, T, H]: x_{t+s}
        positions = (torch.arange(rows, device=features.device) + s - 1)[None].expand(batch, -1)
        cos, sin = drafter.rotary_emb(tokens, positions)
        x = mid.attention_input(tokens, hidden)
        q = attn.queries(x, cos, sin)
        k, v = attn.key_values(x, cos, sin)
        keys.append(k)
        values.append(v)
        mask = ttt_mask(rows, s, features.device)[None, None]
        out = F.scaled_dot_product_attention(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), attn_mask=mask,
                                             scale=attn.head_dim**-0.5, enable_gqa=attn.num_heads != attn.num_kv_heads)
        h = hidden + attn.o_proj(out.transpose(1, 2).reshape(batch, rows, -1))
        h = h + mid.mlp(mid.post_attention_layernorm(h))
        outputs.append(h)
        hidden = h
    return outputs


def ttt_batch(examples, pad_id: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids / labels [B, T + steps + 1]: chat examples with room for ``steps`` unrolled steps."""
    input_ids, labels = pad_chat_batch(examples, pad_id)
    pad = torch.full((len(examples), steps + 1), pad_id)
    return torch.cat([input_ids, pad], dim=1), torch.cat([labels, torch.full_like(pad, IGNORE)], dim=1)


def tapped_features(drafter, target, input_ids: torch.Tensor, rows: int) -> torch.Tensor:
    """[B, rows, n*H]: the frozen target's hidden states at the drafter's taps; row t holds f_t."""
    out = target.model(input_ids=input_ids, output_hidden_states=True)
    layer_ids = drafter.target_layer_ids or default_eagle3_layer_ids(target.config.num_hidden_layers)
    return torch.cat([out.hidden_states[i + 1][:, :rows] for i in layer_ids], dim=-1)


def eagle3_loss(drafter, target, input_ids: torch.Tensor, labels: torch.Tensor, steps: int,
                step_weight: float) -> tuple[torch.Tensor, int]:
    """input_ids / labels [B, S] (labels = token where it is a response token, else IGNORE)."""
    device = next(drafter.parameters()).device
    input_ids, labels = input_ids.to(device), labels.to(device)
    rows = input_ids.shape[1] - steps - 1
    with torch.no_grad():
        features = tapped_features(drafter, target, input_ids, rows)
    outputs = ttt_forward(drafter, target.get_input_embeddings(), input_ids, features, steps)
    total, weight_sum, scored = 0.0, 0.0, 0
    for s, hidden in enumerate(outputs, start=1):
        target_ids = labels[:, s + 1: s + 1 + rows]  # x_{t+s+1}
        in_draft = (target_ids != IGNORE) & drafter.t2d[target_ids.clamp(min=0)]
        draft_ids = torch.cumsum(drafter.t2d.long(), 0)[target_ids.clamp(min=0)] - 1  # target id -> draft id
        draft_labels = torch.where(in_draft, draft_ids, IGNORE)
        logits = drafter.draft_logits(hidden).float()
        if int(in_draft.sum()):
            total = total + step_weight ** (s - 1) * F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), draft_labels.reshape(-1), ignore_index=IGNORE)
            weight_sum += step_weight ** (s - 1)
        scored += int(in_draft.sum())
    return total / max(weight_sum, 1e-9), scored


@torch.no_grad()
def offline_chain_acceptance(drafter, target, examples, pad_id: int, depth: int = 6, limit: int = 64) -> dict:
    """Tokens per round of the drafter's greedy chain of ``depth`` drafts on held-out sequences (teacher forcing).

    Row t of a round starts where x_{t+1} was just committed; TTT step s feeds the true token x_{t+s}, which is the
    chain's own draft whenever steps 1..s-1 were accepted, so the leading matches of step s's guess with x_{t+s+1}
    are exactly what a greedy target accepts on its own answers. tau = 1 + leading matches (the bonus token counts),
    over rows whose next depth + 1 tokens are all response tokens: the EAGLE-3 counterpart of DFlash's
    ``offline_acceptance``.
    """
    matches, rounds = 0, 0
    for start in range(0, min(limit, len(examples)), 8):
        leading, judged = chain_leading_matches(drafter, target, examples[start: start + 8], pad_id, depth)
        matches += int(leading[judged].sum())
        rounds += int(judged.sum())
    return {"offline_tau": 1 + matches / max(rounds, 1), "rounds_judged": rounds, "depth": depth}


@torch.no_grad()
def chain_leading_matches(drafter, target, examples, pad_id: int, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For a batch of chat examples: [B, T] the drafts of a greedy chain of ``depth`` accepted in the round of row t
    (x_{t+1} just committed; a chain running past the answer stops matching there), and [B, T] whether row t is
    judged (its next depth + 1 tokens are all response tokens)."""
    device = next(drafter.parameters()).device
    input_ids, labels = (t.to(device) for t in ttt_batch(examples, pad_id, depth))
    rows = input_ids.shape[1] - depth - 1
    features = tapped_features(drafter, target, input_ids, rows)
    outputs = ttt_forward(drafter, target.get_input_embeddings(), input_ids, features, depth)
    guesses = torch.stack([drafter.to_target_ids(drafter.draft_logits(h).argmax(-1)) for h in outputs], -1)
    truth = torch.stack([labels[:, s + 1: s + 1 + rows] for s in range(1, depth + 1)], -1)  # [B, T, depth]
    judged = (labels[:, 1: 1 + rows] != IGNORE) & (truth != IGNORE).all(-1)  # [B, T]
    leading = (guesses == truth).long().cumprod(-1).sum(-1)  # [B, T] drafts accepted before the first miss
    return leading, judged


def train_eagle3(args) -> dict:
    out_dir = start_run(args)
    tokenizer, target = load_frozen_target(args.target)
    t = target.config
    examples = chat_examples(tokenizer, read_jsonl(args.data), args.seq_len)
    if not examples:
        raise ValueError(f"{args.data} has no usable records")
    heldout, examples = examples[: args.heldout], examples[args.heldout:]
    if not examples:
        raise ValueError(f"{args.data} has too few records for --heldout {args.heldout}")
    draft_vocab = min(args.draft_vocab_size or t.vocab_size, t.vocab_size)
    config = LlamaConfig(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                         num_hidden_layers=1, num_attention_heads=t.num_attention_heads,
                         num_key_value_heads=t.num_key_value_heads,
                         head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
                         rms_norm_eps=t.rms_norm_eps, max_position_embeddings=t.max_position_embeddings,
                         rope_theta=float((getattr(t, "rope_parameters", None) or {}).get("rope_theta", 10000.0)),
                         draft_vocab_size=draft_vocab,
                         target_layer_ids=args.target_layer_ids or default_eagle3_layer_ids(t.num_hidden_layers),
                         architectures=["Eagle3DraftModel"])
    if args.init_from:  # continue a trained drafter (its geometry and draft vocabulary win) with a fresh schedule
        drafter = Eagle3DraftModel.from_pretrained(args.init_from, dtype=torch.float32)
        if drafter.config.hidden_size != t.hidden_size or drafter.config.vocab_size != t.vocab_size:
            raise ValueError(f"--init-from {args.init_from} was trained for another target (hidden size "
                             f"{drafter.config.hidden_size}, vocabulary {drafter.config.vocab_size}); "
                             f"this target has {t.hidden_size} and {t.vocab_size}")
    else:
        drafter = Eagle3DraftModel(config)
        d2t, t2d = draft_vocabulary(examples, t.vocab_size, draft_vocab)
        drafter.d2t.copy_(d2t)
        drafter.t2d.copy_(t2d)

    def batch_for_step(index: int):
        picks = epoch_batch(index, len(examples), args.batch_size, args.seed)
        return ttt_batch([examples[i] for i in picks], tokenizer.pad_token_id, args.ttt_steps)

    def loss_fn(model, batch):
        if target.device != next(model.parameters()).device:
            target.to(next(model.parameters()).device)
        return eagle3_loss(model, target, *batch, steps=args.ttt_steps, step_weight=args.step_weight)

    def evaluate(model):
        device_type = next(model.parameters()).device.type
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16"):
            return offline_chain_acceptance(model, target, heldout, tokenizer.pad_token_id, depth=args.eval_depth)

    settings = settings_from_args(args, out_dir)
    log = run_training(drafter, settings, batch_for_step, loss_fn, description="EAGLE-3 drafter (TTT)",
                       evaluate=evaluate if heldout else None,
                       run_info={"target": str(args.target), "data": str(args.data), "sequences": len(examples),
                                 "heldout_sequences": len(heldout),
                                 "init_from": args.init_from,
                                 "ttt_steps": args.ttt_steps, "draft_vocab_size": draft_vocab,
                                 "drafter_parameters": sum(p.numel() for p in drafter.parameters())})
    drafter.save_pretrained(out_dir / "model")
    print(json.dumps({k: v for k, v in log.items() if k != "history"}, indent=2))
    return log


def add_arguments(parser) -> None:
    parser.add_argument("--target", required=True, help="target model folder (frozen; its tokenizer is used)")
    parser.add_argument("--data", required=True, help="prompt/response JSONL regenerated by the target")
    parser.add_argument("--out", required=True)
    parser.add_argument("--draft-vocab-size", type=int, default=32000, help="most frequent tokens kept (<= vocab)")
    parser.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                        help="decoder-layer outputs to tap (default [1, L//2-1, L-4] = hidden_states [2, L//2, L-3])")
    parser.add_argument("--ttt-steps", type=int, default=4, help="unrolled drafting steps per position")
    parser.add_argument("--step-weight", type=float, default=0.8, help="loss weight of step s is this^(s-1)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--init-from", default=None, help="start from this trained drafter (fine-tune, new data)")
    parser.add_argument("--heldout", type=int, default=0,
                        help="sequences kept out for an offline chain tau estimate (0: train on all, no estimate)")
    parser.add_argument("--eval-depth", type=int, default=6, help="chain length of the offline tau estimate")
    add_run_arguments(parser, lr=3e-4)
