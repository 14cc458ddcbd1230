"""Configuration: frozen dataclasses, embedded defaults, TOML loading with clear errors.

The sections and their defaults are spamd.config.sections; loading and checking a
file, spamd.config.loading. Everything is imported from here.
"""

from spamd.config.loading import load_config
from spamd.config.sections import (
    DEFAULT_DATA_DIR,
    MAX_NGRAM_CHARS,
    STORED_COUNTS,
    AuthConfig,
    Config,
    ControlConfig,
    LmtpConfig,
    LogConfig,
    MaildirConfig,
    MetricsConfig,
    MilterConfig,
    ModelConfig,
    ParserConfig,
    RedisConfig,
    SmtpConfig,
    SpamcConfig,
    StoreConfig,
    UsersConfig,
    WebConfig,
    metrics_address,
    web_address,
)

__all__ = [
    "AuthConfig", "DEFAULT_DATA_DIR", "MAX_NGRAM_CHARS", "STORED_COUNTS", "Config", "ControlConfig", "LmtpConfig", "LogConfig", "MaildirConfig",
    "MetricsConfig", "MilterConfig", "ModelConfig", "ParserConfig", "RedisConfig", "SmtpConfig", "SpamcConfig",
    "StoreConfig", "UsersConfig", "WebConfig", "load_config", "metrics_address", "web_address",
]  # fmt: skip
