"""Source positions: character offsets to 1-based line/column and caret excerpts.

sqlglot tokens carry character offsets into the text that was tokenized; every error we raise
is positioned by such an offset, translated here so parse and bind errors look the same.
"""

from __future__ import annotations

import bisect

from ..errors import ParseError


class Source:
    """A statement text with a line index, for turning offsets into positions."""

    __slots__ = ("text", "_starts")

    def __init__(self, text: str):
        self.text = text
        self._starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self._starts.append(i + 1)

    def locate(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset (``len(text)`` is allowed)."""
        offset = max(0, min(int(offset), len(self.text)))
        line = bisect.bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1] + 1

    def line_text(self, line: int) -> str:
        start = self._starts[line - 1]
        end = self._starts[line] - 1 if line < len(self._starts) else len(self.text)
        return self.text[start:end].rstrip("\r")

    def excerpt(self, offset: int) -> str:
        """The offending line and a caret under the column (tabs kept so the caret lines up)."""
        line, col = self.locate(offset)
        text = self.line_text(line)
        pad = "".join("\t" if ch == "\t" else " " for ch in text[:col - 1])
        return f"{text}\n{pad}^"

    def error(self, cls: type[ParseError], message: str, offset: int) -> ParseError:
        line, col = self.locate(offset)
        return cls(message, line=line, col=col, excerpt=self.excerpt(offset))
