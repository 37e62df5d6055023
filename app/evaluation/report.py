"""The results table: the model's scores beside the published rows (issue 21), protocol and seed on top."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Mapping
from typing import Any

from ...converters.families import SKIP_THOUGHTS

# (task, metric key, label, scale for display)
METRICS: tuple[tuple[str, str, str], ...] = (
    ("sick-r", "r", "SICK-R Pearson r"),
    ("sick-r", "rho", "SICK-R Spearman rho"),
    ("sick-r", "mse", "SICK-R MSE"),
    ("sick-e", "acc", "SICK-E acc %"),
    ("mr", "acc", "MR acc %"),
    ("cr", "acc", "CR acc %"),
    ("subj", "acc", "SUBJ acc %"),
    ("mpqa", "acc", "MPQA acc %"),
    ("trec", "acc", "TREC acc %"),
    ("msrp", "acc", "MSRP acc %"),
    ("msrp", "f1", "MSRP F1 %"),
    ("sts14", "pearson", "STS14 Pearson (mean)"),
    ("sts14", "spearman", "STS14 Spearman (mean)"),
)

# the skip-thoughts papers' rows: the family's published reference (``converters.families``)
PUBLISHED: Mapping[str, Mapping[str, float]] = SKIP_THOUGHTS.reference

NESTED = "eval_classification: RandomState(seed) shuffle, nested 10-fold (contiguous), C=2^0..2^8, liblinear"
PROTOCOLS = {
    "mr": NESTED,
    "cr": NESTED,
    "subj": NESTED,
    "mpqa": NESTED,
    "trec": "eval_trec: coarse labels, shuffled train, 10-fold CV on C=2^0..2^8, liblinear one-vs-rest",
    "msrp": "eval_msrp: |u-v|, u*v + 6 number features, shuffled 10-fold CV on F1, C=2^0..2^8, test acc/F1",
    "sick-r": "eval_sick: use_eos, |u-v|, u*v, Tree-LSTM 5 classes, softmax + Adam, early stop on trial r",
    "sick-e": "SentEval SICKEntailment (sklearn), use_eos: |u-v|, u*v, C=2^-2..2^3 by trial acc",
    "sts14": "SentEval STS14, use_eos: cosine, Pearson/Spearman per set, mean (and size-weighted)",
}
FAST_NOTE = (
    "fast mode: C chosen once on one split and used for every fold; the fits of a stage in one torch "
    "L-BFGS run; SICK-R checks the trial r every 10 epochs"
)


def build(
    model: str,
    seed: int,
    fast: bool,
    results: dict[str, dict[str, Any]],
    seconds: float,
    precision: str = "fp32",
) -> dict[str, Any]:
    """The report; ``precision``: the profile the model ran at (an int8 report is compared with fp32's)."""
    return {
        "model": model,
        "precision": precision,
        "mode": "fast" if fast else "faithful",
        "seed": seed,
        "protocols": {t: PROTOCOLS[t] for t in results} | ({"fast": FAST_NOTE} if fast else {}),
        "tasks": results,
        "published": PUBLISHED,
        "seconds": round(seconds, 2),
    }


def _cell(value: float | None, key: str) -> str:
    if value is None:
        return "—"
    return f"{value:.4f}" if key.startswith(("sick-r", "sts14")) else f"{value:.1f}"


# the published rows' column headers: short, so that the table fits 80 columns; named in full under it
SHORT = {
    "combine-skip (skip-thoughts paper)": "combine-skip [1]",
    "LN skip-thoughts, 1 month (layer-norm paper)": "LN-ST [2]",
}


def table(report: dict[str, Any], width: int | None = None) -> str:
    """The report as text: the table (metric, this model, each published row) in 80 columns whatever the
    terminal, each published row's full name in a numbered note under it; the protocols wrapped to
    ``width`` (default: the terminal's, ``COLUMNS``), never cut."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    heads = ["this model", *(SHORT.get(name, name) for name in PUBLISHED)]
    rows = []
    for task, key, label in METRICS:
        if task not in report["tasks"]:
            continue
        full = f"{task}.{key}"
        vals = [report["tasks"][task].get(key), *(row.get(full) for row in PUBLISHED.values())]
        rows.append([label, *(_cell(v, full) for v in vals)])
    label_w = max([len("metric"), *(len(r[0]) for r in rows)])
    col_w = [max([len(h), *(len(r[i + 1]) for r in rows)]) for i, h in enumerate(heads)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            [f"{cells[0]:{label_w}}", *(f"{c:>{w}}" for c, w in zip(cells[1:], col_w, strict=True))]
        )

    wrap = textwrap.TextWrapper(
        width=max(width, 40), subsequent_indent="      ", break_on_hyphens=False, break_long_words=False
    )
    notes = [f"[{i}] {name}" for i, name in enumerate(PUBLISHED, 1)]
    return "\n".join(
        [
            *wrap.wrap(
                f"lnserve eval skip-thoughts: model {report['model']}, "
                f"{report['mode']} protocol, seed {report['seed']}"
            ),
            *(part for t, p in report["protocols"].items() for part in wrap.wrap(f"  {t}: {p}")),
            "",
            line(["metric", *heads]),
            *(line(r) for r in rows),
            "",
            *notes,
        ]
    )
