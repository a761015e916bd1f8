"""FLy loose verification (Training-Free Loosely Speculative Decoding, ICLR 2026): LOSSY by design, opt-in.

Standard verification stops at the first draft token that differs from the target's choice. FLy keeps a mismatched
draft token when the target was unsure there (entropy gate) and the target then agrees with every following draft
token for a while (deferred window): the target did not "correct itself", so the draft's wording is taken as an
acceptable alternative. Outputs are therefore NOT the target's own greedy/sampled tokens; task accuracy is what is
kept (measure it: ``specgen bench`` reports accuracy on the tiny world's arithmetic problems).

Rules pinned from the reference implementation (see docs / ``../shared/specs/fly.md``), for K draft tokens
d_0..d_{K-1} verified in one forward:

* ``exact[j]``: the target's choice at slot j equals d_j.
* entropy gate: H3[j] = -sum over the 3 most likely tokens of p*log(p), p from the softmax of the target's RAW logits
  over the full vocabulary (no temperature, not renormalized, not divided by log|V|; range [0, ln 3]). A mismatch may
  be rescued only if H3[j] >= theta; theta <= 0.01 switches the gate off.
* deferred window W (reference convention: W counts the mismatched slot): mismatch j is rescued iff
  exact[j+1 .. j+W-1] are all true and j <= K-W-1 (the last W slots are never rescued; K < W rescues nothing).
  W = 0 disables the window (every gated mismatch is rescued). vLLM counts only the following matches
  (``fly_window_convention="vllm"``): its W equals the reference's W+1.
* each mismatch is judged on its own against ``exact``; final = exact | rescue; n = first false in final (K if none).
* emitted: d_0..d_{n-1} (rescued slots emit the DRAFT token), then the target's token at slot n (the bonus if n = K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .verify import committed_tokens, target_choices

FLY_SAMPLING_RULES = ("reference", "lossless_core")
FLY_WINDOW_CONVENTIONS = ("reference", "vllm")
GATE_OFF_BELOW = 0.01  # theta at or below this disables the entropy gate (reference behaviour)


def top3_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[..., V] raw logits -> [...] entropy of the top-3 probabilities of the full-vocabulary softmax, in nats."""
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(min(3, probs.shape[-1]), dim=-1).values
    return -(top * torch.log(top.clamp_min(1e-30))).sum(-1)


def reference_window(window: int, convention: str) -> int:
    """The window in the reference convention (counting the mismatched slot itself)."""
    if convention not in FLY_WINDOW_CONVENTIONS:
        raise ValueError(f"fly_window_convention must be one of {FLY_WINDOW_CONVENTIONS}, got {convention!r}")
    return window + 1 if convention == "vllm" and window > 0 else window


def fly_rescue(exact: torch.Tensor, entropy: torch.Tensor, window: int, theta: float) -> torch.Tensor:
    """Which mismatches FLy accepts, for every batch row at once.

    exact:   [..., K] bool, draft token j equals the target's choice at slot j
    entropy: [..., K] top-3 entropy of the target at slot j
    window:  W in the reference convention (0 = no window)
    returns  [..., K] bool rescue flags (only ever true where exact is false)
    """
    k = exact.shape[-1]
    gate = torch.ones_like(exact) if theta <= GATE_OFF_BELOW else entropy >= theta
    rescue = ~exact & gate
    if window == 0:
        return rescue
    slots = torch.arange(k, device=exact.device)
    rescue &= slots <= k - window - 1  # boundary: the last W slots are never rescued (and K < W rescues nothing)
    # exact[j+1 .. j+W-1] all true <=> no mismatch among the next W-1 slots: count mismatches with a cumulative sum.
    misses = torch.nn.functional.pad((~exact).long().cumsum(-1), (1, 0))  # [..., K+1]
    ahead_end = (slots + window).clamp(max=k).expand_as(exact)  # exclusive end of the window
    window_misses = misses.gather(-1, ahead_end) - misses.gather(-1, (slots + 1).clamp(max=k).expand_as(exact))
    return rescue & (window_misses == 0)


def committed_prefix(final: torch.Tensor) -> torch.Tensor:
    """[..., K] -> [...]: index of the first false in ``final`` (K if none)."""
    return final.long().cumprod(-1).sum(-1)


@dataclass
class FlyDecision:
    """Per batch row (device tensors)."""

    n_accepted: torch.Tensor  # [B] draft tokens emitted (exact or rescued)
    new_tokens: torch.Tensor  # [B, K+1]: row b commits new_tokens[b, :n_accepted[b] + 1]
    mismatches: torch.Tensor  # [B] slots among the K drafts where the draft differed from the target's choice
    rescued: torch.Tensor  # [B] emitted draft tokens that the strict rule would have refused


class FlyVerifier:
    """FLy's acceptance rule for the verified blocks of a batch (the engine calls it instead of the lossless rule).

    window / theta: W (reference convention) and the entropy threshold. sampling_rule, for do_sample=True:
    "reference" (greedy draft; exact if the draft equals either of two target samples; replacement = first
    sample) or "lossless_core" (exact if the draft equals the target's own sample: speculative sampling with a
    one-hot draft, so only FLy's rescues depart from the target's distribution).
    """

    def __init__(self, window: int, theta: float, sampling_rule: str = "reference"):
        if sampling_rule not in FLY_SAMPLING_RULES:
            raise ValueError(f"fly_sampling_rule must be one of {FLY_SAMPLING_RULES}, got {sampling_rule!r}")
        self.window, self.theta, self.sampling_rule = window, theta, sampling_rule

    def decide(self, draft: torch.Tensor, raw_logits: torch.Tensor, scores: torch.Tensor,
               do_sample: bool) -> FlyDecision:
        """draft [B, K+1] (draft[:, 0] = last committed token); raw_logits / scores [B, K+1, V] -> what to commit."""
        k = draft.shape[1] - 1
        if do_sample:
            choices = target_choices(scores, True)  # [B, K+1]
            exact = draft[:, 1:] == choices[:, :-1]
            if self.sampling_rule == "reference":
                exact |= draft[:, 1:] == target_choices(scores, True)[:, :-1]
        else:
            choices = scores.argmax(dim=-1)
            exact = draft[:, 1:] == choices[:, :-1]  # [B, K]
        entropy = top3_entropy(raw_logits[:, :k])  # [B, K]; the gate reads the raw logits, whatever the sampling
        rescue = fly_rescue(exact, entropy, self.window, self.theta)
        n = committed_prefix(exact | rescue)  # [B]
        emitted = torch.arange(k, device=draft.device) < n[:, None]  # [B, K]
        new_tokens = committed_tokens(draft, choices, n)  # rescued slots emit the DRAFT token
        return FlyDecision(n, new_tokens, (~exact).long().sum(-1), (rescue & emitted).long().sum(-1))


def check_fly_settings(window, theta) -> None:
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"fly_window must be an int >= 0 (0 disables the deferred window), got {window!r}")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not 0 <= theta <= math.log(3):
        raise ValueError(f"fly_entropy_threshold must be a number in [0, ln 3 = {math.log(3):.4f}] (top-3 entropy in "
                         f"nats; <= {GATE_OFF_BELOW} disables the gate), got {theta!r}")
