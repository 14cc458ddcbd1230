"""SpamAssassin-compatible answers: spamd verdicts on SpamAssassin score scale, symbols, reports and the reply bytes."""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from spamd.frontends.spamc.protocol import Request
from spamd.model.bayes import Score, Verdict

# Tokens named in SYMBOLS and listed in REPORT, each way.
SYMBOL_TOKENS = 5


REPORT_TOKENS = 10


def sa_score(probability: float, ham_threshold: float, spam_threshold: float, required: float = 5.0) -> float:
    """spamd's spam probability on SpamAssassin's point scale, where `required` (5.0) is the spam line.

    Piecewise linear through (0, required - 10), (ham_threshold, required - 5),
    (spam_threshold, required) and (1, required + 10): ham below required - 5
    (0.0 by default), unsure up to just under required, spam from exactly
    required. Non-decreasing in the probability, so sorting by points sorts by
    probability. It does not round: `shown_score` does, keeping the verdict.
    """
    p = 0.5 if probability != probability else min(1.0, max(0.0, probability))  # NaN: undecided
    if p >= spam_threshold:
        if spam_threshold >= 1.0:
            return required
        return min(required + 10.0, required + (p - spam_threshold) * 10.0 / (1.0 - spam_threshold))
    # Below the spam line, never on it, whatever the float rounding of the slope.
    below = math.nextafter(required, -math.inf)
    if p >= ham_threshold:
        points = required - 5.0 + (p - ham_threshold) * 5.0 / (spam_threshold - ham_threshold)
        return min(points, below)
    points = required - 10.0 + p * 5.0 / ham_threshold  # ham_threshold > p >= 0 here
    return min(points, required - 5.0, below)


def shown_score(score: Score, ham_threshold: float, spam_threshold: float, required: float) -> tuple[str, str]:
    """("7.3", "5.0"): points and threshold as written in the `Spam:` header, one decimal.

    Rounded in tenths, then held on the verdict's side of the shown threshold: a
    spam never shows below it and anything else never at or above it, so a
    client comparing the two (Exim: score >= threshold) agrees with spamd.
    """
    tenths = round(sa_score(score.probability, ham_threshold, spam_threshold, required) * 10)
    line = round(required * 10)
    tenths = max(tenths, line) if score.verdict is Verdict.SPAM else min(tenths, line - 1)
    return _tenths(tenths), _tenths(line)


def _tenths(n: int) -> str:
    return f"{'-' if n < 0 else ''}{abs(n) // 10}.{abs(n) % 10}"


_NOT_SYMBOL = re.compile(r"[^A-Z0-9]+")


def symbol_name(prefix: str, token: str) -> str:
    """A token as a SpamAssassin-style rule name: "subject:free" -> "SPAMMY_SUBJECT_FREE"."""
    safe = _NOT_SYMBOL.sub("_", token.upper()).strip("_")[:40].rstrip("_")
    if not safe or not token.isascii():
        # Non-ASCII tokens lose letters in the safe form; a short hash keeps them apart.
        digest = hashlib.blake2s(token.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest().upper()
        safe = f"{safe}_{digest}" if safe else digest
    return f"{prefix}_{safe}"


def symbols(score: Score, explained: dict[str, Any]) -> str:
    """The verdict and the strongest tokens each way, comma-separated (what `spamc -y` prints)."""
    names = [f"SPAMD_{score.verdict.value.upper()}"]
    for prefix, side in (("SPAMMY", "toward_spam"), ("HAMMY", "toward_ham")):
        for row in explained[side][:SYMBOL_TOKENS]:
            name = symbol_name(prefix, row["token"])
            if name not in names:
                names.append(name)
    return ",".join(names)


def _printable(token: str) -> str:
    shown = token.encode("ascii", "backslashreplace").decode("ascii")
    shown = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in shown)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def report(score: Score, explained: dict[str, Any], points: str, required: str) -> str:
    """A plain-text account of the verdict: what `spamctl explain` shows, as SpamAssassin's report is laid out."""
    verdict = {Verdict.SPAM: "spam", Verdict.UNSURE: "unsure (not spam)", Verdict.HAM: "ham (not spam)"}[score.verdict]
    lines = [
        f"spamd classified this message as {verdict}: spam probability {score.probability:.4f},",
        f"{points} points, {required} required (mean token log-odds {score.log_odds:+.3f}).",
        "",
        " weight  token (share of the mean log-odds, strongest first)",
        "------- ------------------------------------------------------------",
    ]
    for title, side in (("toward spam", "toward_spam"), ("toward ham", "toward_ham")):
        rows = explained[side][:REPORT_TOKENS]
        lines.append(f"        {title}:" + ("" if rows else " none"))
        lines.extend(f"{row['weight']:+7.3f} {_printable(row['token'])}" for row in rows)
    return "\r\n".join(lines) + "\r\n"


def _headers_only(message: bytes) -> bytes:
    """The message up to and including the empty line after its header (HEADERS); all of it if none."""
    m = re.search(rb"\r?\n\r?\n", message)
    return message if m is None else message[: m.end()]


def answer(request: Request, score: Score, points: str, required: str, message: bytes = b"", text: str = "") -> bytes:
    """The EX_OK answer to a scoring command, framed for the client's protocol version as spamd.raw does."""
    verb, version = request.verb, request.version
    spam = f"Spam: {'True' if score.verdict is Verdict.SPAM else 'False'} ; {points} / {required}\r\n"
    ok = "SPAMD/1.1 0 EX_OK\r\n"
    if verb in ("PROCESS", "HEADERS"):
        body = _headers_only(message) if verb == "HEADERS" else message
        if version >= 1.3:
            return f"{ok}Content-length: {len(body)}\r\n{spam}\r\n".encode() + body
        if version >= 1.2:
            return f"{ok}Content-length: {len(body)}\r\n\r\n".encode() + body
        return b"SPAMD/1.0 0 EX_OK\r\n" + body
    if verb == "CHECK":
        return f"{ok}{spam}\r\n".encode()
    # SYMBOLS, REPORT, REPORT_IFSPAM: before 1.3 the Spam header alone (what Exim's
    # `REPORT SPAMC/1.2` parses); from 1.3 on Content-length first.
    body_text = text + ("\r\n" if verb == "SYMBOLS" and version < 1.3 else "")
    body = body_text.encode("ascii", "replace")
    if version >= 1.3:
        return f"{ok}Content-length: {len(body)}\r\n{spam}\r\n".encode() + body
    return f"{ok}{spam}\r\n".encode() + body
