"""Attacked streams: a corpus whose spam fights back against a statistical filter.

The variants (spamd_lab/variants.py) stand in for mail sources nobody
tuned on; these stand in for spammers who know the filter counts words. Each
attack rewrites only the spam of a TREC index, MIME-correctly (text parts are
decoded, changed and re-encoded with their charset and transfer encoding), the
same way for the same seed: invisible characters, look-alike letters from other
scripts, words split by markup, blocks of good words shown or hidden, text moved
into an attachment or an image, unusual encodings, and all of them at once.
Ham is copied byte for byte. `scripts/attacks/attack_first_contact.py` scores the
attacked streams at first contact (`spamctl eval --train-first N`).

Like the variants it uses the stdlib `email` package, not spamd's parser, and it
scores, tokenizes and trains nothing.
"""

from __future__ import annotations

import base64
import email
import email.charset
import email.errors
import email.generator
import email.header
import email.policy
import hashlib
import html
import io
import quopri
import random
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

from spamd.evaluation.trec import read_index, read_mail
from spamd_lab.variants import visible_text

# ---------------------------------------------------------------- the pieces of an attack

ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")
SOFT_HYPHEN = "\u00ad"

# Latin letters and a look-alike from Cyrillic and from Greek (same glyph in common fonts).
CYRILLIC_LOOKALIKES = dict(zip("aceopxyiABCEHKMOPTXjs", "асеорхуіАВСЕНКМОРТХјѕ", strict=True))
GREEK_LOOKALIKES = dict(zip("aiovyABEHIKMNOPTXZ", "αιονγΑΒΕΗΙΚΜΝΟΡΤΧΖ", strict=True))

# Frequent English words with no spam flavour: the "common words" of a good-word block.
_COMMON_TEXT = """the of and to in is was he for it with as his on be at by had are but from or have an they which one you
    were her all she there would their we him been has when who will more no if out so said what up its about into
    than them can only other new some could time these two may then do first any my now such like our over man me
    even most made after also did many before must through back years where much your way well down should because
    each just those people how too little state good very make world still own see men work long get here between
    both life being under never day same another know while last might us great old year off come since against go
    came right used take three meeting project report thanks regards attached please review team schedule week
    monday friday agenda notes draft version update question discussion family weekend dinner lunch office budget
    committee minutes proposal colleague document paper conference seminar student course library research data
    results analysis figure table section chapter reading music garden kitchen morning evening yesterday tomorrow"""
COMMON_WORDS = tuple(_COMMON_TEXT.split())

# What the stdlib's email package raises on some broken mail (bad charsets, bad
# encodings, headers it cannot fold): such a spam is left as it came.
BROKEN_MAIL = (
    LookupError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    email.errors.MessageError,
)

_TAG_SPLIT_RE = re.compile(r"(<[^>]*>)")
_STYLE_OPEN_RE = re.compile(r"<(style|script)\b", re.IGNORECASE)
_STYLE_CLOSE_RE = re.compile(r"</(style|script)\s*>", re.IGNORECASE)
_WORD_RE = re.compile(r"[A-Za-z]{3,}")
_LETTERS_RE = re.compile(r"[A-Za-z]{4,}")
_BODY_CLOSE_RE = re.compile(r"</body\s*>", re.IGNORECASE)


def _on_html_text(markup: str, change: Callable[[str], str]) -> str:
    """`change` applied to the text between tags, not to tags, entities' insides, styles or scripts."""
    out: list[str] = []
    inside_code = False
    for piece in _TAG_SPLIT_RE.split(markup):
        if piece.startswith("<") and piece.endswith(">"):
            if _STYLE_OPEN_RE.match(piece):
                inside_code = True
            elif _STYLE_CLOSE_RE.match(piece):
                inside_code = False
            out.append(piece)
        elif inside_code or not piece:
            out.append(piece)
        else:
            # Leave character references whole: change only the runs between them.
            out.append(re.sub(r"[^&;]+(?=&|$)|(?<=;)[^&]+", lambda m: change(m.group(0)), piece))
    return "".join(out)


def zero_width_words(text: str, rng: random.Random) -> str:
    """An invisible character inside every word of three letters or more."""

    def insert(m: re.Match[str]) -> str:
        word = m.group(0)
        at = rng.randrange(1, len(word))
        return word[:at] + rng.choice(ZERO_WIDTH) + word[at:]

    return _WORD_RE.sub(insert, text)


