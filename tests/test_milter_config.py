"""The [milter] settings and --milter: bad values are refused with the file and the key named."""

from __future__ import annotations

import pytest

from spamd.config import load_config
from spamd.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[milter]\nreject_at = 0.4\n", "milter.reject_at must be 0"),
        ('[milter]\nlisten = "nowhere"\n', "[milter] listen 'nowhere': expected HOST:PORT"),
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
