"""A small, deterministic "tiny world" corpus built only from what every machine has offline.

Three domains:

* ``code``  -- Python standard-library source. Instruction pairs "Complete this function:" (prompt = the ``def``
  line plus docstring, response = the body), and the raw files themselves for pretraining.
* ``prose`` -- English docstrings and comments pulled out of the same files with :mod:`ast` / :mod:`tokenize`.
  Instruction pairs "Explain what this code does:" (response = the docstring's summary) and "Continue the text:".
* ``math``  -- generated multi-step arithmetic word problems with worked solutions whose last line is
  ``#### <answer>``, so :func:`check_answer` can grade a model's output.

Held-out data: whole stdlib files are held out by a hash of their relative path (about 3%), so an evaluation prompt
never comes from a file the model trained on; math evaluation problems come from their own seeded stream and are
excluded from training by exact question text. A final leak check drops any evaluation record whose content still
occurs verbatim in training text (the stdlib has a few duplicated functions and comments).

Everything is a pure function of ``seed`` and the Python installation's stdlib, so two runs on the same interpreter
produce byte-identical files.
"""

from __future__ import annotations

import ast
import hashlib
import gzip
import inspect
import io
import json
import random
import re
import sys
import sysconfig
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

# --------------------------------------------------------------------------------------------------------------------
# Chat format. This module is the single source of truth: tokenizer.py builds its Jinja chat template from the same
# constants and the tests check that both render identically.
# --------------------------------------------------------------------------------------------------------------------

PAD_TOKEN = "<|pad|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"  # separates pretraining documents
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
END_TOKEN = "<|end|>"  # closes an assistant turn; generation stops here
MASK_TOKEN = "<|mask|>"  # reserved for DFlash drafters' masked block positions; never produced by the data
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, ENDOFTEXT_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, END_TOKEN, MASK_TOKEN)

DOMAINS: tuple[str, ...] = ("code", "prose", "math")


def format_user_turn(content: str) -> str:
    """One user turn: marker, newline, content, newline."""
    return f"{USER_TOKEN}\n{content}\n"


def format_assistant_turn(content: str) -> str:
    """One assistant turn: marker, newline, content, then the end marker (no trailing newline)."""
    return f"{ASSISTANT_TOKEN}\n{content}{END_TOKEN}"


def format_messages(messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
    """Render a conversation exactly like the tokenizer's chat template does.

    Only ``user`` and ``assistant`` roles exist in this tiny world. With ``add_generation_prompt`` the text ends with
    the open assistant marker ``<|assistant|>`` and the model writes the newline that starts its turn itself: the BPE
    merges that newline with a code answer's indentation (``"\\n    x"`` -> ``"\\n   "``, ``" x"``), so a prompt ending
    in a lone newline token would start every answer from a token sequence training never showed before code (and
    the model would answer code prompts in prose).
    """
    parts = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "user":
            parts.append(format_user_turn(content))
        elif role == "assistant":
            parts.append(format_assistant_turn(content))
        else:
            raise ValueError(f"unsupported chat role {role!r}: only 'user' and 'assistant' exist")
    if add_generation_prompt:
        parts.append(ASSISTANT_TOKEN)
    return "".join(parts)


def format_chat(prompt: str, response: str | None = None) -> str:
    """A single-turn instruction pair; ``response=None`` gives the generation prompt used at evaluation time."""
    if response is None:
        return format_messages([{"role": "user", "content": prompt}], add_generation_prompt=True)
    return format_messages([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])


def response_text(generated: str) -> str:
    """The answer in a decoded generation: what follows the newline the model writes after ``<|assistant|>``."""
    return generated[1:] if generated.startswith("\n") else generated


def format_record(record: dict, with_response: bool = True) -> str:
    """Chat-format a corpus record (training text, or the evaluation prompt when ``with_response=False``)."""
    return format_chat(record["prompt"], record["response"] if with_response else None)


def contains_special_token(text: str) -> bool:
    """True if ``text`` spells out a special-token marker; such text is dropped so markers only come from formatting."""
    return any(token in text for token in SPECIAL_TOKENS)


# --------------------------------------------------------------------------------------------------------------------
# Stdlib files and the held-out split
# --------------------------------------------------------------------------------------------------------------------

# Directories that are tests, GUI/demo code, vendored packages, or generated tables (encodings are codec maps).
SKIPPED_DIRS = frozenset({"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "ensurepip",
                          "turtledemo", "__pycache__", "encodings", "pydoc_data"})
# Files that are jokes or data rather than code (``this`` is rot13 text).
SKIPPED_FILES = frozenset({"this.py", "antigravity.py", "__phello__.py", "__hello__.py"})
MAX_FILE_BYTES = 200_000
MIN_FILE_BYTES = 1_000  # tiny files (empty __init__.py, shims) yield no useful records
HELDOUT_FRACTION = 0.03
# Keep each instruction pair small enough for a tiny model's context (~2000 chars is ~600 tokens of code).
MAX_RECORD_CHARS = 2000
MAX_BODY_LINES = 40


@dataclass(frozen=True)
class CodeFile:
    """A stdlib source file: its path relative to the stdlib directory (posix style) and its text."""

    rel_path: str
    text: str


def stdlib_dir() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(rel_path: str, fraction: float = HELDOUT_FRACTION) -> bool:
    """Whether a file belongs to the held-out split.

    A cryptographic hash (not Python's salted ``hash``) of the relative path makes the split identical on every run
    and machine, and independent of the seed, so the evaluation files never change between training runs.
    """
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def list_code_files(root: Path | None = None) -> list[CodeFile]:
    """All usable stdlib ``.py`` files, sorted by relative path (sorting makes the corpus order deterministic)."""
    root = Path(root) if root is not None else stdlib_dir()
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith("config-") for part in rel.parts[:-1]):
            continue
        if path.name in SKIPPED_FILES or not path.is_file():
            continue
        size = path.stat().st_size
        if not MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
            continue
        try:
            # tokenize.open honours PEP 263 coding cookies; a few stdlib files are not UTF-8.
            with tokenize.open(path) as handle:
                text = handle.read()
            ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if contains_special_token(text):
            continue
        files.append(CodeFile(rel.as_posix(), text))
    return files


