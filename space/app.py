"""hf_specgen Space: stock `generate` and speculative decoding of the same prompt, side by side.

    python space/app.py            # offline on a CPU: SmolLM2-135M-Instruct when prepared, else the tiny world

On a GPU (or any machine with the Hub), configure a real target and a z-lab drafter with environment variables:
SPECGEN_TARGET (a Hub id or folder), SPECGEN_DFLASH (a DFlash drafter), and optionally SPECGEN_EAGLE3,
SPECGEN_WHIFLASH, SPECGEN_DRAFT_LM; SPECGEN_DTYPE (bf16 / fp32) for any target; SPECGEN_WORLD=tiny forces the tiny world. On ZeroGPU hardware the decode function is wrapped
in `spaces.GPU` when the `spaces` package is importable.

Timing: the two decodes never share the device while they are timed. The baseline runs first, then the speculative
decode, each streaming live into its pane with its own clock; tokens/s and the speedup come from those two clocks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "hf_specgen").is_dir() and str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

import gradio as gr  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers import StoppingCriteria, StoppingCriteriaList  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

import hf_specgen  # noqa: E402
from hf_specgen.embedded import hub_models_dir  # noqa: E402

MAX_PROMPT_CHARS = 4000
MAX_PROMPT_TOKENS = 1024
MAX_NEW_TOKENS = 256
LOSSLESS = ("dflash", "eagle3", "whiflash", "classic")
METHOD_LABELS = {"dflash": "DFlash", "eagle3": "EAGLE-3", "whiflash": "WhiFlash (EAGLE-3 / DFlash router)",
                 "classic": "classic (draft LM)", "fly": "FLy over DFlash (LOSSY)"}
EXAMPLES = [
    ["Write a Python function that returns the n-th Fibonacci number.", "whiflash", 128],
    ["A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a 50 dollar bill. How much change does he "
     "get?", "dflash", 128],
    ["Give me three tips for staying focused while studying.", "whiflash", 128],
    ["Translate into French: The weather is nice today, so we are going to the beach.", "eagle3", 64],
]


@dataclass
class Models:
    target: torch.nn.Module
    tokenizer: object
    name: str
    assistants: dict = field(default_factory=dict)  # method -> assistant model
    note: str = ""


def _load_assistant(path: str | os.PathLike, dtype, device):
    return hf_specgen.load_drafter(str(path), dtype=dtype).to(device).eval()


def load_models() -> Models:
    """Environment-configured Hub models; else the packaged real target with its drafters; else the tiny world."""
    device = os.environ.get("SPECGEN_DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
    hub = hub_models_dir()
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    chosen = os.environ.get("SPECGEN_DTYPE")
    if chosen is not None and chosen not in dtypes:
        raise ValueError(f"SPECGEN_DTYPE={chosen!r}: use bf16 or fp32")
    if os.environ.get("SPECGEN_TARGET"):
        dtype = dtypes[chosen or "bf16"]
        path = os.environ["SPECGEN_TARGET"]
        target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval())
        models = Models(target, AutoTokenizer.from_pretrained(path), path, note=f"{path} on {device}")
        for method, variable in (("dflash", "SPECGEN_DFLASH"), ("eagle3", "SPECGEN_EAGLE3"),
                                 ("whiflash", "SPECGEN_WHIFLASH"), ("classic", "SPECGEN_DRAFT_LM")):
            if os.environ.get(variable):
                loader = (AutoModelForCausalLM.from_pretrained if method == "classic" else hf_specgen.load_drafter)
                models.assistants[method] = loader(os.environ[variable], dtype=dtype).to(device).eval()
    else:
        from hf_specgen.bench.runner import REAL_WORLD, WORLDS, real_world_ready

        if real_world_ready() and os.environ.get("SPECGEN_WORLD", "auto") != "tiny":
            # bf16 unless the CPU lacks bf16 units: emulated, a 16-token verify is ~10x slower than fp32 (README)
            from hf_specgen.dtypes import preferred_dtype

            dtype = dtypes[chosen or preferred_dtype(device)]
            target, tokenizer = hf_specgen.load_target(REAL_WORLD, dtype=dtype)
            models = Models(target.to(device), tokenizer, "SmolLM2-135M-Instruct",
                            note=f"SmolLM2-135M-Instruct ({dtype}, {device}) with drafters trained by hf_specgen")
            world = WORLDS[REAL_WORLD]
        else:
            dtype = dtypes[chosen or "bf16"]
            world = WORLDS["tiny"]
            path = hub / world["target"]
            target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval())
            models = Models(target, AutoTokenizer.from_pretrained(path), "specgen-tiny",
                            note="the tiny world (an 8M model trained offline by hf_specgen; it writes poor text). "
                                 "Run `specgen prepare` for the real SmolLM2-135M-Instruct target")
        for method, role in (("dflash", "dflash"), ("eagle3", "eagle3"), ("whiflash", "whiflash"),
                             ("classic", "draft_lm")):
            if role in world and (hub / world[role]).exists():
                folder = hub / world[role]
                models.assistants[method] = (
                    AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval() if role == "draft_lm"
                    else _load_assistant(folder, dtype, device))
    if "dflash" in models.assistants:
        models.assistants["fly"] = models.assistants["dflash"]
    return models


class Cancelled(StoppingCriteria):
    """Stops a decode once its event is set (the visitor left)."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class TimedStreamer(BaseStreamer):
    """Receives generate's tokens as they are committed (the first put is the prompt) and timestamps each chunk."""

    def __init__(self):
        self.chunks: list[tuple[float, list[int]]] = []
        self.started = time.perf_counter()
        self.done = threading.Event()
        self._prompt_seen = False

    def put(self, value):
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.chunks.append((time.perf_counter(), value.reshape(-1).tolist()))

    def end(self):
        self.done.set()

    def tokens(self) -> list[int]:
        return [t for _, chunk in list(self.chunks) for t in chunk]

    def speed(self) -> float:
        """Decode tokens/s from the first new token on (the prefill is excluded, as in `specgen bench`)."""
        chunks = list(self.chunks)
        if len(chunks) < 2:
            return 0.0
        return (sum(len(c) for _, c in chunks[1:])) / max(chunks[-1][0] - chunks[0][0], 1e-9)


