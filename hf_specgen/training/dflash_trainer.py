"""``specgen train dflash``: train a DFlash drafter for any target, following the paper's recipe.

One training example is a target-regenerated chat sequence (prompt + the target's own response). Per step:

1. The frozen target runs once over the padded batch [M, S] and we keep its tapped hidden states [M, S, n_taps*H].
2. Up to ``max_anchors`` anchor positions a are drawn per sequence among response tokens. Each makes a block
   [token at a, mask x (B-1)] at positions a..a+B-1: exactly what the drafter sees at inference, where a is the last
   committed (bonus) token.
3. All blocks of a sequence go through the drafter in ONE forward: queries [M, A*B], keys [context S ; blocks A*B].
   A block row sees context rows strictly before its anchor (the anchor's own hidden state does not exist yet at
   inference) and every row of its own block, nothing else: S + B of the S + A*B keys, so attention computes only
   those (flex attention's block mask on a GPU, ``AnchoredBlocks`` on a CPU, where flex has no backward).
4. Slot k (1..B-1) of anchor a predicts the token at a+k (same-position prediction), cross entropy weighted by
   exp(-(k-1)/gamma) and normalized by the weight sum; slot 0 and positions outside the response are not scored.

The target's embedding table and lm_head are used but never trained. The result is saved in z-lab's checkpoint format
(the drafter's ``save_pretrained``), so it loads in hf_specgen, through ``AutoModel`` + ``trust_remote_code``, and in
vLLM/SGLang.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..drafters.dflash import DraftHead
from ..models.dflash import AnchoredBlocks, DFlashDraftModel, dflash_config_for_target
from .corpus import read_jsonl
from .lm import chat_examples, most_frequent_answer_tokens
from .loop import (BudgetBatches, add_run_arguments, epoch_batch, load_frozen_target, run_training, settings_from_args,
                   start_run)

DEFAULT_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}  # the paper's decay per block size


def default_gamma(block_size: int) -> float:
    if block_size in DEFAULT_GAMMA:
        return DEFAULT_GAMMA[block_size]
    return max(1.0, 7.0 * block_size / 16)  # interpolate the paper's choices for other sizes


def slot_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[B] loss weight per block slot: 0 for slot 0 (the given token), exp(-(k-1)/gamma) for slot k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32)
    weights = torch.exp(-(k - 1) / gamma)
    weights[0] = 0.0
    return weights


@dataclass
class AnchorBatch:
    """Everything one drafter forward needs for M sequences with A anchor slots each (padded)."""
    input_ids: torch.Tensor  # [M, S] right-padded sequences (pad beyond each length)
    anchors: torch.Tensor  # [M, A] anchor positions (0 where padded)
    anchor_valid: torch.Tensor  # [M, A] bool
    labels: torch.Tensor  # [M, A, B] token at anchor+k, or -100 where not scored
    lengths: torch.Tensor  # [M]


def sample_anchors(loss_mask: torch.Tensor, max_anchors: int, generator: torch.Generator) -> torch.Tensor:
    """Sorted anchor positions for one sequence: response positions p with a scored next token, without replacement.

    loss_mask: [S] bool (response tokens). A block may run past the end of the sequence; its later slots are simply
    not scored, so short answers still teach the drafter how they end.
    """
    candidates = torch.nonzero(loss_mask[:-1] & loss_mask[1:]).flatten()  # [n] p with p and p+1 in the response
    if len(candidates) > max_anchors:
        candidates = candidates[torch.randperm(len(candidates), generator=generator)[:max_anchors]]
    return torch.sort(candidates).values


def anchor_count(example: tuple[list[int], int], max_anchors: int) -> int:
    """Anchors :func:`sample_anchors` draws for one (ids, prompt length) example (at least 1 slot when none)."""
    ids, n_prompt = example
    return max(1, min(max_anchors, len(ids) - max(n_prompt, 0) - 1))


def build_anchor_batch(examples: list[tuple[list[int], int]], block_size: int, max_anchors: int,
                       pad_id: int, generator: torch.Generator) -> AnchorBatch:
    width = max(len(ids) for ids, _ in examples)
    m = len(examples)
    input_ids = torch.full((m, width), pad_id, dtype=torch.long)
    per_sequence = []
    for row, (ids, n_prompt) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        loss_mask = torch.zeros(len(ids), dtype=torch.bool)
        loss_mask[n_prompt:] = True
        per_sequence.append((sample_anchors(loss_mask, max_anchors, generator), loss_mask))
    slots = max(1, max(len(a) for a, _ in per_sequence))
    anchors = torch.zeros((m, slots), dtype=torch.long)
    valid = torch.zeros((m, slots), dtype=torch.bool)
    labels = torch.full((m, slots, block_size), -100, dtype=torch.long)
    offsets = torch.arange(block_size)
    for row, ((ids, _), (seq_anchors, loss_mask)) in enumerate(zip(examples, per_sequence)):
        n = len(seq_anchors)
        anchors[row, :n] = seq_anchors
        valid[row, :n] = True
        targets = seq_anchors[:, None] + offsets[None]  # [n, B] position each slot predicts
        inside = targets < len(ids)
        scored = inside & loss_mask[targets.clamp(max=len(ids) - 1)]
        scored[:, 0] = False  # slot 0 holds the given token
        labels[row, :n] = torch.where(scored, input_ids[row, targets.clamp(max=width - 1)], -100)
    lengths = torch.tensor([len(ids) for ids, _ in examples])
    return AnchorBatch(input_ids, anchors, valid, labels, lengths)


def block_visibility(anchors: torch.Tensor, lengths: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """[M, 1, A*B, S + A*B] bool: which keys each block row may attend to (the dense form of the training mask)."""
    m, a = anchors.shape
    rows = torch.arange(a * block_size, device=anchors.device)
    row_anchor = anchors[:, rows // block_size]  # [M, A*B]
    ctx = torch.arange(context_len, device=anchors.device)
    sees_context = (ctx[None, None] < row_anchor[..., None]) & (ctx[None, None] < lengths[:, None, None])
    sees_block = (rows[None, :, None] // block_size) == (rows[None, None, :] // block_size)  # [1, A*B, A*B]
    return torch.cat([sees_context, sees_block.expand(m, -1, -1)], dim=-1)[:, None]


def flex_block_mask(anchors: torch.Tensor, lengths: torch.Tensor, context_len: int, block_size: int):
    """The same visibility as :func:`block_visibility`, as a flex attention BlockMask (GPU training)."""
    from torch.nn.attention.flex_attention import create_block_mask

    m, a = anchors.shape

    def visible(b, h, q, kv):
        anchor = anchors[b, q // block_size]
        in_context = (kv < context_len) & (kv < anchor) & (kv < lengths[b])
        in_own_block = (kv >= context_len) & ((kv - context_len) // block_size == q // block_size)
        return in_context | in_own_block

    return create_block_mask(visible, m, None, a * block_size, context_len + a * block_size, device=anchors.device)


ATTENTION_KINDS = ("blocks", "flex", "dense")


@dataclass
class TargetPass:
    """What one frozen-target forward over a right-padded batch gives the drafter's loss."""
    taps: torch.Tensor  # [M, S, n_taps*H] hidden states at the drafter's tapped layers
    final: torch.Tensor  # [M, S, H] final-normed states: lm_head(final[p]) is the target's distribution for p+1


