"""The ``llmsim`` command: one module per family of subcommands (runs, studies, catalog, fidelity), the parser and
the entry point. It parses arguments and calls the API."""

from simulator.cli.main import main
from simulator.cli.parser import build_parser

__all__ = ["build_parser", "main"]
