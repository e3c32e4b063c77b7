"""User-facing errors.

Every problem caused by user input (a missing file, a bad row, an unknown option) raises
:class:`KdbertError` with a one-line message that names the problem and the fix. The CLI
prints the message and exits with status 2, never a traceback.
"""


class KdbertError(Exception):
    """A problem with the user's input, with a one-line message saying how to fix it."""
