"""The ``lnserve`` command line (typer). Errors print one line on stderr; ``--debug`` shows the traceback.

Exit codes: 0 success, 2 bad usage or bad input, 1 internal failure. Commands live in ``lnserve.app.commands``.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import click
import typer

from lnserve.app.commands import convert, encode, eval, gallery, model, pull, serve, train
from lnserve.converters.errors import LnserveError

app = typer.Typer(
    name="lnserve",
    help="Convert, export, run and serve the legacy LN-GRU / RMS-GRU encoders.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """lnserve: faithful serving of the layer-normalisation-era encoders."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="lnserve: %(levelname)s: %(message)s"
    )


for _commands in (convert, encode, model, serve, pull, gallery, eval, train):
    _commands.register(app)


def main() -> None:
    """Console entry point: one-line errors, exit 2 for bad input, 1 for internal failures."""
    debug = "--debug" in sys.argv[1:]
    try:
        app(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        typer.echo("lnserve: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if debug:
            raise
        typer.echo(f"lnserve: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except LnserveError as exc:
        if debug:
            raise
        typer.echo(f"lnserve: error [{exc.code}]: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        typer.echo(f"lnserve: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
