"""WhiFlash bundle: an EAGLE-3 drafter, a DFlash drafter and the router choosing between them every round.

Saved as ONE Hub-style folder (``save_pretrained``): config.json holds both drafters' configs and the routing
settings, model.safetensors holds ``ar.*``, ``parallel.*`` and ``neural_router.*``, and this file plus
``dflash.py`` / ``eagle3.py`` go next to them, so ``AutoModel.from_pretrained(folder, trust_remote_code=True)``
rebuilds it without hf_specgen. Imports: torch, transformers and the two sibling drafter files only.

``WhiFlashRouter`` is the paper's neural router: Linear(d -> d/8), GELU, dropout, Linear(d/8 -> 1), reading the
target's final decoder layer output at the last accepted position and regressing AL_eagle - AL_dflash.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel, Qwen3Config

from .dflash import DFlashDraftModel
from .eagle3 import Eagle3DraftModel

ROUTERS = ("entropy", "neural", "eagle3", "dflash", "random")


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


class WhiFlashConfig(PretrainedConfig):
    model_type = "whiflash"

    def __init__(self, ar_config: dict | None = None, parallel_config: dict | None = None, router: str = "entropy",
                 entropy_threshold: float = 2.0, entropy_thresholds: dict | None = None, neural_threshold: float = 1.0,
                 neural_router_hidden_size: int | None = None, lazy: bool = True, drafter_paths: dict | None = None,
                 **kwargs):
        self.ar_config = ar_config or {}
        self.parallel_config = parallel_config or {}
        self.router = router
        self.entropy_threshold = entropy_threshold
        self.entropy_thresholds = entropy_thresholds or {}  # per prompt category, from `specgen calibrate`
        self.neural_threshold = neural_threshold
        self.neural_router_hidden_size = neural_router_hidden_size
        self.lazy = lazy
        # A "linked" bundle (save_linked) stores only the router and points at the drafters' own folders.
        self.drafter_paths = drafter_paths or {}
        super().__init__(**kwargs)


def _config_dict(model) -> dict:
    config = model.config.to_dict()
    for key in ("auto_map", "architectures", "transformers_version", "_name_or_path"):
        config.pop(key, None)
    return config


class WhiFlash(PreTrainedModel):
    """What ``generate(assistant_model=..., speculative_mode="whiflash")`` takes.

    ``WhiFlash(ar=eagle3_drafter, parallel=dflash_drafter, router="entropy")`` or ``WhiFlash(config)``.
    router: "entropy" (target entropy > entropy_threshold -> EAGLE-3), "neural" (neural_router's prediction >
    neural_threshold -> EAGLE-3), "eagle3" / "dflash" (always one), "random", or a callable(signal) returning
    "eagle3" or "dflash" (signal = {"logits": [V], "hidden": [d]} of the target at the last accepted position, and
    "position": that token's slot in the sequence; callables are not saved). lazy: lazy catch-up of the drafter
    that sat out (the paper's optimisation); False updates it every round.
    """

    config_class = WhiFlashConfig
    base_model_prefix = "whiflash"

    def __init__(self, config: WhiFlashConfig | None = None, *, ar: Eagle3DraftModel | None = None,
                 parallel: DFlashDraftModel | None = None, router="entropy", entropy_threshold: float = 2.0,
                 neural_router: WhiFlashRouter | None = None, neural_threshold: float = 1.0, lazy: bool = True):
        if config is None:
            if ar is None or parallel is None:
                raise ValueError("WhiFlash needs ar= (an EAGLE-3 drafter) and parallel= (a DFlash drafter), or a config")
            if router == "neural" and neural_router is None:
                raise ValueError("router='neural' needs neural_router=WhiFlashRouter(...) (specgen train router)")
            config = WhiFlashConfig(
                ar_config=_config_dict(ar), parallel_config=_config_dict(parallel),
                router=router if isinstance(router, str) else "custom", entropy_threshold=entropy_threshold,
                neural_threshold=neural_threshold, lazy=lazy,
                neural_router_hidden_size=neural_router.net[0].in_features if neural_router is not None else None)
        super().__init__(config)
        self.ar = ar if ar is not None else Eagle3DraftModel(LlamaConfig(**config.ar_config))
        self.parallel = parallel if parallel is not None else DFlashDraftModel(Qwen3Config(**config.parallel_config))
        if neural_router is None and config.neural_router_hidden_size:
            neural_router = WhiFlashRouter(config.neural_router_hidden_size)
        self.neural_router = neural_router
        self.router = router if callable(router) else config.router  # a callable router lives on the instance only
        self.entropy_threshold = config.entropy_threshold
        self.neural_threshold = config.neural_threshold
        self.lazy = config.lazy
        self.post_init()

    def _init_weights(self, module):
        pass  # the drafters initialize themselves; loading overwrites everything

    def save_pretrained(self, *args, **kwargs):
        # the drafters' configs as they are now: a drafter changed after bundling (a DFlash draft vocabulary set)
        # must be rebuilt that way when the bundle loads
        self.config.ar_config, self.config.parallel_config = _config_dict(self.ar), _config_dict(self.parallel)
        return super().save_pretrained(*args, **kwargs)

    def save_linked(self, folder, ar_path: str, parallel_path: str) -> None:
        """Save routing settings and the router only, pointing at the drafters' folders (paths relative to
        ``folder``, or Hub ids). Load it with ``hf_specgen.load_drafter(folder)``; ``save_pretrained`` instead
        writes a self-contained bundle that ``AutoModel.from_pretrained(..., trust_remote_code=True)`` reads."""
        import json
        import os

        from safetensors.torch import save_file

        os.makedirs(folder, exist_ok=True)
        config = self.config.to_dict()
        config.update(drafter_paths={"ar": ar_path, "parallel": parallel_path}, ar_config={}, parallel_config={})
        config.pop("auto_map", None)
        config["architectures"] = ["WhiFlash"]
        with open(os.path.join(folder, "config.json"), "w") as handle:
            json.dump(config, handle, indent=2, sort_keys=True)
        if self.neural_router is not None:
            save_file({f"neural_router.{k}": v.contiguous() for k, v in self.neural_router.state_dict().items()},
                      os.path.join(folder, "model.safetensors"))

    def set_category(self, category: str) -> None:
        """Use the entropy threshold calibrated for this prompt category (``specgen calibrate``)."""
        if category not in self.config.entropy_thresholds:
            raise ValueError(f"no calibrated threshold for {category!r}; calibrated: "
                             f"{sorted(self.config.entropy_thresholds)}")
        self.entropy_threshold = self.config.entropy_thresholds[category]


WhiFlash.register_for_auto_class("AutoModel")
WhiFlashConfig.register_for_auto_class()