def split_code_files(files: Sequence[CodeFile], seed: int = 0,
                     max_code_files: int | None = None) -> tuple[list[CodeFile], list[CodeFile]]:
    """Split files into (train, held-out) by path hash, optionally subsampling to ``max_code_files`` in total.

    When subsampling, the held-out share is kept at roughly ``HELDOUT_FRACTION`` but at least two files, so that even
    a tiny test corpus has an evaluation set. The subsample is a seeded shuffle so it spans many packages.
    """
    train = [f for f in files if not is_heldout(f.rel_path)]
    heldout = [f for f in files if is_heldout(f.rel_path)]
    if max_code_files is not None:
        rng = random.Random(f"code-subsample-{seed}")
        n_heldout = min(len(heldout), max(2, round(max_code_files * HELDOUT_FRACTION)))
        n_train = max(0, max_code_files - n_heldout)
        train = sorted(rng.sample(train, min(n_train, len(train))), key=lambda f: f.rel_path)
        heldout = sorted(rng.sample(heldout, n_heldout), key=lambda f: f.rel_path)
    return train, heldout


# --------------------------------------------------------------------------------------------------------------------
# Code and prose extraction
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class FileExtraction:
    """What one file contributes: instruction records and raw English passages (for pretraining and continuation).

    ``leak_keys`` maps a record id to the strings that, if all found verbatim in training text, mean the record
    leaked (see :func:`_drop_leaked`).
    """

    code: list[dict] = field(default_factory=list)
    prose: list[dict] = field(default_factory=list)
    passages: list[str] = field(default_factory=list)
    leak_keys: dict[str, list[str]] = field(default_factory=dict)


def _looks_like_english(text: str, min_words: int = 6) -> bool:
    """Cheap filter that rejects commented-out code, tables and symbol-heavy docstrings."""
    words = re.findall(r"[A-Za-z]{2,}", text)
    if len(words) < min_words:
        return False
    visible = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    ascii_chars = sum(c.isascii() for c in visible)
    return letters >= 0.7 * len(visible) and ascii_chars >= 0.97 * len(visible)


def _paragraphs(text: str, drop_indented: bool = False) -> list[str]:
    """Split on blank lines and re-flow each paragraph onto one line (docstrings and comments are hard-wrapped).

    With ``drop_indented``, paragraphs whose first line is indented are skipped: in a cleaned docstring those are
    code examples or literal blocks, which re-flowing would turn into nonsense.
    """
    blocks = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    if drop_indented:
        blocks = [p for p in blocks if not p[:1].isspace()]
    return [" ".join(p.split()) for p in blocks]


def _dedent_by(lines: list[str], indent: str) -> list[str]:
    """Strip the ``def`` line's indentation from every line that has it.

    Unlike :func:`textwrap.dedent` this still works when a multi-line string inside the body starts at column 0.
    """
    return [line[len(indent):] if line.startswith(indent) else line for line in lines]


def _function_records(rel_path: str, lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef,
                      out: FileExtraction) -> None:
    """Make the "Complete this function" (code) and "Explain what this code does" (prose) records for one function."""
    first_stmt = node.body[0]
    if first_stmt.lineno == node.lineno:  # one-liner like ``def f(): return 1``: there is no body to complete
        return
    docstring = ast.get_docstring(node, clean=True)
    has_doc = docstring is not None
    if has_doc:
        header_end = first_stmt.end_lineno  # signature + docstring
        if len(node.body) < 2 or node.body[1].lineno <= header_end:
            return  # docstring-only function (nothing to complete) or statements on the docstring's line
    else:
        header_end = first_stmt.lineno - 1
    def_line = lines[node.lineno - 1]
    indent = def_line[: len(def_line) - len(def_line.lstrip())]
    header = _dedent_by(lines[node.lineno - 1: header_end], indent)
    body = _dedent_by(lines[header_end: node.end_lineno], indent)
    # Drop trailing blank lines so the response ends at the last statement.
    while body and not body[-1].strip():
        body.pop()
    if not body or len(body) > MAX_BODY_LINES:
        return
    header_text, body_text = "\n".join(header), "\n".join(body)
    if len(header_text) + len(body_text) > MAX_RECORD_CHARS:
        return
    record_id = f"code/complete/{rel_path}:{node.lineno}"
    out.code.append({"domain": "code", "task": "complete", "id": record_id, "source": rel_path,
                     "prompt": "Complete this function:\n" + header_text, "response": body_text})
    out.leak_keys[record_id] = [header_text]

    if not has_doc:
        return
    summary = _paragraphs(docstring)[0]
    if not _looks_like_english(summary, min_words=4):
        return
    signature = _dedent_by(lines[node.lineno - 1: first_stmt.lineno - 1], indent)
    code_text = "\n".join(signature + body)
    record_id = f"prose/explain/{rel_path}:{node.lineno}"
    out.prose.append({"domain": "prose", "task": "explain", "id": record_id, "source": rel_path,
                      "prompt": "Explain what this code does:\n" + code_text, "response": summary})
    # The docstring-free code is not a contiguous substring of the file, so test its two halves.
    out.leak_keys[record_id] = ["\n".join(signature), body_text]


