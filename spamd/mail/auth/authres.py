"""Authentication-Results (RFC 8601): parse them, and keep only those our own servers added.

A header with a trusted authserv-id counts only above the Received header of the
last trusted hop (section 5): one a message brought with it from outside sits
below, whatever id it claims. It does not verify anything itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from spamd.mail.auth.records import MAX_RECORD, RecordError

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*\Z")
_PROPERTY = re.compile(r"([A-Za-z0-9_\-]+)\.([A-Za-z0-9_\-]+)=(.*)\Z")


@dataclass(frozen=True, slots=True)
class MethodResult:
    """One `method=result` with its properties (`header.d`, `smtp.mailfrom`, ...), names lower-cased."""

    method: str
    result: str
    properties: tuple[tuple[str, str], ...] = ()
    comment: str = ""  # the statement's comments, where verifiers put more (OpenDMARC: "p=reject dis=none")

    def get(self, name: str) -> str:
        for key, value in self.properties:
            if key == name:
                return value
        return ""


@dataclass(frozen=True, slots=True)
class SignatureResult:
    """A DKIM signature's result, verified here or read from trusted Authentication-Results: pass, fail,
    policy (l= left content unsigned), temperror (DNS), permerror (malformed)."""

    domain: str
    selector: str
    result: str


@dataclass(frozen=True, slots=True)
class AuthenticationResults:
    authserv_id: str
    results: tuple[MethodResult, ...]


def _statements(value: str) -> list[tuple[str, str]]:
    """Each `;`-separated statement as (its text without comments, its comments' text); a `;` or a
    nested `(...)` inside a comment belongs to the comment, and a `;` or `(` inside a quoted
    string (rspamd: reason="No valid SPF, No valid DKIM") to the string. RecordError if a comment
    or a quoted string is left open."""
    statements: list[tuple[str, str]] = []
    text: list[str] = []
    comment: list[str] = []
    depth = 0
    quoted = escaped = False
    for char in value:
        if quoted:
            text.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == "(":
            depth += 1
            if depth > 1:
                comment.append(char)
            else:
                text.append(" ")
        elif char == ")" and depth:
            depth -= 1
            comment.append(char if depth else " ")
        elif depth:
            comment.append(char)
        elif char == ";":
            statements.append(("".join(text), " ".join("".join(comment).split())))
            text, comment = [], []
        else:
            quoted = char == '"'
            text.append(char)
    if depth or quoted:
        raise RecordError(f"a comment or quoted string left open in Authentication-Results: {value[:60]!r}")
    statements.append(("".join(text), " ".join("".join(comment).split())))
    return statements


# A word of a statement: runs of anything but spaces and quotes, and quoted strings, as one.
_WORD = re.compile(r'(?:[^\s"]+|"(?:[^"\\]|\\.)*")+')


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def parse_authentication_results(value: str) -> AuthenticationResults:
    """One header's value; RecordError if it is not `authserv-id [version]; method=result ...; ...`."""
    if len(value) > MAX_RECORD:
        raise RecordError(f"Authentication-Results of {len(value)} characters (at most {MAX_RECORD})")
    statements = _statements(value)
    head = statements[0][0].split()
    if not head or not _TOKEN.match(head[0]) or len(head) > 2 or (len(head) == 2 and not head[1].isdigit()):
        raise RecordError(f"no authserv-id in Authentication-Results: {value[:60]!r}")
    results = []
    for statement, comment in statements[1:]:
        statement = statement.strip()
        if not statement or statement.lower() == "none":
            continue
        words = _WORD.findall(statement)
        method, sep, result = words[0].partition("=")
        method = method.split("/")[0].lower()
        if not sep or not _TOKEN.match(method) or not _TOKEN.match(result):
            raise RecordError(f"not a method=result: {statement[:60]!r}")
        properties = []
        for word in words[1:]:
            found = _PROPERTY.match(word)
            if found is None:
                if word.lower().startswith("reason="):
                    continue
                raise RecordError(f"not a ptype.property=value: {word[:60]!r}")
            properties.append(
                (
                    f"{found.group(1).lower()}.{found.group(2).lower()}",
                    _unquoted(found.group(3)),
                )
            )
        results.append(MethodResult(method, result.lower(), tuple(properties), comment))
    return AuthenticationResults(head[0].lower(), tuple(results))


def trusted_results(
    headers: Iterable[tuple[str, str]],
    trusted_ids: Iterable[str],
    trusted_hops: int = 1,
) -> list[AuthenticationResults]:
    """The Authentication-Results with a trusted authserv-id above the `trusted_hops`-th Received header.

    `trusted_hops` counts the Received headers our own servers add, from the top; 0
    trusts none. A header that does not parse is left out (it authenticates nothing).
    """
    ids = {i.lower() for i in trusted_ids}
    if not ids or trusted_hops <= 0:
        return []
    found, received = [], 0
    for name, value in headers:
        if name == "received":
            received += 1
            if received >= trusted_hops:
                break
        elif name == "authentication-results":
            try:
                parsed = parse_authentication_results(value)
            except RecordError:
                continue
            if parsed.authserv_id in ids:
                found.append(parsed)
    return found
