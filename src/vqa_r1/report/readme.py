"""Tables shown in a Markdown document (the README) are copies of generated table files.

A block ``<!-- table: PATH -->`` ... ``<!-- /table -->`` holds the file at PATH (relative to the
document) verbatim; ``vqa-r1 tables`` rewrites every block from its file, and ``--check`` fails
when one differs. So a number in the README cannot be typed in or go stale unnoticed.
"""

from __future__ import annotations

import re
from pathlib import Path

from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_text

_BLOCK = re.compile(
    r"(<!-- table: (?P<path>[^>]+?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL
)


def synced(text: str, base: Path) -> str:
    """``text`` with every table block replaced by its file's content."""

    def replace(match: re.Match) -> str:
        path = base / match["path"].strip()
        if not path.is_file():
            raise UserError(f"a table block names {match['path']}, which does not exist")
        body = path.read_text()
        return f"{match[1]}{body if body.endswith(chr(10)) else body + chr(10)}{match[4]}"

    return _BLOCK.sub(replace, text)


def sync_document(document: Path) -> bool:
    """Rewrite the blocks of ``document``; True when it changed."""
    text = document.read_text()
    new = synced(text, document.parent)
    if new != text:
        atomic_write_text(document, new)
    return new != text