@torch.no_grad()
def target_pass(drafter: DFlashDraftModel, target, input_ids: torch.Tensor) -> TargetPass:
    out = target.model(input_ids=input_ids, output_hidden_states=True)  # right padding: causal, no mask needed
    taps = torch.cat([out.hidden_states[i + 1] for i in drafter.target_layer_ids], dim=-1)
    return TargetPass(taps, out.last_hidden_state)


def drafter_block_states(drafter: DFlashDraftModel, target, batch: AnchorBatch, attention: str = "blocks",
                         taps: torch.Tensor | None = None) -> torch.Tensor:
    """[M, A*B, H]: the drafter's output for every block of every sequence, in one forward.

    attention: "blocks" (only the visible scores; any device), "flex" (a flex BlockMask; GPU training) or "dense"
    (SDPA with the full mask: the reference the other two are tested against). taps: the target's tapped states
    for ``batch.input_ids`` when already computed (:class:`TargetPass`).
    """
    device = next(drafter.parameters()).device
    input_ids = batch.input_ids.to(device)
    anchors, lengths = batch.anchors.to(device), batch.lengths.to(device)
    m, s = input_ids.shape
    a, block = anchors.shape[1], drafter.block_size
    if taps is None:
        taps = target_pass(drafter, target, input_ids).taps
    with torch.no_grad():
        block_tokens = torch.full((m, a, block), drafter.mask_token_id, device=device)
        block_tokens[:, :, 0] = torch.gather(input_ids, 1, anchors)  # [M, A, B] = [token at a, mask, ...]
        noise = target.get_input_embeddings()(block_tokens.view(m, a * block))  # [M, A*B, H]
    block_positions = (anchors[..., None] + torch.arange(block, device=device)).view(m, a * block)
    position_ids = torch.cat([torch.arange(s, device=device).expand(m, -1), block_positions], dim=1)  # [M, S+A*B]
    if attention == "flex":
        mask = flex_block_mask(anchors, lengths, s, block)
    elif attention == "dense":
        mask = block_visibility(anchors, lengths, s, block)
    elif attention == "blocks":
        mask = AnchoredBlocks(anchors, lengths, block)
    else:
        raise ValueError(f"attention must be one of {ATTENTION_KINDS}, not {attention!r}")
    return drafter(noise_embedding=noise, target_hidden=taps, position_ids=position_ids, attention_mask=mask)


