"""Text that came from outside (a job, a receipt, a path, a host) made safe for a terminal.

Every interface shows untrusted strings through `visible`: an ESC, an OSC 8 link, a C1
control or a bidi override must show as characters, never act on the terminal.
"""

from __future__ import annotations

import unicodedata


def _visible_char(c: str) -> str:
    code = ord(c)
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode control pictures: ␛ for ESC, ␀ for NUL
    if code == 0x7F:
        return "␡"
    if 0x80 <= code < 0xA0:
        return f"\\x{code:02x}"
    return f"<U+{code:04X}>"


def visible(text: str, keep_newlines: bool = False, tab: str = "    ") -> str:
    """Untrusted text made safe to show: every control or format character becomes visible.

    ESC becomes ``␛``, other C0 controls their control pictures, C1 controls ``\\x9b``,
    and invisible format characters (bidi overrides, zero-width) ``<U+202E>``, so a
    file can never restyle, hide or reorder what the board shows.
    """
    out = []
    for c in text:
        if c == "\n" and keep_newlines:
            out.append(c)
        elif c == "\t" and tab:
            out.append(tab)
        elif c.isprintable() or c == " ":
            out.append(c)
        elif unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(_visible_char(c))
        else:
            out.append(c)
    return "".join(out)


def one_line(text: str) -> str:
    """The first line of `text`, visible, with ``…`` when more lines follow."""
    stripped = text.strip("\n")
    first, _, rest = stripped.partition("\n")
    return visible(first, tab=" ") + (" …" if rest.strip() else "")


def age(seconds: float) -> str:
    """A short age: 42s, 5m, 3h, 2d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
