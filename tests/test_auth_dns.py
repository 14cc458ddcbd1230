"""Sender authentication's DNS (the budget, the cache, servers that answer nothing) and the batch evaluation against our own DNS server on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spamd.config import AuthConfig, Config
from spamd.engine.engine import Engine
from spamd.learning.classifier import Classifier
from spamd.mail.auth.dns import SERVER_DOWN_AFTER, SERVER_PROBE_S, Budget, CachingResolver, DnsTemporaryError
from spamd.model.bayes import Label, Verdict
from tests.auth_helpers import SigningKeys, authenticator, dkim_results, mail, verify
from tests.cli_helpers import run_spamctl
from tests.dns_helpers import ZoneServer

# ---------------------------------------------------------------- DNS: budget, cache, temporary errors


def test_a_server_that_never_answers_costs_the_budget_and_authenticates_nothing(
    silent_nameserver: str, test_keys: SigningKeys
) -> None:
    auth = authenticator(silent_nameserver, dns_budget_s=0.3)
    result = verify(auth, test_keys.shop.sign(mail()))
    assert dkim_results(result) == [("shop.example", "temperror")]
    assert result.dmarc is not None and result.dmarc.result == "temperror"
    assert result.from_authenticated() == "" and not result.dmarc_rejects()
    asked = auth.resolver.queries
    again = verify(auth, test_keys.shop.sign(mail(subject="another")))
    # The key that timed out is not asked again; only the policy, which the first message had no time left for.
    assert dkim_results(again) == [("shop.example", "temperror")] and auth.resolver.queries == asked + 1


def test_servfail_is_a_temporary_error_not_a_failure(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    auth_zone.servfail.add("sel1._domainkey.shop.example")
    result = verify(authenticator(auth_zone), test_keys.shop.sign(mail()))
    assert dkim_results(result) == [("shop.example", "temperror")]
    assert result.dmarc is not None and result.dmarc.result == "fail"  # the policy exists; nothing passed
    assert result.from_authenticated() == ""


def test_answers_are_cached_for_their_ttl_negative_ones_too(
    zone_server: ZoneServer,
) -> None:
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    zone_server.txt("k._domainkey.shop.example", "v=DKIM1; p=abc")
    budget = Budget(5.0)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    assert resolver.txt("nothing.shop.example", budget) is None
    asked = zone_server.queries
    zone_server.clear("k._domainkey.shop.example")
    zone_server.txt("nothing.shop.example", "now there is")
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    assert resolver.txt("nothing.shop.example", budget) is None
    assert zone_server.queries == asked
    now[0] += 61  # past the SOA's negative TTL (60 s), not the answer's (300 s)
    assert resolver.txt("nothing.shop.example", budget) == (b"now there is",)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    now[0] += 300
    assert resolver.txt("k._domainkey.shop.example", budget) is None


def test_a_senders_large_records_cannot_grow_the_cache_past_its_bytes(zone_server: ZoneServer) -> None:
    """A sender publishes what it likes under its own names: 30 records of 20 KB (fetched over TCP, as
    truncated over UDP), each asked once, as a new selector in each message would be. Each is answered
    whole; the cache keeps to its bytes, the newest kept, the oldest dropped."""
    zone_server.txt("k._domainkey.shop.example", "v=DKIM1; p=abc")
    big = {f"s{n}._domainkey.big.example": f"v=DKIM1; p={n:02d}" + "A" * 20_000 for n in range(30)}
    for name, value in big.items():
        zone_server.txt(name, value)
    resolver, budget = CachingResolver((zone_server.address,), max_bytes=100_000), Budget(30.0)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    for name, value in big.items():
        assert resolver.txt(name, budget) == (value.encode(),)
        assert resolver.cached_bytes <= 100_000
    asked = zone_server.queries
    assert resolver.txt(list(big)[-1], budget) == (list(big.values())[-1].encode(),)  # the newest: cached
    assert zone_server.queries == asked
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)  # the oldest: asked again
    assert zone_server.queries == asked + 1


def test_dkimpy_and_dnspythons_resolver_are_imported_by_who_verifies_not_at_every_start() -> None:
    # 130 ms of every start of spamctl eval, train and bulk classify, which verify nobody unless it counts;
    # a process that makes an Authenticator (a daemon's helper, with its configuration) imports them then.
    probe = (
        "import sys\n"
        "import spamd.cli.classify, spamd.cli.evaluate, spamd.cli.training, spamd.daemon\n"
        "print(sorted(m for m in ('dkim', 'dns.resolver', 'nacl', 'cryptography') if m in sys.modules))\n"
        "from spamd.config import AuthConfig\n"
        "from spamd.mail.auth.verify import Authenticator\n"
        "authenticator = Authenticator(AuthConfig(nameservers=('127.0.0.1:9',), dns_budget_s=0.0))\n"
        "print('dkim' in sys.modules and 'dns.resolver' in sys.modules)\n"
        "raw = b'DKIM-Signature: v=1; a=rsa-sha256; d=shop.example; s=s1; h=from; bh=x; b=y\\r\\n"
        "From: a@shop.example\\r\\n\\r\\nbody\\r\\n'\n"
        "print(len(authenticator.verify(raw, [('from', 'a@shop.example')], 'a@shop.example').dkim))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "True", "1"]  # the signature was verified, with dkimpy


def test_a_spent_budget_asks_nothing() -> None:
    resolver = CachingResolver(("127.0.0.1:9",))
    with pytest.raises(DnsTemporaryError):
        resolver.txt("x.shop.example", Budget(0.0))
    assert resolver.queries == 0


@pytest.mark.parametrize(("action", "verdict"), [("score", Verdict.UNSURE), ("spam", Verdict.SPAM)])
def test_a_dmarc_reject_failure_is_reported_and_filed_as_configured(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys, action: str, verdict: Verdict
) -> None:
    auth = AuthConfig(nameservers=(auth_zone.address,), dmarc_reject_action=action)
    engine = Engine.open(Config(data_dir=tmp_path, auth=auth), durable=False)
    try:
        forged = test_keys.shop.sign(mail()).replace(b"on its way", b"held at customs, pay here")
        classified = engine.classify(forged)
        assert classified.analyzed.dmarc_reject
        assert (
            "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
            in classified.analyzed.auth_report
        )
        assert classified.score.verdict is verdict  # an untrained model: unsure unless the action files it
        assert not engine.classify(test_keys.shop.sign(mail())).analyzed.dmarc_reject
    finally:
        engine.close()


# ---------------------------------------------------------------- evaluation


def test_a_batchs_scores_are_each_messages_own_score(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """`scores_many` (spamctl classify) leaves out the key and senders where nothing reads them: the same scores,
    a DMARC p=reject failure filed as configured among them."""
    auth = AuthConfig(nameservers=(auth_zone.address,), dmarc_reject_action="spam")
    engine = Engine.open(Config(data_dir=tmp_path, auth=auth), durable=False)
    try:
        for n in range(6):
            engine.train(mail(subject=f"Order {n}"), Label.HAM, "test")
            engine.train(mail(sender=f"win@prize{n}.example", body="claim your prize now\r\n"), Label.SPAM, "test")
        raws = [
            test_keys.shop.sign(mail(subject="Order 9")),
            test_keys.shop.sign(mail()).replace(b"on its way", b"held at customs, pay here"),  # DMARC fails
            mail(sender="win@prize9.example", body="claim your prize today\r\n"),
            mail(sender="friend@other.example", subject="lunch?"),
        ]
        classifier = engine.classifier
        one_by_one = [classifier.score(classifier.analyze(raw)) for raw in raws]
        assert classifier.scores_many(raws) == one_by_one
        assert [score.verdict for score in one_by_one][:3] == [Verdict.HAM, Verdict.SPAM, Verdict.SPAM]
        assert classifier.scores_many(raws, "alice") == [classifier.score(classifier.analyze(r), "alice") for r in raws]
    finally:
        engine.close()
    # A DMARC failure only reported (the default): no score reads the verification, so nothing is asked.
    auth_zone.queries = 0
    reporting = Engine.open(Config(data_dir=tmp_path / "reporting", auth=AuthConfig(nameservers=(auth_zone.address,))))
    try:
        classifier = reporting.classifier
        scores = classifier.scores_many(raws)
        assert auth_zone.queries == 0
        assert scores == [classifier.score(classifier.analyze(raw)) for raw in raws]
        assert auth_zone.queries > 0  # analyze verifies each message, for its X-Spam-Auth report
    finally:
        reporting.close()


def test_spamctl_eval_asks_dns_only_with_dns(auth_zone: ZoneServer, test_keys: SigningKeys, tmp_path: Path) -> None:
    """A corpus's records of years ago are gone: eval verifies from what the message carries unless --dns."""
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for n in range(4):
        raw = test_keys.shop.sign(mail(subject=f"Order {n}", body=f"Hello,\r\n\r\nparcel {n} is on its way.\r\n"))
        (data / f"m{n}").write_bytes(raw)
        lines.append(f"{'ham' if n % 2 else 'spam'} data/m{n}\n")
    (tmp_path / "index").write_text("".join(lines))
    config = tmp_path / "spamd.toml"
    config.write_text(f'[auth]\nnameservers = ["{auth_zone.address}"]\n')

    offline = run_spamctl("--config", config, "eval", "--json", "--jobs", "1", tmp_path / "index")
    assert offline.returncode == 0, offline.stderr
    assert auth_zone.queries == 0
    online = run_spamctl("--config", config, "eval", "--json", "--jobs", "1", "--dns", tmp_path / "index")
    assert online.returncode == 0, online.stderr
    assert auth_zone.queries > 0  # the shop's key and DMARC record, at least