def homoglyph_words(text: str, rng: random.Random, share: float = 0.5) -> str:
    """In about `share` of the words, every letter with a look-alike replaced from one script (Cyrillic or Greek)."""

    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        if rng.random() >= share:
            return word
        table = CYRILLIC_LOOKALIKES if rng.random() < 0.5 else GREEK_LOOKALIKES
        return "".join(table.get(c, c) for c in word)

    return _WORD_RE.sub(swap, text)


def soft_hyphen_words(text: str, rng: random.Random) -> str:
    """A soft hyphen inside every word of four letters or more (plain text: invisible unless at a line end)."""
    return _LETTERS_RE.sub(lambda m: _cut(m.group(0), rng, SOFT_HYPHEN), text)


def _cut(word: str, rng: random.Random, joint: str) -> str:
    at = rng.randrange(1, len(word))
    return word[:at] + joint + word[at:]


def split_html_words(markup: str, rng: random.Random) -> str:
    """Words of the HTML text split by an empty tag, a comment, `&shy;` or a letter as a character reference."""

    def split(m: re.Match[str]) -> str:
        word = m.group(0)
        at = rng.randrange(1, len(word))
        kind = rng.randrange(4)
        if kind == 0:
            return word[:at] + rng.choice(("<b></b>", "<span></span>", "<i></i>", "<font></font>")) + word[at:]
        if kind == 1:
            return word[:at] + f"<!-- {rng.choice(COMMON_WORDS)} -->" + word[at:]
        if kind == 2:
            return word[:at] + "&shy;" + word[at:]
        ref = f"&#{ord(word[at])};" if rng.random() < 0.5 else f"&#x{ord(word[at]):x};"
        return word[:at] + ref + word[at + 1 :]

    return _on_html_text(markup, lambda text: _LETTERS_RE.sub(split, html.escape(text, quote=False)))


# Ways a block of HTML is kept from the reader (all render nothing, or nothing legible).
HIDING = {
    "display-none": '<div style="display:none">{}</div>',
    "visibility-hidden": '<div style="visibility:hidden;height:0;overflow:hidden">{}</div>',
    "font-size-0": '<div style="font-size:0px;line-height:0">{}</div>',
    "same-colour": '<div style="color:#ffffff;background-color:#ffffff">{}</div>',
    "off-screen": '<div style="position:absolute;left:-9999px;top:-9999px">{}</div>',
}


@dataclass
class Context:
    """What an attack may know of the stream: the words of its recent ham (the spammer's guess at them)."""

    recent_ham_words: deque[str] = field(default_factory=lambda: deque(maxlen=5000))

    def saw_ham(self, raw: bytes) -> None:
        self.recent_ham_words.extend(w.lower() for w in _WORD_RE.findall(visible_text(raw)) if len(w) <= 12)

    def good_words(self, rng: random.Random, n: int, source: str) -> list[str]:
        pool: tuple[str, ...] | deque[str] = COMMON_WORDS
        if source == "ham" and len(self.recent_ham_words) >= 20:
            pool = self.recent_ham_words
        return [pool[rng.randrange(len(pool))] for _ in range(n)]


# ---------------------------------------------------------------- MIME: the text parts, changed in place


def _parse(raw: bytes) -> Message:
    return email.message_from_bytes(raw, policy=email.policy.compat32)


def _flatten(msg: Message) -> bytes:
    out = io.BytesIO()
    email.generator.BytesGenerator(out, mangle_from_=False, maxheaderlen=0).flatten(
        msg, unixfrom=msg.get_unixfrom() is not None
    )
    return out.getvalue()


def text_parts(msg: Message) -> list[Message]:
    """The text/plain and text/html leaves that are not attachments."""
    return [
        part
        for part in msg.walk()
        if not part.is_multipart()
        and part.get_content_type() in ("text/plain", "text/html")
        and (part.get("content-disposition") or "").lower().find("attachment") < 0
    ]


def part_text(part: Message) -> str:
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    try:
        return data.decode(part.get_content_charset() or "latin-1", "replace")
    except LookupError:
        return data.decode("latin-1")


