"""A progress bar for long compiles: a compile of a graph that takes more than
:data:`AFTER_SECONDS` shows a tqdm bar over its partitions on stderr when
stderr is a terminal (and the verbose lines are off: GRAPHC_VERBOSE prints its
own); otherwise nothing is shown, nor tqdm imported."""
from __future__ import annotations

import sys

from .. import verbose

#: a compile shows its bar once it has run this long
AFTER_SECONDS = 1.0


class CompileProgress:
    """``with CompileProgress(n) as bar: ... bar.step(label)`` once per partition."""

    def __init__(self, total: int):
        self.bar = None
        stream = sys.stderr
        if total > 1 and not verbose.LEVEL and stream is not None and _isatty(stream):
            from tqdm import tqdm
            self.bar = tqdm(total=total, file=stream, unit="partition", desc="graphc compile", leave=False,
                            delay=AFTER_SECONDS, dynamic_ncols=True)

    def label(self, text: str) -> None:
        """Name the partition now compiling."""
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False
