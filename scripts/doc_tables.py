"""Rewrite the event tables of docs/internals.md from spec/schema.py (the test checks they agree)."""

from __future__ import annotations

import re
from pathlib import Path

from aiperf_runner.spec import schema

DOC = Path(__file__).resolve().parent.parent / "docs" / "internals.md"
TABLE = re.compile(r"\| type \| fields \|\n\| --- \| --- \|\n(?:\|.*\|\n)+")


def main() -> None:
    text = DOC.read_text()
    tables = iter([schema.markdown_table(schema.MAIN), schema.markdown_table(schema.TRIAL)])
    text, n = TABLE.subn(lambda m: next(tables) + "\n", text)
    assert n == 2, f"expected the two event tables in {DOC}, found {n}"
    DOC.write_text(text)


if __name__ == "__main__":
    main()
