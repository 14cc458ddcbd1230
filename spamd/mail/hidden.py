"""HTML a reader never sees: elements hidden by CSS, taken out of the visible text.

A block of ordinary words in a `display:none` element is the cheapest way to
dilute a statistical filter's evidence (the "good word" attack): the reader sees
the spam, the filter counts the words. Here each element whose inline style hides
it (display:none, visibility:hidden, a zero font size, an opacity of 0, text the
colour of its own background, a position far off screen) is cut out of the markup
and its text returned apart, for the tokenizer's `hidden:` tokens.

It reads inline `style` attributes only, not style sheets or inherited colours,
and never raises: odd markup leaves an element visible.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

from spamd.mail.normalize import code_points

_STYLED_TAG_RE = re.compile(r"""<([a-z][a-z0-9]{0,15})\b[^<>]*?\bstyle\s*=\s*("[^"<>]*"|'[^'<>]*'|[^\s<>]+)[^<>]*>""")
# Each way of hiding; `_HIDING_RE` is them as one pattern, asked of each inline style's value.
_HIDING_ALTERNATIVES = (
    r"display\s*:\s*none",
    r"visibility\s*:\s*hidden",
    r"font-size\s*:\s*0+(?:\.0+)?(?:px|pt|em|rem|%)?\s*(?=[;\"'!]|$)",
    r"opacity\s*:\s*0+(?:\.0+)?\s*(?=[;\"'!]|$)",
    *(rf"{side}\s*:\s*-\d{{3,}}" for side in ("left", "top", "text-indent", "margin-left")),
)
_HIDING_RE = re.compile("|".join(_HIDING_ALTERNATIVES))
_COLOUR_RE = re.compile(r"(?:^|[;\s\"'])color\s*:\s*([#a-z0-9]+)")
_BACKGROUND_RE = re.compile(r"background(?:-color)?\s*:\s*([#a-z0-9]+)")
_VOID = frozenset(("img", "br", "hr", "input", "meta", "link", "area", "base", "col", "wbr", "source", "embed"))
# Elements cut out per part at most: each is one search for its end tag.
MAX_HIDDEN_ELEMENTS = 64


def _colour(value: str) -> str:
    named = {"white": "#ffffff", "black": "#000000"}
    value = named.get(value, value)
    if len(value) == 4 and value.startswith("#"):
        return "#" + "".join(c * 2 for c in value[1:])
    return value


def hiding_kind(style: str) -> str | None:
    """How an inline style (lower-cased) hides its element, or None when it does not."""
    m = _HIDING_RE.search(style)
    if m:
        found = m.group(0)
        if found.startswith("display"):
            return "display-none"
        if found.startswith("visibility"):
            return "visibility-hidden"
        if found.startswith("font-size"):
            return "font-size-0"
        if found.startswith("opacity"):
            return "opacity-0"
        return "off-screen"
    if "background" not in style:  # a colour is compared with its background's only
        return None
    colour = _COLOUR_RE.search(style)
    if colour:
        background = _BACKGROUND_RE.search(style)
        if background and _colour(colour.group(1)) == _colour(background.group(1)):
            return "same-colour"
    return None


def _element_end(lower: str, name: str, start: int) -> int:
    """Where the element opened just before `start` ends (after its end tag); the end of the text if unclosed."""
    depth = 1
    for m in re.finditer(rf"<(/?){re.escape(name)}\b[^<>]*>", lower[start:]):
        depth += -1 if m.group(1) else 1
        if depth == 0:
            return start + m.end()
    return len(lower)


def _styled_tags(lower: str) -> Iterator[re.Match[str]]:
    """`_STYLED_TAG_RE.finditer(lower)`, tried only at the "<" before each "style".

    A match holds no "<" but its first and ends at the first ">" after it: so it starts
    at the last "<" before a "style" it holds, and the next one after its end. finditer
    tried the pattern at every "<" of the markup (parsing trec07p-dev's first 300
    messages, 1,085 -> 1,042 k instructions a message under callgrind).
    """
    end = 0  # no match starts before it: each "<" is tried once, each stretch searched back once
    at = lower.find("style")
    while at != -1:
        start = lower.rfind("<", end, at)
        if start == -1:
            end = at
        elif m := _STYLED_TAG_RE.match(lower, start):
            yield m
            end = m.end()
        else:
            end = start + 1
        at = lower.find("style", max(at + 5, end))


