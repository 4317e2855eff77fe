"""Errors a user fixes in their input or settings, not in the code."""

from __future__ import annotations

from collections.abc import Iterable


class InputError(ValueError):
    """Input that cannot be used: what is wrong, how many rows (and of how many), up to three
    example rows or ids, and the setting or file change that fixes it.

    ``str()`` is one line: ``<what> (<count> of <total> rows, e.g. a, b, c); <fix>``; ``saber
    build`` prints the parts as a short block."""

    default_fix = ""

    def __init__(
        self,
        what: str,
        *,
        fix: str = "",
        count: int | None = None,
        total: int | None = None,
        examples: Iterable[object] = (),
        unit: str = "rows",
    ) -> None:
        self.what = what
        self.fix = fix or self.default_fix
        self.count = count
        self.total = total
        self.examples = [str(e) for e in list(examples)[:3]]
        self.unit = unit
        super().__init__(self.one_line())

    def rows(self) -> str:
        """``54 of 270 rows, e.g. P_1, P_6, P_11`` (empty when there is nothing to count)."""
        parts = []
        if self.count is not None:
            of = f" of {self.total}" if self.total is not None else ""
            parts.append(f"{self.count}{of} {self.unit}")
        if self.examples:
            parts.append("e.g. " + ", ".join(self.examples))
        return ", ".join(parts)

    def one_line(self) -> str:
        rows = self.rows()
        text = f"{self.what} ({rows})" if rows else self.what
        return f"{text}; {self.fix}" if self.fix else text
