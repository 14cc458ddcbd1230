"""Sender authentication's outcomes as tokens for the model ([model] auth_outcomes): what was verified, not claimed.

`auth:dkim:pass`, `auth:spf:softfail`, `auth:dmarc:fail:p=reject`, `auth:arc:pass`, and
the From's organizational domain when it is authenticated (`auth:aligned:paypal.com`):
a domain's good name is learned only from mail it really sent. Unsigned mail gives
`auth:dkim:none`. It decides nothing by itself: the model weighs the tokens as any.
"""

from __future__ import annotations

from spamd.mail.auth.domains import organizational_domain
from spamd.mail.auth.verify import AuthResult

PREFIX = "auth:"
_MAX_WORD = 40  # a result word from a trusted header, cut: it names a class of outcome, not an essay


def outcome_tokens(auth: AuthResult) -> list[str]:
    """The tokens of one message's AuthResult, each once."""
    tokens = [f"auth:dkim:{s.result[:_MAX_WORD]}" for s in auth.dkim] or ["auth:dkim:none"]
    if auth.spf is not None:
        tokens.append(f"auth:spf:{auth.spf[1][:_MAX_WORD]}")
    if auth.dmarc is not None:
        tokens.append(f"auth:dmarc:{auth.dmarc.result[:_MAX_WORD]}")
        if auth.dmarc.result == "fail" and auth.dmarc.policy:
            tokens.append(f"auth:dmarc:fail:p={auth.dmarc.policy[:_MAX_WORD]}")
    if auth.arc != "none":
        tokens.append(f"auth:arc:{auth.arc[:_MAX_WORD]}")
    if auth.from_authenticated():
        tokens.append("auth:aligned:" + organizational_domain(auth.from_domain)[:200])
    return list(dict.fromkeys(tokens))
