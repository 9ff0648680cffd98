"""The tokenizer and cursor under :mod:`navigator.specs`: names (bare or quoted), ':' and ',',
and the errors that quote the entry they are in."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, NoReturn

from navigator.errors import UserInputError

MAX_DIM = 2**31 - 1
"""Largest dimension / batch size accepted (INT32_MAX, as TensorRT)."""

NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
DIGITS_RE = re.compile(r"[0-9]+")
SPECIAL = frozenset(":,'\"")   # characters that make a name need quotes


def show_token(s: str) -> str:
    """Quote a token for an error message, escaping anything unprintable."""
    if len(s) > 80:
        return repr(s[:60]) + f"... ({len(s)} chars)"
    return repr(s)


@dataclass(frozen=True)
class Token:
    kind: str  # "word", ":" or ","
    text: str
    quoted: bool
    start: int
    end: int


def tokenize(text: str, option: str, usage: str) -> list[Token]:
    toks: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in ":,":
            toks.append(Token(ch, ch, False, i, i + 1))
            i += 1
        elif ch in "'\"":
            close = text.find(ch, i + 1)
            if close < 0:
                raise UserInputError(
                    f"{option}: unterminated quote {ch} in {show_token(text[i:])} ({usage})"
                )
            toks.append(Token("word", text[i + 1 : close], True, i, close + 1))
            i = close + 1
        else:
            j = i
            while j < n and not (text[j] in SPECIAL or text[j].isspace()):
                j += 1
            toks.append(Token("word", text[i:j], False, i, j))
            i = j
    return toks


class Cursor:
    """Walks the token list of one option value, producing tailored errors."""

    def __init__(self, text: str, option: str, usage: str):
        if not isinstance(text, str):
            raise UserInputError(f"{option}: expected a string, got {type(text).__name__}")
        self.text = text
        self.option = option
        self.usage = usage
        self.toks = tokenize(text, option, self.usage)
        self.i = 0
        self.entry_start = 0
        self.last_end = 0
        if not self.toks:
            self.fail("value is empty")

    # -- helpers ---------------------------------------------------------
    def fail(self, message: str) -> NoReturn:
        raise UserInputError(f"{self.option}: {message} ({self.usage})")

    def entry(self) -> str:
        return show_token(self.text[self.entry_start : self.last_end].strip())

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def peek(self, ahead: int = 0) -> Token | None:
        k = self.i + ahead
        return self.toks[k] if k < len(self.toks) else None

    def take(self) -> Token:
        tok = self.toks[self.i]
        self.i += 1
        self.last_end = tok.end
        return tok

    def begin_entry(self) -> None:
        tok = self.peek()
        self.entry_start = tok.start if tok is not None else len(self.text)
        self.last_end = self.entry_start

    # -- grammar pieces --------------------------------------------------
    def name(self) -> str:
        tok = self.peek()
        if tok is None:
            self.fail("expected a name at the end of the value")
        if tok.kind == ":":
            rest = self.text[tok.start :].split(",", 1)[0]
            self.fail(f"missing name before ':' in {show_token(rest)}")
        if tok.kind == ",":
            self.fail(f"empty entry at position {tok.start} in {show_token(self.text)}")
        self.take()
        if tok.quoted and not tok.text:
            self.fail(f"empty quoted name in {show_token(self.text)}")
        return tok.text

    def colon(self, name: str) -> None:
        self.expect(":", f"name {show_token(name)}")

    def value(self, what: str, name: str | None) -> str:
        where = f"after {show_token(name + ':')}" if name is not None else f"in {show_token(self.text)}"
        tok = self.peek()
        if tok is None or tok.kind != "word":
            got = "end of value" if tok is None else show_token(tok.text)
            self.fail(f"missing {what} {where}, got {got}")
        self.take()
        if tok.quoted:
            self.fail(f"{what} {show_token(tok.text)} {where} must not be quoted")
        return tok.text

    def comma(self, after: str) -> None:
        self.expect(",", after)

    def expect(self, kind: str, after: str) -> None:
        """Take the separator ``kind`` (':' or ','), or fail naming what came instead."""
        tok = self.peek()
        if tok is None or tok.kind != kind:
            got = "end of value" if tok is None else show_token(tok.text)
            self.fail(f"expected '{kind}' after {after}, got {got}")
        self.take()

    def next_entry(self) -> bool:
        """Consume the separator after an entry; False at the end of the text."""
        tok = self.peek()
        if tok is None:
            return False
        if tok.kind != ",":
            self.fail(
                f"unexpected {show_token(tok.text)} after {self.entry()}; separate entries with ','"
            )
        self.take()
        if self.at_end():
            self.fail(f"trailing ',' in {show_token(self.text)}")
        return True


def read_number(cur: Cursor, tok: str, what: str) -> float:
    if not NUMBER_RE.fullmatch(tok):
        cur.fail(f"bad {what} {show_token(tok)} in {cur.entry()}: not a number")
    value = float(tok)
    if not math.isfinite(value):
        cur.fail(f"bad {what} {show_token(tok)} in {cur.entry()}: not a finite number")
    return value


def read_pos_int(cur: Cursor, tok: str, what: str) -> int:
    if not DIGITS_RE.fullmatch(tok):
        cur.fail(f"bad {what} {show_token(tok)} in {cur.entry()}: not a positive integer")
    stripped = tok.lstrip("0")
    if len(stripped) > len(str(MAX_DIM)) or (stripped and int(stripped) > MAX_DIM):
        cur.fail(f"{what} {show_token(tok)} in {cur.entry()} exceeds {MAX_DIM}")
    value = int(stripped or "0")
    if value == 0:
        cur.fail(f"zero-size {what} {show_token(tok)} in {cur.entry()} (must be >= 1)")
    return value


def check_dup(cur: Cursor, seen: Mapping[str, object], name: str) -> None:
    if name in seen:
        cur.fail(f"duplicate name {show_token(name)} in {show_token(cur.text)}")
