"""Command-line interface (Typer). Every command maps user errors to one line and exit status 2.

One module per group of commands, in the order ``vflbench --help`` lists them: :mod:`.data`, :mod:`.runs`,
:mod:`.sweeps`, :mod:`.tables`; what they share (the application object, the error handling, the run flags
generated from the settings schema) is :mod:`.app`. A command module registers its commands on import."""

from . import data, runs, serving, sweeps, tables  # noqa: F401  (registration, in --help's order)
from .app import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":  # pragma: no cover
    main()
