"""The ``kdbert`` command line: ``main`` parses and dispatches, one module per larger command."""

from kdbert.cli.commands import main

__all__ = ["main"]
