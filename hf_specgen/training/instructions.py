"""Training prompts for drafters of a real instruct target: math, code and general instructions.

Drafters learn from the target's own answers to these prompts (``specgen data regenerate``), so the prompts only
need to cover what users ask; their quality matters less than their spread. Three sources, none shared with a
benchmark prompt (``tests/test_instructions.py`` proves the sets are disjoint):

- math: GSM8K's *training* problems (shipped in ``data/gsm8k_train.jsonl.gz``, MIT). Spec-Bench's math prompts are
  GSM8K *test* problems. Once those are used, the same problems with their numbers redrawn (``math_variant_prompts``).
- code: requests built from documented functions and classes of the Python standard library installed here (their
  names, signatures and docstring summaries), in several phrasings.
- general: requests written by this module from templates and word lists (explanations, advice, short writing,
  comparisons), each in one of several styles (length, audience, format).
- code with context: a function or method of the standard library, its source shown, with a task on it (explain it,
  test it, document it, rewrite it).
- long context: passages of Python's own documentation (the language reference topics that ship with every Python
  in ``pydoc_data``, module and class docstrings), with a task on the passage (summarize it, answer from it, translate
  part of it).

The standard library's sources, docstrings and ``pydoc_data`` are under the Python Software Foundation License 2.0.
Every record is ``{"id", "domain", "prompt"}`` (math records also carry ``answer``, the number after ``####``).
"""

from __future__ import annotations

import gzip
import importlib
import inspect
import json
import random
import re
import textwrap
import warnings
from importlib import resources

# Pure-Python standard-library modules with useful docstrings; importing them has no side effects.
CODE_MODULES = (
    "bisect", "heapq", "textwrap", "string", "statistics", "fractions", "itertools", "functools", "collections",
    "os.path", "posixpath", "shutil", "glob", "fnmatch", "json", "csv", "base64", "binascii", "hashlib", "hmac",
    "random", "math", "cmath", "decimal", "datetime", "calendar", "time", "difflib", "re", "shlex", "urllib.parse",
    "html", "ipaddress", "uuid", "secrets", "copy", "pprint", "operator", "keyword", "zlib", "gzip", "tarfile",
    "zipfile", "tempfile", "pathlib", "configparser", "argparse", "logging", "enum", "dataclasses", "typing",
    "contextlib", "abc", "numbers", "struct", "codecs", "unicodedata", "locale", "gettext", "email.utils",
    "mimetypes", "quopri", "colorsys", "wave", "sched", "queue", "threading", "weakref", "types", "inspect",
    "tokenize", "ast", "dis", "traceback", "warnings", "filecmp", "stat", "platform", "sysconfig", "http.cookies",
    "xml.sax.saxutils", "graphlib", "reprlib", "zoneinfo", "linecache", "getopt", "optparse", "plistlib",
)

CODE_TEMPLATES = (
    "Write a Python function `{name}{signature}` that does the following: {summary}",
    "Implement `{name}{signature}` in Python. {summary} Include a docstring.",
    "Write a Python function named {name}. {summary} Give a short example of calling it.",
    "Explain what Python's `{module}.{name}` does and show a short example of using it.",
    "How would you write `{name}{signature}` from scratch in Python? It should do this: {summary}",
)
CLASS_TEMPLATES = (
    "Write a small Python class `{name}`: {summary}",
    "Explain the purpose of `{module}.{name}` in Python's standard library and show how to use it.",
)

