"""The one exception type the harness raises for problems a user must fix."""


class HarnessError(Exception):
    """A user-facing failure: the message names the problem and what to do.

    The CLI prints the message without a traceback and exits with status 1.
    """