def init_from_target_layers(drafter: DFlashDraftModel, target) -> list[int]:
    """Start the drafter's N layers as copies of the target's last N decoder layers; returns the copied layer ids.

    A drafter's output goes through the target's own final norm and lm_head, so the target's last layers already
    compute what its layers must: turn context into next-token logits. Starting there learns faster than a random
    start on a CPU budget (SmolLM2, same 330 answers, 6 minutes: training loss 5.50 against 6.67). The wiring makes
    the first layer's context keys/values exactly the target's at its first copied layer: ``fc`` passes through the
    tap just below it (other taps start at zero) and ``hidden_norm`` takes that layer's input norm, since context rows
    skip the drafter layers' own input norm. Qwen3-style q/k norms, which Llama-style targets lack, start as ones.
    Needs the tap at ``L - N - 1`` (``--target-layer-ids ... L-N-1``).
    """
    from ..engine.taps import decoder_layers

    layers = decoder_layers(target)
    n = len(drafter.layers)
    first = len(layers) - n
    if first - 1 not in drafter.target_layer_ids:
        raise ValueError(f"--init-layers-from-target copies target layers {first}..{len(layers) - 1} and needs the tap "
                         f"just below them: include {first - 1} in --target-layer-ids "
                         f"(now {drafter.target_layer_ids})")
    hidden = drafter.config.hidden_size
    with torch.no_grad():
        for mine, theirs in zip(drafter.layers, layers[first:]):
            # strict=False: the drafter's q_norm/k_norm have no counterpart in Llama-style layers (they keep ones)
            missing, unexpected = mine.load_state_dict(theirs.state_dict(), strict=False)
            if unexpected or any(not name.endswith(("q_norm.weight", "k_norm.weight")) for name in missing):
                raise ValueError(f"target layer {type(theirs).__name__} does not match the drafter layer's shapes "
                                 f"(missing {missing}, unexpected {unexpected}); train without "
                                 "--init-layers-from-target")
        tap = drafter.target_layer_ids.index(first - 1)
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, tap * hidden:(tap + 1) * hidden] = torch.eye(hidden)
        drafter.hidden_norm.weight.copy_(layers[first].input_layernorm.weight)
        final_norm = getattr(target.get_decoder(), "norm", None)
        if final_norm is not None:
            drafter.norm.weight.copy_(final_norm.weight)
    return list(range(first, len(layers)))


def seen_vocabulary(examples: list[tuple[list[int], int]], vocab_size: int) -> torch.Tensor:
    """[V'] sorted ids of every token in the data (prompts and answers): the softmax of ``--train-vocab seen``."""
    seen = torch.zeros(vocab_size, dtype=torch.bool)
    for ids, _ in examples:
        seen[torch.tensor(ids)] = True
    return torch.nonzero(seen).flatten()


