"""Sender authentication's outcomes as tokens for the model ([model] auth_outcomes): what was verified, not claimed.

`auth:dkim:pass`, `auth:spf:softfail`, `auth:dmarc:fail:p=reject`, `auth:arc:pass`, and
the From's organizational domain when it is authenticated (`auth:aligned:paypal.com`), each
passing signature's (`auth:signer:sendgrid.net`) and a trusted ARC sealer's (`auth:sealer:`):
a domain's good name is learned only from mail it really sent. Unsigned mail gives
`auth:dkim:none`. It decides nothing by itself: the model weighs the tokens as any.
"""

from __future__ import annotations

from spamd.mail.auth.domains import organizational_domain
from spamd.mail.auth.verify import AuthResult

PREFIX = "auth:"
# A message may carry many signatures; the first few passing ones name who sent it.
_MAX_SIGNERS = 4
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
    # Who proved itself, aligned with the From or not (an ESP's d=, a list's own signature, a trusted
    # sealer): what this site learns of each identity is its reputation, and none of it can be forged.
    tokens += ["auth:signer:" + organizational_domain(domain)[:200] for domain in auth.dkim_passes()[:_MAX_SIGNERS]]
    if auth.arc_sealer:
        tokens.append("auth:sealer:" + organizational_domain(auth.arc_sealer)[:200])
    return list(dict.fromkeys(tokens))
