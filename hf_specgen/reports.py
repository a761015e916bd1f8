"""The benchmark report format (``results.json`` of ``specgen bench``), read by the benchmark's own tables and by
the model-card exporter in training/, which must not import the benchmark."""

from __future__ import annotations


def has_compiled_baseline(methods: dict) -> bool:
    """Whether a report's methods (``report["methods"]``) carry the "vs compiled AR" ratio (a ``--compile`` run)."""
    return any("speedup_vs_compiled_ar" in e for m in methods.values() for e in m["by_category"].values())


def markdown_table(rows: list[list[str]], header: list[str]) -> str:
    """A padded markdown table (the bench's and the batch curve's printouts)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
