"""User-facing errors.

Every mistake a user can make (bad YAML, unknown model, a model that does not fit, a malformed trace row) raises
:class:`LLMSimError` with a one-line message that names the field or ``file:line``, the bad value and what is
allowed. The CLI prints that line and exits with status 2; it never shows a traceback for these.
"""


class LLMSimError(Exception):
    """A problem with the user's input, explained in one line."""


class ConfigError(LLMSimError):
    """An experiment (or override) that does not validate."""
