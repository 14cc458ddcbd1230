"""config/spamd.toml documents every key with its embedded default; the milter keys are checked."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from spamd.config import _SECTION_CLASSES, Config, load_config
from spamd.errors import ConfigError

SAMPLE = Path(__file__).resolve().parent.parent / "config" / "spamd.toml"


def documented() -> dict[tuple[str | None, str], object]:
    """Every commented-out `# key = value` of the sample config, by (section, key)."""
    found: dict[tuple[str | None, str], object] = {}
    section = None
    for line in SAMPLE.read_text().splitlines():
        if m := re.match(r"^\[(\w+)\]$", line):
            section = m.group(1)
        elif m := re.match(r"^# (\w+) = (.+)$", line):
            found[(section, m.group(1))] = tomllib.loads(f"v = {m.group(2)}")["v"]
    return found


def test_sample_config_lists_every_key_with_its_default():
    found = documented()
    defaults = Config()
    for name, cls in _SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            default = getattr(getattr(defaults, name), f.name)
            value = found.get((name, f.name), "(missing)")
            assert (tuple(value) if isinstance(value, list) else value) == default, f"[{name}] {f.name}"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[milter]\nreject_at = 0.4\n", "milter.reject_at must be 0"),
        ("[milter]\nlisten = \"nowhere\"\n", "[milter] listen 'nowhere': expected HOST:PORT"),
        ("[milter]\nmax_message_bytes = 10\n", "milter.max_message_bytes >= 1024"),
    ],
)
def test_bad_milter_settings_are_named(tmp_path, text, complaint):
    path = tmp_path / "spamd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert complaint in str(refused.value) and str(path) in str(refused.value)


def test_milter_flag_overrides_listen(tmp_path):
    assert load_config(None, milter_listen="127.0.0.1:10027").milter.listen == "127.0.0.1:10027"
    with pytest.raises(ConfigError, match="--milter"):
        load_config(None, milter_listen="10027")
