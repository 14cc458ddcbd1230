"""Who sent a message, once per message: trusted Authentication-Results, else DKIM, SPF, DMARC and ARC ourselves.

`Authenticator.verify` gives an AuthResult, small and frozen, that the senders'
rule and `explain` read. It never raises for what a message holds, and spends at
most `[auth] dns_budget_s` on DNS: past it a check is a temperror, which
authenticates nothing and fails nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from spamd.config import AuthConfig
from spamd.mail.auth.authres import (
    AuthenticationResults,
    MethodResult,
    SignatureResult,
    parse_authentication_results,
    trusted_results,
)
from spamd.mail.auth.dmarc import DmarcResult, evaluate
from spamd.mail.auth.dns import Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.domains import aligned, normalized, organizational_domain
from spamd.mail.auth.records import RecordError
from spamd.mail.auth.spf import SmtpSession, check_spf


@dataclass(frozen=True, slots=True)
class AuthResult:
    """What was verified about one message; `source` says whether spamd verified it or trusted an MTA's header."""

    from_domain: str = ""
    dkim: tuple[SignatureResult, ...] = ()
    spf: tuple[str, str] | None = None  # (domain, result): MAIL FROM's (or HELO's), where there was a session
    dmarc: DmarcResult | None = None
    arc: str = "none"  # pass, fail, none, temperror
    arc_sealer: str = ""  # d= of the newest ARC-Seal when the chain passed and the sealer is trusted
    source: str = "none"  # "spamd", "authserv-id NAME", or "none" (off, or nothing to check)
    # The domains whose DKIM pass that trusted sealer recorded in its ARC-Authentication-Results.
    arc_dkim_passes: tuple[str, ...] = ()

    def dkim_passes(self) -> list[str]:
        return [s.domain for s in self.dkim if s.result == "pass" and s.domain]

    def from_authenticated(self) -> str:
        """How the From domain is authenticated ("dmarc", "dkim:D", "spf:D"), or "" if it is not."""
        if not self.from_domain:
            return ""
        if self.dmarc is not None and self.dmarc.result == "pass" and self.dmarc.from_domain == self.from_domain:
            return "dmarc"
        for domain in self.dkim_passes():
            if aligned(domain, self.from_domain):
                return "dkim:" + domain
        if self.spf is not None and self.spf[1] == "pass" and aligned(self.spf[0], self.from_domain):
            return "spf:" + self.spf[0]
        return ""

    def list_authenticated(self, list_id: str) -> str:
        """How a List-Id is authenticated ("dkim:D" by the list's own domain, "arc:SEALER"), or "".

        A trusted sealer vouches for what it saw, not for every header it passed on: for the list's
        mail when it is the list's own domain (the list sealed what it sent), or when its sealed
        results record a DKIM pass by that domain (it verified the list's signature before a change
        broke it). A List-Id that someone wrote into mail a trusted forwarder sealed is still a claim.
        """
        list_domain = organizational_domain(list_id)
        for domain in self.dkim_passes():
            if organizational_domain(domain) == list_domain:
                return "dkim:" + domain
        if self.arc_sealer and any(
            organizational_domain(domain) == list_domain for domain in (self.arc_sealer, *self.arc_dkim_passes)
        ):
            return "arc:" + self.arc_sealer
        return ""

    def dmarc_rejects(self) -> bool:
        """DMARC failed under p=reject (reported; `[auth] dmarc_reject_action` says what it does)."""
        return self.dmarc is not None and self.dmarc.result == "fail" and self.dmarc.policy == "reject"

    def header(self) -> str:
        """The X-Spam-Auth value: each result in Authentication-Results' words ("": nothing was checked).

        Every word in it is a `report_token`: a domain, a HELO or an MTA's result is what a message
        or an SMTP client said, and must not write a result of its own into the header."""
        if not (self.dkim or self.spf or self.dmarc or self.arc != "none"):
            return ""
        t = report_token
        kind, _, authserv_id = self.source.partition(" ")
        parts = [f"source={t(kind)}" + (f" {t(authserv_id)}" if authserv_id else "")]
        parts += [f"dkim={t(s.result)} header.d={t(s.domain)}" for s in self.dkim]
        if self.spf is not None:
            parts.append(f"spf={t(self.spf[1])} smtp.mailfrom={t(self.spf[0])}")
        if self.dmarc is not None:
            policy = f" policy.published-domain-policy={t(self.dmarc.policy)}" if self.dmarc.policy else ""
            parts.append(f"dmarc={t(self.dmarc.result)} header.from={t(self.dmarc.from_domain)}{policy}")
        if self.arc != "none":
            parts.append(f"arc={t(self.arc)}" + (f" header.d={t(self.arc_sealer)}" if self.arc_sealer else ""))
        return "; ".join(parts)