def check_inputs(models: Models, prompt, method, max_new_tokens) -> tuple[torch.Tensor, int]:
    """Validated (input_ids, max_new_tokens); a gr.Error with what to change otherwise."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Type a prompt first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters; this demo takes at most {MAX_PROMPT_CHARS}.")
    if method not in models.assistants:
        raise gr.Error(f"Method {method!r} is not available here; choose one of {', '.join(models.assistants)}.")
    try:
        max_new_tokens = int(max_new_tokens)
    except (TypeError, ValueError):
        raise gr.Error("max new tokens must be a whole number.") from None
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise gr.Error(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}.")
    ids = models.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)["input_ids"]
    if ids.shape[1] > MAX_PROMPT_TOKENS:
        raise gr.Error(f"The prompt is {ids.shape[1]} tokens; this demo takes at most {MAX_PROMPT_TOKENS}.")
    return ids.to(models.target.device), max_new_tokens


def _generate_kwargs(models: Models, method: str, max_new_tokens: int, temperature: float) -> tuple[dict, dict]:
    sampling = dict(do_sample=temperature > 0, max_new_tokens=max_new_tokens)
    if temperature > 0:
        sampling["temperature"] = float(temperature)
    speculative = dict(sampling, assistant_model=models.assistants[method], speculative_mode=method,
                       return_dict_in_generate=True)
    return sampling, speculative


def origins(first_token: bool, acceptance_lengths: list[int], n_tokens: int) -> list[str]:
    """Per new token: "draft" (a drafted token the target accepted) or "target" (the target's own token: the prefill's
    first token and the last token of every round)."""
    labels = ["target"] if first_token else []
    for length in acceptance_lengths:
        labels += ["draft"] * (length - 1) + ["target"]
    return labels[:n_tokens]


def highlighted(tokenizer, tokens: list[int], labels: list[str]) -> list[tuple[str, str | None]]:
    return [(tokenizer.decode([t]), label) for t, label in zip(tokens, labels)]


@dataclass
class Frame:
    """The state of one side-by-side decode: what each pane shows now."""
    baseline: TimedStreamer | None = None
    speculative: TimedStreamer | None = None
    output: object = None  # the speculative generate output, once finished
    running: str | None = None  # "baseline" / "speculative" while that side decodes
    sampled: bool = False

    def stats(self) -> dict:
        """What the API returns: both speeds (decode tokens/s, prefill excluded), tau, identical texts."""
        out = self.output.speculative_stats
        lengths = out.acceptance_lengths
        base, spec = self.baseline.speed(), self.speculative.speed()
        return {"baseline_tokens_per_s": base, "speculative_tokens_per_s": spec,
                "speedup": spec / base if base else None, "tau": sum(lengths) / max(len(lengths), 1),
                "rounds": len(lengths), "identical": self.baseline.tokens() == self.speculative.tokens(),
                "lossy": bool(out.lossy), "rescued_tokens": out.rescued_tokens,
                "new_tokens": len(self.speculative.tokens())}


class Demo:
    """Decodes one prompt with stock generate, then speculatively, streaming both. The queue runs one decode at a
    time (a CPU has no room for two timed decodes); the models are shared, each call's decoding state is its own."""

    def __init__(self, models: Models):
        self.models = models

    def _run(self, input_ids, kwargs, result: dict, streamer: TimedStreamer):
        try:
            result["out"] = self.models.target.generate(input_ids, streamer=streamer, **kwargs)
        except Exception as error:  # shown to the visitor; the app stays up for the next one
            result["error"] = error
            streamer.end()

    def decode_pair(self, prompt, method, max_new_tokens, temperature=0.0):
        """Yields a Frame about every 0.15 s while the two decodes run one after the other, then the final one.

        A visitor who leaves closes this generator: the decode in flight is stopped at its next round (a stopping
        criterion), so it never competes with the next visitor's timed decode."""
        input_ids, max_new_tokens = check_inputs(self.models, prompt, method, max_new_tokens)
        baseline_kwargs, speculative_kwargs = _generate_kwargs(self.models, method, max_new_tokens, temperature)
        frame = Frame(sampled=temperature > 0)
        for side, kwargs in (("baseline", baseline_kwargs), ("speculative", speculative_kwargs)):
            streamer, result, cancel = TimedStreamer(), {}, threading.Event()
            kwargs = dict(kwargs, stopping_criteria=StoppingCriteriaList([Cancelled(cancel)]))
            setattr(frame, side, streamer)
            frame.running = side
            worker = threading.Thread(target=self._run, args=(input_ids, kwargs, result, streamer), daemon=True)
            worker.start()
            try:
                while not streamer.done.wait(0.15):
                    yield frame
            finally:  # also when the visitor disconnects (GeneratorExit): stop the decode, free the device
                cancel.set()
                worker.join()
            if "error" in result:
                raise gr.Error(f"{side} decoding failed: {result['error']}")
            if side == "speculative":
                frame.output = result["out"]
        frame.running = None
        yield frame

    def render(self, frame: Frame):
        """(baseline text, speculative tokens coloured by origin, summary markdown, acceptance per round)."""
        tok = self.models.tokenizer
        base_text = tok.decode(frame.baseline.tokens(), skip_special_tokens=True) if frame.baseline else ""
        spans = []
        if frame.speculative is not None:
            chunks = list(frame.speculative.chunks)
            tokens = [t for _, chunk in chunks for t in chunk]
            if frame.output is not None:
                labels = origins(True, frame.output.speculative_stats.acceptance_lengths, len(tokens))
            else:  # live: every chunk after the first is one round, whose last token is the target's own
                labels = ["target"] * len(chunks[0][1]) if chunks else []
                for _, chunk in chunks[1:]:
                    labels += ["draft"] * (len(chunk) - 1) + ["target"]
            spans = highlighted(tok, tokens, labels)
        plot = None
        if frame.output is not None:
            import pandas as pd

            lengths = frame.output.speculative_stats.acceptance_lengths
            plot = pd.DataFrame({"round": list(range(1, len(lengths) + 1)), "tokens per round": lengths})
        return base_text, spans, self.summary(frame), plot

    def summary(self, frame: Frame) -> str:
        lines = []
        for side, title in (("baseline", "stock generate"), ("speculative", "speculative")):
            streamer = getattr(frame, side)
            if streamer is not None:
                running = " (decoding...)" if frame.running == side else ""
                elapsed = (streamer.chunks[-1][0] if streamer.chunks else time.perf_counter()) - streamer.started
                lines.append(f"**{title}**: {len(streamer.tokens())} tokens in {elapsed:.1f} s, "
                             f"{streamer.speed():.1f} tokens/s{running}")
        if frame.output is not None:
            stats = frame.stats()
            lines.append(f"**speedup {stats['speedup']:.2f}x**, tau {stats['tau']:.2f} tokens per target forward "
                         f"({stats['rounds']} rounds)")
            if stats["lossy"]:
                lines.append(f"FLy is lossy: it kept {stats['rescued_tokens']} draft tokens the target would not "
                             "have chosen.")
            elif frame.sampled:
                lines.append("Sampling: both texts follow the target's distribution but are different samples.")
            else:
                lines.append("Identical texts: **yes**" if stats["identical"] else
                             "Identical texts: **no** (a near-tie rounded differently by the multi-token verify)")
        return "  \n".join(lines)

    def warm_up(self) -> None:
        """One short decode per method at start-up, so the first visitor's timing is not the engine's first call."""
        ids = self.models.tokenizer("Hello", return_tensors="pt")["input_ids"].to(self.models.target.device)
        for method in self.models.assistants:
            self.models.target.generate(ids, **_generate_kwargs(self.models, method, 8, 0.0)[1])

    def stream(self, prompt, method, max_new_tokens, temperature):
        for frame in self.decode_pair(prompt, method, max_new_tokens, temperature):
            yield self.render(frame)

    def compare(self, prompt, method, max_new_tokens):
        """The API: (baseline_text, speculative_text, stats) for one prompt, greedy."""
        frame = None
        for frame in self.decode_pair(prompt, method, max_new_tokens):
            pass
        tok = self.models.tokenizer
        return (tok.decode(frame.baseline.tokens(), skip_special_tokens=True),
                tok.decode(frame.speculative.tokens(), skip_special_tokens=True), frame.stats())


