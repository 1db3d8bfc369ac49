"""Errors a user can fix. They are printed without a traceback and exit with status 2."""


class UserError(Exception):
    """Bad input: the message names the file or field and says what to do."""
