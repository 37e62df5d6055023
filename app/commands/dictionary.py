"""``lnserve dictionary recover``: the uni-skip ``vocab.py`` dictionary, from the published files."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Annotated

import typer

from lnserve.errors import UserInputError

dictionary_app = typer.Typer(
    help="Word dictionaries of the skip-thoughts training format.", no_args_is_help=True
)


@dictionary_app.command("recover")
def recover(
    uni_skip: Annotated[
        Path, typer.Option("--uni-skip", help="Directory with uni_skip.npz, utable.npy and dictionary.txt.")
    ],
    out: Annotated[Path, typer.Option("--out", help="The dictionary pkl to write (vocab.py format).")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Recover uni-skip's word dictionary (words -> indices 2..n_words-1) exactly, from its Wemb rows in
    utable.npy; write it as training/vocab.py does (two protocol-0 pickles, readable by Python 2)."""
    from ...converters.dictionary_recovery import recover_uni_skip_dictionary
    from ...converters.vocab_pickle import write_word_dictionary
    from .common import check_output, write_atomic

    check_output(out, "--out")  # a directory, a device, under a file, in /proc: refused before any work
    if out.exists() and not force:
        raise UserInputError(f"--out {out}: already exists (use --force to replace a file)")
    recovered = recover_uni_skip_dictionary(uni_skip)
    worddict = collections.OrderedDict((w, i) for i, w in enumerate(recovered.words, start=2))
    # word counts are not in the published files: wordcount is empty
    write_atomic(out, lambda f: write_word_dictionary(f, worddict, collections.OrderedDict()), "--out")
    typer.echo(
        f"recovered {len(worddict):,} words (indices 2..{len(worddict) + 1}) from {recovered.table_rows:,} "
        f"table rows -> {out}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(dictionary_app, name="dictionary")