def build_app(models: Models | None = None) -> gr.Blocks:
    models = models or load_models()
    demo = Demo(models)
    demo.warm_up()
    methods = [(METHOD_LABELS[m], m) for m in ("dflash", "eagle3", "whiflash", "classic", "fly")
               if m in models.assistants]
    decode = demo.stream
    try:  # ZeroGPU hardware: ask for a GPU for the duration of a decode
        import spaces

        decode = spaces.GPU(decode)
    except ImportError:
        pass
    with gr.Blocks(title="hf_specgen: speculative decoding side by side") as app:
        gr.Markdown(
            "# Speculative decoding, side by side\n"
            f"Target: {models.note}. The same prompt is decoded twice: first by stock `generate`, then with the "
            "chosen speculative method. **The two decodes run one after the other** (never at the same time, so "
            "neither slows the other), each streaming live with its own clock; speeds exclude the prompt's prefill. "
            "Lossless methods must give exactly the baseline's text; FLy is lossy by design. One decode runs at a "
            "time: others wait in the queue.")
        with gr.Row():
            prompt = gr.Textbox(label="prompt", lines=3, max_length=MAX_PROMPT_CHARS, scale=3)
            with gr.Column(scale=1):
                # WhiFlash first when shipped: each round it drafts with whichever drafter pays on this machine
                default = "whiflash" if "whiflash" in models.assistants else (methods[0][1] if methods else None)
                method = gr.Dropdown(methods, value=default, label="method")
                max_new = gr.Slider(1, MAX_NEW_TOKENS, value=128, step=1, label="max new tokens")
                temperature = gr.Slider(0.0, 1.5, value=0.0, step=0.05, label="temperature (0 = greedy)")
                run = gr.Button("Decode", variant="primary")
        with gr.Row():
            baseline = gr.Textbox(label="stock generate", lines=14, elem_id="baseline-pane")
            speculative = gr.HighlightedText(label="speculative (green: drafted or copied, and accepted; blue: the "
                                                   "target's own)",
                                             color_map={"draft": "green", "target": "blue"},
                                             show_inline_category=False, elem_id="speculative-pane")
        summary = gr.Markdown(elem_id="summary")
        plot = gr.BarPlot(x="round", y="tokens per round", label="tokens committed per round", height=220)
        gr.Examples(EXAMPLES, [prompt, method, max_new], label="examples (code, math, chat, translation)")
        run.click(decode, [prompt, method, max_new, temperature], [baseline, speculative, summary, plot],
                  api_name="stream", concurrency_id="decode")
        api_prompt, api_method, api_max = gr.Textbox(visible=False), gr.Textbox(visible=False), gr.Number(visible=False)
        api_out = [gr.Textbox(visible=False), gr.Textbox(visible=False), gr.JSON(visible=False)]
        gr.Button(visible=False).click(demo.compare, [api_prompt, api_method, api_max], api_out, api_name="compare",
                                       concurrency_id="decode")
    # One decode at a time on the shared device; the queue tells everyone else their place.
    app.queue(default_concurrency_limit=1, max_size=32)
    return app


if __name__ == "__main__":
    build_app().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
