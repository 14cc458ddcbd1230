"""The docs stay true mechanically: config keys, log events, links and the configuration blocks they show.

- every key of the config dataclasses (spamd/config/sections.py) is on docs/configuration.md and
  in config/spamd.toml, with its real default, and nothing else is (a removed key fails);
- docs/configuration.md says which keys a SIGHUP applies as the daemon does;
- every log event spamd emits is on docs/monitoring.md, and nothing else is;
- every relative link in README.md, docs/*.md and scripts/**/README.md resolves, `#anchor`s
  to a heading (GitHub's slugs);
- every `scripts/...py` the docs name exists, every script has a row with its command in its
  folder's README, and every section of accuracy.md and performance.md with a table of
  figures names the script or spamctl command that reproduces them;
- every TOML block in the docs is a valid spamd config, and the snippet blocks that the
  Postfix and Dovecot tests build their configuration from are there and parse (so a
  machine without Postfix or Dovecot still checks them).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from spamd.config import Config, load_config
from tests.doc_snippets import all_snippets, main_cf_settings, master_cf_services, snippet

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((REPO / "scripts").rglob("README.md"))]
TOP = ""  # the section of top-level keys (data_dir)


# ---------------------------------------------------------------- config keys


def code_keys() -> dict[tuple[str, str], Any]:
    """(section, key) -> default, for every setting the config dataclasses have."""
    defaults = Config()
    keys: dict[tuple[str, str], Any] = {}
    for f in dataclasses.fields(Config):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            for item in dataclasses.fields(value):
                keys[(f.name, item.name)] = getattr(value, item.name)
        else:
            keys[(TOP, f.name)] = str(value) if isinstance(value, Path) else value
    return keys


def toml_value(literal: str, where: str) -> Any:
    try:
        return tomllib.loads(f"v = {literal}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise AssertionError(f"{where}: {literal!r} is not a TOML value ({e})") from None


def same_default(documented: Any, default: Any) -> bool:
    if isinstance(default, tuple):
        return documented == list(default)
    if isinstance(default, bool) or isinstance(documented, bool):
        return documented is default
    if isinstance(default, float):
        return isinstance(documented, float) and documented == default
    return type(documented) is type(default) and documented == default


DOC_ROW = re.compile(r"^\| `(?P<key>\w+)` \| `(?P<default>[^`]*)`[^|]*\| (?P<reload>applied|restart) \|", re.M)
DOC_HEADING = re.compile(r"^## (?:`\[(?P<section>\w+)\]`|(?P<top>Top level))\s*$", re.M)


def documented_keys() -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (default as written, applied|restart), from docs/configuration.md's tables."""
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    found: dict[tuple[str, str], tuple[str, str]] = {}
    headings = list(DOC_HEADING.finditer(text))
    for n, heading in enumerate(headings):
        section = TOP if heading.group("top") else heading.group("section")
        end = headings[n + 1].start() if n + 1 < len(headings) else len(text)
        for row in DOC_ROW.finditer(text, heading.end(), end):
            key = (section, row.group("key"))
            assert key not in found, f"docs/configuration.md documents {key} twice"
            found[key] = (row.group("default"), row.group("reload"))
    return found


def listed_keys() -> dict[tuple[str, str], str]:
    """(section, key) -> default as written, from config/spamd.toml's commented-out `# key = value` lines."""
    found: dict[tuple[str, str], str] = {}
    section = TOP
    for line in (REPO / "config" / "spamd.toml").read_text(encoding="utf-8").splitlines():
        if m := re.fullmatch(r"\[(\w+)\]\s*", line):
            section = m.group(1)
        elif m := re.fullmatch(r"# (\w+) = (.+)", line):
            key = (section, m.group(1))
            assert key not in found, f"config/spamd.toml lists {key} twice"
            found[key] = m.group(2)
    return found


def name(key: tuple[str, str]) -> str:
    return key[1] if key[0] == TOP else f"[{key[0]}] {key[1]}"


def test_every_config_key_is_on_the_configuration_page_with_its_default():
    code, docs = code_keys(), documented_keys()
    missing = sorted(name(k) for k in code.keys() - docs.keys())
    stale = sorted(name(k) for k in docs.keys() - code.keys())
    assert not missing, f"keys missing from docs/configuration.md: {missing}"
    assert not stale, f"docs/configuration.md documents keys spamd does not have: {stale}"
    wrong = [
        f"{name(key)}: docs say {written}, spamd's default is {code[key]!r}"
        for key, (written, _) in docs.items()
        if not same_default(toml_value(written, f"docs/configuration.md {name(key)}"), code[key])
    ]
    assert not wrong, wrong


def test_the_configuration_page_says_which_keys_sighup_applies():
    from spamd.daemon import LIVE_SETTINGS

    wrong = [
        f"{name(key)}: docs say {reload}"
        for key, (_, reload) in documented_keys().items()
        if (reload == "applied") != (key[1] in LIVE_SETTINGS.get(key[0], set()))
    ]
    assert not wrong, f"docs/configuration.md's SIGHUP column is not what the daemon does: {wrong}"


