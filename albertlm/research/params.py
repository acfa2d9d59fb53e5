"""Exact parameter counts of the presets and the paper's ablations, next to the paper's printed figures.

Counts come from building the real model classes on the ``meta`` device (no memory is allocated), so
they measure the code, not a formula. Paper figures: Lan et al. 2019, Tables 1-4 (in millions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from albertlm.config import PRESETS, AlbertConfig
from albertlm.model import AlbertModel

# preset -> the figure the paper prints (Table 1 / 2)
PAPER_PRESETS = {
    "albert-base-v1": 12, "albert-large-v1": 18, "albert-xlarge-v1": 60, "albert-xxlarge-v1": 235,
    "albert-base-v2": 12, "albert-large-v2": 18, "albert-xlarge-v2": 60, "albert-xxlarge-v2": 235,
    "bert-base": 108, "bert-large": 334,
}
# (table, E, sharing) -> the paper's figure for ALBERT-base with that embedding size and sharing
PAPER_ABLATIONS = {
    ("Table 3", 64, "all"): 10, ("Table 3", 128, "all"): 12, ("Table 3", 256, "all"): 16,
    ("Table 3", 768, "all"): 31, ("Table 3", 64, "none"): 87, ("Table 3", 128, "none"): 89,
    ("Table 3", 256, "none"): 93, ("Table 3", 768, "none"): 108,
    ("Table 4", 768, "all"): 31, ("Table 4", 768, "attention"): 83, ("Table 4", 768, "ffn"): 57,
    ("Table 4", 768, "none"): 108, ("Table 4", 128, "all"): 12, ("Table 4", 128, "attention"): 64,
    ("Table 4", 128, "ffn"): 38, ("Table 4", 128, "none"): 89,
}


@dataclass
class Row:
    name: str  # preset name, or the ablation's description
    source: str  # "preset" or the paper table
    embedding_size: int
    hidden_size: int
    sharing: str
    parameters: int  # exact count of AlbertModel (encoder + pooler)
    paper_millions: float | None  # what the paper prints, None where it prints nothing


def count_parameters(config: AlbertConfig) -> int:
    """Distinct parameters of ``AlbertModel(config)`` (shared weights once), built without memory."""
    with torch.device("meta"):
        return AlbertModel(config).num_parameters()


def parameter_table() -> list[Row]:
    rows = []
    for name in PRESETS:
        c = AlbertConfig.from_preset(name)
        rows.append(Row(name, "preset", c.embedding_size, c.hidden_size, c.sharing, count_parameters(c),
                        PAPER_PRESETS.get(name)))
    for (table, e, sharing), paper in PAPER_ABLATIONS.items():
        c = AlbertConfig.from_preset("albert-base-v2", embedding_size=e, sharing=sharing)
        rows.append(Row(f"albert-base E={e} sharing={sharing}", table, e, c.hidden_size, sharing,
                        count_parameters(c), paper))
    return rows


def format_table(rows: list[Row], fmt: str = "text") -> str:
    if fmt == "json":
        import json
        from dataclasses import asdict

        return "\n".join(json.dumps(asdict(r)) for r in rows)
    head = ["model", "source", "E", "H", "sharing", "parameters", "paper"]
    body = [
        [r.name, r.source, str(r.embedding_size), str(r.hidden_size), r.sharing, f"{r.parameters:,}",
         f"{r.paper_millions:g}M" if r.paper_millions is not None else "-"]
        for r in rows
    ]
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt_row = lambda cells: "  ".join(c.rjust(w) if i >= 2 else c.ljust(w)  # noqa: E731
                                      for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([fmt_row(head)] + [fmt_row(b) for b in body])
