"""Errors a user can fix. They are printed without a traceback and exit with status 2."""


class UserError(Exception):
    """Bad input: the message names the file or field and says what to do."""


# errno values that mean "you may not write here": the user picks another folder or fixes it
_NOT_WRITABLE = {1: "operation not permitted", 13: "permission denied", 30: "read-only file system"}


def unwritable_message(err: OSError) -> str | None:
    """The one-line message for a folder or file the user cannot write (a read-only output folder,
    another user's run), or None for any other OS error (a bug, or a fault with its own message)."""
    if err.errno not in _NOT_WRITABLE or not err.filename:
        return None
    where = str(err.filename)
    folder, _, name = where.rpartition("/")
    if name.startswith(".") and ".tmp" in name:  # an atomic writer's temporary: name its folder
        where = folder or "/"
    return (
        f"{where}: cannot write here ({_NOT_WRITABLE[err.errno]}); choose a folder you can "
        "write (--output-dir, --out) or change its permissions"
    )
