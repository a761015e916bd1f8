"""``specgen train router``: train WhiFlash's neural router and save the whole WhiFlash bundle.

Targets, following the paper: at every decoding position of a corpus of the target's own greedy text, both drafters
draft from that point and we record Delta-AL = AL_eagle - AL_dflash together with the target's final decoder layer
output at the last committed position (what the router reads at decode time). On target-greedy text the true
continuation is what the target would emit, so "accepted" = "matches the text":

* AL_dflash(a): 1 + leading matches of the DFlash block anchored at a (one batched drafter forward per sequence);
* AL_eagle(a): 1 + leading matches of EAGLE-3's drafting from row a-1. A chain (top_k = 1) is computed exactly with
  teacher forcing (while drafts match, they ARE the true tokens); with ``--eagle-top-k k`` a step counts as accepted
  when the true token is among the drafter's top k there, an upper bound of what a dynamic tree of that width finds.

The MLP (d -> d/8, GELU, dropout, -> 1) is fit with MSE, AdamW (peak lr 1e-3), through the shared training loop.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from ..engine.taps import HiddenStateTap
from ..loading import load_drafter
from ..models.eagle3 import default_eagle3_layer_ids
from ..models.whiflash import WhiFlash, WhiFlashRouter
from .corpus import read_jsonl
from .dflash_trainer import build_anchor_batch, drafter_block_states
from .eagle3_trainer import ttt_forward
from .lm import chat_examples
from .loop import add_run_arguments, epoch_batch, load_frozen_target, run_training, settings_from_args, start_run


@torch.no_grad()
def router_targets(target, eagle, dflash, example: tuple[list[int], int], eagle_depth: int, eagle_top_k: int,
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For one sequence: (hidden [n, d], al_eagle [n], al_dflash [n], anchors [n]) at every anchor a (the position
    of the last committed token when a round starts) in the response whose DFlash block and EAGLE-3 chain both fit
    inside it."""
    ids, n_prompt = example
    block = dflash.block_size
    batch = build_anchor_batch([example], block, 10_000, pad_id, torch.Generator().manual_seed(0))
    anchors = batch.anchors[0][batch.anchor_valid[0]]  # positions a (the committed token the next round starts at)
    horizon = max(block - 1, eagle_depth)
    anchors = anchors[(anchors + horizon < len(ids)) & (anchors >= 1)]
    if len(anchors) == 0:
        return (torch.zeros(0, target.config.hidden_size), torch.zeros(0), torch.zeros(0),
                torch.zeros(0, dtype=torch.long))
    seq = torch.tensor([ids])
    layers = target.config.num_hidden_layers
    eagle_taps = eagle.target_layer_ids or default_eagle3_layer_ids(layers)
    with HiddenStateTap(target, [layers - 1]) as tap:
        out = target.model(input_ids=seq, output_hidden_states=True)
        final = tap.features()[0]  # [S, d] the final decoder layer output (pre-norm), as the router sees it
    truth = seq[0]

    # DFlash: leading matches of each anchor's block against the text.
    states = drafter_block_states(dflash, target, batch)  # [1, A*B, H]
    guess = target.lm_head(states).argmax(-1).view(-1, block)[batch.anchor_valid[0]]  # [A, B]
    keep = torch.isin(batch.anchors[0][batch.anchor_valid[0]], anchors)
    guess = guess[keep][:, 1:]  # [n, B-1] slot k predicts a+k
    offsets = torch.arange(1, block)
    al_dflash = 1 + (guess == truth[anchors[:, None] + offsets]).long().cumprod(-1).sum(-1)

    # EAGLE-3: step s from row t = a-1 predicts x_{a+s}.
    rows = len(ids) - eagle_depth - 1
    features = torch.cat([out.hidden_states[i + 1][:, :rows] for i in eagle_taps], dim=-1)
    padded = torch.cat([seq, torch.full((1, 1), pad_id)], dim=1)
    steps = ttt_forward(eagle, target.get_input_embeddings(), padded, features, eagle_depth)
    hits = []
    for s, hidden in enumerate(steps, start=1):
        logits = eagle.draft_logits(hidden[0, anchors - 1])  # [n, draft_vocab]
        top = eagle.to_target_ids(logits.topk(eagle_top_k, dim=-1).indices)  # [n, k]
        hits.append((top == truth[anchors + s][:, None]).any(-1))
    al_eagle = 1 + torch.stack(hits, dim=-1).long().cumprod(-1).sum(-1)
    return final[anchors - 1], al_eagle.float(), al_dflash.float(), anchors


