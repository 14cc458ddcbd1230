"""Configuration blocks the docs show, read from the docs, so the tests run exactly what a reader copies.

A block is a fenced code block right after a marker line in docs/*.md:

    <!-- snippet: postfix-milter-main.cf -->
    ```
    smtpd_milters = inet:127.0.0.1:10027
    ...
    ```

The docs write fixed ports and paths (127.0.0.1:10025, ...); a test swaps in its own with
`with_placeholders`, which fails when a placeholder is no longer there, so a doc edit
cannot silently leave a test running something else.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"

_SNIPPET = re.compile(
    r"^<!--\s*snippet:\s*(?P<name>[\w.\-]+)\s*-->[ \t]*\n"  # the marker, alone on its line
    r"(?:[ \t]*\n)*"  # blank lines allowed before the fence
    r"(?P<fence>`{3,}|~{3,})[^\n]*\n"  # the opening fence (an info string allowed)
    r"(?P<body>.*?)"
    r"^(?P=fence)[ \t]*$",  # the closing fence
    re.M | re.S,
)


@functools.cache
def all_snippets() -> dict[str, tuple[str, Path]]:
    """Every named block in docs/*.md: name -> (text, page). A name used twice is an error."""
    found: dict[str, tuple[str, Path]] = {}
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        markers = re.findall(r"^<!--\s*snippet:", text, re.M)
        matches = list(_SNIPPET.finditer(text))
        if len(markers) != len(matches):
            raise AssertionError(
                f"{page}: {len(markers)} snippet markers but {len(matches)} fenced blocks right after one"
            )
        for m in matches:
            name = m.group("name")
            if name in found:
                raise AssertionError(f"snippet {name!r} is in both {found[name][1]} and {page}")
            found[name] = (m.group("body"), page)
    return found


def snippet(name: str) -> str:
    """The text of the block named `name` (ending in a newline)."""
    snippets = all_snippets()
    if name not in snippets:
        raise AssertionError(f"no <!-- snippet: {name} --> block in {DOCS}/*.md (have: {', '.join(sorted(snippets))})")
    return snippets[name][0]


def with_placeholders(text: str, replacements: dict[str, str]) -> str:
    """`text` with each placeholder the docs write replaced by the test's own value; each must occur."""
    for placeholder, value in replacements.items():
        if placeholder not in text:
            raise AssertionError(f"placeholder {placeholder!r} not found in the docs' snippet:\n{text}")
        text = text.replace(placeholder, value)
    return text


def main_cf_settings(text: str) -> dict[str, str]:
    """main.cf lines as Postfix reads them: `name = value`, comments and blank lines skipped."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[:1].isspace():
            raise AssertionError(f"continuation lines are not supported here: {line!r}")
        name, sep, value = line.partition("=")
        if not sep:
            raise AssertionError(f"not a main.cf setting: {line!r}")
        settings[name.strip()] = value.strip()
    return settings


def master_cf_services(text: str) -> list[str]:
    """master.cf entries: each service line with the `-o` lines under it, as one string."""
    services: list[str] = []
    for line in text.splitlines(keepends=True):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[:1].isspace():
            if not services:
                raise AssertionError(f"an option line before any service: {line!r}")
            services[-1] += line
        else:
            services.append(line)
    return services
