"""Spam that disguises its words: hidden text, invisible characters, look-alike letters, split words."""

from __future__ import annotations

import dataclasses
import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import ParserConfig
from spamd.mail.hidden import cut_hidden, cut_word_salad, hiding_kind, split_word_salad
from spamd.mail.message import parse_message
from spamd.mail.normalize import normalize, normalize_any
from spamd.mail.tokenize import MAX_HIDDEN_WORDS, tokenize

ON = ParserConfig(word_salad=True)  # every defence, word salad too (off by default)
OFF = dataclasses.replace(ON, hidden_text=False, normalize=False, word_salad=False)


def html_message(body: str, subject: str = "Offer") -> bytes:
    return (
        f"From: shop@deals.example\nTo: you@example.org\nSubject: {subject}\nMIME-Version: 1.0\n"
        f"Content-Type: text/html; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n{body}\n"
    ).encode()


def body_words(raw: bytes, limits: ParserConfig = ON) -> list[str]:
    return [t for t in tokenize(parse_message(raw, limits)) if ":" not in t and "@" not in t]


def disguise(raw: bytes, limits: ParserConfig = ON) -> list[str]:
    return [t for t in tokenize(parse_message(raw, limits)) if t.startswith(("hidden:", "obfuscated:", "salad:"))]


def test_a_hidden_good_word_block_gives_hidden_tokens_not_words() -> None:
    raw = html_message(
        "<html><body><p>Cheap pills here</p>"
        '<div style="display: none">meeting agenda <b>budget</b> minutes</div></body></html>'
    )
    assert body_words(raw) == ["cheap", "pills", "here"]
    assert disguise(raw) == [
        "hidden:display-none", "hidden:words:3", "hidden:meeting", "hidden:agenda", "hidden:budget", "hidden:minutes",
    ]  # fmt: skip
    assert body_words(raw, OFF) == ["cheap", "pills", "here", "meeting", "agenda", "budget", "minutes"]
    assert disguise(raw, OFF) == []


def test_each_way_of_hiding_is_named_and_visible_styles_are_not() -> None:
    assert hiding_kind("display:none") == "display-none"
    assert hiding_kind("visibility: hidden; height:0") == "visibility-hidden"
    assert hiding_kind("font-size:0px;line-height:0") == "font-size-0"
    assert hiding_kind("font-size: 0") == "font-size-0"
    assert hiding_kind("opacity:0") == "opacity-0"
    assert hiding_kind("position:absolute;left:-9999px") == "off-screen"
    assert hiding_kind("color:#fff;background-color:#FFFFFF".lower()) == "same-colour"
    assert hiding_kind("color:white; background:#ffffff") == "same-colour"
    for visible in ("font-size:0.8em", "font-size:10px", "color:#000;background:#fff", "display:block", "opacity:0.5",
                    "margin-left:-5px", "border-color:red;background:red"):  # fmt: skip
        assert hiding_kind(visible) is None, visible


def test_hidden_elements_nest_and_an_unclosed_one_hides_to_the_end() -> None:
    markup = '<div>a <div style="display:none">b <div>c</div> d</div> e</div><span style="font-size:0">f'
    kept, lower, hidden, kinds = cut_hidden(markup, markup.lower())
    assert kept.split() == ["<div>a", "e</div>"]
    assert "b" in hidden[0] and "c" in hidden[0] and "d" in hidden[0] and hidden[1] == "f"
    assert kinds == ["display-none", "font-size-0"]
    assert len(kept) == len(lower)


def test_the_hidden_words_are_capped() -> None:
    block = " ".join(f"word{n}x" for n in range(100))
    raw = html_message(f'<p>Buy now</p><p style="visibility:hidden">{block}</p>')
    tokens = disguise(raw)
    assert len([t for t in tokens if t.startswith("hidden:word") and ":words:" not in t]) == MAX_HIDDEN_WORDS
    assert "hidden:words:7" in tokens


def test_a_homoglyph_word_gives_the_latin_word_and_an_obfuscated_token() -> None:
    raw = html_message("<p>Cheap v\u0456\u0430gr\u0430 and \u0441\u03b9\u0430lis b\u043enus</p>", "\u0421heap pills")
    assert body_words(raw) == ["cheap", "viagra", "and", "cialis", "bonus"]
    assert "subject:cheap" in tokenize(parse_message(raw, ON))
    assert disguise(raw) == ["obfuscated:mixed-script"]
    assert "viagra" not in body_words(raw, OFF)


def test_russian_and_greek_text_keep_their_letters() -> None:
    text = "Привет, это сор и пример текста. Καλημέρα κόσμε"
    assert normalize(text) == (text, [])


def test_a_word_split_by_tags_comments_soft_hyphens_and_references_is_joined() -> None:
    raw = html_message("<p>vi<b></b>ag<!-- hello -->ra ci&shy;alis ch&#101;ap pre<span>scr</span>iption</p><p>next</p>")
    assert body_words(raw) == ["viagra", "cialis", "cheap", "prescription", "next"]
    assert disguise(raw) == ["obfuscated:split", "obfuscated:invisible"]
    assert body_words(raw, OFF) == ["vi", "ag", "ra", "ci", "alis", "cheap", "pre", "scr", "iption", "next"]


