"""Output lines, with a progress bar on stderr for longer runs when stderr is a terminal."""
from __future__ import annotations

import sys

from ..terminal import shown

#: runs of more cases than this get a progress bar
BAR_MIN_CASES = 5


class Progress:
    def __init__(self, total: int):
        self.bar = None
        if total > BAR_MIN_CASES and sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, file=sys.stderr, unit="case", leave=False, dynamic_ncols=True)

    def emit(self, line: str) -> None:
        """Print a result line to stdout without breaking the bar (escaped as one
        line: it quotes file names and error messages)."""
        line = shown(line)
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def label(self, text: str) -> None:
        """Name the case now running."""
        if self.bar is not None:
            self.bar.set_postfix_str(text)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
