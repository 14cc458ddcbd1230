"""[model] auth_outcomes: sender authentication's outcomes as tokens, the same when a message is scored and trained.

Signed mail is made with the session's test keys (tests/auth_helpers.py) and verified
against our DNS server on loopback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spamd.config import AuthConfig, Config, ModelConfig
from spamd.evaluation.trec import analyze_in_workers, read_batches, read_index
from spamd.learning.classifier import Analyzed, Classifier
from spamd.mail.auth.authres import SignatureResult
from spamd.mail.auth.dmarc import DmarcResult
from spamd.mail.auth.outcomes import outcome_tokens
from spamd.mail.auth.verify import NOTHING, AuthResult
from spamd.model.families import count_settings
from tests.auth_helpers import SigningKeys, mail
from tests.dns_helpers import ZoneServer


def classifier(zone: ZoneServer, auth_outcomes: bool = True) -> Classifier:
    config = Config(model=ModelConfig(auth_outcomes=auth_outcomes), auth=AuthConfig(nameservers=(zone.address,)))
    return Classifier(config, None)  # type: ignore[arg-type]  # analysis needs no model, as in the helper processes


def test_outcomes_name_what_was_verified() -> None:
    assert outcome_tokens(NOTHING) == ["auth:dkim:none"]
    signed = AuthResult(
        "mail.shop.example",
        (SignatureResult("shop.example", "s", "pass"), SignatureResult("other.example", "s", "fail")),
        ("shop.example", "softfail"),
        DmarcResult("mail.shop.example", "pass", "reject", "dkim:shop.example"),
        "pass",
    )
    assert outcome_tokens(signed) == [
        "auth:dkim:pass", "auth:dkim:fail", "auth:spf:softfail", "auth:dmarc:pass", "auth:arc:pass",
        "auth:aligned:shop.example", "auth:signer:shop.example",
    ]  # fmt: skip
    # Another domain's passing signature (an ESP's) is a signer of its own, never the From's alignment.
    rejected = AuthResult("shop.example", (SignatureResult("mail.esp.example", "s", "pass"),), None,
                          DmarcResult("shop.example", "fail", "reject"))  # fmt: skip
    assert outcome_tokens(rejected) == [
        "auth:dkim:pass", "auth:dmarc:fail", "auth:dmarc:fail:p=reject", "auth:signer:esp.example",
    ]  # fmt: skip
    # A trusted sealer's list: the sealer is an identity too; a chain no trusted sealer closed names none.
    sealed = AuthResult("list.example", arc="pass", arc_sealer="lists.example.org")
    assert outcome_tokens(sealed) == ["auth:dkim:none", "auth:arc:pass", "auth:sealer:example.org"]
    assert not any(t.startswith("auth:sealer:") for t in outcome_tokens(AuthResult("list.example", arc="pass")))
    # Many passing signatures name at most four signers: a message cannot flood the reputation tokens.
    many = AuthResult("x.example", tuple(SignatureResult(f"d{i}.example", "s", "pass") for i in range(20)))
    assert len([t for t in outcome_tokens(many) if t.startswith("auth:signer:")]) == 4


def test_signed_mail_gets_its_outcomes_scored_and_trained_alike(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    on = classifier(auth_zone)
    signed = test_keys.shop.sign(mail())
    tokens = on.tokens(signed)
    assert {"auth:dkim:pass", "auth:dmarc:pass", "auth:aligned:shop.example"} <= set(tokens), tokens
    # A training (no authentication asked for) verifies too: the same features as the score's.
    scored, trained = on.analyze(signed), on.analyze(signed, authenticate=False)
    assert np.array_equal(scored.features.ids, trained.features.ids)
    assert np.array_equal(scored.features.counts, trained.features.counts)
    # Another domain's valid signature on the shop's From: a DMARC failure under the shop's p=reject.
    forged = on.tokens(test_keys.other.sign(mail()))
    assert "auth:dmarc:fail:p=reject" in forged and not any(t.startswith("auth:aligned:") for t in forged), forged
    assert "auth:dkim:none" in on.tokens(mail())
    # Off (the default): no auth: token, features as before.
    off = classifier(auth_zone, auth_outcomes=False)
    assert not any(t.startswith("auth:") for t in off.tokens(signed))
    assert len(off.analyze(signed).features.ids) < len(scored.features.ids)


def test_a_model_with_auth_outcomes_records_it_in_its_count_settings() -> None:
    assert "auth_outcomes" not in count_settings(ModelConfig())
    assert count_settings(ModelConfig(auth_outcomes=True))["auth_outcomes"] is True


def test_spamctl_eval_workers_carry_each_message_authentication(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """Analysis in worker processes hands back who sent each message, as analysis in this process does."""
    messages = {
        "signed": test_keys.shop.sign(mail(subject="signed")),
        "unsigned": mail(subject="unsigned"),
        "forged": test_keys.other.sign(mail(subject="forged")),
    }
    for name, raw in messages.items():
        (tmp_path / name).write_bytes(raw)
    index = tmp_path / "index"
    index.write_text("".join(f"ham {name}\n" for name in messages))
    config = Config(auth=AuthConfig(nameservers=(auth_zone.address,)))
    entries = read_index(index)
    in_workers = [a for batch in analyze_in_workers(config, entries, 2) for _, a, _ in batch if isinstance(a, Analyzed)]
    here = [
        a
        for batch in read_batches(entries, classifier(auth_zone).analyze_many)
        for _, a, _ in batch
        if isinstance(a, Analyzed)
    ]
    assert [(a.authenticated, a.dmarc_reject, a.auth_report) for a in in_workers] == [
        (a.authenticated, a.dmarc_reject, a.auth_report) for a in here
    ]
    assert len(in_workers) == len(here) == 3
    signed, unsigned, forged = in_workers
    assert signed.authenticated == 1 and "dkim=pass" in signed.auth_report
    assert unsigned.authenticated == 0
    assert forged.authenticated == 0 and forged.dmarc_reject