TOPICS = (
    "photosynthesis", "the water cycle", "black holes", "inflation", "compound interest", "vaccines", "plate tectonics",
    "machine learning", "the internet", "encryption", "climate change", "the French Revolution", "democracy",
    "supply and demand", "gravity", "electric cars", "renewable energy", "the immune system", "sleep", "volcanoes",
    "the Roman Empire", "recycling", "social media", "the stock market", "DNA", "the moon landing", "rainbows",
    "earthquakes", "coral reefs", "the printing press", "solar panels", "antibiotics", "bees", "the human heart",
    "tides", "cloud computing", "open source software", "the Olympic Games", "coffee", "chess",
    "the solar system", "glaciers", "the printing of money", "batteries", "the Silk Road", "ancient Egypt",
    "the Renaissance", "nutrition", "exercise and the brain", "migration of birds", "rainforests", "deserts",
    "the scientific method", "prime numbers", "probability", "statistics", "the periodic table", "magnetism",
    "light and color", "sound waves", "weather forecasts", "hurricanes", "the Industrial Revolution", "the telephone",
    "airplanes", "bridges", "skyscrapers", "3D printing", "robots in factories", "smartphones", "password security",
    "databases", "search engines", "video games", "music theory", "jazz", "painting with watercolors", "poetry",
    "mythology", "philosophy", "ethics in technology", "time zones", "maps", "languages of the world", "tea",
    "bread baking", "fermentation", "composting", "urban gardening", "public libraries", "museums", "chess openings",
)
# A style appended to a general request: the same question asked for other lengths, audiences and formats.
STYLES = ("", "", " Keep it under 100 words.", " Use a bulleted list.", " Write it for a beginner.",
          " Use a friendly tone.", " Use a formal tone.", " Answer in one paragraph.", " Include an example.",
          " Then give a one-sentence summary.", " Number the points.", " Be concise.")
ACTIVITIES = (
    "learning a new language", "staying focused while studying", "running a first marathon", "saving money",
    "cooking for a large group", "starting a vegetable garden", "writing a cover letter", "giving a presentation",
    "traveling on a budget", "keeping a houseplant alive", "learning to code", "sleeping better", "moving to a new city",
    "preparing for a job interview", "reducing screen time", "training a puppy", "organizing a small office",
    "planning a birthday party", "taking better photos", "making friends at a new school",
)
THINGS = (
    "working from home", "electric scooters", "public transport", "online shopping", "nuclear power", "e-books",
    "living in a big city", "homeschooling", "social networks", "self-driving cars", "fast food", "smartwatches",
    "open-plan offices", "learning with videos", "renting an apartment", "a four-day work week",
)
PEOPLE = ("a colleague", "my manager", "a new customer", "my landlord", "a teacher", "a friend I have not seen in years",
          "the city council", "a job applicant", "my neighbour", "a hotel")
SUBJECTS = ("a delayed project", "a meeting next week", "a broken heater", "thanks for their help", "a schedule change",
            "a refund request", "a volunteering event", "a new product launch", "a noisy party", "a job offer")
SUBJECTS_CREATIVE = ("the ocean", "autumn leaves", "a lighthouse", "a quiet city at night", "the first snow", "a robot",
                     "an old bookshop", "a mountain village", "a lost umbrella", "the last train home")
GENERAL_TEMPLATES = (
    ("Explain {topic} in simple terms.", "topic"),
    ("Write a short paragraph about {topic}.", "topic"),
    ("What are three interesting facts about {topic}?", "topic"),
    ("How would you explain {topic} to a ten-year-old?", "topic"),
    ("Give me three tips for {activity}.", "activity"),
    ("What is a good plan for {activity}? Answer in a few steps.", "activity"),
    ("What are the main advantages and disadvantages of {thing}?", "thing"),
    ("Write a short persuasive argument for {thing}.", "thing"),
    ("Write a short email to {person} about {subject}.", "person_subject"),
    ("Write a short poem about {creative}.", "creative"),
    ("Write the opening paragraph of a story about {creative}.", "creative"),
    ("Compare {topic} and {topic2}: how are they alike and how do they differ?", "two_topics"),
    ("Summarize the following text in two sentences:\n\n{passage}", "passage"),
    ("Read this description and answer the question.\n\n{passage}\n\nQuestion: What is the module `{module}` used "
     "for?", "passage"),
)


def _summary(doc: str | None) -> str | None:
    """The first sentence of a docstring, if it reads as English prose (not a signature or a one-word stub)."""
    if not doc:
        return None
    first = " ".join(doc.strip().split("\n\n")[0].split())
    first = re.split(r"(?<=[.!?])\s", first)[0]
    if len(first.split()) < 4 or len(first) > 300 or "(" in first[:20] or ">>>" in first:
        return None
    return first if first.endswith((".", "!", "?")) else first + "."


