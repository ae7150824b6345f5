"""Errors that are the user's to fix: the CLI prints them as one line, never a traceback."""


class UserError(Exception):
    """Bad input (unknown model, missing file, malformed line, endpoint down...).

    The message must name the offending input and, where possible, say what to do instead.
    """