def _comment_blocks(source: str) -> list[str]:
    """Runs of whole-line comments, re-flowed into paragraphs (a bare ``#`` line is a paragraph break)."""
    blocks: list[list[str]] = []
    last_row = -2
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT or not token.line.lstrip().startswith("#"):
                continue
            row = token.start[0]
            text = token.string.lstrip("#")
            if token.string.startswith(("#!", "# -*-")) or "coding:" in text[:20]:
                continue
            text = text[1:] if text.startswith(" ") else text
            if row != last_row + 1:
                blocks.append([])
            blocks[-1].append(text.rstrip())
            last_row = row
    except (tokenize.TokenError, SyntaxError):
        return []
    return ["\n\n".join(_paragraphs("\n".join(block), drop_indented=True)) for block in blocks]


def _split_for_continuation(text: str, rng: random.Random) -> tuple[str, str] | None:
    """Split a passage at a sentence (else word) boundary 30-60% of the way in; the model writes the rest."""
    lo, hi = int(len(text) * 0.3), int(len(text) * 0.6)
    cuts = [m.end() for m in re.finditer(r"[.!?:]\s+", text) if lo <= m.end() <= hi]
    if not cuts:
        cuts = [m.end() for m in re.finditer(r"\s+", text) if lo <= m.end() <= hi]
    if not cuts:
        return None
    cut = rng.choice(cuts)
    head, tail = text[:cut].rstrip(), text[cut:].lstrip()
    return (head, tail) if head and tail else None


MIN_PASSAGE_CHARS = 80  # shorter English snippets are kept only inside the raw code files
MIN_CONTINUE_CHARS = 200
MAX_CONTINUE_CHARS = 1500


def extract_file(code_file: CodeFile, seed: int = 0) -> FileExtraction:
    """Parse one file into code/prose records and English passages.

    Records are emitted in source order; the only randomness (continuation cut points) uses an RNG seeded by the
    seed and the file's path, so a file's records do not depend on which other files were selected.
    """
    out = FileExtraction()
    rel_path, source = code_file.rel_path, code_file.text
    tree = ast.parse(source)
    lines = source.splitlines()
    rng = random.Random(f"prose-{seed}-{rel_path}")

    docstrings: list[str] = []
    module_doc = ast.get_docstring(tree, clean=True)
    if module_doc:
        docstrings.append(module_doc)
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        doc = ast.get_docstring(node, clean=True)
        if doc:
            docstrings.append(doc)
        if not isinstance(node, ast.ClassDef):
            _function_records(rel_path, lines, node, out)

    # English passages: each docstring paragraph group / comment block that reads as prose, re-flowed.
    seen: set[str] = set()
    for raw in docstrings + _comment_blocks(source):
        paragraphs = _paragraphs(inspect.cleandoc(raw), drop_indented=True)
        passage = "\n\n".join(p for p in paragraphs if not p.startswith(">>>"))
        if len(passage) < MIN_PASSAGE_CHARS or passage in seen or not _looks_like_english(passage):
            continue
        seen.add(passage)
        out.passages.append(passage)
        if len(passage) < MIN_CONTINUE_CHARS:
            continue
        split = _split_for_continuation(passage[:MAX_CONTINUE_CHARS], rng)
        if split is None:
            continue
        head, tail = split
        record_id = f"prose/continue/{rel_path}#{len(out.passages) - 1}"
        out.prose.append({"domain": "prose", "task": "continue", "id": record_id, "source": rel_path,
                          "prompt": "Continue the text:\n" + head, "response": tail})
        out.leak_keys[record_id] = [head]

    # Guard against special-token spellings inside extracted text (the raw files were already checked).
    out.code = [r for r in out.code if not contains_special_token(r["prompt"] + r["response"])]
    out.prose = [r for r in out.prose if not contains_special_token(r["prompt"] + r["response"])]
    return out


# --------------------------------------------------------------------------------------------------------------------
# Math word problems
# --------------------------------------------------------------------------------------------------------------------

_PEOPLE = [("Ava", "she", "her"), ("Ben", "he", "his"), ("Chloe", "she", "her"), ("Daniel", "he", "his"),
           ("Emma", "she", "her"), ("Farid", "he", "his"), ("Grace", "she", "her"), ("Hiro", "he", "his"),
           ("Isla", "she", "her"), ("Jamal", "he", "his"), ("Keiko", "she", "her"), ("Liam", "he", "his"),
           ("Maya", "she", "her"), ("Noah", "he", "his"), ("Olivia", "she", "her"), ("Pablo", "he", "his"),
           ("Quinn", "she", "her"), ("Ravi", "he", "his"), ("Sofia", "she", "her"), ("Tomas", "he", "his")]
_ITEMS = ["notebooks", "pens", "apples", "oranges", "books", "candles", "mugs", "stickers", "toy cars", "puzzles",
          "plants", "bottles of juice", "pencils", "socks", "batteries", "cupcakes"]
_SHARED = ["marbles", "cookies", "crayons", "stamps", "shells", "cards", "beads", "grapes"]
_VEHICLES = ["car", "bus", "train", "truck", "cyclist", "motorbike"]
_CROPS = ["tomato", "pepper", "strawberry", "bean", "lettuce"]