_NOT_IN_A_REPORT_TOKEN = re.compile(r"[^0-9A-Za-z._-]")


def report_token(value: str) -> str:
    """`value` as one word of X-Spam-Auth: ASCII letters, digits, ".", "_" and "-" as they are, any
    other character "?", and "-" for nothing. A HELO of "x; dkim=pass header.d=bank.example"
    (the SPF domain of a bounce) wrote a passing signature of the bank into the header."""
    return _NOT_IN_A_REPORT_TOKEN.sub("?", value) or "-"


def reported_results(report: str) -> tuple[str, list[tuple[str, str]]]:
    """What an X-Spam-Auth value (`AuthResult.header`) reports: where its results came from ("spamd",
    "authserv-id", or "none" for an empty value) and each result as (method, result)."""
    if not report:
        return "none", []
    source, *results = report.split("; ")
    pairs = [part.partition(" ")[0].partition("=") for part in results]
    return source.removeprefix("source=").partition(" ")[0], [(method, result) for method, _, result in pairs]


NOTHING = AuthResult()
# OpenDMARC writes the domain's policy in a comment as "(p=reject dis=none)", rspamd as "(policy=reject)".
_COMMENTED_POLICY = re.compile(r"(?i)(?<![\w-])(?:p|policy)=(none|quarantine|reject)\b")


def from_domain_of(address: str | None) -> str:
    return normalized(address.rpartition("@")[2]) if address and "@" in address else ""


