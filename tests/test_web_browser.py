"""The web console in a real browser: Debian's chromium, driven by selenium through chromium-driver.

Real parts: spamd as a subprocess (`--web`, `--smtp`), smtplib for mail, spamctl as a
subprocess for training and for `stats --json`, headless chromium with a fresh profile.
`pytest -k browser` selects these tests. Without chromium or chromedriver they skip,
saying why, unless the environment variable CI is set: then they fail. A screenshot of
each page is saved in pytest's temp directory (the path is printed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spamd.model.bayes import Label
from spamd.web.auth import load_or_create_token
from tests.cli_helpers import SPAMCTL, spamctl_env
from tests.daemon_helpers import DaemonProcess, make_message, send, wait_until_sync, write_config
from tests.web_helpers import HOSTILE_SUBJECTS, hostile_message

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = [
    name
    for name, path in (("chromium", CHROMIUM), ("chromedriver (Debian: chromium-driver)", CHROMEDRIVER))
    if not path
]

pytestmark = [pytest.mark.slow]


def needs_browser(console: Console | None) -> Console:
    if console is not None:
        return console
    reason = f"{' and '.join(MISSING)} not installed: apt-get install chromium chromium-driver"
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {reason}")
    pytest.skip(reason)
    raise AssertionError("unreachable")


@dataclass
class Console:
    daemon: DaemonProcess
    driver: Chrome
    base: str
    smtp_port: int
    data: Path
    config: Path
    shots: Path

    def spamctl(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run([*SPAMCTL, "--config", str(self.config), "--data-dir", str(self.data), *args],
                              input=input, capture_output=True, timeout=60, env=spamctl_env())  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        return done

    def get(self, path: str) -> None:
        self.driver.get(self.base + path)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console | None]:
    if MISSING:  # each test says so: a skip, or in CI a failure
        yield None
        return
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("browser")
    config = write_config(tmp / "spamd.toml", "[web]\nshow_subjects = true\n")
    data = tmp / "data"
    for i in range(10):  # confident verdicts on the two vocabularies
        for label in ("spam", "ham"):
            raw = make_message(Label.SPAM if label == "spam" else Label.HAM, i, seed=5)
            done = subprocess.run([*SPAMCTL, "--config", str(config), "--data-dir", str(data), "train", f"--{label}", "-"],
                                  input=raw, capture_output=True, timeout=60, env=spamctl_env())  # fmt: skip
            assert done.returncode == 0, done.stderr.decode()
    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", "--web", "127.0.0.1:0")
    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,1400",
                 f"--user-data-dir={tmp / 'profile'}"):  # fmt: skip
        options.add_argument(flag)
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    driver = None
    try:
        started = daemon.wait_for("daemon_started")
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        driver.set_page_load_timeout(30)
        shots = tmp / "screenshots"
        shots.mkdir()
        yield Console(
            daemon, driver, f"http://127.0.0.1:{started['web_port']}", started["smtp_port"], data, config, shots
        )
        print(f"screenshots of the console: {shots}")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
        assert not daemon.events("web_request_failed")
    finally:
        if driver is not None:
            driver.quit()
        daemon.kill()


def by(css: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def click_and_wait(c: Console, css: str) -> None:
    """Click a form's button and wait for the page it leads to (a click does not wait for it)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    # A mark on the old document's window: gone once the next page has replaced it. (Waiting for
    # the old <html> element to go stale raced with Chromium, which sometimes answered the check
    # mid-navigation with "Node with given id does not belong to the document".)
    c.driver.execute_script("window.spamdOldPage = true")
    c.driver.find_element(*by(css)).click()
    WebDriverWait(c.driver, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script("return window.spamdOldPage === undefined && document.readyState === 'complete'")
    )


def log_in(c: Console, secret: str) -> None:
    c.get("/login")
    field = c.driver.find_element(*by("#secret"))
    field.clear()
    field.send_keys(secret)
    click_and_wait(c, "#login")


def logged_in(c: Console) -> None:
    c.get("/")
    if c.driver.title != "spamd · Overview":
        log_in(c, load_or_create_token(c.data))
    assert c.driver.title == "spamd · Overview"


def shown_stats(c: Console) -> dict[str, int]:
    found = {}
    for element in c.driver.find_elements(*by("[data-stat]")):
        stat, value = element.get_attribute("data-stat"), element.get_attribute("data-value")
        assert stat is not None and value is not None  # the selector asks for elements that have both
        found[stat] = int(value)
    return found


def no_alert(c: Console) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = c.driver.switch_to.alert.text  # reading it raises when none is open


def test_browser_refuses_a_wrong_password_then_logs_in_and_the_overview_is_spamctl_stats(console: Console | None):
    c = needs_browser(console)
    log_in(c, "not the token")
    assert c.driver.title == "spamd · Log in"
    assert "Wrong token or password" in c.driver.find_element(*by("#login-problem")).text
    c.shot("login")
    c.get("/history")
    assert c.driver.title == "spamd · Log in"  # not logged in: sent to the login page

    for i in range(4):
        send(c.smtp_port, make_message(Label.SPAM if i % 2 else Label.HAM, i))
    c.daemon.wait_for("message_scored", count=4)
    logged_in(c)
    before = json.loads(c.spamctl("stats", "--json").stdout)
    c.get("/")
    shown = shown_stats(c)
    after = json.loads(c.spamctl("stats", "--json").stdout)
    assert before["messages_scored"] == after["messages_scored"] == 4  # nothing happened in between
    expected = {
        "messages_scored": after["messages_scored"],
        "messages_scored_all_time": after["messages_scored_all_time"],
        "trained_ham": after["trained_ham"],
        "trained_spam": after["trained_spam"],
        "tokens": after["tokens"],
        "ledger_entries": after["ledger_entries"],
        "journal_records": after["journal_records"],
        **{f"scored_by_verdict.{v}": after["scored_by_verdict"].get(v, 0) for v in ("ham", "unsure", "spam")},
        **{
            f"scored_by_verdict_all_time.{v}": after["scored_by_verdict_all_time"].get(v, 0)
            for v in ("ham", "unsure", "spam")
        },
    }
    assert shown == expected
    assert c.driver.find_element(*by("#store-health")).text.startswith("embedded: healthy")
    assert c.driver.find_elements(*by("#per-minute svg path"))  # the chart drew something
    c.shot("overview")


def test_browser_uploads_a_message_as_spam_and_the_trained_count_grows(console: Console | None, tmp_path: Path):
    c = needs_browser(console)
    logged_in(c)
    spam_before = shown_stats(c)["trained_spam"]
    message = tmp_path / "spam.eml"
    message.write_bytes(make_message(Label.SPAM, 900, seed=9))
    c.get("/train")
    c.driver.find_element(*by("#message_file")).send_keys(str(message))
    c.driver.find_element(*by("#as-spam")).click()
    click_and_wait(c, "#train-submit")
    outcomes = [e.text for e in c.driver.find_elements(*by("#results .outcome"))]
    assert outcomes == ["learned"]
    assert shown_stats(c)["trained_spam"] == spam_before + 1
    c.shot("train")
    c.get("/")
    assert shown_stats(c)["trained_spam"] == spam_before + 1
    assert json.loads(c.spamctl("stats", "--json").stdout)["trained_spam"] == spam_before + 1


def test_browser_opens_an_explanation_and_hostile_subjects_stay_text(console: Console | None):
    c = needs_browser(console)
    scored = len(c.daemon.events("message_scored"))
    for n, subject in enumerate(HOSTILE_SUBJECTS):
        send(c.smtp_port, hostile_message(100 + n, subject))
    wait_until_sync(lambda: len(c.daemon.events("message_scored")) >= scored + len(HOSTILE_SUBJECTS), timeout=20)
    logged_in(c)
    c.get("/history")
    assert c.driver.title == "spamd · History"
    no_alert(c)
    subjects = [e.text for e in c.driver.find_elements(*by("#history td.subject"))]
    expected = [*HOSTILE_SUBJECTS[:3], "<script>alert(2)</script>"]  # the last decoded from RFC 2047
    for subject in expected:
        assert subject in subjects, (subject, subjects)
    assert not c.driver.find_elements(*by("main img, main script, main b"))
    domains = [e.text for e in c.driver.find_elements(*by("#history tr td:nth-child(6)"))]
    assert "evil.example" in domains
    c.shot("history")

    # The newest verdict (a hostile one): its explanation, its Subject as text, no script run.
    click_and_wait(c, "#history a.why")
    assert re.fullmatch(r"spamd · Verdict \d+", c.driver.title)
    no_alert(c)
    assert c.driver.find_element(*by("#subject")).text == "<script>alert(2)</script>"
    tokens = [e.text for e in c.driver.find_elements(*by("#explanation td.token"))]
    assert tokens and any(t in tokens for t in ("money", "winner", "prize", "claim", "free"))
    assert not c.driver.find_elements(*by("main img, main script"))
    c.shot("verdict")
    c.get("/accuracy")
    assert c.driver.find_elements(*by("#daily-rates svg"))
    c.shot("accuracy")


def test_browser_a_post_without_its_csrf_token_is_refused(console: Console | None):
    c = needs_browser(console)
    logged_in(c)
    spam_before = shown_stats(c)["trained_spam"]
    c.get("/train")
    c.driver.find_element(*by("#message_text")).send_keys(make_message(Label.SPAM, 901, seed=9).decode())
    # WebDriver's script (not the page's: the page has none, and its CSP allows none inline) drops the token.
    c.driver.execute_script("document.querySelector('#train-form input[name=csrf]').remove()")
    click_and_wait(c, "#train-submit")
    assert c.driver.title == "spamd · 403"
    assert "CSRF token is missing" in c.driver.find_element(*by("#error-message")).text
    # A forged token is refused the same way, and so is logging out without one.
    c.get("/train")
    c.driver.execute_script("document.querySelector('#train-form input[name=csrf]').value = 'forged'")
    c.driver.find_element(*by("#message_text")).send_keys(make_message(Label.SPAM, 902, seed=9).decode())
    click_and_wait(c, "#train-submit")
    assert c.driver.title == "spamd · 403"
    c.driver.execute_script("document.querySelector('form.logout input[name=csrf]').remove()")
    click_and_wait(c, "form.logout button")
    assert c.driver.title == "spamd · 403"
    c.get("/")
    assert c.driver.title == "spamd · Overview"  # still logged in
    assert shown_stats(c)["trained_spam"] == spam_before
    refused = ("<spam-901-9@example.org>", "<spam-902-9@example.org>")
    assert not [e for e in c.daemon.events("training_applied") if e.get("message_id") in refused]
    # Logging out with the form's token works.
    click_and_wait(c, "form.logout button")
    assert c.driver.title == "spamd · Log in"