def set_part_text(part: Message, text: str, encoding: str | None = None, charset: str | None = None) -> None:
    """Replace a leaf part's text, keeping its charset (UTF-8 when the text needs it) and transfer encoding.

    `encoding` ('base64', 'quoted-printable', '8bit') and `charset` override them.
    """
    if charset is None:
        charset = part.get_content_charset() or "us-ascii"
        try:
            text.encode(charset)
        except (UnicodeEncodeError, LookupError):
            charset = "utf-8"
    data = text.encode(charset, "replace")
    cte = (encoding or str(part.get("content-transfer-encoding", "")) or "7bit").strip().lower()
    if cte == "base64":
        body = base64.encodebytes(data).decode("ascii")
    elif cte == "quoted-printable":
        body = quopri.encodestring(data).decode("ascii")
    else:
        cte = "8bit" if any(b > 127 for b in data) else "7bit"
        body = data.decode("ascii", "surrogateescape")  # written back as the same bytes
    del part["content-transfer-encoding"]
    part["Content-Transfer-Encoding"] = cte
    part.set_param("charset", charset)
    part.set_payload(body)


def _change_text(raw: bytes, plain: Callable[[str], str], markup: Callable[[str], str]) -> bytes:
    """Every readable text part changed (`plain` for text/plain, `markup` for HTML); no text part: unchanged."""
    try:
        msg = _parse(raw)
        parts = text_parts(msg)
        if not parts:
            return raw
        for part in parts:
            text = part_text(part)
            set_part_text(
                part,
                markup(text) if part.get_content_type() == "text/html" else plain(text),
            )
        return _flatten(msg)
    except BROKEN_MAIL:  # leave such a message as it came
        return raw


def _change_subject(raw: bytes, change: Callable[[str], str]) -> bytes:
    """The Subject changed, written as an RFC 2047 UTF-8 word where it needs one."""
    try:
        msg = _parse(raw)
        if "subject" not in msg:
            return raw
        value = str(email.header.make_header(email.header.decode_header(str(msg["subject"]))))
        new = change(value)
        if new == value:
            return raw
        msg.replace_header(
            "subject",
            email.header.Header(new, "utf-8").encode() if not new.isascii() else new,
        )
        return _flatten(msg)
    except BROKEN_MAIL:
        return raw


def _as_html(part: Message) -> str:
    """A part's text as HTML: its markup if it is HTML, else its lines escaped into paragraphs."""
    text = part_text(part)
    if part.get_content_type() == "text/html":
        return text
    paragraphs = "".join(f"<p>{html.escape(line)}</p>\n" for line in text.splitlines() if line.strip())
    return f"<html><body>\n{paragraphs}</body></html>\n"


def _insert_before_body_end(markup: str, block: str) -> str:
    found = list(_BODY_CLOSE_RE.finditer(markup))
    if found:
        at = found[-1].start()
        return markup[:at] + block + markup[at:]
    return markup + block


# ---------------------------------------------------------------- the attacks


def _in_every_text(raw: bytes, change: Callable[[str], str]) -> bytes:
    """`change` applied to the text of every text part (in HTML, the text between tags) and to the Subject."""
    raw = _change_text(raw, change, lambda m: _on_html_text(m, change))
    return _change_subject(raw, change)


