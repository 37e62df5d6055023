"""The ``lnserve`` command line (typer). Errors print one line on stderr; ``--debug`` shows the traceback.

Exit codes: 0 success, 2 bad usage or bad input, 1 internal failure.
Commands live in ``lnserve.app.commands``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated, NoReturn

import typer
from typer.core import TyperOption

from lnserve.errors import LnserveError, shown
from lnserve.storage import storage_full

from .commands import convert, dictionary, encode, eval, gallery, model, pull, serve, train

# an OSError naming a file with one of these is the place the user chose (a path under a file, a read-only or
# pseudo file system, a device), not a fault of lnserve: one line and exit 2, as every bad input
_PLACE_ERRNOS = frozenset(
    {
        errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.EEXIST,
        errno.ENXIO, errno.ENODEV, errno.ENAMETOOLONG, errno.ELOOP, errno.ETXTBSY, errno.EXDEV,
    }
)  # fmt: skip


def _flags_show_no_type() -> None:
    """typer 0.29's rich help prints a ``<bool>`` type beside plain flags (``--debug``, ``--help``,
    ``--fast``): a flag takes no value, so its type column stays empty (as click's plain help has it)."""
    original = TyperOption.display_type_rich
    if getattr(original, "_lnserve_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag else original(self, ctx)

    display_type_rich._lnserve_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_flags_show_no_type()

app = typer.Typer(
    name="lnserve",
    help="Convert, export, run and serve the legacy LN-GRU / RMS-GRU encoders.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version() -> str:
    try:
        return package_version("lnserve")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"lnserve {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """lnserve: faithful serving of the layer-normalisation-era encoders."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="lnserve: %(levelname)s: %(message)s"
    )


for _commands in (convert, dictionary, encode, model, serve, pull, gallery, eval, train):
    _commands.register(app)


def main() -> None:
    """Console entry point: one-line errors, exit 2 for bad input or usage, 1 for internal failures."""
    debug = "--debug" in sys.argv[1:]
    try:
        code = app(prog_name="lnserve", standalone_mode=False)
        sys.stdout.flush()  # results on a full disk (``> file``) fail here, answered below, not at exit
    except typer.Abort:
        typer.echo("lnserve: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # usage mistakes (typer >= 0.28 vendors click's exceptions)
        if debug:
            raise
        _usage_error(exc)
    except LnserveError as exc:
        if debug:
            raise
        typer.echo(f"lnserve: error [{exc.code}]: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        if (
            full := storage_full(exc, str(getattr(exc, "filename", None) or "writing the output"))
        ) is not None:
            _drop_unwritten_stdout()
            typer.echo(f"lnserve: error [{full.code}]: {full}", err=True)
            sys.exit(full.exit_code)
        if isinstance(exc, OSError) and exc.errno in _PLACE_ERRNOS and exc.filename:
            where = shown(str(exc.filename))
            typer.echo(f"lnserve: error [invalid_input]: {where}: {exc.strerror or exc}", err=True)
            sys.exit(2)
        typer.echo(f"lnserve: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit (--help, --version, Ctrl-C) returns its code


def _drop_unwritten_stdout() -> None:
    """Point stdout at /dev/null: what could not be written stays buffered, and Python's flush at exit would
    fail on it again (a traceback-like "Exception ignored" and exit 120 after the one-line error)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _usage_error(exc: typer.TyperException) -> NoReturn:
    """One line (``lnserve: error [usage_error]: ...``) and exit 2, whatever typer's exception class."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "lnserve"
    if type(exc).__name__ == "NoArgsIsHelpError":  # typer printed the help on stdout already
        message = f"missing command; choose one of the commands above (see `{command} --help`)"
    else:
        message = " ".join(exc.format_message().split()) + f" (see `{command} --help`)"
    typer.echo(f"lnserve: error [usage_error]: {message}", err=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