def train_router(args) -> dict:
    out_dir = start_run(args)
    tokenizer, target = load_frozen_target(args.target)
    eagle = load_drafter(args.eagle3).float().eval()
    dflash = load_drafter(args.dflash).float().eval()
    records = [r for r in read_jsonl(args.data) if not r.get("sampled")]  # target-greedy text only
    examples = chat_examples(tokenizer, records[: args.max_sequences], args.seq_len)
    from tqdm.auto import tqdm

    xs, ys, al_e, al_d = [], [], [], []
    for example in tqdm(examples, desc="drafting both ways", unit="seq"):
        hidden, eagle_al, dflash_al, _ = router_targets(target, eagle, dflash, example, args.eagle_depth,
                                                     args.eagle_top_k, tokenizer.pad_token_id)
        xs.append(hidden)
        ys.append(eagle_al - dflash_al)
        al_e.append(eagle_al)
        al_d.append(dflash_al)
    x, y = torch.cat(xs), torch.cat(ys)
    if len(x) == 0:
        raise ValueError("no usable positions: responses are shorter than the drafters' horizon")
    router = WhiFlashRouter(target.config.hidden_size, dropout=args.dropout)

    def batch_for_step(index: int):
        picks = epoch_batch(index, len(x), args.batch_size, args.seed)
        return x[picks], y[picks]

    def loss_fn(model, batch):
        features, delta = batch
        return F.mse_loss(model(features.to(next(model.parameters()).device)).float(), delta), len(delta)

    settings = settings_from_args(args, out_dir / "router_run")
    log = run_training(router, settings, batch_for_step, loss_fn, description="WhiFlash router",
                       run_info={"positions": len(x), "sequences": len(examples),
                                 "mean_al_eagle": float(torch.cat(al_e).mean()),
                                 "mean_al_dflash": float(torch.cat(al_d).mean()),
                                 "oracle_token_al": float(torch.maximum(torch.cat(al_e), torch.cat(al_d)).mean()),
                                 "eagle_top_k_proxy": args.eagle_top_k, "eagle_depth": args.eagle_depth})
    bundle = WhiFlash(ar=eagle, parallel=dflash, router="neural", neural_router=router.eval(),
                      neural_threshold=args.neural_threshold, entropy_threshold=args.entropy_threshold)
    bundle.save_pretrained(out_dir)
    print(json.dumps({k: v for k, v in log.items() if k != "history"}, indent=2))
    return log


def add_arguments(parser) -> None:
    parser.add_argument("--target", required=True)
    parser.add_argument("--eagle3", required=True, help="EAGLE-3 drafter folder")
    parser.add_argument("--dflash", required=True, help="DFlash drafter folder")
    parser.add_argument("--data", required=True, help="target-regenerated JSONL (greedy rows are used)")
    parser.add_argument("--out", required=True, help="WhiFlash bundle folder to write (drafters + router)")
    parser.add_argument("--max-sequences", type=int, default=1000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--eagle-depth", type=int, default=8)
    parser.add_argument("--eagle-top-k", type=int, default=1, help="1 = exact chain AL; k > 1 = top-k proxy")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--neural-threshold", type=float, default=1.0)
    parser.add_argument("--entropy-threshold", type=float, default=2.0)
    add_run_arguments(parser, lr=1e-3, max_steps=2000, mixed_precision="no")