def dflash_loss(drafter: DFlashDraftModel, target, batch: AnchorBatch, weights: torch.Tensor,
                attention: str = "blocks", train_vocab: torch.Tensor | None = None,
                passed: TargetPass | None = None, soft_label_weight: float = 0.0) -> tuple[torch.Tensor, int]:
    """Slot-weighted loss of all blocks; returns (loss, number of scored slots).

    Per scored slot: (1 - w) x cross entropy against the data's token + w x KL(target || drafter), the target's own
    distribution for that position as a soft label (w = ``soft_label_weight``; the data are the target's greedy
    answers, so the hard label is that distribution's argmax, and the soft one also teaches which tokens come close).
    ``train_vocab`` [V'] restricts both softmaxes to these token ids (every label must be one of them). On a CPU the
    lm_head product over a 49k vocabulary is most of a step; the tokens a target never wrote in the data only need to
    stay unlikely, and the offline tau (full lm_head, as at inference) checks that they do. ``passed``: the target's
    forward over ``batch.input_ids`` when already run.
    """
    if not 0.0 <= soft_label_weight <= 1.0:
        raise ValueError(f"soft_label_weight must be in [0, 1], not {soft_label_weight}")
    if passed is None:
        passed = target_pass(drafter, target, batch.input_ids.to(next(drafter.parameters()).device))
    hidden = drafter_block_states(drafter, target, batch, attention, passed.taps)
    m, rows = hidden.shape[:2]
    labels = batch.labels.to(hidden.device).view(m, rows)
    head, head_bias = target.lm_head.weight, target.lm_head.bias
    if train_vocab is not None:  # the restricted head, and each label's position in it
        train_vocab = train_vocab.to(hidden.device)
        head, head_bias = head[train_vocab], None if head_bias is None else head_bias[train_vocab]
        position = torch.full((target.lm_head.weight.shape[0],), -100, dtype=torch.long, device=hidden.device)
        position[train_vocab] = torch.arange(len(train_vocab), device=hidden.device)
        labels = torch.where(labels == -100, labels, position[labels.clamp(min=0)])
    logits = F.linear(hidden, head, head_bias).float()  # [M, A*B, V']; frozen, but passes gradients to the drafter
    token_loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100,
                                 reduction="none").view(m, rows)
    scored = labels != -100  # [M, A*B]
    if soft_label_weight > 0:
        # slot k of the block anchored at a predicts a+k: the target's distribution for it sits at row a+k-1
        block = drafter.block_size
        anchors = batch.anchors.to(hidden.device)
        source = (anchors[..., None] + torch.arange(block, device=hidden.device) - 1).view(m, rows)  # [M, A*B]
        source = source.clamp(0, passed.final.shape[1] - 1)
        with torch.no_grad():
            teacher_states = passed.final[torch.arange(m, device=hidden.device)[:, None], source][scored]  # [N, H]
            teacher = F.log_softmax(F.linear(teacher_states, head, head_bias).float(), dim=-1)  # [N, V']
        student = F.log_softmax(logits[scored], dim=-1)  # [N, V']
        kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)  # [N]
        token_loss = token_loss.masked_scatter(scored, (1 - soft_label_weight) * token_loss[scored]
                                               + soft_label_weight * kl)
    slot_weight = weights.to(hidden.device).repeat(rows // weights.shape[0])[None] * scored  # [M, A*B]
    n_scored = int(scored.sum())
    return (token_loss * slot_weight).sum() / slot_weight.sum().clamp(min=1e-6), n_scored


@torch.no_grad()
def offline_acceptance(drafter, target, examples, pad_id: int, limit: int = 64) -> dict:
    """Expected tokens per round on held-out sequences, judged against the data (teacher forcing).

    For every response anchor whose block lies inside the response, the drafter's greedy block is compared with the
    true next tokens; tau = 1 + the number of leading matches (the target's bonus token counts). A quick proxy for
    decode-time tau on the target's own text. The drafter's draft vocabulary, if any, limits its guesses.
    """
    head = DraftHead(target.lm_head, drafter.draft_vocab)
    taus, blocks = offline_acceptance_by_head(drafter, target, examples, pad_id, {None: head}, limit)
    return {"offline_tau": taus[None], "blocks_judged": blocks}


@torch.no_grad()
def offline_acceptance_by_head(drafter, target, examples, pad_id: int, heads: dict, limit: int = 64):
    """``offline_acceptance`` for several ways of turning the drafter's block states into guesses ({name:
    DraftHead}; the states are computed once): ({name: offline tau}, blocks judged)."""
    generator = torch.Generator().manual_seed(1234)
    block = drafter.block_size
    matches, blocks = dict.fromkeys(heads, 0), 0
    for start in range(0, min(limit, len(examples)), 8):
        batch = build_anchor_batch(examples[start: start + 8], block, 10_000, pad_id, generator)
        hidden = drafter_block_states(drafter, target, batch)
        labels = batch.labels.to(hidden.device)[..., 1:]
        judged = (labels != -100).all(-1) & batch.anchor_valid.to(hidden.device)
        blocks += int(judged.sum())
        for name, head in heads.items():
            matches[name] += int(block_leading_matches(hidden, batch, head, block)[judged].sum())
    return {name: 1 + count / max(blocks, 1) for name, count in matches.items()}, blocks


def block_leading_matches(hidden: torch.Tensor, batch: AnchorBatch, head, block: int) -> torch.Tensor:
    """[M, A]: the leading drafts of each anchor's block (its greedy guesses through ``head`` from the drafter's block
    states ``hidden`` [M, A*B, H]) that match the data; a slot past the response never matches."""
    guess = head.token_ids(head(hidden).argmax(-1)).view(hidden.shape[0], -1, block)[..., 1:]  # [M, A, B-1]
    labels = batch.labels.to(hidden.device)[..., 1:]
    return (guess == labels).long().cumprod(-1).sum(-1)


def train_dflash(args) -> dict:
    if args.init_from and args.init_layers_from_target:
        raise ValueError("--init-from continues a trained drafter and --init-layers-from-target starts a new one from "
                         "the target's layers: pass one of them")
    out_dir = start_run(args)
    tokenizer, target = load_frozen_target(args.target)
    mask_token_id = args.mask_token_id if args.mask_token_id is not None else tokenizer.mask_token_id
    if mask_token_id is None:
        raise ValueError("the tokenizer has no mask token; pass --mask-token-id (an id the target never produces, "
                         "e.g. a reserved special token)")
    if not 0 <= mask_token_id < target.config.vocab_size:
        raise ValueError(f"--mask-token-id {mask_token_id} is outside the target's vocabulary "
                         f"({target.config.vocab_size} tokens)")
    if args.init_from:  # continue from a trained drafter (its geometry wins) with a fresh schedule
        drafter = DFlashDraftModel.from_pretrained(args.init_from, dtype=torch.float32)
        if drafter.block_size != args.block_size or drafter.mask_token_id != mask_token_id:
            raise ValueError(f"--init-from {args.init_from} has block size {drafter.block_size} and mask token "
                             f"{drafter.mask_token_id}; pass --block-size {drafter.block_size} and that mask token")
    else:
        config = dflash_config_for_target(target.config, args.layers, args.block_size, mask_token_id,
                                          target_layer_ids=args.target_layer_ids, num_taps=args.num_taps)
        drafter = DFlashDraftModel(config)
        if args.init_layers_from_target:
            init_from_target_layers(drafter, target)
    gamma = args.gamma or default_gamma(args.block_size)
    weights = slot_weights(args.block_size, gamma)

    records = read_jsonl(args.data)
    examples = chat_examples(tokenizer, records, args.seq_len)
    heldout = examples[: args.heldout]
    train = examples[args.heldout:]
    if not train:
        raise ValueError(f"{args.data} has too few records ({len(examples)}) for --heldout {args.heldout}")
    attention = args.attention
    if attention == "auto":
        attention = "flex" if torch.cuda.is_available() else "blocks"

    # --anchor-budget: batches of similar answer lengths holding about that many anchors (short answers are many)
    budget = BudgetBatches([anchor_count(ex, args.max_anchors) for ex in train], args.anchor_budget, args.seed) \
        if args.anchor_budget else None

    def batch_for_step(index: int) -> AnchorBatch:
        picks = budget.batch(index) if budget else epoch_batch(index, len(train), args.batch_size, args.seed)
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + index)  # anchors differ every epoch
        return build_anchor_batch([train[i] for i in picks], args.block_size, args.max_anchors,
                                  tokenizer.pad_token_id, generator)

    train_vocab = seen_vocabulary(examples, target.config.vocab_size) if args.train_vocab == "seen" else None
    if args.draft_vocab_size is not None:  # 0 lifts a restriction --init-from's drafter had
        drafter.set_draft_vocab(most_frequent_answer_tokens(train, target.config.vocab_size, args.draft_vocab_size)
                                if args.draft_vocab_size else None)

    def loss_fn(model, batch):
        if target.device != next(model.parameters()).device:
            target.to(next(model.parameters()).device)
        return dflash_loss(model, target, batch, weights, attention, train_vocab,
                           soft_label_weight=args.soft_label_weight)

    def evaluate(model):
        # in the training precision: an fp32 pass over the held-out blocks takes minutes on a CPU
        device_type = next(model.parameters()).device.type
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16"):
            return offline_acceptance(model, target, heldout, tokenizer.pad_token_id)

    settings = settings_from_args(args, out_dir)
    log = run_training(drafter, settings, batch_for_step, loss_fn, description=f"DFlash drafter b{args.block_size}",
                       evaluate=evaluate,
                       run_info={"target": str(args.target), "data": str(args.data), "train_sequences": len(train),
                                 "heldout_sequences": len(heldout), "gamma": gamma, "max_anchors": args.max_anchors,
                                 "anchor_budget": args.anchor_budget, "init_from": args.init_from,
                                 "init_layers_from_target": bool(args.init_layers_from_target),
                                 "attention": attention, "soft_label_weight": args.soft_label_weight,
                                 "train_vocab": len(train_vocab) if train_vocab is not None else "all",
                                 "draft_vocab": len(drafter.draft_vocab) if drafter.draft_vocab is not None else "all",
                                 "drafter_parameters": sum(p.numel() for p in drafter.parameters())})
    drafter.save_pretrained(out_dir / "model")
    print(json.dumps({k: v for k, v in log.items() if k != "history"}, indent=2))
    return log


