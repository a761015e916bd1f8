"""Quality measures for lossy methods (FLy) on a real target: does the speedup change what the model answers?

A 135M model solves few benchmark problems, so accuracy against the reference answers says little. Two measures that
do mean something at that scale:

- ``final_number_agreement``: on math word problems (Spec-Bench's GSM8K test questions), whether a method's answer ends
  on the same final number as the target's own greedy answer (lossless methods always agree);
- ``humaneval_passes``: HumanEval pass@1 of the answer's code, run against the problem's unit tests in a separate
  Python process with a time limit, for the target alone and with each method.
"""

from __future__ import annotations

import re
import subprocess
import sys

from ..training.regenerate import last_number

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)


def final_number_agreement(text: str, reference: str) -> bool:
    """Whether both texts end on the same number (two texts without any number agree too)."""
    return last_number(text) == last_number(reference)


def extract_code(answer: str, record: dict) -> str:
    """The Python code of a chat answer: its fenced blocks, else the whole answer; the problem's stub (imports,
    signature) is put first when the answer does not define the function itself."""
    blocks = _FENCE.findall(answer)
    code = "\n\n".join(blocks) if blocks else answer
    if not re.search(rf"def\s+{re.escape(record['entry_point'])}\s*\(", code):
        code = record["stub"] + code
    return record["stub_imports"] + "\n" + code


def humaneval_passes(record: dict, answer: str, timeout: float = 10.0) -> bool:
    """Run the answer's code and the problem's ``check`` in a fresh interpreter (isolated, time-limited)."""
    program = f"{extract_code(answer, record)}\n\n{record['test']}\n\ncheck({record['entry_point']})\n"
    try:
        result = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0
