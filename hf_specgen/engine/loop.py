"""The one decoding loop every speculative mode shares.

    prefill -> repeat [propose -> verify -> accept -> commit / roll back] -> stop

A *proposer* (drafters/) turns the committed sequence into a block of W tokens whose first token is the last
committed one; the target verifies the whole block in one forward; ``verify.py`` decides how many drafts
to keep; caches are rolled back by moving a length. Everything here is batch size 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .cache import set_cache_length, static_cache
from .graphs import CACHE_BUCKET, StepRunner
from .session import DecodingSession
from .stats import SpeculativeStats, Stopwatch
from .taps import decoder_layers, tapped
from .tree import TreeProposal, accept_greedy, accept_sampling, compact_path
from .verify import accepted_length, process_block_logits, target_choices


@dataclass
class SpeculativeGenerateOutput(GenerateDecoderOnlyOutput):
    """Stock ``GenerateDecoderOnlyOutput`` plus the run's ``speculative_stats``."""

    speculative_stats: SpeculativeStats | None = None


def _stop_token_ids(generation_config) -> set[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _required_capacity(prompt_len: int, max_new_tokens: int, width: int, compiled: bool,
                       max_cache_len: int | None) -> int:
    """Cache slots for the call: the last verify starts at slot prompt_len + max_new_tokens - 2 and writes W rows.
    Compiled steps get a multiple of CACHE_BUCKET, and ``max_cache_len`` (stock generate's meaning: size the cache
    for the largest call) makes every call up to it share one size, hence one graph."""
    need = prompt_len + max_new_tokens + width
    if compiled:
        need = -(-need // CACHE_BUCKET) * CACHE_BUCKET
    return max(need, max_cache_len or 0)


def check_target(target, capacity: int) -> None:
    cfg = target.config.get_text_config(decoder=True)
    if getattr(cfg, "is_encoder_decoder", False):
        raise ValueError("Speculative modes support decoder-only targets (AutoModelForCausalLM), not encoder-decoder models.")
    window = getattr(cfg, "sliding_window", None)
    uses_window = window is not None and (
        "sliding_attention" in (getattr(cfg, "layer_types", None) or []) or getattr(cfg, "use_sliding_window", True)
    )
    if uses_window and window < capacity:
        raise ValueError(
            f"The target uses sliding-window attention (window {window}) and this call needs {capacity} cache slots; "
            "speculative modes need full attention over the sequence. Lower max_new_tokens / the prompt length so "
            f"prompt + max_new_tokens + block_size <= {window}."
        )
    decoder_layers(target)  # raises a clear error when the model has no decoder layer list


class SpeculativeDecoder:
    """Runs one speculative generate call for ``target`` with a proposer (see drafters/)."""

    def __init__(self, target, proposer, mode: str, compile_steps: bool, verifier=None):
        self.target = target
        self.proposer = proposer
        self.verifier = verifier  # None: lossless acceptance; a FlyVerifier: FLy's loose (lossy) rule
        self.mode = mode
        self.compile_steps = compile_steps
        self.width = proposer.block_size
        self.layer_ids = proposer.tapped_layer_ids
        self._verify = StepRunner(self._verify_step, compile_steps, target.device)

    def _verify_step(self, block_ids, positions, mask):
        # block_ids [1, W]; positions [1, W]; mask [1, 1, W, capacity]
        out = self.target(
            input_ids=block_ids, position_ids=positions, attention_mask=mask, past_key_values=self.cache, use_cache=True
        )
        features = self.tap.features() if self.tap is not None else None  # [1, W, n_taps*H]
        return out.logits[0], features  # [W, V]

    def _verify_tree(self, tree: TreeProposal, session, start: int, logits_processor, do_sample: bool, clock):
        """One target forward over every tree node, the longest accepted path, K/V moved to contiguous slots.

        Returns (n_accepted, new_tokens [n+1], scores [n+1, V], logits [n+1, V], features [1, n+1, n_taps*H],
        time the verify forward ended) with rows re-ordered along the accepted path, so the caller handles a tree
        like a block.
        """
        depths = torch.tensor(tree.depths, device=session.device)[None]  # [1, N]
        logits, features = self._verify(tree.tokens[None], session.positions[:, start : start + 1] + depths,
                                        session.tree_mask(start, tree.ancestors))
        verified_at = clock.now()
        committed = session.committed()
        row_tokens = lambda i: torch.tensor([tree.path_tokens(i)], dtype=torch.long, device=session.device)  # noqa: E731
        scores = process_block_logits(logits, committed, tree.tokens, logits_processor, row_tokens=row_tokens)
        if do_sample:
            path, next_token = accept_sampling(tree, torch.softmax(scores, dim=-1))
        else:
            choices = scores.argmax(dim=-1)
            path = accept_greedy(tree, choices)
            next_token = int(choices[path[-1]])
        compact_path(self.cache, start, path)
        rows = torch.tensor(path, device=session.device)
        new_tokens = torch.cat([tree.tokens[rows[1:]], torch.tensor([next_token], device=session.device)])
        if features is not None:
            features = features.index_select(1, rows)  # [1, n+1, n_taps*H] along the accepted path
        return len(path) - 1, new_tokens, scores[rows], logits[rows], features, verified_at

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        generation_config,
        logits_processor,
        stopping_criteria,
        streamer=None,
        max_cache_len: int | None = None,
    ):
        target, width = self.target, self.width
        prompt_len = input_ids.shape[1]
        max_new_tokens = generation_config.max_length - prompt_len
        margin = getattr(self.proposer, "cache_margin", 0)
        capacity = _required_capacity(prompt_len, max_new_tokens, width + margin, self.compile_steps, max_cache_len)
        check_target(target, capacity)
        do_sample = bool(generation_config.do_sample)
        stop_ids = _stop_token_ids(generation_config)
        extra_criteria = [c for c in stopping_criteria if not isinstance(c, (EosTokenCriteria, MaxLengthCriteria))]
        want_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
        want_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
        scores_out, logits_out = [], []

        dtype = target.get_input_embeddings().weight.dtype
        session = DecodingSession(input_ids, attention_mask, capacity, width, dtype)
        self.cache = static_cache(capacity, len(decoder_layers(target)))
        stats = SpeculativeStats(mode=self.mode, block_size=width, lossy=self.verifier is not None)
        clock = Stopwatch(target.device)
        if streamer is not None:
            streamer.put(input_ids.cpu())

        def commit(new_tokens: torch.Tensor, scores: torch.Tensor, logits: torch.Tensor) -> bool:
            """Append up to max_new_tokens, cut after a stop token; True when generation is over."""
            room = max_new_tokens - (session.length - prompt_len)
            new_list = new_tokens[:room].tolist()
            done = len(new_list) == room
            for i, tok in enumerate(new_list):
                if tok in stop_ids:
                    new_list, done = new_list[: i + 1], True
                    break
            if extra_criteria:  # user criteria (stop strings, max_time, ...) are judged after every token
                for i in range(len(new_list)):
                    candidate = torch.cat([session.committed(), new_tokens[None, : i + 1]], dim=1)
                    if any(bool(c(candidate, None).any()) for c in extra_criteria):
                        new_list, done = new_list[: i + 1], True
                        break
            kept = new_tokens[: len(new_list)]
            session.append(kept)
            if want_scores:
                scores_out.extend(scores[: len(new_list)].unbind(0))
            if want_logits:
                logits_out.extend(logits[: len(new_list)].float().unbind(0))
            if streamer is not None:
                streamer.put(kept.cpu())
            return done

        try:
            with tapped(target, self.layer_ids) as tap:
                self.tap = tap
                # ---------------- prefill: the prompt, and the first new token
                t0 = clock.now()
                out = target(
                    input_ids=input_ids, position_ids=session.positions[:, :prompt_len],
                    attention_mask=session.prefill_mask(), past_key_values=self.cache, use_cache=True,
                )
                last_logits = out.logits[0, -1:]  # [1, V]
                scores = process_block_logits(last_logits, session.committed(), input_ids[0, -1:], logits_processor)
                first = target_choices(scores, do_sample)  # [1]
                finished = commit(first, scores, last_logits)
                prompt_features = tap.features() if tap is not None else None
                observe = getattr(self.proposer, "observe", None)  # routers read the target at the newest token
                if not finished:
                    self.proposer.start(session, prompt_features)
                    if observe is not None:
                        observe(out.logits[0, -1], prompt_features[0, -1])
                t1 = clock.now()
                stats.prefill_time = t1 - t0

                # ---------------- decode rounds
                while not finished:
                    r0 = clock.now()
                    draft = self.proposer.propose()  # [W] block, or a TreeProposal
                    r1 = clock.now()
                    start = session.last_slot
                    if isinstance(draft, TreeProposal):
                        n_accepted, new_tokens, scores, logits, features, r2 = self._verify_tree(
                            draft, session, start, logits_processor, do_sample, clock)
                    else:
                        rows = draft.shape[0]  # the proposer's block (a router may switch between sizes)
                        logits, features = self._verify(
                            draft[None], session.positions[:, start : start + rows], session.causal_mask(start, rows)
                        )
                        r2 = clock.now()
                        scores = process_block_logits(logits, session.committed(), draft, logits_processor)
                        if self.verifier is None:
                            choices = target_choices(scores, do_sample)  # [W]
                            n_accepted = accepted_length(draft, choices)
                            new_tokens = torch.cat([draft[1 : 1 + n_accepted], choices[n_accepted : n_accepted + 1]])
                        else:
                            decision = self.verifier.decide(draft, logits, scores, do_sample)
                            n_accepted, new_tokens = decision.n_accepted, decision.new_tokens
                            stats.mismatches_per_round.append(decision.mismatches)
                            stats.rescued_per_round.append(decision.rescued)
                    # Target cache keeps the verified rows up to the last accepted draft.
                    set_cache_length(self.cache, start + n_accepted + 1)
                    if features is not None and self.compile_steps:
                        features = features.clone()  # a graph replay would overwrite it
                    self.proposer.commit(features, n_accepted + 1)
                    if observe is not None:
                        observe(logits[n_accepted], features[0, n_accepted])
                    stats.acceptance_lengths.append(n_accepted + 1)
                    finished = commit(new_tokens, scores, logits)
                    stats.draft_time += r1 - r0
                    stats.verify_time += r2 - r1
                    stats.round_draft_seconds.append(r1 - r0)
                    stats.round_seconds.append(clock.now() - r0)
                stats.decode_time = clock.now() - t1
        finally:
            self.tap = None
            if streamer is not None:
                streamer.end()

        stats.new_tokens = session.length - prompt_len
        stats.draft_forwards = getattr(self.proposer, "forward_calls", stats.num_rounds)
        stats.drafter_per_round = list(getattr(self.proposer, "drafter_per_round", []))
        stats.backlog_sizes = list(getattr(self.proposer, "backlog_sizes", []))
        sequences = session.committed().clone()
        if not generation_config.return_dict_in_generate:
            return sequences
        return SpeculativeGenerateOutput(
            sequences=sequences,
            scores=tuple(s[None] for s in scores_out) if want_scores else None,
            logits=tuple(lg[None] for lg in logits_out) if want_logits else None,
            speculative_stats=stats,
        )