def add_arguments(parser) -> None:
    parser.add_argument("--target", required=True, help="target model folder (frozen; its tokenizer is used)")
    parser.add_argument("--data", required=True, help="prompt/response JSONL regenerated by the target")
    parser.add_argument("--out", required=True, help="run folder: checkpoint/, log.json, loss.png, model/")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2, help="drafter decoder layers")
    parser.add_argument("--num-taps", type=int, default=None, help="tapped target layers (default: one per layer)")
    parser.add_argument("--target-layer-ids", type=int, nargs="+", default=None)
    parser.add_argument("--mask-token-id", type=int, default=None, help="default: the tokenizer's mask token")
    parser.add_argument("--max-anchors", type=int, default=512, help="anchors per sequence (the paper: 512)")
    parser.add_argument("--gamma", type=float, default=None, help="slot loss decay (default: 7 for B=16, 4 for B=8)")
    parser.add_argument("--attention", default="auto", choices=["auto", *ATTENTION_KINDS],
                        help="auto: flex attention's block mask on a GPU, 'blocks' elsewhere (flex has no CPU "
                             "backward); 'blocks' computes only the scores a row may see, 'dense' masks a full "
                             "score matrix (slow; the reference)")
    parser.add_argument("--seq-len", type=int, default=3072)
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per step (without --anchor-budget)")
    parser.add_argument("--anchor-budget", type=int, default=None,
                        help="instead of a fixed batch size: group answers of similar length, about this many "
                             "anchors per step (data with short and long answers mixed)")
    parser.add_argument("--train-vocab", default="all", choices=["all", "seen"],
                        help="softmax over the whole vocabulary (default), or only over tokens present in the data "
                             "(a CPU saving for large vocabularies; inference always uses the full lm_head)")
    parser.add_argument("--draft-vocab-size", type=int, default=None,
                        help="the drafter proposes only the N most frequent answer tokens of the training data, so "
                             "its lm_head product runs over N rows instead of the vocabulary (lossless: the target "
                             "verifies); saved with the drafter. 0: the whole vocabulary. Default: the whole "
                             "vocabulary, or --init-from's choice")
    parser.add_argument("--soft-label-weight", type=float, default=0.0,
                        help="weight in [0, 1] of a KL term towards the target's own next-token distribution (from "
                             "the same target forward), beside the cross entropy on the data's tokens")
    parser.add_argument("--init-from", default=None, help="start from this trained drafter (fine-tune, new data)")
    parser.add_argument("--init-layers-from-target", action="store_true",
                        help="start the drafter layers as copies of the target's last layers (needs the tap just "
                             "below them in --target-layer-ids); much faster to train than a random start")
    parser.add_argument("--heldout", type=int, default=64, help="sequences kept out for the offline tau estimate")
    add_run_arguments(parser, lr=6e-4)
