"""The training loop every trainer shares: accelerate, schedule, progress bar, resumable checkpoints, JSON log, PNG.

A trainer supplies three things: the trainable model, ``batch_for_step(index)`` (a pure function of a global batch
index, so resuming at step N replays exactly the data a run without interruption would have seen) and
``loss_fn(model, batch) -> (loss, n_tokens)``. Everything else lives here once.

Schedule: linear warmup then cosine decay over the run's *progress*, where progress is the larger of
``step / max_steps`` and ``elapsed / time_budget``. With only a step budget this is the usual cosine schedule; with a
time budget (how the tiny world is trained on a CPU) the learning rate still reaches its floor exactly when the budget
runs out, whatever the machine's speed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch


@dataclass
class TrainSettings:
    out_dir: str
    lr: float = 6e-4
    weight_decay: float = 0.01
    warmup_fraction: float = 0.04
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    max_steps: int = 10_000
    time_budget_minutes: float | None = None
    log_every: int = 10
    checkpoint_minutes: float = 10.0
    eval_every_minutes: float | None = None  # held-out evaluation during training too: a curve, not one point
    mixed_precision: str = "bf16"  # "no", "bf16" or "fp16" (accelerate's names)
    seed: int = 0
    resume: bool = True

    def validate(self) -> None:
        if self.lr <= 0 or self.max_steps < 1:
            raise ValueError("lr must be > 0 and max_steps >= 1")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError("warmup_fraction must be in [0, 1)")
        if self.time_budget_minutes is not None and self.time_budget_minutes <= 0:
            raise ValueError("time_budget_minutes must be > 0 (or None for a step budget only)")
        if self.eval_every_minutes is not None and self.eval_every_minutes <= 0:
            raise ValueError("eval_every_minutes must be > 0 (or None to evaluate only at the end)")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError("mixed_precision must be 'no', 'bf16' or 'fp16'")


def add_run_arguments(parser, lr: float, max_steps: int = 100_000, mixed_precision: str = "bf16") -> None:
    """The schedule, budget, precision and resume flags every ``specgen train`` command shares."""
    parser.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    parser.add_argument("--warmup-fraction", type=float, default=0.04)
    parser.add_argument("--max-steps", type=int, default=max_steps)
    parser.add_argument("--time-budget-minutes", type=float, default=None,
                        help="stop (and finish the cosine schedule) after this much training time")
    parser.add_argument("--eval-every-minutes", type=float, default=None,
                        help="also evaluate on the held-out data every this many training minutes (a curve in "
                             "log.json's 'evals'; the evaluation time is not counted as training time)")
    parser.add_argument("--mixed-precision", default=mixed_precision, choices=["no", "bf16", "fp16"])
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-resume", action="store_true", help="start over even if out/checkpoint exists")


def training_device_name(device: torch.device) -> str:
    """What a run trained on, for its log and the model cards ("on one NVIDIA H100 ...", "on a 2-thread CPU")."""
    if device.type == "cuda":
        return f"one {torch.cuda.get_device_name(device)}"
    return f"a {torch.get_num_threads()}-thread CPU"


def start_run(args) -> Path:
    """Seed, CPU threads and the run folder, from the flags of :func:`add_run_arguments` and ``--out``."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def load_frozen_target(path):
    """(tokenizer, target) for drafter training: fp32, eval mode, no gradients."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..targets import resolve_target

    path = resolve_target(str(path))
    target = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    target.requires_grad_(False)
    return AutoTokenizer.from_pretrained(path), target


def settings_from_args(args, out_dir) -> "TrainSettings":
    """TrainSettings from the flags of :func:`add_run_arguments`."""
    return TrainSettings(out_dir=str(out_dir), lr=args.lr, max_steps=args.max_steps,
                         time_budget_minutes=args.time_budget_minutes, warmup_fraction=args.warmup_fraction,
                         mixed_precision=args.mixed_precision, seed=args.seed, resume=not args.no_resume,
                         eval_every_minutes=args.eval_every_minutes)


def epoch_batch(index: int, n_items: int, batch_size: int, seed: int) -> list[int]:
    """Item indices of global batch ``index``: every epoch is its own seeded permutation of the items, cut into
    batches, so a resumed run replays exactly the batches an uninterrupted run would have seen."""
    per_epoch = max(n_items // batch_size, 1)
    epoch, within = divmod(index, per_epoch)
    order = torch.randperm(n_items, generator=torch.Generator().manual_seed(seed + epoch))
    return order[within * batch_size: (within + 1) * batch_size].tolist()


class BudgetBatches:
    """Batches of similar-cost items whose padded cost (items x the largest cost among them) stays within a budget.

    For data of very uneven lengths (the target's answers run from 5 to 200 tokens) a fixed batch size either pads
    short items up to the longest or starves the step; here a short-answer batch holds many items and a long-answer
    batch few. Per epoch: a seeded permutation, cut into pools, each pool sorted by cost and split greedily, then the
    batches shuffled. ``batch(i)`` is a pure function of the global index, like :func:`epoch_batch`, so resuming
    replays the same data.
    """

    def __init__(self, costs: list[int], budget: int, seed: int, pool: int = 4096):
        if budget < max(costs):
            raise ValueError(f"batch budget {budget} is below the costliest item ({max(costs)}): raise the budget")
        self.costs, self.budget, self.seed, self.pool = costs, budget, seed, pool
        self._current: tuple[int, list[list[int]]] | None = None  # one epoch's batches in memory
        self._sizes: dict[int, int] = {}  # batches per epoch

    def epoch(self, epoch: int) -> list[list[int]]:
        if self._current is None or self._current[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(len(self.costs), generator=generator).tolist()
            batches: list[list[int]] = []
            for start in range(0, len(order), self.pool):
                current: list[int] = []
                for item in sorted(order[start: start + self.pool], key=self.costs.__getitem__):
                    # sorted ascending, so the newest item is the batch's largest
                    if current and (len(current) + 1) * self.costs[item] > self.budget:
                        batches.append(current)
                        current = []
                    current.append(item)
                batches.append(current)
            shuffle = torch.randperm(len(batches), generator=generator).tolist()
            self._current = (epoch, [batches[i] for i in shuffle])
            self._sizes[epoch] = len(batches)
        return self._current[1]

    def batch(self, index: int) -> list[int]:
        epoch = 0
        while index >= self.batches_in_epoch(epoch):
            index -= self._sizes[epoch]
            epoch += 1
        return self.epoch(epoch)[index]

    def batches_in_epoch(self, epoch: int) -> int:
        if epoch not in self._sizes:
            self.epoch(epoch)
        return self._sizes[epoch]


def lr_factor(progress: float, warmup_fraction: float, min_lr_ratio: float) -> float:
    """Multiplier of the peak learning rate at ``progress`` in [0, 1]: linear warmup, then cosine to the floor."""
    if warmup_fraction > 0 and progress < warmup_fraction:
        return max(progress / warmup_fraction, 1e-3)
    span = max(1.0 - warmup_fraction, 1e-8)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, (progress - warmup_fraction) / span)))
    return min_lr_ratio + (1.0 - min_lr_ratio) * cosine


@dataclass
class RunState:
    step: int = 0
    elapsed_seconds: float = 0.0
    cpu_seconds: float = 0.0  # the process's CPU time in steps: the compute spent, whatever else shares the machine
    tokens_seen: int = 0
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)


def run_training(
    model: torch.nn.Module,
    settings: TrainSettings,
    batch_for_step: Callable[[int], Any],
    loss_fn: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, int]],
    *,
    description: str,
    evaluate: Callable[[torch.nn.Module], dict] | None = None,
    run_info: dict | None = None,
) -> dict:
    """Train ``model`` in place; returns the final log dict (also written to ``out_dir/log.json``).

    ``batch_for_step(i)`` gets a *global* batch index; with several processes, process r of w takes indices
    ``step * w + r``, so the same command scales to multi-GPU through ``accelerate launch``.
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    settings.validate()
    out_dir = Path(settings.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    set_seed(settings.seed)
    accelerator = Accelerator(mixed_precision=settings.mixed_precision, cpu=not torch.cuda.is_available())
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95))
    model, optimizer = accelerator.prepare(model, optimizer)

    state = RunState()
    checkpoint_dir = out_dir / "checkpoint"
    if settings.resume and (checkpoint_dir / "run_state.json").exists():
        accelerator.load_state(str(checkpoint_dir))
        state = RunState(**json.loads((checkpoint_dir / "run_state.json").read_text()))
        accelerator.print(f"resumed from {checkpoint_dir} at step {state.step} ({state.elapsed_seconds / 60:.1f} min)")

    def progress() -> float:
        by_steps = state.step / settings.max_steps
        if settings.time_budget_minutes is None:
            return by_steps
        return max(by_steps, state.elapsed_seconds / (60.0 * settings.time_budget_minutes))

    def save_checkpoint() -> None:
        accelerator.wait_for_everyone()
        accelerator.save_state(str(checkpoint_dir))
        if accelerator.is_main_process:
            (checkpoint_dir / "run_state.json").write_text(json.dumps(asdict(state)))

    world, rank = accelerator.num_processes, accelerator.process_index
    bar = tqdm(total=1000, desc=description, unit="‰", disable=not accelerator.is_local_main_process,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}‰ [{elapsed}<{remaining}] {postfix}")
    bar.update(int(1000 * progress()))
    window_loss, window_tokens, window_steps = 0.0, 0, 0
    last_checkpoint = time.perf_counter()

    def evaluate_now() -> dict:
        model.eval()
        with torch.no_grad():
            result = evaluate(accelerator.unwrap_model(model))
        model.train()
        return result

    def due_for_eval() -> bool:
        if evaluate is None or settings.eval_every_minutes is None:
            return False
        last = state.evals[-1]["minutes"] if state.evals else 0.0
        return state.elapsed_seconds / 60 - last >= settings.eval_every_minutes

    model.train()
    while progress() < 1.0:
        started, started_cpu = time.perf_counter(), time.process_time()
        lr = settings.lr * lr_factor(progress(), settings.warmup_fraction, settings.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = batch_for_step(state.step * world + rank)
        with accelerator.autocast():
            loss, n_tokens = loss_fn(model, batch)
        accelerator.backward(loss)
        grad_norm = accelerator.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.tokens_seen += int(n_tokens) * world
        state.elapsed_seconds += time.perf_counter() - started
        state.cpu_seconds += time.process_time() - started_cpu
        window_loss += float(loss.detach()) * n_tokens
        window_tokens += n_tokens
        window_steps += 1
        if state.step % settings.log_every == 0 or progress() >= 1.0:
            record = {"step": state.step, "loss": window_loss / max(window_tokens, 1), "lr": lr,
                      "grad_norm": float(grad_norm), "tokens_seen": state.tokens_seen,
                      "minutes": state.elapsed_seconds / 60, "cpu_minutes": state.cpu_seconds / 60,
                      "tokens_per_second": state.tokens_seen / state.elapsed_seconds}
            state.history.append(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", step=state.step, tok_s=f"{record['tokens_per_second']:.0f}")
            window_loss, window_tokens, window_steps = 0.0, 0, 0
        bar.update(int(1000 * min(progress(), 1.0)) - bar.n)
        if progress() < 1.0 and due_for_eval():
            state.evals.append({"step": state.step, "minutes": state.elapsed_seconds / 60,
                                "cpu_minutes": state.cpu_seconds / 60, "tokens_seen": state.tokens_seen,
                                **evaluate_now()})
            accelerator.print(f"step {state.step}: {state.evals[-1]}")
        if time.perf_counter() - last_checkpoint > 60 * settings.checkpoint_minutes:
            save_checkpoint()
            last_checkpoint = time.perf_counter()
    bar.close()
    save_checkpoint()
    model = accelerator.unwrap_model(model)
    model.eval()
    log = {"description": description, "settings": asdict(settings), **(run_info or {}),
           "steps": state.step, "tokens_seen": state.tokens_seen, "train_minutes": state.elapsed_seconds / 60,
           "train_cpu_minutes": state.cpu_seconds / 60, "device": training_device_name(accelerator.device),
           "final_train_loss": state.history[-1]["loss"] if state.history else None, "history": state.history}
    if evaluate is not None:
        with torch.no_grad():
            log["eval"] = evaluate(model)
        if settings.eval_every_minutes is not None:
            log["evals"] = state.evals + [{"step": state.step, "minutes": state.elapsed_seconds / 60,
                                           "cpu_minutes": state.cpu_seconds / 60, "tokens_seen": state.tokens_seen,
                                           **log["eval"]}]
    if accelerator.is_main_process:
        (out_dir / "log.json").write_text(json.dumps(log, indent=2))
        plot_loss(state.history, out_dir / "loss.png", description, log.get("eval"))
    return log


def plot_loss(history: list[dict], path: Path, title: str, evaluation: dict | None = None) -> None:
    """Training loss against tokens seen (log-x), with held-out losses as horizontal marks when given."""
    if not history:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot([h["tokens_seen"] for h in history], [h["loss"] for h in history], lw=1, label="train")
    for i, (name, value) in enumerate(((evaluation or {}).get("loss") or {}).items()):
        ax.axhline(value, ls="--", lw=0.8, color=plt.cm.tab10(i + 1), label=f"held-out {name}: {value:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens seen")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
