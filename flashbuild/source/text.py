"""How flashbuild reads a source file's bytes as text: one reader for patch and scan.

1. UTF-8, with or without a BOM;
2. UTF-16 declared by its byte-order mark (LE or BE: MSVC writes these, and their NUL bytes
   would otherwise look binary);
3. Latin-1, byte for byte, for NUL-free bytes that are not UTF-8 (a Latin-1 or CP1252 source,
   which upstream trees hold): every byte maps to one character, so patch writes back the
   bytes no edit touches unchanged, and the scan sees every ASCII construct where it is.

NUL bytes without a UTF-16 BOM (a binary file, BOM-less UTF-16) or a UTF-16 BOM before invalid
UTF-16 are not text (docs/reliability.md "patch: encodings", decided in issue 22).
"""

from __future__ import annotations

from typing import Literal

#: An encoding a source file is read in. Each is a byte-exact round trip: a BOM stays in the
#: decoded text as U+FEFF (patch writes it back; the scan drops it).
Encoding = Literal["utf-8", "utf-16-le", "utf-16-be", "latin-1"]


def sniff_encoding(data: bytes) -> Encoding | None:
    """The encoding `data` is read in, None for bytes that are not text."""
    for bom, name in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom) and not data.startswith(b"\xff\xfe\0\0"):
            try:
                data.decode(name)
            except UnicodeDecodeError:
                return None
            return name  # type: ignore[return-value]
    if b"\0" in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "latin-1"
    return "utf-8"


def not_text_reason(data: bytes) -> str:
    """Why `sniff_encoding` found `data` not to be text (the evidence of a refusal)."""
    nul = data.find(b"\0")
    if nul >= 0 and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return (f"a NUL byte at offset {nul} and no UTF-16 byte-order mark (a binary file, or "
                "UTF-16 without a BOM)")
    return "it starts with a UTF-16 byte-order mark but is not valid UTF-16"


def decode(data: bytes) -> tuple[str, Encoding] | None:
    """The text of `data` (a BOM kept as U+FEFF) and the encoding it was read in; None for
    bytes that are not text (`not_text_reason` says why)."""
    encoding = sniff_encoding(data)
    if encoding is None:
        return None
    return data.decode(encoding), encoding
