"""A test of a real program (Postfix, Dovecot, spamc, ...) skips where the program is missing, and fails in CI.

CI installs every program the tests run against (.ci/run, which sets CI=1), so there a
missing one is a broken install, not a reason to pass quietly.
"""

from __future__ import annotations

import os

import pytest

# Fixtures shared by several test modules, found by name rather than imported into each
# (an imported fixture is shadowed by the test's parameter of the same name).
pytest_plugins = ["tests.cli_helpers", "tests.redis_helpers", "tests.dns_helpers", "tests.auth_helpers"]


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("real_program"):
        missing = mark.args[0] if mark.args else None
        if missing is None:
            continue
        if os.environ.get("CI"):
            pytest.fail(f"{missing}, and CI installs it (.ci/run)", pytrace=False)
        pytest.skip(str(missing))
