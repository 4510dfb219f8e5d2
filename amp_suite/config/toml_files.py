"""TOML files read with care: nesting depth checked before parsing, and one-line errors naming the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

# Deepest nesting of arrays and inline tables a config file may have.
MAX_TOML_DEPTH = 32


def _skip_string(text: str, start: int) -> int:
    """The index just past the TOML string starting at ``text[start]`` (a quote)."""
    quote = text[start]
    if text.startswith(quote * 3, start):
        end = text.find(quote * 3, start + 3)
        while end != -1 and quote == '"' and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        return len(text) if end == -1 else end + 3
    index = start + 1
    while index < len(text) and text[index] not in (quote, "\n"):
        index += 2 if quote == '"' and text[index] == "\\" else 1
    return index + 1


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def check_toml_depth(text: str, path: Path) -> None:
    """A one-line :class:`UsageError` naming the line where arrays and inline tables nest past :data:`MAX_TOML_DEPTH`.

    A linear scan (strings and comments skipped), so a file nested thousands
    of levels deep is refused before the parser recurses into it.
    """
    depth = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = _skip_string(text, index)
            continue
        if char == "#":
            newline = text.find("\n", index)
            index = len(text) if newline == -1 else newline
            continue
        if char in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                line = text.count("\n", 0, index) + 1
                raise UsageError(f"{path}: line {line}: arrays and tables nest more than {MAX_TOML_DEPTH} "
                                 "levels deep")
        elif char in "]}":
            depth = max(0, depth - 1)
        index += 1


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start}); is it really a TOML file?") from None
    check_toml_depth(text, path)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to read") from None
    except tomllib.TOMLDecodeError as exc:
        message = " ".join(str(exc).split())
        if "(at end of document)" in message:  # tomllib gives no line number here
            message = message.replace("(at end of document)", f"(at end of document, line {len(text.splitlines())})")
        hint = ("; the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: save it as "
                "UTF-8 without BOM" if text.startswith("\ufeff") else "")
        raise UsageError(f"{path}: malformed TOML: {message}{hint}") from None