def _public_members(module_name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = importlib.import_module(module_name)
        except Exception:  # a module missing from this build of Python
            return
    for name, member in sorted(vars(module).items()):
        if name.startswith("_") or getattr(member, "__module__", None) not in (module.__name__, module_name):
            continue
        if inspect.isfunction(member) or inspect.isclass(member):
            yield module_name, name, member


def _module_descriptions() -> list[tuple[str, str]]:
    """(module, the first paragraphs of its docstring) for modules with a few sentences of description."""
    out = []
    for module_name in CODE_MODULES:
        try:
            doc = importlib.import_module(module_name).__doc__ or ""
        except Exception:
            continue
        text = " ".join(" ".join(p.split()) for p in doc.strip().split("\n\n")[:2])
        if 200 <= len(text) <= 1200 and ">>>" not in text:
            out.append((module_name, text))
    return out


def code_prompts(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(f"code-{seed}")
    candidates = []
    for module_name, name, member in (m for mod in CODE_MODULES for m in _public_members(mod)):
        summary = _summary(inspect.getdoc(member))
        if summary is None:
            continue
        if inspect.isclass(member):
            candidates.append((CLASS_TEMPLATES, dict(module=module_name, name=name, summary=summary)))
            continue
        try:
            # a default shown by its object's address (`<function copy2 at 0x7f...>`) differs from run to run
            signature = re.sub(r" at 0x[0-9a-f]+", "", str(inspect.signature(member)))
        except (TypeError, ValueError):
            continue
        candidates.append((CODE_TEMPLATES, dict(module=module_name, name=name, signature=signature, summary=summary)))
    rng.shuffle(candidates)
    prompts = []
    for i in range(n):  # cycle through the members with a different phrasing each time round
        templates, fields = candidates[i % len(candidates)]
        template = templates[(i // len(candidates) + rng.randrange(len(templates))) % len(templates)]
        prompts.append(template.format(**fields))
    return [{"id": f"code-{i}", "domain": "code", "prompt": p} for i, p in enumerate(dict.fromkeys(prompts))]


def _unique_prompts(n: int, draw, domain: str, kind: str | None = None) -> list[dict]:
    """Up to ``n`` distinct prompts from ``draw()`` (a prompt, or None for a draw to discard), giving up after 50n
    draws when the templates have no more to give; ids ``{kind}-0``, ``{kind}-1``, ... in the order drawn (``kind``
    defaults to the domain)."""
    seen: dict[str, None] = {}
    attempts = 0
    while len(seen) < n and attempts < 50 * n:
        attempts += 1
        prompt = draw()
        if prompt is not None:
            seen.setdefault(prompt)
    return [{"id": f"{kind or domain}-{i}", "domain": domain, "prompt": p} for i, p in enumerate(seen)]


def general_prompts(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(f"general-{seed}")
    passages = _module_descriptions()

    def draw() -> str:
        template, kind = GENERAL_TEMPLATES[rng.randrange(len(GENERAL_TEMPLATES))]
        if kind == "passage":
            module, passage = rng.choice(passages)
            return template.format(passage=passage, module=module)
        if kind == "person_subject":
            prompt = template.format(person=rng.choice(PEOPLE), subject=rng.choice(SUBJECTS))
        elif kind == "two_topics":
            first, second = rng.sample(TOPICS, 2)
            prompt = template.format(topic=first, topic2=second)
        else:
            words = {"topic": TOPICS, "activity": ACTIVITIES, "thing": THINGS, "creative": SUBJECTS_CREATIVE}[kind]
            prompt = template.format(**{kind: rng.choice(words)})
        return prompt + rng.choice(STYLES)

    return _unique_prompts(n, draw, "general")


def gsm8k_train() -> list[dict]:
    raw = (resources.files("hf_specgen.training") / "data" / "gsm8k_train.jsonl.gz").read_bytes()
    rows = [json.loads(line) for line in gzip.decompress(raw).decode().splitlines() if line.strip()]
    return [{"id": f"gsm8k-train-{i}", "domain": "math", "prompt": r["question"],
             "answer": r["answer"].rsplit("####", 1)[-1].strip().replace(",", ""), "answer_format": "last_number"}
            for i, r in enumerate(rows)]


def math_prompts(n: int, seed: int = 0) -> list[dict]:
    rows = gsm8k_train()
    random.Random(f"math-{seed}").shuffle(rows)
    return rows[:n]


CODE_CONTEXT_TEMPLATES = (
    "Explain what this Python function does, step by step:\n\n```python\n{source}```",
    "Write pytest unit tests for the following Python function:\n\n```python\n{source}```",
    "Add type hints and a clear docstring to this Python function:\n\n```python\n{source}```",
    "Rewrite this Python function to make it easier to read, and explain what you changed:\n\n```python\n{source}```",
    "What are the edge cases this Python function handles? Point to the lines.\n\n```python\n{source}```",
)
PASSAGE_TEMPLATES = (
    "Summarize the following text in two sentences:\n\n{passage}",
    "Summarize this passage as three bullet points:\n\n{passage}",
    "Read the passage and explain its main idea to a beginner.\n\n{passage}",
    "{passage}\n\nBased only on the passage above, what is the most important rule it describes?",
    "{passage}\n\nWrite two questions that can be answered from this passage, each with its answer.",
    "Here is an excerpt from the Python documentation:\n\n{passage}\n\nWhat does it say, in plain words?",
    "List the key terms in this text and define each in one line.\n\n{passage}",
)
TRANSLATE_TEMPLATE = "Translate the following text into {language}:\n\n{text}"
LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese", "Dutch")


def _sources() -> list[str]:
    """Sources of standard-library functions and methods of 5 to 40 lines, public and documented (deduplicated)."""
    out: dict[str, None] = {}
    for _module_name, _name, member in (m for mod in CODE_MODULES for m in _public_members(mod)):
        functions = [member] if inspect.isfunction(member) else [
            f for n, f in sorted(vars(member).items()) if inspect.isfunction(f) and not n.startswith("__")]
        for function in functions:
            try:
                source = inspect.getsource(function)
            except (OSError, TypeError):
                continue
            source = textwrap.dedent(source)
            if 5 <= source.count("\n") <= 40 and len(source) <= 2000:
                out.setdefault(source)
    return list(out)


def _documentation_passages() -> list[str]:
    """Passages of 300-1500 characters of Python's documentation: the language reference topics (paragraphs merged
    up to the size) and the longer class and module docstrings of CODE_MODULES."""
    from pydoc_data.topics import topics

    passages = []
    for name in sorted(topics):
        paragraphs = [" ".join(p.split()) for p in topics[name].split("\n\n")]
        paragraphs = [p for p in paragraphs if len(p) > 60 and not p.startswith(("*", "=", "::")) and "::=" not in p]
        chunk = ""
        for paragraph in paragraphs:
            chunk = f"{chunk}\n\n{paragraph}".strip()
            if len(chunk) >= 300:
                if len(chunk) <= 1500:
                    passages.append(chunk)
                chunk = ""
    for _module_name, _name, member in (m for mod in CODE_MODULES for m in _public_members(mod)):
        doc = " ".join((inspect.getdoc(member) or "").split())
        if 300 <= len(doc) <= 1500 and ">>>" not in doc:
            passages.append(doc)
    passages += [text for _module, text in _module_descriptions() if len(text) >= 300]
    return list(dict.fromkeys(passages))


def code_context_prompts(n: int, seed: int = 0) -> list[dict]:
    """Tasks over a shown piece of standard-library code (the answer refers back to a long context)."""
    rng = random.Random(f"code-context-{seed}")
    sources = _sources()
    pairs = [(s, t) for s in sources for t in CODE_CONTEXT_TEMPLATES]
    rng.shuffle(pairs)
    return [{"id": f"code-context-{i}", "domain": "code", "prompt": t.format(source=s)}
            for i, (s, t) in enumerate(pairs[:n])]


def long_context_prompts(n: int, seed: int = 0) -> list[dict]:
    """Summarize / answer from / translate a passage of Python's documentation; one in five is a translation of
    one to three sentences of a passage."""
    rng = random.Random(f"long-{seed}")
    passages = _documentation_passages()

    def draw() -> str | None:
        passage = rng.choice(passages)
        if rng.random() >= 0.2:
            return rng.choice(PASSAGE_TEMPLATES).format(passage=passage)
        sentences = re.split(r"(?<=[.!?])\s+", passage)
        start = rng.randrange(len(sentences))
        text = " ".join(sentences[start: start + rng.randint(1, 3)])
        if len(text) < 40:
            return None
        return TRANSLATE_TEMPLATE.format(language=rng.choice(LANGUAGES), text=text)

    return _unique_prompts(n, draw, "long")


# A whole number of a word problem: not part of a decimal ("2.50") or a grouped number ("1,000").
_WHOLE_NUMBER = re.compile(r"(?<![\d.,])\d+(?!\d|[.,]\d)")


def math_variant_prompts(n: int, seed: int = 0) -> list[dict]:
    """GSM8K training problems with every whole number but 1 redrawn with as many digits (one digit: 2-9), so
    the target answers new arithmetic in the same wording. The variants carry no answer (nobody solved them):
    distillation needs the target's answer, not the right one."""
    rng = random.Random(f"math-variant-{seed}")
    problems = [r["prompt"] for r in gsm8k_train() if _WHOLE_NUMBER.search(r["prompt"])]

    def redraw(match: re.Match) -> str:
        digits = len(match.group())
        if match.group() == "1":  # "1 month": another number would break the noun's singular
            return "1"
        return str(rng.randint(2, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10 ** digits - 1))

    return _unique_prompts(n, lambda: _WHOLE_NUMBER.sub(redraw, rng.choice(problems)), "math", "gsm8k-variant")


def _kind(record: dict) -> str:
    """The source a record's id names: ``code-context-17`` -> ``code-context``."""
    return record["id"].rsplit("-", 1)[0]


def more_prompts(existing: list[dict], counts: dict[str, int], seed: int, exclude=None) -> list[dict]:
    """Prompts to append to a prompt file: ``counts[kind]`` new prompts of each source (``math-variant``, ``code``,
    ``code-context``, ``general``, ``long``) drawn with ``seed``, none equal to a prompt of ``existing`` (or to
    another new one), numbered on from ``existing``'s ids of that source, in a seeded mixed order. A source that has
    fewer new prompts to give gives what it has. ``exclude`` as in ``build_prompts``."""
    makers = {"math-variant": math_variant_prompts, "code": code_prompts, "code-context": code_context_prompts,
              "general": general_prompts, "long": long_context_prompts}
    unknown = set(counts) - set(makers)
    if unknown:
        raise ValueError(f"unknown prompt sources {sorted(unknown)}; choose from {sorted(makers)}")
    seen = {record["prompt"] for record in existing}
    new = []
    for source, count in counts.items():
        if count <= 0:
            continue
        # Draw enough to cover every prompt this source already gave (a new seed repeats some of them).
        drawn = makers[source](count + len(existing), seed)
        kind = _kind(drawn[0]) if drawn else source
        numbers = [int(r["id"].rsplit("-", 1)[1]) for r in existing if _kind(r) == kind]
        next_number = max(numbers, default=-1) + 1
        picked = []
        for record in drawn:
            if record["prompt"] in seen or (exclude is not None and exclude(record["prompt"])):
                continue
            seen.add(record["prompt"])
            picked.append({**record, "id": f"{kind}-{next_number + len(picked)}"})
            if len(picked) == count:
                break
        new += picked
    random.Random(f"mix-{seed}").shuffle(new)
    return new


def build_prompts(n_math: int, n_code: int, n_general: int, seed: int = 0, n_code_context: int = 0,
                  n_long: int = 0, exclude=None) -> list[dict]:
    """The training prompt set, domains interleaved in a seeded order (so any prefix of it is a balanced mix).
    ``exclude(prompt) -> bool`` drops prompts (`specgen data prompts` drops those sharing text with a benchmark:
    ``bench.prompt_sets.shares_text_with_a_benchmark``)."""
    records = math_prompts(n_math, seed) + code_prompts(n_code, seed) + general_prompts(n_general, seed)
    if n_code_context:
        records += code_context_prompts(n_code_context, seed)
    if n_long:
        records += long_context_prompts(n_long, seed)
    if exclude is not None:
        records = [r for r in records if not exclude(r["prompt"])]
    random.Random(f"mix-{seed}").shuffle(records)
    return records