def test_every_config_key_is_in_config_spamd_toml_with_its_default():
    code, listed = code_keys(), listed_keys()
    missing = sorted(name(k) for k in code.keys() - listed.keys())
    stale = sorted(name(k) for k in listed.keys() - code.keys())
    assert not missing, f"keys missing from config/spamd.toml: {missing}"
    assert not stale, f"config/spamd.toml lists keys spamd does not have: {stale}"
    wrong = [
        f"{name(key)}: config/spamd.toml says {written}, spamd's default is {code[key]!r}"
        for key, written in listed.items()
        if not same_default(toml_value(written, f"config/spamd.toml {name(key)}"), code[key])
    ]
    assert not wrong, wrong


def test_config_spamd_toml_uncommented_is_the_embedded_defaults(tmp_path):
    """Every `# key = value` line of config/spamd.toml made live gives exactly the defaults."""
    text = (REPO / "config" / "spamd.toml").read_text(encoding="utf-8")
    live = re.sub(r"^# (\w+ = .+)$", r"\1", text, flags=re.M)
    path = tmp_path / "spamd.toml"
    path.write_text(live, encoding="utf-8")
    assert load_config(path) == load_config(None)


# ---------------------------------------------------------------- log events


EVENT_CALL = re.compile(
    r"\b(?:log\.(?:debug|info|warning|error|exception|critical)|metrics\.error|on_error)\(\s*(?P<f>f?)\"(?P<event>[^\"]+)\""
)


def emitted_events() -> set[str]:
    """Every log event name in spamd/, f-strings over the helper processes' kinds and the listeners' ways in expanded."""
    sources = {path: path.read_text(encoding="utf-8") for path in (REPO / "spamd").rglob("*.py")}
    kinds = {kind for text in sources.values() for kind in re.findall(r'^\s+kind = "(\w+)"', text, re.M)}
    ways = {way for text in sources.values() for way in re.findall(r'^\s+way_in = "(\w+)"', text, re.M)}
    events: set[str] = set()
    for path, text in sources.items():
        for m in EVENT_CALL.finditer(text):
            event = m.group("event")
            if m.group("f"):
                names = {"{self.kind}": kinds, "{self.way_in}": ways, "{self.filter.way_in}": ways}
                [(name, values)] = [(n, v) for n, v in names.items() if n in event] or [("", set())]
                assert name and event.count("{") == 1, f"{path}: cannot expand log event {event!r}"
                events.update(event.replace(name, value) for value in values)
            else:
                events.add(event)
    assert {"message_scored", "training_applied", "analysis_process_lost", "delivery_process_stuck"} <= events
    return events


def documented_events() -> set[str]:
    text = (DOCS / "monitoring.md").read_text(encoding="utf-8")
    section = text.split("\n## Log events\n", 1)[1].split("\n## ", 1)[0]
    events: set[str] = set()
    for row in re.findall(r"^\| ([^|]+) \|", section, re.M):
        events.update(re.findall(r"`([a-z_]+)`", row))
    return events


def test_every_log_event_is_on_the_monitoring_page():
    emitted, documented = emitted_events(), documented_events()
    assert not sorted(emitted - documented), (
        f"log events missing from docs/monitoring.md: {sorted(emitted - documented)}"
    )
    assert not sorted(documented - emitted), (
        f"docs/monitoring.md lists events spamd no longer logs: {sorted(documented - emitted)}"
    )


# ---------------------------------------------------------------- links


FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code spans (neither holds links or headings)."""
    text = FENCE.sub("", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_github_slugs():
    assert github_slug("Memory, disk and the parser's caps") == "memory-disk-and-the-parsers-caps"
    assert github_slug("`[parser]`") == "parser"
    assert github_slug('When is a training "accepted"?') == "when-is-a-training-accepted"
    assert github_slug("Training from Dovecot with IMAPSieve") == "training-from-dovecot-with-imapsieve"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.\-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: {linked} does not exist")
        elif anchor:
            if linked.suffix != ".md" or linked.is_dir():
                broken.append(f"{target}: an anchor into something that is not a Markdown page")
            elif anchor not in anchors(linked):
                broken.append(f"{target}: no heading with the anchor #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_docs_index_links_every_page():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(prose(index))}
    missing = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in linked)
    assert not missing, f"docs/README.md does not link {missing}"


# ---------------------------------------------------------------- scripts named in the docs


SCRIPT_PATH = re.compile(r"\bscripts/[\w./-]+\.py\b")
FIGURE_PAGES = [DOCS / "accuracy.md", DOCS / "performance.md"]


def test_every_script_the_docs_name_exists():
    """A figure's command names a script that is there: `scripts/FOLDER/NAME.py` from the checkout's root."""
    named = {(page, path) for page in PAGES for path in SCRIPT_PATH.findall(page.read_text(encoding="utf-8"))}
    assert len({path for _, path in named}) >= 20, named
    missing = sorted(f"{page.relative_to(REPO)}: {path}" for page, path in named if not (REPO / path).is_file())
    assert not missing, f"the docs name scripts that do not exist: {missing}"


def test_every_script_is_in_its_folders_readme_and_every_folder_in_the_index():
    scripts = REPO / "scripts"
    index = (scripts / "README.md").read_text(encoding="utf-8")
    for folder in sorted(p for p in scripts.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert f"[{folder.name}/]({folder.name}/README.md)" in index, f"scripts/README.md does not list {folder.name}/"
        readme = (folder / "README.md").read_text(encoding="utf-8")
        for script in sorted(folder.glob("*.py")):
            row = next((line for line in readme.splitlines() if line.startswith(f"| `{script.name}` |")), None)
            assert row is not None, f"{folder.name}/README.md has no row for {script.name}"
            assert f"scripts/{folder.name}/{script.name}" in row, (
                f"{folder.name}/README.md: no command for {script.name}"
            )
    assert not list(scripts.glob("*.py")), "a script outside the folders: put it in the one for what it measures"


def sections(page: Path) -> list[tuple[str, str]]:
    """(heading, text up to the next heading of any level) for each heading of a page."""
    parts = re.split(r"^(#{2,6} .+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return [(parts[n], parts[n + 1]) for n in range(1, len(parts) - 1, 2)]


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda p: p.name)
def test_every_table_of_figures_names_the_command_that_reproduces_it(page: Path):
    """A section with a table of measured figures names a script of scripts/ or a spamctl command for them."""
    bare = []
    for heading, text in sections(page):
        if re.search(r"^\|.*\d.*\|\s*$", text, re.M) and not re.search(r"scripts/\w+/\w+\.py|spamctl \w+", text):
            bare.append(heading)
    assert not bare, f"{page.name}: sections with figures and no command: {bare}"


# ---------------------------------------------------------------- configuration blocks


def fenced_blocks(info: str) -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        for m in re.finditer(
            r"^(`{3,})" + info + r"[ \t]*\n(.*?)^\1[ \t]*$", page.read_text(encoding="utf-8"), re.M | re.S
        ):
            found.append((page, m.group(2)))
    return found


def test_every_toml_block_in_the_docs_is_a_valid_spamd_config(tmp_path):
    blocks = fenced_blocks("toml")
    assert len(blocks) >= 3
    for n, (page, text) in enumerate(blocks):  # noqa: B007  `page` is named so a failure's traceback shows it
        path = tmp_path / f"{n}.toml"
        path.write_text(text, encoding="utf-8")
        load_config(path)  # a ConfigError names the key; the page is in the traceback's locals


def test_the_snippets_the_postfix_and_dovecot_tests_use_are_there_and_parse():
    names = set(all_snippets())
    assert {
        "postfix-milter-main.cf",
        "postfix-content-filter-master.cf",
        "postfix-content-filter-spamd.toml",
        "dovecot-maildir.conf",
    } <= names, names
    main = main_cf_settings(snippet("postfix-milter-main.cf"))
    assert main["smtpd_milters"] == "inet:127.0.0.1:10027" and main["milter_default_action"] == "tempfail"
    services = master_cf_services(snippet("postfix-content-filter-master.cf"))
    assert [s.split()[0] for s in services] == ["smtp", "spamd", "127.0.0.1:10026"]
    assert "content_filter=spamd:[127.0.0.1]:10025" in services[0]
    relay = tomllib.loads(snippet("postfix-content-filter-spamd.toml"))
    assert relay == {"smtp": {"mode": "relay", "next_hop_port": 10026}}
    assert "mail_location = maildir:~/Maildir" in snippet("dovecot-maildir.conf")


def test_the_snippets_the_authentication_milter_tests_use_are_there_and_agree():
    """One authserv-id in all of them: the milters write it, OpenDMARC and spamd trust it, Postfix strips claims of it."""
    auth_id = "mx.example.org"
    for name in ("opendkim.conf", "opendmarc.conf"):
        settings = dict(line.split(None, 1) for line in snippet(name).splitlines() if line and line[0] != "#")
        assert settings["AuthservID"] == auth_id, name
    assert "TrustedAuthservIDs  mx.example.org" in snippet("opendmarc.conf")
    main = main_cf_settings(snippet("postfix-auth-milters-main.cf"))
    assert main["smtpd_milters"] == "inet:127.0.0.1:8891, inet:127.0.0.1:8893, inet:127.0.0.1:10027"
    assert main["header_checks"] == "regexp:/etc/postfix/authres_header_checks"
    assert r"/^Authentication-Results:.*mx\.example\.org/ IGNORE" in snippet("postfix-authres-header-checks")
    assert tomllib.loads(snippet("postfix-auth-spamd.toml")) == {"auth": {"trusted_authserv_ids": [auth_id]}}
    # rspamd instead: its milter first, then spamd, the same header_checks; it writes Authentication-Results.
    rspamd_main = main_cf_settings(snippet("postfix-rspamd-main.cf"))
    assert rspamd_main["smtpd_milters"] == "inet:127.0.0.1:11332, inet:127.0.0.1:10027"
    assert rspamd_main["header_checks"] == main["header_checks"]
    assert 'use = ["authentication-results"];' in snippet("rspamd-milter-headers.conf")
