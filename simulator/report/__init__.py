"""Reports: the console summary (plots and traces come later)."""

from simulator.report.console import format_summary

__all__ = ["format_summary"]
