"""Progress of a long command (migrate, tune, validate --serve, bench): one line a step.

`done` prints a finished step's line on the stream (stderr). On a terminal `begin` shows the step
under way on the line its `done` line then replaces, so each step keeps one line; elsewhere (a
file, a CI log) only the finished lines are written. A quiet `Progress` (the commands' --quiet)
prints nothing.
"""

from __future__ import annotations

import sys
from typing import TextIO

_CLEAR_LINE = "\r\x1b[K"  # back to the start of the line, erase it


class Progress:
    """One line a step on `stream` (default stderr); nothing when `quiet`."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self._terminal = not quiet and self.stream.isatty()
        self._open = False  # a `begin` line waits for its `done`

    def begin(self, text: str) -> None:
        """Show a step under way (on a terminal only)."""
        if self._terminal:
            self.stream.write(_CLEAR_LINE + text)
            self.stream.flush()
            self._open = True

    def done(self, text: str) -> None:
        """Print a finished step's line (over its `begin` line on a terminal)."""
        if self.quiet:
            return
        self.stream.write((_CLEAR_LINE if self._open else "") + text + "\n")
        self.stream.flush()
        self._open = False
