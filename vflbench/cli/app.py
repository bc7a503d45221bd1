"""The command line's application object and what every command shares: one-line errors with exit status 2
(:func:`friendly`), the run flags generated from the settings schema (:func:`with_settings`), the consoles, the
warning line, the progress bar of a training stage, the checked ``--out`` path."""

from __future__ import annotations

import errno
import functools
import os
import sys
import typing
import warnings
from pathlib import Path

import typer
from rich.console import Console

from ..core.errors import VFLBenchError
from ..runs.settings import field_option

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Reproducible VFL benchmarks with missing feature blocks."
)
data_app = typer.Typer(no_args_is_help=True, help="Manage raw dataset files.")
app.add_typer(data_app, name="data")


@app.callback()
def _main(
    plugin: list[Path] | None = typer.Option(
        None, "--plugin", help="a Python file that registers a method (repeatable; also $VFLBENCH_PLUGINS)"
    ),
):
    """Reproducible VFL benchmarks with missing feature blocks."""
    if plugin:
        from ..core import plugins

        try:
            for p in plugin:
                plugins.add(p)
        except VFLBenchError as e:
            _error(str(e))
            raise typer.Exit(2) from None


console = Console(soft_wrap=True, emoji=False)  # no emoji codes: '1:100:5' must print as typed
err_console = Console(stderr=True, soft_wrap=True, emoji=False)
_show_warning = warnings.showwarning


_shown: set[str] = set()  # vflbench's warnings already printed by this process


def _warning_line(message, category, filename, lineno, file=None, line=None):
    """vflbench's own warnings as one yellow line on stderr, each distinct message once a process (planning a sweep
    resolves a table's runs one by one, and each would repeat the table's warnings); others as Python prints them."""
    from rich.markup import escape

    from ..core.errors import VFLBenchWarning

    if issubclass(category, VFLBenchWarning):
        if str(message) in _shown:
            return
        _shown.add(str(message))
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    else:
        _show_warning(message, category, filename, lineno, file, line)


warnings.showwarning = _warning_line


def _error(msg: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)


def friendly(fn):
    """Turn VFLBenchError (and a few predictable OS errors) into one clear line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _shown.clear()  # each command prints its own warnings once
        try:
            return fn(*args, **kwargs)
        except VFLBenchError as e:
            _error(str(e))
            raise typer.Exit(getattr(e, "exit_code", 2)) from None
        except (PermissionError, IsADirectoryError, NotADirectoryError, FileNotFoundError) as e:
            what = {
                PermissionError: "permission denied",
                IsADirectoryError: "is a directory",
                NotADirectoryError: "a part of the path is not a directory",
                FileNotFoundError: "no such file or directory",
            }[type(e)]
            _error(f"{e.filename or ''}: {what}; check the path and its permissions.")
            raise typer.Exit(2) from None
        except UnicodeDecodeError as e:
            _error(f"a file is not text (UTF-8): {e.reason} at byte {e.start}; give a YAML/CSV text file.")
            raise typer.Exit(2) from None
        except OSError as e:
            if e.errno == errno.ENOSPC:
                _error(f"the disk is full while writing {e.filename or 'output'}; free space or use another --out.")
                raise typer.Exit(2) from None
            raise
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


def with_settings(fn, required: bool = True):
    """Add one option per declared run field and run setting (:mod:`vflbench.runs.settings`) to a command
    that takes them as ``**given``: the schema is the only place their flags are written."""
    import inspect as _inspect

    from ..runs.settings import cli_parameters, field_parameters

    sig = _inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not _inspect.Parameter.VAR_KEYWORD]
    hints = typing.get_type_hints(fn)  # real types, not the strings of `from __future__ import annotations`
    params = [
        p.replace(kind=_inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)) for p in params
    ]
    fn.__signature__ = sig.replace(parameters=[*field_parameters(required), *cli_parameters(), *params])
    return fn


# options shared by `masks` and `run` (the same flags mean the same thing in both)
PARTIES_OPT = typer.Option(4, help="number of parties K")
PARTITIONER_OPT = field_option("partitioner")
DATA_OPT = field_option("data_options")
PART_OPT = field_option("partition_options")


def progress_bar(*fields: str, quiet: bool = False):
    """The progress bar of a long command, on stderr: description, bar, done/total, then ``fields`` (rich text
    columns such as ``"loss {task.fields[loss]}"``), elapsed time and ETA; none with ``quiet``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f) for f in fields),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
        transient=False,
    )


def phase_progress(bar):
    """A context manager: while inside, the phases below the command line (vflbench.core.progress: alignment by PSI,
    reading a large table) show as tasks of ``bar``."""
    import contextlib

    from ..core.progress import set_reporter

    tasks: dict[str, int] = {}

    def show(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = bar.add_task(what, total=total, loss="")
        bar.update(tasks[what], completed=done, total=total)

    @contextlib.contextmanager
    def scope():
        set_reporter(show)
        try:
            yield
        finally:
            set_reporter(None)

    return scope()


def _stage_progress(bar, label: str):
    """A progress bar per training stage: a trainer callback (imported lazily, so that the CLI
    answers bad input without loading torch)."""
    from ..training.trainer import Callback

    class StageProgress(Callback):
        task = None

        def on_prepared(self, inputs):
            align = inputs.prep.data.preprocessing.get("alignment")
            if (
                align is not None
            ):  # one line per party: how many samples it holds (the warnings say when one holds none)
                from ..data.alignment import holding_report

                for line in holding_report(align)[0]:
                    bar.console.print(line, markup=False, highlight=False)

        def on_stage_start(self, loop):
            name = f" [{loop.stage.name}]" if len(loop.method.stages) > 1 else ""
            self.task = bar.add_task(f"{label}{name}", total=loop.epochs, loss="-")

        def on_epoch_end(self, loop):
            bar.update(self.task, completed=loop.epoch + 1, loss=f"{loop.shown_loss:.4f}")

    return StageProgress()


def out_path(text: str | None, flag: str = "--out") -> Path | None:
    """An output path given on the command line; an empty one is refused (it would mean the
    working directory without saying so)."""
    if text is None:
        return None
    if not str(text).strip():
        raise VFLBenchError(f"{flag} is empty; give a directory or file path (use '.' for the working directory).")
    return Path(text)


# Commands that start no process of their own and leave nothing to clean up: once they have written their files and
# printed, the process leaves without the interpreter's teardown, whose module finalisation (torch's above all) held
# a finished `vflbench run` for about a second (docs/SPEED.md, "Start-up"). Commands that start Ray, party
# processes' launchers or Optuna's storage keep the ordinary exit.
QUICK_EXIT = frozenset({"run", "table", "methods", "attacks", "datasets", "masks", "inspect"})


def observed() -> bool:
    """A profiler, tracer or coverage run watches this process: it writes its data at the interpreter's exit,
    which therefore stays the ordinary one."""
    watchers = ("cProfile", "profile", "coverage", "pyinstrument", "yappi", "line_profiler")
    return sys.getprofile() is not None or sys.gettrace() is not None or any(w in sys.modules for w in watchers)


def main() -> None:
    """The console entry point (``vflbench``, ``python -m vflbench``)."""
    command = next((a for a in sys.argv[1:] if a in QUICK_EXIT or a in {"sweep", "tune", "server", "party"}), None)
    try:
        app(prog_name="vflbench")
    except SystemExit as e:
        if command not in QUICK_EXIT or observed():
            raise
        code = e.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0 if code is None else int(code))