@dataclass
class MathProblem:
    """A generated problem: question, solution lines (one operation each) and the integer answer."""

    template: str
    question: str
    steps: list[str]
    answer: int

    @property
    def solution(self) -> str:
        """Worked solution; the last line ``#### <answer>`` is what :func:`extract_answer` reads."""
        return "\n".join(self.steps + [f"#### {self.answer}"])


def _divisors(n: int, lo: int, hi: int) -> list[int]:
    return [d for d in range(lo, min(hi, n) + 1) if n % d == 0]


def _bill_above(amount: int) -> int:
    """The smallest common banknote that covers ``amount`` with change left over."""
    for bill in (10, 20, 50, 100, 200):
        if bill > amount:
            return bill
    return (amount // 100 + 1) * 100


def _shopping(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    item1, item2 = rng.sample(_ITEMS, 2)
    a, p1, b, p2 = rng.randint(2, 9), rng.randint(1, 12), rng.randint(2, 9), rng.randint(1, 15)
    cost1, cost2 = a * p1, b * p2
    if n_steps == 2:
        bill = _bill_above(cost1)
        q = (f"{name} buys {a} {item1} that cost {p1} dollars each and pays with a {bill}-dollar bill. "
             f"How much change does {pron} get?")
        steps = [f"The {item1} cost {a} * {p1} = {cost1} dollars.",
                 f"The change is {bill} - {cost1} = {bill - cost1} dollars."]
        return MathProblem("shopping", q, steps, bill - cost1)
    total = cost1 + cost2
    q = f"{name} buys {a} {item1} at {p1} dollars each and {b} {item2} at {p2} dollars each."
    steps = [f"The {item1} cost {a} * {p1} = {cost1} dollars.", f"The {item2} cost {b} * {p2} = {cost2} dollars.",
             f"Together that is {cost1} + {cost2} = {total} dollars."]
    if n_steps == 3:
        return MathProblem("shopping", q + f" How much does {pron} spend in total?", steps, total)
    bill = _bill_above(total)
    q += f" {pron.capitalize()} pays with a {bill}-dollar bill. How much change does {pron} get?"
    steps.append(f"The change is {bill} - {total} = {bill - total} dollars.")
    return MathProblem("shopping", q, steps, bill - total)


def _travel(rng: random.Random, n_steps: int) -> MathProblem:
    vehicle = rng.choice(_VEHICLES)
    s1, t1 = rng.randrange(20, 85, 5), rng.randint(1, 4)
    d1 = s1 * t1
    if n_steps == 2:
        trip = d1 + rng.randrange(10, 200, 10)
        q = (f"A {vehicle} travels at {s1} km per hour for {t1} hours on a {trip} km trip. "
             f"How many kilometers are left?")
        steps = [f"It covers {s1} * {t1} = {d1} km.", f"That leaves {trip} - {d1} = {trip - d1} km."]
        return MathProblem("travel", q, steps, trip - d1)
    s2, t2 = rng.randrange(20, 85, 5), rng.randint(1, 4)
    d2 = s2 * t2
    total = d1 + d2
    q = f"A {vehicle} travels at {s1} km per hour for {t1} hours, then at {s2} km per hour for {t2} hours."
    steps = [f"The first part is {s1} * {t1} = {d1} km.", f"The second part is {s2} * {t2} = {d2} km.",
             f"In total it travels {d1} + {d2} = {total} km."]
    if n_steps == 3:
        return MathProblem("travel", q + " How far does it travel in total?", steps, total)
    trip = total + rng.randrange(10, 200, 10)
    q += f" The whole trip is {trip} km. How many kilometers are left?"
    steps.append(f"That leaves {trip} - {total} = {trip - total} km.")
    return MathProblem("travel", q, steps, trip - total)


def _sharing(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    thing = rng.choice(_SHARED)
    friends, each = rng.randint(2, 6), rng.randint(3, 12)
    total = friends * each
    boxes = rng.choice([d for d in _divisors(total, 2, 12) if total // d >= 2] or [friends])
    per_box = total // boxes
    q = (f"{name} has {boxes} boxes with {per_box} {thing} in each box. {pron.capitalize()} shares them equally "
         f"among {friends} friends.")
    steps = [f"{name} has {boxes} * {per_box} = {total} {thing}.",
             f"Each friend gets {total} / {friends} = {each} {thing}."]
    if n_steps == 2:
        return MathProblem("sharing", q + f" How many {thing} does each friend get?", steps, each)
    lost = rng.randint(1, each - 1)
    left = each - lost
    q += f" Each friend then loses {lost} {thing}."
    steps.append(f"Each friend has {each} - {lost} = {left} {thing} left.")
    if n_steps == 3:
        return MathProblem("sharing", q + f" How many {thing} does each friend have now?", steps, left)
    q += f" How many {thing} do the friends have altogether now?"
    steps.append(f"Altogether they have {friends} * {left} = {friends * left} {thing}.")
    return MathProblem("sharing", q, steps, friends * left)


def _ages(rng: random.Random, n_steps: int) -> MathProblem:
    (a_name, _, _), (b_name, _, _), (c_name, _, _) = rng.sample(_PEOPLE, 3)
    a, gap = rng.randint(4, 30), rng.randint(2, 12)
    b = a + gap
    c = 2 * b
    q = f"{a_name} is {a} years old. {b_name} is {gap} years older than {a_name}. {c_name} is twice as old as {b_name}."
    steps = [f"{b_name} is {a} + {gap} = {b} years old.", f"{c_name} is 2 * {b} = {c} years old."]
    if n_steps == 2:
        return MathProblem("ages", q + f" How old is {c_name}?", steps, c)
    now = a + b + c
    steps.append(f"Together they are {a} + {b} + {c} = {now} years old.")
    if n_steps == 3:
        return MathProblem("ages", q + " What is the sum of their ages?", steps, now)
    years = rng.randint(2, 10)
    q += f" What will the sum of their ages be in {years} years?"
    steps.append(f"In {years} years each is {years} years older, "
                 f"so the sum is {now} + 3 * {years} = {now + 3 * years}.")
    return MathProblem("ages", q, steps, now + 3 * years)


def _savings(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, poss = rng.choice(_PEOPLE)
    start, weekly, weeks = rng.randint(0, 60), rng.randrange(5, 45, 5), rng.randint(2, 12)
    saved = weekly * weeks
    total = start + saved
    q = f"{name} has {start} dollars and saves {weekly} dollars every week for {weeks} weeks."
    steps = [f"{pron.capitalize()} saves {weekly} * {weeks} = {saved} dollars.",
             f"{pron.capitalize()} then has {start} + {saved} = {total} dollars."]
    if n_steps == 2:
        return MathProblem("savings", q + f" How much money does {pron} have then?", steps, total)
    spent = rng.randint(1, total - 1)
    if n_steps == 4 and (total - spent) % 2:
        spent = spent + 1 if spent + 1 < total else spent - 1  # keep what is left even so "half" is whole
    left = total - spent
    q += f" Then {pron} spends {spent} dollars on a gift."
    steps.append(f"After the gift {pron} has {total} - {spent} = {left} dollars.")
    if n_steps == 3:
        return MathProblem("savings", q + f" How much money does {pron} have left?", steps, left)
    q += f" {pron.capitalize()} puts half of what is left into {poss} bank account. How much goes into the bank?"
    steps.append(f"Half of {left} is {left} / 2 = {left // 2} dollars.")
    return MathProblem("savings", q, steps, left // 2)


def _baking(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    batches, per_batch = rng.randint(2, 6), rng.randrange(6, 26, 2)
    cookies = batches * per_batch
    bag = rng.randint(2, 6)
    bags = rng.randint(1, (cookies - 1) // bag)
    eaten = cookies - bags * bag  # chosen so the leftovers fill whole bags
    q = (f"{name} bakes {batches} batches of cookies with {per_batch} cookies in each batch. "
         f"{pron.capitalize()} gives away {eaten} cookies.")
    steps = [f"{pron.capitalize()} bakes {batches} * {per_batch} = {cookies} cookies.",
             f"After giving some away {pron} has {cookies} - {eaten} = {cookies - eaten} cookies."]
    if n_steps == 2:
        return MathProblem("baking", q + " How many cookies are left?", steps, cookies - eaten)
    q += f" {pron.capitalize()} packs the rest into bags of {bag}."
    steps.append(f"That fills {cookies - eaten} / {bag} = {bags} bags.")
    if n_steps == 3:
        return MathProblem("baking", q + f" How many bags does {pron} fill?", steps, bags)
    price = rng.randint(2, 9)
    q += f" Each bag sells for {price} dollars. How much money does {pron} make?"
    steps.append(f"{pron.capitalize()} makes {bags} * {price} = {bags * price} dollars.")
    return MathProblem("baking", q, steps, bags * price)


def _reading(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    rate, days = rng.randrange(5, 45, 5), rng.randint(2, 7)
    read = rate * days
    rate2, days2 = rng.randrange(5, 55, 5), rng.randint(1, 6)
    pages = read + rate2 * days2
    left = pages - read
    q = f"A book has {pages} pages. {name} reads {rate} pages a day for {days} days."
    steps = [f"{pron.capitalize()} reads {rate} * {days} = {read} pages.",
             f"There are {pages} - {read} = {left} pages left."]
    if n_steps == 2:
        return MathProblem("reading", q + " How many pages are left?", steps, left)
    q += f" Then {pron} reads {rate2} pages a day."
    steps.append(f"The rest takes {left} / {rate2} = {days2} days.")
    if n_steps == 3:
        return MathProblem("reading", q + " How many more days does it take to finish the book?", steps, days2)
    q += " How many days does it take to read the whole book?"
    steps.append(f"In total it takes {days} + {days2} = {days + days2} days.")
    return MathProblem("reading", q, steps, days + days2)


def _garden(rng: random.Random, n_steps: int) -> MathProblem:
    name, _, poss = rng.choice(_PEOPLE)
    crop = rng.choice(_CROPS)
    rows, cols = rng.randint(2, 8), rng.randint(3, 10)
    plants = rows * cols
    died = rng.randint(2, plants // 3)
    alive = plants - died
    q = f"{name} plants {rows} rows of {crop} plants with {cols} plants in each row. {died} plants die."
    steps = [f"{name} plants {rows} * {cols} = {plants} plants.",
             f"{plants} - {died} = {alive} plants survive."]
    if n_steps == 2:
        return MathProblem("garden", q + " How many plants survive?", steps, alive)
    per_plant = rng.randint(2, 6)
    harvest = alive * per_plant
    q += f" Each surviving plant gives {per_plant} {crop}s."
    steps.append(f"The harvest is {alive} * {per_plant} = {harvest} {crop}s.")
    if n_steps == 3:
        return MathProblem("garden", q + f" How many {crop}s does {name} harvest?", steps, harvest)
    basket = rng.choice([d for d in _divisors(harvest, 2, 20) if d != per_plant] or [per_plant])
    q += f" {name} puts them in baskets of {basket}. How many baskets does {name} fill?"
    steps.append(f"That fills {harvest} / {basket} = {harvest // basket} baskets.")
    return MathProblem("garden", q, steps, harvest // basket)


def _wages(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    wage, hours, days = rng.randint(8, 25), rng.randint(2, 8), rng.randint(2, 6)
    daily = wage * hours
    earned = daily * days
    q = f"{name} earns {wage} dollars an hour and works {hours} hours a day for {days} days."
    steps = [f"Each day {pron} earns {wage} * {hours} = {daily} dollars.",
             f"Over {days} days {pron} earns {daily} * {days} = {earned} dollars."]
    if n_steps == 2:
        return MathProblem("wages", q + f" How much does {pron} earn?", steps, earned)
    bonus = rng.randrange(10, 110, 10)
    total = earned + bonus
    q += f" {pron.capitalize()} also gets a bonus of {bonus} dollars."
    steps.append(f"With the bonus {pron} has {earned} + {bonus} = {total} dollars.")
    if n_steps == 3:
        return MathProblem("wages", q + f" How much does {pron} get in total?", steps, total)
    rent = rng.randint(1, total - 1)
    q += f" {pron.capitalize()} pays {rent} dollars of rent. How much is left?"
    steps.append(f"After rent {pron} has {total} - {rent} = {total - rent} dollars.")
    return MathProblem("wages", q, steps, total - rent)


def _classroom(rng: random.Random, n_steps: int) -> MathProblem:
    groups, size, per_group = rng.randint(2, 8), rng.randint(2, 6), rng.randint(2, 9)
    students = groups * size
    markers = groups * per_group
    q = (f"A teacher splits {students} students into groups of {size}. Each group gets {per_group} markers.")
    steps = [f"There are {students} / {size} = {groups} groups.",
             f"The groups need {groups} * {per_group} = {markers} markers."]
    if n_steps == 2:
        return MathProblem("classroom", q + " How many markers are handed out?", steps, markers)
    box = markers + rng.randint(1, 40)
    q += f" The teacher had {box} markers."
    steps.append(f"The teacher has {box} - {markers} = {box - markers} markers left.")
    if n_steps == 3:
        return MathProblem("classroom", q + " How many markers are left?", steps, box - markers)
    packs, per_pack = rng.randint(2, 5), rng.randint(4, 12)
    bought = packs * per_pack
    q += f" Then the teacher buys {packs} packs of {per_pack} markers. How many markers does the teacher have now?"
    steps.append(f"The teacher buys {packs} * {per_pack} = {bought} markers and has {box - markers} + {bought} = "
                 f"{box - markers + bought} markers.")
    return MathProblem("classroom", q, steps, box - markers + bought)


def _stickers(rng: random.Random, n_steps: int) -> MathProblem:
    name, pron, _ = rng.choice(_PEOPLE)
    thing = rng.choice(_SHARED)
    have, packs, per_pack = rng.randint(3, 40), rng.randint(2, 6), rng.randint(4, 12)
    bought = packs * per_pack
    total = have + bought
    q = f"{name} has {have} {thing}. {pron.capitalize()} buys {packs} packs with {per_pack} {thing} in each pack."
    steps = [f"{pron.capitalize()} buys {packs} * {per_pack} = {bought} {thing}.",
             f"Now {pron} has {have} + {bought} = {total} {thing}."]
    if n_steps == 2:
        return MathProblem("collecting", q + f" How many {thing} does {pron} have now?", steps, total)
    friends = rng.randint(2, 5)
    give = rng.randint(1, total - friends)
    if n_steps == 4:
        give += (total - give) % friends  # make the remainder divisible among the friends
    left = total - give
    q += f" {pron.capitalize()} gives away {give} {thing}."
    steps.append(f"{pron.capitalize()} has {total} - {give} = {left} {thing} left.")
    if n_steps == 3:
        return MathProblem("collecting", q + f" How many {thing} are left?", steps, left)
    q += f" {pron.capitalize()} splits the rest equally among {friends} friends. How many does each friend get?"
    steps.append(f"Each friend gets {left} / {friends} = {left // friends} {thing}.")
    return MathProblem("collecting", q, steps, left // friends)


def _bus(rng: random.Random, n_steps: int) -> MathProblem:
    riders = rng.randint(10, 40)
    q = f"A bus starts with {riders} passengers."
    steps = []
    for stop in range(1, n_steps + 1):
        off = rng.randint(0, min(riders, 12))
        on = rng.randint(0, 12)
        after = riders - off + on
        q += f" At stop {stop}, {off} people get off and {on} get on."
        steps.append(f"After stop {stop} there are {riders} - {off} + {on} = {after} passengers.")
        riders = after
    return MathProblem("bus", q + " How many passengers are on the bus at the end?", steps, riders)


MATH_TEMPLATES: dict[str, Callable[[random.Random, int], MathProblem]] = {
    "shopping": _shopping, "travel": _travel, "sharing": _sharing, "ages": _ages, "savings": _savings,
    "baking": _baking, "reading": _reading, "garden": _garden, "wages": _wages, "classroom": _classroom,
    "collecting": _stickers, "bus": _bus,
}


def generate_math_problem(rng: random.Random) -> MathProblem:
    """One problem from a random template with 2-4 solution steps."""
    name = rng.choice(sorted(MATH_TEMPLATES))
    return MATH_TEMPLATES[name](rng, rng.randint(2, 4))


def _math_record(problem: MathProblem, split: str, index: int) -> dict:
    return {"domain": "math", "task": "solve", "id": f"math/{split}/{index}", "template": problem.template,
            "num_steps": len(problem.steps), "prompt": "Solve: " + problem.question, "response": problem.solution,
            "answer": problem.answer}


def math_records(n: int, seed: int, split: str, exclude_questions: Iterable[str] = ()) -> list[dict]:
    """``n`` distinct math records from the RNG stream named by ``split`` and ``seed``.

    Questions in ``exclude_questions`` (the evaluation set, when building training data) are skipped, which keeps
    evaluation problems out of training without shrinking either set.
    """
    rng = random.Random(f"math-{split}-{seed}")
    seen = set(exclude_questions)
    records: list[dict] = []
    attempts = 0
    while len(records) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError(f"could only generate {len(records)} distinct math problems out of {n}")
        problem = generate_math_problem(rng)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        records.append(_math_record(problem, split, len(records)))
    return records


_ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")


def extract_answer(text: str) -> float | None:
    """The number after the last ``####`` marker, or None if the text has no (well-formed) marker.

    Deliberately strict: a model only gets credit when it produces the answer format it was trained on, so a stray
    number in an unfinished solution is not mistaken for an answer.
    """
    matches = _ANSWER_RE.findall(text)
    if not matches:
        return None
    try:
        return float(matches[-1].replace(",", ""))
    except ValueError:
        return None


def check_answer(problem_record: dict, generated_text: str) -> bool:
    """Whether ``generated_text`` ends its solution with the record's correct final answer."""
    value = extract_answer(generated_text)
    return value is not None and abs(value - float(problem_record["answer"])) < 1e-9


# --------------------------------------------------------------------------------------------------------------------
# Putting it together
# --------------------------------------------------------------------------------------------------------------------

DEFAULT_MATH_TRAIN = 20_000
DEFAULT_MATH_EVAL = 500


@dataclass
class CorpusSplits:
    """Everything the corpus builder produces, in memory."""

    train: list[dict]
    eval_code: list[dict]
    eval_math: list[dict]
    eval_prose: list[dict]
    train_files: list[CodeFile]
    eval_files: list[CodeFile]
    passages: list[str]  # English passages from training files, for raw pretraining text
    dropped_leaks: int = 0


def _drop_leaked(records: list[dict], leak_keys: dict[str, list[str]], haystack: str,
                 train_prompts: set[str]) -> list[dict]:
    """Remove evaluation records whose prompt is a training prompt or whose content occurs verbatim in training text.

    Held-out files already guarantee this in most cases, but the stdlib duplicates some code (pure-Python twins of C
    modules, trivial ``__repr__`` bodies) and boilerplate comments across files.
    """
    kept, seen_prompts = [], set()
    for record in records:
        prompt = record["prompt"]
        if prompt in train_prompts or prompt in seen_prompts:
            continue
        keys = leak_keys.get(record["id"], [])
        if keys and all(key in haystack for key in keys):
            continue
        seen_prompts.add(prompt)
        kept.append(record)
    return kept


def build_records(seed: int = 0, max_code_files: int | None = None, n_math_train: int = DEFAULT_MATH_TRAIN,
                  n_math_eval: int = DEFAULT_MATH_EVAL, stdlib_root: Path | None = None) -> CorpusSplits:
    """Build all train and held-out records in memory (see :func:`build_corpus` to write them)."""
    train_files, eval_files = split_code_files(list_code_files(stdlib_root), seed, max_code_files)

    train_code, train_prose, passages, seen_passages = [], [], [], set()
    seen_prompts: set[str] = set()
    for code_file in train_files:
        extraction = extract_file(code_file, seed)
        # Exact duplicates (the same comment in several modules) would only be memorised; keep the first.
        for record in extraction.code + extraction.prose:
            if record["prompt"] in seen_prompts:
                continue
            seen_prompts.add(record["prompt"])
            (train_code if record["domain"] == "code" else train_prose).append(record)
        for passage in extraction.passages:
            if passage not in seen_passages:
                seen_passages.add(passage)
                passages.append(passage)

    eval_code, eval_prose, leak_keys = [], [], {}
    for code_file in eval_files:
        extraction = extract_file(code_file, seed)
        eval_code += extraction.code
        eval_prose += extraction.prose
        leak_keys.update(extraction.leak_keys)

    eval_math = math_records(n_math_eval, seed, "eval")
    train_math = math_records(n_math_train, seed, "train",
                              exclude_questions=[r["prompt"].removeprefix("Solve: ") for r in eval_math])

    train = train_code + train_prose + train_math
    train_prompts = {r["prompt"] for r in train}
    # Training text that code/prose evaluation content could be copied from: raw files, passages, and the
    # (dedented) code/prose instruction pairs. Math is excluded: it cannot contain stdlib text, and eval math
    # questions were already excluded from the training stream above.
    haystack = "\x00".join([f.text for f in train_files] + passages
                           + [r["prompt"] + "\x00" + r["response"] for r in train_code + train_prose])
    n_eval = len(eval_code) + len(eval_prose)
    eval_code = _drop_leaked(eval_code, leak_keys, haystack, train_prompts)
    eval_prose = _drop_leaked(eval_prose, leak_keys, haystack, train_prompts)

    random.Random(f"train-order-{seed}").shuffle(train)
    return CorpusSplits(train=train, eval_code=eval_code, eval_math=eval_math, eval_prose=eval_prose,
                        train_files=train_files, eval_files=eval_files, passages=passages,
                        dropped_leaks=n_eval - len(eval_code) - len(eval_prose))


def pretraining_documents(splits: CorpusSplits, seed: int = 0) -> list[dict]:
    """Raw pretraining documents ``{"domain", "kind", "text"}`` mixing all three domains, in a seeded order.

    Pretraining needs both plain text (raw stdlib files, English passages) and the chat-formatted instruction pairs,
    so the model learns the language of each domain and the ``<|user|>/<|assistant|>/<|end|>`` protocol at once.
    Only training data is used. Documents are meant to be joined with ``<|endoftext|>`` by the trainer.
    """
    docs = [{"domain": r["domain"], "kind": "chat", "text": format_record(r)} for r in splits.train]
    docs += [{"domain": "code", "kind": "file", "text": f.text} for f in splits.train_files]
    docs += [{"domain": "prose", "kind": "passage", "text": p} for p in splits.passages]
    random.Random(f"pretrain-order-{seed}").shuffle(docs)
    return docs


def iter_pretraining_text(documents: Iterable[dict]) -> Iterable[str]:
    """The text of each document followed by ``<|endoftext|>``: what a tokenizer or LM trainer consumes."""
    for doc in documents:
        yield doc["text"] + ENDOFTEXT_TOKEN


def _write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """Records of a JSONL file (``.jsonl`` or ``.jsonl.gz``), or of every finished shard of a dataset folder
    (``data/*.jsonl.gz``, written by ``specgen data regenerate --shard-size``), in shard order."""
    path = Path(path)
    if path.is_dir():
        shards = sorted((path / "data").glob("*.jsonl.gz"))
        if not shards:
            raise ValueError(f"{path} is a folder without data/*.jsonl.gz shards; pass a JSONL file or a dataset "
                             "folder written by `specgen data regenerate --shard-size`")
        return [row for shard in shards for row in read_jsonl(shard)]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _count_by(rows: Iterable[dict], key: str) -> dict[str, int]:
    return dict(sorted(Counter(row[key] for row in rows).items()))


def _chars_by_domain(rows: Iterable[dict], text: Callable[[dict], str]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for row in rows:
        counts[row["domain"]] += len(text(row))
    return dict(sorted(counts.items()))


def corpus_stats(splits: CorpusSplits, documents: list[dict], seed: int) -> dict:
    """Counts and character totals for ``stats.json``."""
    def pair_chars(record: dict) -> str:
        return record["prompt"] + record["response"]

    return {
        "seed": seed,
        "python_version": sys.version.split()[0],
        "files": {"train": len(splits.train_files), "eval": len(splits.eval_files),
                  "eval_paths": [f.rel_path for f in splits.eval_files]},
        "records": {"train": _count_by(splits.train, "domain"), "train_tasks": _count_by(splits.train, "task"),
                    "eval_code": len(splits.eval_code), "eval_math": len(splits.eval_math),
                    "eval_prose": len(splits.eval_prose), "eval_prose_tasks": _count_by(splits.eval_prose, "task"),
                    "eval_dropped_as_leaked": splits.dropped_leaks},
        "chars": {"train": _chars_by_domain(splits.train, pair_chars),
                  "eval_code": sum(len(pair_chars(r)) for r in splits.eval_code),
                  "eval_math": sum(len(pair_chars(r)) for r in splits.eval_math),
                  "eval_prose": sum(len(pair_chars(r)) for r in splits.eval_prose)},
        "pretrain": {"documents": _count_by(documents, "domain"), "kinds": _count_by(documents, "kind"),
                     "chars": _chars_by_domain(documents, lambda d: d["text"]),
                     "total_chars": sum(len(d["text"]) for d in documents)},
        "math_templates": _count_by([r for r in splits.train if r["domain"] == "math"], "template"),
    }


def build_corpus(out_dir: str | Path, seed: int = 0, max_code_files: int | None = None,
                 n_math_train: int = DEFAULT_MATH_TRAIN, n_math_eval: int = DEFAULT_MATH_EVAL) -> dict:
    """Build the corpus and write it to ``out_dir``; returns the stats dict.

    Files: ``train.jsonl`` (instruction records of all domains, shuffled), ``eval_code.jsonl``, ``eval_math.jsonl``,
    ``eval_prose.jsonl`` (held-out records), ``pretrain.jsonl`` (raw pretraining documents, see
    :func:`pretraining_documents`) and ``stats.json``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    splits = build_records(seed, max_code_files, n_math_train, n_math_eval)
    documents = pretraining_documents(splits, seed)
    _write_jsonl(out / "train.jsonl", splits.train)
    _write_jsonl(out / "eval_code.jsonl", splits.eval_code)
    _write_jsonl(out / "eval_math.jsonl", splits.eval_math)
    _write_jsonl(out / "eval_prose.jsonl", splits.eval_prose)
    _write_jsonl(out / "pretrain.jsonl", documents)
    stats = corpus_stats(splits, documents, seed)
    (out / "stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return stats


if __name__ == "__main__":  # python -m hf_specgen.training.corpus OUT_DIR [--max-code-files N]
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-code-files", type=int, default=None)
    parser.add_argument("--n-math-train", type=int, default=DEFAULT_MATH_TRAIN)
    parser.add_argument("--n-math-eval", type=int, default=DEFAULT_MATH_EVAL)
    args = parser.parse_args()
    print(json.dumps(build_corpus(args.out_dir, args.seed, args.max_code_files, args.n_math_train,
                                  args.n_math_eval), indent=2))
