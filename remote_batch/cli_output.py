"""What every command group of the ``remote-batch`` CLI shares: its consoles, ``--json`` printing, the
exit codes, and the typer group that prints the SDK's errors as one line (terminal-safe) instead of a
traceback."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from remote_batch.errors import ApiError, RemoteBatchError
from remote_batch.json_codec import to_json_number
from remote_batch.terminal import PipeConsole, cell, end_on_broken_pipe, json_text

#: Exit codes (README's "CLI"): 0 done; 1 an error (the API's, a connection); 2 the job ended Terminated
#: (or the build Failed). A usage error (a bad option, argument or requirements file, refused before
#: any request) exits 2 too, the code typer's usage errors exit with.
EXIT_ERROR = 1
EXIT_TERMINATED = 2
EXIT_USAGE = typer.BadParameter.exit_code

#: Off a terminal (a pipe, a file) tables are not squeezed into 80 columns (scripts should use --json).
PIPE_WIDTH = 160
out = PipeConsole(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
err = PipeConsole(stderr=True, highlight=False)


def usage_error(message: str) -> typer.Exit:
    """Print ``message`` as one line (``Error: ...``, terminal-safe) on stderr; the ``typer.Exit`` of a
    usage error to raise (``EXIT_USAGE``). For bad input whose message names its own place (a
    requirements file and line), which typer's usage box would wrap over several lines."""
    err.print(cell(f"Error: {message}"), soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def error_text(exc: BaseException) -> str:
    """What a failed command prints: docs/http-api.md's code, message and field for an API error."""
    if isinstance(exc, ApiError):
        field = f" (field: {exc.field})" if exc.field else ""
        return f"Error: {exc.code}: {exc.message}{field}"
    return f"Error: {exc}"


class Group(TyperGroup):
    """Typer's group, printing the SDK's errors as one line and exiting 1 instead of a traceback, and
    ending quietly when stdout's reader is gone (``end_on_broken_pipe``)."""

    def invoke(self, ctx: Any) -> Any:  # click's Context (typer vendors click: its class moves)
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            end_on_broken_pipe()
        except (RemoteBatchError, ImportError, TimeoutError, ValueError, TypeError, OSError) as exc:
            err.print(cell(error_text(exc)), soft_wrap=True)
            raise typer.Exit(EXIT_ERROR) from None


JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout, its control characters escaped (``terminal.json_text``)."""
    sys.stdout.write(json_text(value, default=to_json_number, indent=2) + "\n")


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (``logs`` then escapes the job's control characters)."""
    return sys.stdout.isatty()