def zero_width(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """A zero-width character inside every word of the text and the Subject."""
    return _in_every_text(raw, lambda t: zero_width_words(t, rng))


def homoglyphs(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """Cyrillic or Greek look-alike letters in half the words of the text and the Subject."""
    return _in_every_text(raw, lambda t: homoglyph_words(t, rng))


def split_words(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """Words split: in HTML by empty tags, comments, `&shy;` and character references; in plain text by soft hyphens."""
    return _change_text(raw, lambda t: soft_hyphen_words(t, rng), lambda m: split_html_words(m, rng))


def good_words(n: int, source: str) -> Callable[[bytes, random.Random, Context], bytes]:
    """A block of `n` good words appended, visibly, to every text part."""

    def attack(raw: bytes, rng: random.Random, context: Context) -> bytes:
        words = context.good_words(rng, n, source)
        block = " ".join(words)
        return _change_text(
            raw,
            lambda t: t.rstrip("\n") + "\n\n" + block + "\n",
            lambda m: _insert_before_body_end(m, f"<p>{block}</p>"),
        )

    attack.__doc__ = f"{n} {source} words appended in plain sight."
    return attack


def hidden_words(hiding: str, n: int = 150, source: str = "ham") -> Callable[[bytes, random.Random, Context], bytes]:
    """A block of `n` good words hidden from the reader by `hiding` (HIDING); plain-text spam becomes HTML."""

    def attack(raw: bytes, rng: random.Random, context: Context) -> bytes:
        block = HIDING[hiding].format(html.escape(" ".join(context.good_words(rng, n, source))))
        try:
            msg = _parse(raw)
            parts = text_parts(msg)
            if not parts:
                return raw
            for part in parts:
                markup = _insert_before_body_end(_as_html(part), block)
                if part.get_content_type() != "text/html":
                    part.set_type("text/html")
                set_part_text(part, markup)
            return _flatten(msg)
        except BROKEN_MAIL:
            return raw

    attack.__doc__ = f"{n} words from {source} hidden by {hiding}."
    return attack


_PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x90\x00\x00\x00\xc8\x08\x02\x00\x00\x00"


def _new_body(raw: bytes, msg: Message) -> tuple[Message, list[str]]:
    """A multipart/mixed message with the original's headers (but the MIME ones) and its words."""
    words = visible_text(raw).split()
    out = Message()
    for name, value in msg.items():
        if name.lower() not in (
            "content-type",
            "content-transfer-encoding",
            "mime-version",
        ):
            out[name] = value
    if msg.get_unixfrom():
        out.set_unixfrom(str(msg.get_unixfrom()))
    out["MIME-Version"] = "1.0"
    out["Content-Type"] = "multipart/mixed"
    out.set_boundary(f"=_part_{hashlib.blake2b(raw, digest_size=6).hexdigest()}")
    return out, words


def _leaf(
    content_type: str,
    data: bytes,
    filename: str | None = None,
    disposition: str = "attachment",
) -> Message:
    part = Message()
    part["Content-Type"] = content_type
    part["Content-Transfer-Encoding"] = "base64"
    if filename:
        part["Content-Disposition"] = f'{disposition}; filename="{filename}"'
    part.set_payload(base64.encodebytes(data).decode("ascii"))
    return part


def in_attachment(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """The text moved into an attached .html file; the body says only a few words of it."""
    try:
        msg = _parse(raw)
        out, words = _new_body(raw, msg)
        if not words:
            return raw
        note = Message()
        note["Content-Type"] = "text/plain; charset=us-ascii"
        note.set_payload(" ".join(words[:6]).encode("ascii", "replace").decode("ascii") + "\n\nsee attached\n")
        page = "<html><body><p>" + html.escape(" ".join(words)) + "</p></body></html>\n"
        name = f"{rng.choice(COMMON_WORDS)}{rng.randrange(100)}.html"
        out.attach(note)
        out.attach(_leaf("text/html; charset=utf-8", page.encode("utf-8"), name))
        return _flatten(out)
    except BROKEN_MAIL:
        return raw


def in_image(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """The text gone into an image: HTML with an inline image and a handful of words beside it."""
    try:
        msg = _parse(raw)
        out, words = _new_body(raw, msg)
        if not words:
            return raw
        cid = f"img{rng.randrange(10**8)}@{rng.choice(COMMON_WORDS)}"
        text = html.escape(" ".join(words[:5]))
        page = f'<html><body><p>{text}</p><img src="cid:{cid}" width="400" height="200"></body></html>\n'
        body = Message()
        body["Content-Type"] = "text/html; charset=utf-8"
        set_part_text(body, page, "quoted-printable", "utf-8")
        image = _leaf(
            "image/png",
            _PNG_HEAD + rng.randbytes(600),
            f"{cid.split('@')[0]}.png",
            "inline",
        )
        image["Content-ID"] = f"<{cid}>"
        out.attach(body)
        out.attach(image)
        return _flatten(out)
    except BROKEN_MAIL:
        return raw


_CHARSETS = (
    "utf-8",
    "iso-8859-1",
    "windows-1252",
    "iso-8859-15",
    "koi8-r",
    "iso-8859-7",
)


def _encoded_words(value: str, rng: random.Random) -> str:
    """A header value as RFC 2047 words, each in a charset that can write it (mixed), B or Q."""
    words = value.split()
    out = []
    for start in range(0, len(words), 2):
        chunk = " ".join(words[start : start + 2]) + (" " if start + 2 < len(words) else "")
        for charset in rng.sample(_CHARSETS, len(_CHARSETS)):
            try:
                data = chunk.encode(charset)
                break
            except UnicodeEncodeError:
                continue
        else:
            charset, data = "utf-8", chunk.encode("utf-8")
        if rng.random() < 0.5:
            out.append(f"=?{charset}?B?{base64.b64encode(data).decode('ascii')}?=")
        else:
            q = "".join(chr(b) if chr(b).isalnum() else "_" if b == 32 else f"={b:02X}" for b in data)
            out.append(f"=?{charset}?Q?{q}?=")
    return " ".join(out)


def encodings(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """Text parts in base64 or quoted-printable and an unusual charset; Subject and From name as RFC 2047 words."""
    try:
        msg = _parse(raw)
        for part in text_parts(msg):
            text = part_text(part)
            charset = rng.choice(_CHARSETS)
            try:
                text.encode(charset)
            except UnicodeEncodeError:
                charset = "utf-8"
            set_part_text(part, text, rng.choice(("base64", "quoted-printable")), charset)
        if "subject" in msg:
            value = str(email.header.make_header(email.header.decode_header(str(msg["subject"]))))
            if value.strip():
                msg.replace_header("subject", _encoded_words(value, rng))
        sender = str(msg.get("from", ""))
        m = re.match(r'\s*"?([^"<]+?)"?\s*(<[^>]+>)\s*$', sender)
        if m and m.group(1).isascii():
            msg.replace_header("from", f"{_encoded_words(m.group(1), rng)} {m.group(2)}")
        return _flatten(msg)
    except BROKEN_MAIL:
        return raw


def all_at_once(raw: bytes, rng: random.Random, context: Context) -> bytes:
    """Homoglyphs, zero-width characters, split words, a hidden good-word block and the encodings together."""
    for attack in (
        homoglyphs,
        zero_width,
        split_words,
        hidden_words("display-none"),
        encodings,
    ):
        raw = attack(raw, rng, context)
    return raw


Attack = Callable[[bytes, random.Random, Context], bytes]

ATTACKS: dict[str, Attack] = {
    "zero-width": zero_width,
    "homoglyphs": homoglyphs,
    "split-words": split_words,
    "common-words-50": good_words(50, "common"),
    "common-words-150": good_words(150, "common"),
    "ham-words-150": good_words(150, "ham"),
    "ham-words-400": good_words(400, "ham"),
    **{f"hidden-{name}": hidden_words(name) for name in HIDING},
    "attachment": in_attachment,
    "image": in_image,
    "encodings": encodings,
    "all": all_at_once,
}


def attacked(
    messages: Iterable[tuple[str, bytes]], attack: str, seed: int = 1, start: int = 0
) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) in stream order -> the same with each spam attacked; ham unchanged, byte for byte.

    A spam's random choices depend on the seed and its place in the stream only,
    so the same seed gives the same bytes. Good words from ham come from the ham
    seen before each spam (the spammer's guess at the recipient's mail). Spam
    before message number `start` is left alone: the mail a model was trained on
    before the campaign (first contact, `spamctl eval --train-first`).
    """
    if attack not in ATTACKS:
        raise KeyError(f"unknown attack {attack!r}; known: {', '.join(ATTACKS)}")
    change = ATTACKS[attack]
    context = Context()
    for number, (label, raw) in enumerate(messages):
        if label == "spam" and number >= start:
            yield label, change(raw, random.Random(f"{seed}:{attack}:{number}"), context)
        else:
            context.saw_ham(raw)
            yield label, raw


def write_attacked(index: Path, attack: str, out_dir: Path, seed: int = 1, start: int = 0) -> Path:
    """Write `index` with its spam attacked into `out_dir/<attack>-seed<seed>[-from<start>]/`; returns the new index.

    Entries `read_mail` refuses are left out (as `write_variant` does); reuses a
    complete earlier run (its index is written last).
    """
    if attack not in ATTACKS:
        raise KeyError(f"unknown attack {attack!r}; known: {', '.join(ATTACKS)}")
    target = out_dir / (f"{attack}-seed{seed}" + (f"-from{start}" if start else ""))
    target_index = target / "index"
    if target_index.exists():
        return target_index
    (target / "data").mkdir(parents=True, exist_ok=True)
    readable = ((str(e.label), raw) for e in read_index(index) for raw in [read_mail(e.path)[0]] if raw is not None)
    lines = []
    for number, (label, raw) in enumerate(attacked(readable, attack, seed, start)):
        name = f"data/{number:06d}"
        (target / name).write_bytes(raw)
        lines.append(f"{label} {name}\n")
    tmp = target / "index.tmp"
    tmp.write_text("".join(lines))
    tmp.replace(target_index)
    return target_index