class Authenticator:
    """One per process: the resolver (and its cache) lives as long as it does."""

    def __init__(self, config: AuthConfig, resolver: CachingResolver | None = None):
        # dkimpy now, with the resolver: a process that makes an Authenticator verifies (a daemon's
        # helper makes it with its configuration), and its first message should not wait for the
        # import (130-220 ms) within its DNS budget. Processes that verify nobody never import it.
        from spamd.mail.auth import dkim as signatures

        self._signatures = signatures  # bound here: no import statement on each message's path
        self.config = config
        self.resolver = resolver if resolver is not None else CachingResolver(config.nameservers)

    def budget(self, started: float | None = None, cached_only: bool = False) -> Budget:
        """A message's time for DNS from `started` (time.monotonic() when it arrived; None: now), so that
        no wait of its own or of messages before it holds it up longer (`verify`). `cached_only`: the
        cache's answers alone, DnsWouldWait for a look-up that would ask a server."""
        return Budget(self.config.dns_budget_s, started=started, cached_only=cached_only)

    def verify(
        self,
        raw: bytes,
        headers: Sequence[tuple[str, str]],
        from_address: str | None,
        session: SmtpSession | None = None,
        budget: Budget | None = None,
    ) -> AuthResult:
        """`raw` as received (spamd's own headers stripped), its parsed `headers`, its From address, and the
        SMTP session where spamd saw one (for SPF). `budget`: the message's time for DNS, counted from its
        arrival (None: `[auth] dns_budget_s` from now)."""
        if not self.config.enabled:
            return NOTHING
        from_domain = from_domain_of(from_address)
        trusted = trusted_results(headers, self.config.trusted_authserv_ids, self.config.trusted_hops)
        budget = budget if budget is not None else self.budget()
        if trusted:
            result = from_trusted_headers(trusted, from_domain, self._signatures.length_limited_beyond(raw))
            # An MTA's arc= names no sealer (RFC 8617 defines no property for it), so trusted sealers
            # are checked here: only for mail that carries a chain, and only with sealers configured.
            arc, sealer, sealed_passes = self._arc(raw, headers, budget)
            return (
                result if arc == "none" else replace(result, arc=arc, arc_sealer=sealer, arc_dkim_passes=sealed_passes)
            )
        signatures = self._signatures.verify_signatures(raw, self.resolver, budget)
        spf = check_spf(session, self.resolver, budget) if session is not None and session.client_ip else None
        dmarc = None
        if from_domain and (signatures or spf is not None):
            # Unsigned and without a session, DMARC cannot pass: no DNS for it.
            passes = [s.domain for s in signatures if s.result == "pass"]
            spf_pass = spf[0] if spf is not None and spf[1] == "pass" else None
            dmarc = evaluate(from_domain, passes, spf_pass, self.resolver, budget)
        arc, sealer, sealed_passes = self._arc(raw, headers, budget)
        return AuthResult(from_domain, signatures, spf, dmarc, arc, sealer, "spamd", sealed_passes)

    def _arc(self, raw: bytes, headers: Sequence[tuple[str, str]], budget: Budget) -> tuple[str, str, tuple[str, ...]]:
        """The ARC chain's result, its newest sealer if that one is trusted, and the DKIM passes that sealer
        recorded (`sealed_dkim_passes`); checked only with trusted sealers.

        Only a chain whose newest seal names a trusted sealer can vouch for anything, so no other is
        checked ("none"), nor one past MAX_ARC_BYTES: dkimpy hashes the body again for every ARC set.
        """
        if not self.config.trusted_arc_sealers:  # every message comes here: nothing to gather then
            return "none", "", ()
        trusted = {normalized(s) for s in self.config.trusted_arc_sealers}
        seals = [value for name, value in headers if name == "arc-seal"]
        if not seals or newest_seal_domain(seals) not in trusted:
            return "none", "", ()
        if len(seals) * len(raw) > MAX_ARC_BYTES:
            return "none", "", ()

        import dkim  # dkimpy ships no type information; imported with self._signatures

        def lookup(name: bytes, timeout: float = 5) -> bytes | None:
            records = self.resolver.txt(name.decode("ascii", "replace"), budget)
            return records[0] if records else None

        try:
            chain, results, _reason = dkim.ARC(raw, logger=self._signatures._QUIET, minkey=1024).verify(dnsfunc=lookup)
        except DnsTemporaryError:
            return "temperror", "", ()
        except Exception:  # dkimpy's parser on a hostile chain: it vouches for nothing
            return "fail", "", ()
        if chain != dkim.CV_Pass or not results:
            return "fail" if chain == dkim.CV_Fail else "none", "", ()
        newest = max(results, key=lambda r: r.get("instance", 0))
        sealer = normalized(newest.get("as-domain", b"").decode("ascii", "replace"))
        if sealer not in trusted:
            return "pass", "", ()
        return "pass", sealer, sealed_dkim_passes(newest.get("aar-value", b""))


# ARC sets times the message's bytes that a chain is verified for at most. dkimpy checks every set's
# ARC-Message-Signature, hashing the body again each time (RFC 8617 asks only the newest's), at
# about 65 ms a MiB a set in pure Python (a 2 MB message: 0.39 s for 3 sets, 3.7 s for 30): past
# this, a chain costs more than a whole message's analysis is allowed to. Real chains are short
# and list posts small: on modern-dev, 1 to 3 sets, 199 KB at most.
MAX_ARC_BYTES = 2 * 1024 * 1024
_SEAL_INSTANCE = re.compile(r"(?:^|;)\s*i\s*=\s*(\d{1,3})\s*(?:;|$)")
_SEAL_DOMAIN = re.compile(r"(?:^|;)\s*d\s*=\s*([^;\s]{1,253})\s*(?:;|$)")


