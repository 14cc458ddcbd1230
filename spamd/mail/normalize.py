"""Text as a reader sees it: compatibility forms folded, invisible characters dropped, look-alike letters mapped.

Spam that fights a word-counting filter writes its words so that they look the
same to a person and differ to the filter: a zero-width space or soft hyphen
inside a word, Cyrillic or Greek letters that look Latin, fullwidth or
mathematical letters. `normalize` undoes that before words are found, and says
which tricks it undid (the fact that a word was disguised is itself evidence:
the tokenizer's `obfuscated:` tokens).

The look-alikes are a compact table of the Cyrillic and Greek letters that
Unicode's confusables (TR39) give a Latin skeleton of one letter, applied only
to words that mix them with Latin letters, or, in text that is mostly Latin, to
words made of nothing else: a Russian or Greek text keeps its own letters.
It does not handle other scripts' look-alikes or multi-letter skeletons ("rn" for "m").
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

# Format and filler characters a reader does not see (Unicode general category Cf
# and the Hangul/Mongolian fillers), dropped wherever they are.
INVISIBLE = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b"
    "\u206c\u206d\u206e\u206f\u3164\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08\ufe09\ufe0a"
    "\ufe0b\ufe0c\ufe0d\ufe0e\ufe0f\ufeff\uffa0"
)
_INVISIBLE_CLASS = "[" + "".join(sorted(INVISIBLE)) + "]"
_INVISIBLE_RE = re.compile(_INVISIBLE_CLASS + "+")
# The same inside a word; the pattern starts with the class, not with a look-behind, so
# that the engine skips along to the next invisible character.
_INVISIBLE_IN_WORD_RE = re.compile(_INVISIBLE_CLASS + f"(?<=\\w{_INVISIBLE_CLASS}){_INVISIBLE_CLASS}*+(?=\\w)")

# Cyrillic and Greek letters whose TR39 skeleton is one Latin letter (both cases).
CONFUSABLES = str.maketrans(
    {
        **dict(zip("аеорсухіјѕԁһԛԝӏүɑ", "aeopcyxijsdhqwlya", strict=True)),
        **dict(zip("АВЕКМНОРСТХУІЈЅԌԜ", "ABEKMHOPCTXYIJSGW", strict=True)),
        **dict(zip("αοιυνκρτχγεζ", "aoiuvkptxyez", strict=True)),
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
    }
)
_CONFUSABLE_CHARS = frozenset(chr(c) for c in CONFUSABLES)
_LATIN_RUN_RE = re.compile(r"[A-Za-z]+")
_OTHER_SCRIPT_RUN_RE = re.compile(r"[\u0370-\u03ff\u0400-\u052f]+")


def normalize(text: str) -> tuple[str, list[str]]:
    """`text` folded (NFKC), without invisible characters, look-alike letters mapped; and the tricks found.

    The tricks are "invisible" (an invisible character inside a word), "compatibility"
    (letters NFKC changed, as fullwidth or mathematical ones) and "mixed-script" (a word
    whose look-alike letters were mapped). ASCII text is returned as it is, at once.
    """
    if text.isascii():
        return text, []
    return _normalize_latin1(text) if is_latin1(text) else normalize_any(text)


# Each code point's kind, as bits: invisible (INVISIBLE), Cyrillic or Greek (U+0370-U+052F).
_INVISIBLE_KIND, _OTHER_SCRIPT_KIND = 1, 2
_KIND_OF = np.zeros(0x110000, dtype=np.uint8)
_KIND_OF[[ord(c) for c in INVISIBLE]] = _INVISIBLE_KIND
_KIND_OF[0x370:0x530] = _OTHER_SCRIPT_KIND


def code_points(text: str) -> np.ndarray:
    """`text`'s code points as uint32, lone surrogates included: what a numpy table over every code point indexes."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _kinds(text: str) -> int:
    """The kinds of character `text` holds (bits of _KIND_OF), in one pass of numpy over its code points."""
    codes = code_points(text)
    return int(np.bitwise_or.reduce(_KIND_OF[codes])) if len(codes) else 0


def normalize_any(text: str) -> tuple[str, list[str]]:
    """`normalize` of any text (tests compare the Latin-1 path with it)."""
    # Which kinds of character the text holds is looked up for all of its characters at once:
    # building the set of its characters made a string of each, and a regex search for each
    # kind cost more still (parsing trec07p-dev's first 300 messages: 1,013 k instructions a
    # message -> 992 k; the searches 1,033 k; callgrind).
    kinds = _kinds(text)
    tricks: list[str] = []
    given = text
    if kinds & _INVISIBLE_KIND:
        if _INVISIBLE_IN_WORD_RE.search(text):
            tricks.append("invisible")
        text = _INVISIBLE_RE.sub("", text)
    if not unicodedata.is_normalized("NFKC", text):
        # Only a letter's compatibility form is a disguise ("ＦＲＥＥ"); "…" or "½" are typography.
        # Asked of the text as given: the Hangul fillers are invisible letters that NFKC changes.
        if any(c > "\x7f" and c.isalpha() and unicodedata.normalize("NFKC", c) != c for c in set(given)):
            tricks.append("compatibility")
        text = unicodedata.normalize("NFKC", text)
        kinds = _kinds(text)
    if kinds & _OTHER_SCRIPT_KIND:
        latin = sum(map(len, _LATIN_RUN_RE.findall(text)))
        other = sum(map(len, _OTHER_SCRIPT_RUN_RE.findall(text)))
        text, mapped = _map_lookalikes(text, latin > other)
        if mapped:
            tricks.append("mixed-script")
    return text, tricks


