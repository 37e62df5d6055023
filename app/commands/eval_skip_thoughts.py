"""``lnserve eval skip-thoughts``: the skip-thoughts papers' evaluation protocols on a model's vectors."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from lnserve.errors import UserInputError

from ..runtime.engine import DEFAULT_BACKEND
from .common import BackendOpt, PrecisionOpt, check_output, progress_bar, save_text


def parse_tasks(value: str) -> list[str]:
    from ..evaluation.protocols import TASKS

    tasks = [t.strip().lower() for t in value.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise UserInputError(
            f"--task {value!r}: unknown task {unknown[0] if unknown else '(none)'!r}; "
            f"expected one or more of {','.join(TASKS)} (comma-separated)"
        )
    return list(dict.fromkeys(tasks))


def skip_thoughts(
    model: Annotated[
        Path, typer.Option("--model", help="Model artifact directory (any model lnserve serves).")
    ],
    task: Annotated[
        str, typer.Option("--task", help="Comma-separated: sick-r,sick-e,mr,cr,subj,mpqa,trec,msrp,sts14.")
    ],
    data: Annotated[
        Path, typer.Option("--data", help="Directory with each set's original distribution files.")
    ],
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the results as JSON ('-': stdout).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Shuffle seed (the scripts' default).")] = 1234,
    fast: Annotated[
        bool, typer.Option("--fast", help="A first look: C by one inner split, fits batched in torch.")
    ] = False,
    jobs: Annotated[
        int, typer.Option("--jobs", min=1, help="Threads for the independent liblinear fits (same scores).")
    ] = 1,
    backend: BackendOpt = DEFAULT_BACKEND,
    precision: PrecisionOpt = "fp32",
) -> None:
    """MR, CR, SUBJ, MPQA, TREC, MSRP, SICK-R as the skip-thoughts scripts ran them; SICK-E, STS14 as
    SentEval."""
    from ..evaluation import report
    from ..evaluation.encoders import EngineEncoder
    from ..evaluation.protocols import Context, run_task
    from ..evaluation.readiness import check_task_files

    tasks = parse_tasks(task)
    if not data.is_dir():
        raise UserInputError(f"--data {data}: not a directory (it holds the sets' distribution files)")
    if json_out is not None and str(json_out) != "-":
        check_output(json_out, "--json")
    for t in tasks:  # every file is checked before a model loads or anything is encoded
        check_task_files(t, data, fast=fast)
    encoder = EngineEncoder.open(model, backend=backend, precision=precision, bar=progress_bar)
    ctx = Context(encode=encoder, data=data, seed=seed, fast=fast, bar=progress_bar, jobs=jobs)
    start = time.perf_counter()
    results: dict[str, Any] = {}
    for t in tasks:
        t0 = time.perf_counter()
        results[t] = run_task(t, ctx) | {"seconds": round(time.perf_counter() - t0, 2)}
    rep = report.build(
        encoder.name, seed, fast, results, time.perf_counter() - start, precision=encoder.engine.precision
    )
    text = json.dumps(rep, indent=2)
    if json_out is not None and str(json_out) == "-":
        sys.stdout.write(text + "\n")
        return
    typer.echo(report.table(rep))
    if json_out is not None:
        save_text(json_out, text + "\n", "--json")


def register(group: typer.Typer) -> None:
    group.command("skip-thoughts")(skip_thoughts)