def newest_seal_domain(seals: Sequence[str]) -> str:
    """The d= of the ARC-Seal with the highest i= ("" if that one names none): the sealer a chain's
    verification would name, before any is verified."""
    newest, domain = -1, ""
    for seal in seals:
        instance, named = _SEAL_INSTANCE.search(seal), _SEAL_DOMAIN.search(seal)
        number = int(instance.group(1)) if instance else 0
        if number > newest:
            newest, domain = number, normalized(named.group(1)) if named else ""
    return domain


def sealed_dkim_passes(aar_value: bytes) -> tuple[str, ...]:
    """The domains an ARC-Authentication-Results value ("i=N; authserv-id; dkim=pass header.d=D; ...")
    records a DKIM pass for; none if it cannot be read."""
    text = aar_value.decode("ascii", "replace").replace("\r\n", "")
    instance, separator, rest = text.partition(";")
    if not separator or not instance.strip().lower().startswith("i="):
        return ()
    try:
        recorded = parse_authentication_results(rest)
    except RecordError:
        return ()
    passes = (normalized(r.get("header.d") or r.get("header.i").rpartition("@")[2]) for r in recorded.results
              if r.method == "dkim" and r.result == "pass")  # fmt: skip
    return tuple(dict.fromkeys(domain for domain in passes if domain))


def _commented_policy(comment: str) -> str:
    """The domain's policy where the verifier wrote it in a comment (OpenDMARC: "p=reject dis=none",
    rspamd: "policy=reject"), or ""."""
    found = _COMMENTED_POLICY.search(comment)
    return found.group(1).lower() if found else ""


def from_trusted_headers(
    trusted: list[AuthenticationResults], from_domain: str, length_limited: Sequence[tuple[str, str, bytes]] = ()
) -> AuthResult:
    """The results our MTA's verifiers recorded, as they are, but for a DKIM pass of a signature in
    `length_limited` (`length_limited_beyond`: its l= leaves content unsigned), which is "policy" as
    spamd's own check makes it, and a DMARC pass that rested on it, which is a fail."""
    signatures: list[SignatureResult] = []
    spf, dmarc, arc = None, None, "none"
    for header in trusted:
        for result in header.results:
            if result.method == "dkim":
                if result.result == "none":  # not signed (rspamd writes it): no signature to report
                    continue
                domain = normalized(result.get("header.d") or result.get("header.i").rpartition("@")[2])
                outcome = result.result
                if outcome == "pass" and _is_length_limited(domain, result, length_limited):
                    outcome = "policy"
                signatures.append(SignatureResult(domain, result.get("header.s"), outcome))
            elif result.method == "spf" and spf is None:
                mailfrom = result.get("smtp.mailfrom")
                spf = (
                    normalized(mailfrom.rpartition("@")[2] or result.get("smtp.helo")),
                    result.result,
                )
            elif result.method == "dmarc" and dmarc is None:
                policy = result.get("policy.dmarc") or _commented_policy(result.comment)
                dmarc = DmarcResult(normalized(result.get("header.from")), result.result, policy)
            elif result.method == "arc" and arc == "none":
                arc = result.result
    if dmarc is not None and dmarc.result == "pass" and any(s.result == "policy" for s in signatures):
        aligned_pass = any(s.result == "pass" and aligned(s.domain, dmarc.from_domain) for s in signatures) or (
            spf is not None and spf[1] == "pass" and aligned(spf[0], dmarc.from_domain)
        )
        if not aligned_pass:
            dmarc = DmarcResult(dmarc.from_domain, "fail", dmarc.policy)
    source = "authserv-id " + trusted[0].authserv_id
    return AuthResult(from_domain, tuple(signatures), spf, dmarc, arc, "", source)


def _is_length_limited(domain: str, result: MethodResult, length_limited: Sequence[tuple[str, str, bytes]]) -> bool:
    """Whether a DKIM result is for one of the `length_limited` signatures: the same d=, and s= and the b=
    prefix (header.b) where the verifier names them."""
    selector, b_prefix = result.get("header.s").lower(), result.get("header.b").encode("ascii", "replace")
    return any(
        d == domain and (not selector or s == selector) and (not b_prefix or b.startswith(b_prefix))
        for d, s, b in length_limited
    )
