"""One exception hierarchy for what users and their data can cause.

Each message names the file, key or peer involved and, where there is one, what to do.
"""


class SpamdError(Exception):
    """Base of every error spamd reports to a user rather than as a bug."""


class ConfigError(SpamdError):
    """The configuration file or a command-line override is invalid."""


class StoreError(SpamdError):
    """The model state on disk cannot be read or written."""


class CorruptStateError(StoreError):
    """A snapshot or journal is damaged in a way that recovery must not paper over."""


class StateLockedError(StoreError):
    """Another process (the daemon or a spamctl) holds the model state."""


class NotAMessageError(SpamdError):
    """Input given as a mail message is not one (empty, or a directory)."""


class StoreUnavailableError(StoreError):
    """The shared store (Redis) cannot be reached right now: answer a temporary failure, retry later."""