def test_a_batchs_look_ups_wait_together_not_one_behind_another(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    """A resolver that takes its time (0.3 s an answer): the messages of a batch (`spamctl eval` and
    `classify` analyze 64 at a time) verify their senders at the same time, each as it would alone."""
    raws = [
        test_keys.shop.sign(mail(sender=f"news@s{n}.shop.example", subject=f"Order {n}")) for n in range(12)
    ]  # each From a host of its own: a DMARC look-up of its own, after the shop's key
    auth_zone.delay = 0.3
    config = Config(auth=AuthConfig(nameservers=(auth_zone.address,)))
    batch = Classifier(config, None).analyze_many(raws)  # type: ignore[arg-type]  # analysis only
    assert auth_zone.most_in_flight >= 6  # one behind another, it would be 1
    auth_zone.delay = 0.0
    alone = Classifier(config, None)  # type: ignore[arg-type]
    for raw, analyzed in zip(raws, batch, strict=True):
        assert analyzed.auth_report == alone.analyze(raw).auth_report
        assert "dkim=pass header.d=shop.example" in analyzed.auth_report and "dmarc=pass" in analyzed.auth_report


def test_nameservers_that_answer_nothing_are_not_waited_for_by_every_message(zone_server: ZoneServer) -> None:
    """Three look-ups in a row timing out: the next ones are temporary errors at once, but for a probe
    every SERVER_PROBE_S; any answer brings the servers back. Counted in queries sent, not in seconds."""
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    zone_server.txt("a.shop.example", "up")
    zone_server.silent.add("dead.example")
    for n in range(SERVER_DOWN_AFTER):
        with pytest.raises(DnsTemporaryError):  # each a name of its own: the per-name cache does not help
            resolver.txt(f"s{n}.dead.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER and resolver.servers_down
    for n in range(20):  # mail from twenty other domains: none waits, none is asked
        with pytest.raises(DnsTemporaryError, match="timed out or failed"):
            resolver.txt(f"x{n}.other.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER and resolver.unasked == 20
    now[0] += SERVER_PROBE_S  # the probe's turn: it is asked, times out, and the servers stay down
    with pytest.raises(DnsTemporaryError):
        resolver.txt("s9.dead.example", Budget(0.2))
    with pytest.raises(DnsTemporaryError, match="timed out or failed"):
        resolver.txt("a.shop.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER + 1
    now[0] += SERVER_PROBE_S  # the next probe is answered: every look-up is asked again
    assert resolver.txt("a.shop.example", Budget(5.0)) == (b"up",)
    assert not resolver.servers_down
    assert resolver.txt("b.shop.example", Budget(5.0)) is None


def test_look_ups_cut_short_by_a_spent_budget_do_not_count_the_servers_down(zone_server: ZoneServer) -> None:
    resolver = CachingResolver((zone_server.address,))
    zone_server.silent.add("dead.example")
    for n in range(SERVER_DOWN_AFTER * 2):
        budget = Budget(0.4)
        budget.deadline -= 0.3  # most of the message's time already spent elsewhere
        with pytest.raises(DnsTemporaryError):
            resolver.txt(f"s{n}.dead.example", budget)
    assert not resolver.servers_down and resolver.unasked == 0
