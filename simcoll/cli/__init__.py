"""The ``simcoll`` command: one module per subcommand."""

from simcoll.cli.main import main

__all__ = ["main"]