# The letters below U+0100 that NFKC changes (ª, µ, º): the compatibility forms text of
# Latin-1 alone can hold. Of them only the soft hyphen is INVISIBLE.
_LATIN1_COMPATIBILITY = "".join(
    c for c in map(chr, range(128, 256)) if c.isalpha() and unicodedata.normalize("NFKC", c) != c
)
_LATIN1_INVISIBLE = "".join(c for c in INVISIBLE if c < "\u0100")


def is_latin1(text: str) -> bool:
    """Whether every character of `text` is below U+0100."""
    try:
        text.encode("latin-1")  # a copy of the bytes where it is (CPython keeps such text one byte a character)
    except UnicodeEncodeError:
        return False
    return True


def _normalize_latin1(text: str) -> tuple[str, list[str]]:
    """`normalize` of text whose characters are all below U+0100, asked of the few that can matter there.

    The same answers as the set of the text's characters gives: building that set was most of
    `normalize`'s time (the non-ASCII texts of trec07p-dev's first 3,000 messages, 57% of them
    Latin-1: 118 -> 69 ms).
    """
    tricks: list[str] = []
    if any(c in text for c in _LATIN1_INVISIBLE):
        if _INVISIBLE_IN_WORD_RE.search(text):
            tricks.append("invisible")
        text = _INVISIBLE_RE.sub("", text)
    if unicodedata.is_normalized("NFKC", text):
        return text, tricks  # Latin-1 still: no Cyrillic or Greek letter
    if any(c in text for c in _LATIN1_COMPATIBILITY):
        tricks.append("compatibility")
    # Text below U+0100 is NFKC character by character (none of its characters' forms combines with
    # the next one's), so a no-break space, what most such text holds, is only a space: replaced,
    # the text needs NFKC no more. `normalize` over the Latin-1 texts of trec07p-dev's first 3,000
    # messages (603, of which 339 not NFKC), best of 5: 15.3 -> 6.5 ms.
    spaced = text.replace("\xa0", " ")
    text = spaced if unicodedata.is_normalized("NFKC", spaced) else unicodedata.normalize("NFKC", text)
    if is_latin1(text):
        return text, tricks
    # NFKC made letters of other scripts (µ, the micro sign, is a Greek mu): as `normalize` goes on.
    if any("\u0370" <= c <= "\u052f" for c in set(text)):
        latin = sum(map(len, _LATIN_RUN_RE.findall(text)))
        other = sum(map(len, _OTHER_SCRIPT_RUN_RE.findall(text)))
        text, mapped = _map_lookalikes(text, latin > other)
        if mapped:
            tricks.append("mixed-script")
    return text, tricks


# A word split by inline tags or a short comment between two of its letters, as in
# "vi<b></b>agra" or "vi<!-- x -->agra": joined (by html_to_text, with [parser] normalize). Block
# tags (p, div, td, br) still separate words, as a reader sees them.
# The pattern starts with "<" and looks behind only then, so that the engine skips along
# to the next "<": starting with the look-behind it tried every position of the markup.
_INLINE_TAG = r"(?:/?(?:b|i|u|s|em|strong|span|font|small|big|sub|sup|tt|abbr|wbr|a|mark|ins|del)\b[^<>]{0,200}>|!--[^<>]{0,200}?-->)"
_INLINE_SPLIT_RE = re.compile(rf"<(?<=\w<){_INLINE_TAG}(?:<{_INLINE_TAG})*+(?=\w)", re.IGNORECASE)


def join_split_words(markup: str) -> tuple[str, int]:
    """HTML with the inline tags and comments inside words taken out, and how many places were joined."""
    return _INLINE_SPLIT_RE.subn("", markup)


def _skeleton(word: str, mostly_latin: bool) -> str:
    """A word with Cyrillic or Greek letters, its look-alikes mapped to Latin where that is a disguise."""
    if not (_LATIN_RUN_RE.search(word) or mostly_latin) or _CONFUSABLE_CHARS.isdisjoint(word):
        return word
    if any(not ("a" <= c.lower() <= "z") and c not in _CONFUSABLE_CHARS for c in word):
        return word  # a letter with no Latin look-alike: a word of its own script
    return word.translate(CONFUSABLES)


def _map_lookalikes(text: str, mostly_latin: bool) -> tuple[str, bool]:
    """Each word holding Cyrillic or Greek letters through `_skeleton`; whether any changed.

    Words are found from their Cyrillic or Greek letters outwards, each character looked
    at once: a pattern for "letters around a Cyrillic one" backtracked through every
    long run of Latin letters from each of its positions (quadratic in the run).
    """
    pieces: list[str] = []
    pos = 0
    mapped = False
    for m in _OTHER_SCRIPT_RUN_RE.finditer(text):
        if m.start() < pos:
            continue  # inside the word just mapped
        start, end = m.start(), m.end()
        while start > pos and text[start - 1].isalpha():
            start -= 1
        while end < len(text) and text[end].isalpha():
            end += 1
        word = text[start:end]
        new = _skeleton(word, mostly_latin)
        mapped = mapped or new != word
        pieces += [text[pos:start], new]
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces), mapped
