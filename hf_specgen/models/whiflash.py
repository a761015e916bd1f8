"""WhiFlash bundle: an EAGLE-3 drafter, a DFlash drafter and the router choosing between them every round.

``WhiFlashRouter`` is the paper's neural router: Linear(d -> d/8), GELU, dropout, Linear(d/8 -> 1), reading the
target's final decoder layer output at the last accepted position and regressing AL_eagle - AL_dflash.
"""

from __future__ import annotations

import torch
from torch import nn


class WhiFlashRouter(nn.Module):
    def __init__(self, hidden_size: int, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_size, hidden_size // 8), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden_size // 8, 1))

    @property
    def dtype(self) -> torch.dtype:
        return self.net[0].weight.dtype

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., d] -> [...] predicted AL_eagle - AL_dflash."""
        return self.net(hidden).squeeze(-1)


class WhiFlash(nn.Module):
    """What ``generate(assistant_model=..., speculative_mode="whiflash")`` takes.

    router: "entropy" (target entropy > entropy_threshold -> EAGLE-3), "neural" (neural_router's prediction >
    neural_threshold -> EAGLE-3), "eagle3" / "dflash" (always one), "random", or a callable(signal) returning
    "eagle3" or "dflash" (signal = {"logits": [V], "hidden": [d]} of the target at the last accepted position).
    lazy: lazy catch-up of the drafter that sat out (the paper's optimisation); False updates it every round.
    """

    def __init__(self, ar, parallel, router="entropy", entropy_threshold: float = 2.0,
                 neural_router: WhiFlashRouter | None = None, neural_threshold: float = 1.0, lazy: bool = True):
        super().__init__()
        if router == "neural" and neural_router is None:
            raise ValueError("router='neural' needs neural_router=WhiFlashRouter(...) (trained with specgen train router)")
        self.ar, self.parallel, self.neural_router = ar, parallel, neural_router
        self.router, self.entropy_threshold, self.neural_threshold, self.lazy = (
            router, entropy_threshold, neural_threshold, lazy)

    @property
    def device(self) -> torch.device:
        return next(self.parallel.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parallel.parameters()).dtype