def test_block_tags_still_separate_words() -> None:
    raw = html_message("<table><tr><td>first</td><td>second</td></tr></table><p>third</p><br>fourth")
    assert body_words(raw) == ["first", "second", "third", "fourth"]
    assert disguise(raw) == []


def test_zero_width_characters_and_fullwidth_letters_are_undone() -> None:
    assert normalize("fr\u200bee m\u200done\u2060y") == ("free money", ["invisible"])
    assert normalize("\uff26\uff32\uff25\uff25 offer") == ("FREE offer", ["compatibility"])
    assert normalize("caf\u00e9 \u2026 \u00bd") == ("caf\u00e9 ... 1\u20442", [])  # no letter was disguised
    assert normalize("plain ascii") == ("plain ascii", [])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_any_unicode_text_normalizes_to_text_without_invisible_characters(text: str) -> None:
    folded, tricks = normalize(text)
    assert isinstance(folded, str) and set(tricks) <= {"invisible", "compatibility", "mixed-script"}
    assert "\u200b" not in folded and "\u00ad" not in folded


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("<>/=\"' :;-adinoplsyetvhbfuzxc0123456789#\u200b\u0430"), max_size=400))
def test_any_markup_gives_tokens(markup: str) -> None:
    tokenize(parse_message(html_message(markup), ON))


def test_a_visible_block_of_good_words_is_word_salad_and_sentences_are_not() -> None:
    block = " ".join(["meeting", "agenda", "budget", "minutes", "draft"] * 10)
    raw = (
        "From: shop@deals.example\nSubject: Offer\n\nBuy cheap pills now!\n\n" + block + "\n\nRegards, the shop\n"
    ).encode()
    assert body_words(raw) == ["buy", "cheap", "pills", "now!", "regards", "the", "shop"]
    assert disguise(raw) == ["salad:words:6"]
    assert len(body_words(raw, OFF)) == 57
    prose = " ".join(["The meeting is on Monday, and the budget review follows it."] * 8)
    assert disguise(f"From: a@b.example\nSubject: x\n\n{prose}\n".encode()) == []
    assert cut_word_salad("short text") == ("short text", 0)
    assert disguise(raw, ParserConfig()) == []  # off by default: a person's unpunctuated note keeps its words


def test_a_long_run_of_latin_letters_beside_a_cyrillic_one_is_normalized_in_one_pass() -> None:
    # A pattern for "letters around a Cyrillic one" once backtracked through such a run from each of its positions.
    text = "a" * 200_000 + " \u0436 " + "b\u0430" * 50_000
    folded, tricks = normalize(text)
    assert folded == "a" * 200_000 + " \u0436 " + "ba" * 50_000 and tricks == ["mixed-script"]


# Latin-1 letters and marks that matter to the normaliser (the compatibility letters, the soft
# hyphen, NFKC's changes), among ASCII letters, spaces and punctuation.
LATIN1 = st.text(
    st.sampled_from(list("aAbz \n.,-'") + ["\xad", "\xa0", "\xaa", "\xb5", "\xba", "\xbc", "\xe9", "\xff"])
)


@settings(max_examples=400)
@given(LATIN1 | st.text(st.characters(max_codepoint=255)))
def test_latin1_text_normalizes_as_any_text_does(text: str) -> None:
    assert normalize(text) == normalize_any(text)


@settings(max_examples=400)
@given(st.text(st.characters(max_codepoint=0xFF)))
def test_any_latin1_text_normalizes_as_any_text_does(text: str) -> None:
    assert normalize(text) == normalize_any(text)


def test_latin1_text_is_nfkc_character_by_character() -> None:
    # What the Latin-1 path's no-break space shortcut rests on: no character's form combines with the next one's.
    latin1 = [chr(c) for c in range(256)]
    alone = {c: unicodedata.normalize("NFKC", c) for c in latin1}
    assert all(unicodedata.normalize("NFKC", a + b) == alone[a] + alone[b] for a in latin1 for b in latin1)


SALAD = st.text(
    st.sampled_from(
        list("abcxyz") + [" "] * 3 + ["\n", "\t", "\x1c", "\x0b", "\x85", "\xa0", "\u2003", "A", ".", "\xe9", "\0"]
    ),
    min_size=100,
)


@settings(max_examples=300)
@given(st.lists(SALAD | st.just("lorem ipsum dolor " * 15), min_size=1, max_size=4).map("".join))
def test_latin1_text_is_searched_for_word_salad_as_any_text(text: str) -> None:
    assert split_word_salad(text) == split_word_salad(text, quick=False)


WIDE_SALAD = st.text(
    st.sampled_from(
        list("abcxyz") + [" "] * 3 + ["\n", "\x85", "\xa0", "\u2003", "\u3000", "\u2028", "\u2019", "\u0436", "\u4e00"]
        + ["\U0001f600", "\ud800", "\u3001", "A", "."]
    ),
    min_size=100,
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(WIDE_SALAD | st.just("lorem ipsum dolor " * 15), min_size=1, max_size=4).map("".join))
def test_text_beyond_latin1_is_searched_for_word_salad_as_the_pattern_does(text: str) -> None:
    # Found in a byte a character, Unicode's spaces (U+2003, U+3000) counted as \s counts them.
    assert split_word_salad(text) == split_word_salad(text, quick=False)


def test_no_character_past_the_salad_tables_reach_is_white_space() -> None:
    every = "".join(map(chr, range(0x3001, 0x110000)))
    assert re.search(r"\s", every) is None