def cut_hidden(markup: str, lower: str) -> tuple[str, str, list[str], list[str]]:
    """(markup, lower) with hidden elements replaced by a space, their markup, and how each was hidden.

    `lower` is `markup` lower-cased, of the same length (html_to_text makes it so).
    """
    # Only the inline styles are asked how they hide: asking the whole markup first whether any way
    # of hiding is there (each one's word by str.find, then its pattern) cost more than it saved,
    # parsing with hidden_text alone, k instructions a message over 300 messages (callgrind):
    # trec07p-dev 945 -> 912, modern-dev 5,229 -> 5,159, hard-dev 6,036 -> 6,023 (the same cuts).
    if "style" not in lower:
        return markup, lower, [], []
    keep, keep_lower, hidden, kinds = [], [], [], []
    pos = 0
    for m in _styled_tags(lower):
        if m.start() < pos:
            continue  # inside an element already cut
        kind = hiding_kind(m.group(2).strip("\"'"))
        if kind is None or m.group(1) in _VOID:
            continue
        end = _element_end(lower, m.group(1), m.end())
        keep.append(markup[pos : m.start()])
        keep_lower.append(lower[pos : m.start()])
        hidden.append(markup[m.end() : end])
        kinds.append(kind)
        pos = end
        if len(kinds) >= MAX_HIDDEN_ELEMENTS:
            break
    if not kinds:
        return markup, lower, [], []
    keep.append(markup[pos:])
    keep_lower.append(lower[pos:])
    return " ".join(keep), " ".join(keep_lower), hidden, kinds


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Word salad: SALAD_WORDS or more lower-case words in a row with nothing but spaces and
# line breaks between them, no capital, digit or punctuation: no sentence runs that long
# (a block of good words appended to spam, or the random words of a relayed spam).
SALAD_WORDS = 40
# A run of lower-case letters and white space after any other character, long enough to
# hold SALAD_WORDS words of two letters. The pattern starts with that other character, so
# the engine skips along to the next one: 16 us a message over trec07p-dev's first 2,000
# texts, where a pattern of words that could start after any space took 78.
_RUN_RE = re.compile(rf"[^a-z\s]([a-z\s]{{{3 * SALAD_WORDS},}}+)")
# Text is not searched with the pattern: its runs are found in a byte a character, every
# lower-case letter and white space made "a" and every other character NUL (_runs). The
# pattern, with \s spelled as ASCII, took 54-59 ms over the ASCII texts of trec07p-dev's first
# 3,000 messages; asking the bytes first whether any run is there, 6 ms. Latin-1 text (ASCII
# included, most mail) is masked by bytes.translate; other text (curly quotes, Cyrillic, CJK)
# by a numpy table over every code point, so that \s's Unicode spaces (U+2003, U+3000) count
# as the pattern counts them: split_word_salad over those texts, best of 5, trec07p-dev's first
# 3,000 messages (415 texts) 26.6 -> 9.4 ms, modern-dev's 1,200 (488 texts) 60.9 -> 12.7 ms.
# Every character \s matches lies below U+3001 (tests/test_disguises.py asks all of Unicode).
_RUN_CHARS_OF = np.zeros(0x110000, dtype=np.uint8)
_RUN_CHARS_OF[[m.start() for m in re.finditer(r"[a-z\s]", "".join(map(chr, range(0x3001))))]] = ord("a")
_RUN_CHARS = _RUN_CHARS_OF[:256].tobytes()  # the same for Latin-1's bytes, for bytes.translate
_RUN_STRETCH = b"a" * (3 * SALAD_WORDS)


def _runs(text: str) -> list[tuple[int, int]]:
    """The spans of `_RUN_RE`'s group in split_word_salad's `marked` ("\0" + `text`).

    `text` a byte a character, every lower-case letter and white space made "a" and every
    other character NUL: a match is a stretch of at least the run's length of "a"s between
    two NULs (or the ends), found by bytes.find, which skips along a long needle instead of
    trying each character. Over the texts of trec07p-dev's first 3,000 messages that may hold a
    run, the pattern's search took 65 ms and split_word_salad 74 ms in all; now 33 (the same
    spans: tests compare the two).
    """
    try:
        masked = text.encode("latin-1").translate(_RUN_CHARS)  # a copy where CPython keeps a byte a character
    except UnicodeEncodeError:
        masked = _RUN_CHARS_OF[code_points(text)].tobytes()
    spans = []
    at = masked.find(_RUN_STRETCH)
    while at != -1:
        start = masked.rfind(b"\0", 0, at) + 1
        end = masked.find(b"\0", at)
        end = len(masked) if end == -1 else end
        spans.append((start + 1, end + 1))  # in "\0" + text, as the pattern reports them
        at = masked.find(_RUN_STRETCH, end)
    return spans


def split_word_salad(text: str, quick: bool = True) -> tuple[str, list[str]]:
    """`text` without its runs of word salad, and the runs ([]: none, the text itself).

    `quick`: the text's runs found in its bytes (_runs); False: by the pattern (tests compare the two)."""
    if len(text) < 3 * SALAD_WORDS:
        return text, []
    spans = _runs(text) if quick else [m.span(1) for m in _RUN_RE.finditer("\0" + text)]
    if not spans:
        return text, []
    runs: list[str] = []
    pieces = []
    pos = 0
    marked = "\0" + text  # a character before the first run, for the pattern to start at
    for start, end in spans:
        # A run starts and ends between words: the letters of a word it shares with the text
        # around it ("Hello" after the "H", "word" before a "2") stay with that text.
        if start > 1 and not marked[start - 1].isspace():
            start = end - len(marked[start:end].lstrip(_LETTERS))
        if end < len(marked) and not marked[end].isspace():
            end = start + len(marked[start:end].rstrip(_LETTERS))
        run = marked[start:end]
        if len(run.split()) < SALAD_WORDS:
            continue
        pieces.append(marked[pos + 1 : start] if pos == 0 else marked[pos:start])
        runs.append(run)
        pos = end
    if not runs:
        return text, []
    pieces.append(marked[pos:])
    return " ".join(pieces), runs


def cut_word_salad(text: str) -> tuple[str, int]:
    """`text` without its runs of word salad, and how many words they held (0: none, the text itself)."""
    text, runs = split_word_salad(text)
    return text, sum(len(run.split()) for run in runs)
