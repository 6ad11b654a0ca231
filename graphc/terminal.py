"""What the command line prints, made safe for a terminal: names in a graph
(op names, file paths, error messages quoting them) are data, and may hold
terminal escape sequences (ESC[2J clears the screen), NUL, carriage returns,
bidirectional overrides, or lone surrogates that no encoding can write.

* :func:`shown` escapes a field that is one line (a name, a path, an error
  message, a result line): every control and format character, newlines
  included, as ``\\x1b``, ``\\n``, ``\\u202e``.
* :class:`SafeStream` wraps an output stream: what is written keeps its
  newlines and tabs, every other control or format character is escaped, and
  what the stream's encoding cannot write (a lone surrogate) is written as a
  backslash escape instead of raising UnicodeEncodeError.  ``graphc``'s
  commands print through it (:func:`safe_output`).
"""
from __future__ import annotations

import contextlib
import re
import sys

#: DEL and C1 controls, zero-width and bidirectional format characters, line and
#: paragraph separators, the byte order mark, and surrogates
_OTHER = "\\x7f-\\x9f\\u00ad\\u061c\\u180e\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff\\ud800-\\udfff"
_FIELD = re.compile("[\\x00-\\x1f" + _OTHER + "]")            # every C0 control
_TEXT = re.compile("[\\x00-\\x08\\x0b-\\x1f" + _OTHER + "]")  # C0 but tab and newline
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown(text) -> str:
    """``str(text)`` as one printable line: control and format characters
    (newlines too) and surrogates escaped."""
    return _FIELD.sub(_escape, str(text))


def printable(text: str, encoding: str | None = None) -> str:
    """``text`` with its newlines and tabs kept, other control and format
    characters escaped, and what ``encoding`` cannot write backslash-escaped."""
    text = _TEXT.sub(_escape, text)
    if encoding:
        try:
            text.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            try:
                text = text.encode(encoding, "backslashreplace").decode(encoding)
            except LookupError:
                text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text


class SafeStream:
    """A text stream writing :func:`printable` text to ``stream``."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text, getattr(self._stream, "encoding", None)))

    def __getattr__(self, name):   # flush, isatty, encoding, fileno ... of the stream
        return getattr(self._stream, name)


@contextlib.contextmanager
def safe_output():
    """``sys.stdout`` and ``sys.stderr`` wrapped in :class:`SafeStream` inside."""
    with contextlib.redirect_stdout(SafeStream(sys.stdout)), contextlib.redirect_stderr(SafeStream(sys.stderr)):
        yield


__all__ = ["SafeStream", "printable", "safe_output", "shown"]
