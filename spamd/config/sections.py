"""The configuration's sections: frozen dataclasses whose defaults are the embedded configuration.

Each default carries the measurement or reason behind it; spamd.config.loading reads
TOML over them and checks the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from spamd.config.addresses import parse_host_port

DEFAULT_DATA_DIR = Path("~/.local/share/spamd")


@dataclass(frozen=True)
class ParserConfig:
    """Caps on the work spent on one message, so a hostile message cannot stall the daemon."""

    # Bytes of the raw message that are parsed at all; the rest is ignored.
    # Cost in accuracy: see README "Parser caps" (measured by scripts/speed/measure_core.py).
    max_bytes: int = 512 * 1024
    # MIME parts visited (depth-first); later parts are skipped.
    max_parts: int = 100
    # Multipart nesting followed; deeper parts are treated as opaque.
    max_depth: int = 20
    # Characters of decoded text per part handed to the tokenizer.
    max_text_chars: int = 128 * 1024
    # Processes that parse and tokenize for the daemon beside its event loop
    # (spamd/engine/analyzers.py): -1 for one per core but the loop's, 0 for none.
    processes: int = -1
    # Text of HTML elements hidden by inline CSS (display:none, visibility:hidden, font-size:0,
    # opacity:0, off screen, colour of its background) becomes `hidden:` tokens, not words
    # (spamd/mail/hidden.py). First contact on spamassassin (docs/accuracy.md), 150 ham words
    # in a display:none block: (1-ROCA)% 0.1849 -> 0.0361, spam filed spam 56.6% -> 90.4%.
    hidden_text: bool = True
    # Text as a reader sees it before words are found: NFKC, invisible characters dropped,
    # Cyrillic/Greek look-alikes mapped to Latin, words split by inline tags joined; each
    # disguise an `obfuscated:` token (spamd/mail/normalize.py). First contact on spamassassin,
    # a zero-width character in every word: (1-ROCA)% 0.0707 -> 0.0371, spam filed spam 70.8% ->
    # 90.7%; +2.9% analysis time on trec07p-dev (scripts/costs/disguise_cost.py).
    normalize: bool = True
    # Runs of 40+ lower-case words with no punctuation (word salad, a visible block of good
    # words) left out of the text: one `salad:words:` token instead. First contact on spamassassin,
    # 150 words of recent ham appended: (1-ROCA)% 0.2019 -> 0.0398, spam filed spam 55.3% -> 90.4%
    # (with the two switches above on in both). Off by default: it takes the words out of a
    # person's unpunctuated lower-case mail too (a note, a list of names), and then nothing but
    # the headers is scored; the suite's own 40-word test messages all went Unsure with it on.
    # A block hidden from the reader is hidden_text's, which is on; a visible one is weighed
    # as at most [model] salad_tokens tokens when this is off.
    word_salad: bool = False


STORED_COUNTS = ("log", "binary", "log2")  # model.stored_counts
MAX_NGRAM_CHARS = 100_000  # model.ngram_chars at most: n-grams of a whole message cost more than all else


@dataclass(frozen=True)
class ModelConfig:
    """The naive Bayes model and its verdict thresholds."""

    # 2**22 buckets = 4,194,304: 32 MiB of counts. The collision rate at this size
    # is measured by scripts/speed/measure_core.py (README "Memory").
    hash_bits: int = 22
    # Additive (Lidstone) smoothing of P(token | class). trec / sa (1-ROCA)%:
    # 0.001: 0.0201 / 0.0676, 0.003: 0.0198 / 0.0663, 0.01: 0.0204 / 0.0676,
    # 0.03: 0.0224 / 0.0750, 0.1: 0.0264 / 0.0948 (first tokenizer). Dirichlet
    # smoothing toward the corpus-wide rate was worse at every strength tried.
    alpha: float = 0.01
    # Thin evidence stays near neutral: a token's log-odds are scaled by
    # n / (n + evidence_prior), n its stored count in both classes (3 for each
    # message that has it once), so a token seen in one message counts half and an
    # unseen one nothing. Before, an unseen token got log(N_ham / N_spam) of the
    # class totals and a token seen once as much as one seen a thousand times.
    # On held-out mail nobody tuned on ((1-ROCA)%, 0 -> 3; bogofilter beside):
    # Ling-Spam 0.130 -> 0.120 (0.197), Enron-Spam preprocessed 0.181 -> 0.158
    # (0.326), CSDMC2010 0.0222 -> 0.0033 (0.078); spamassassin 0.0563 -> 0.0534
    # and its derived streams alike (header-poor 0.141 -> 0.125, tokenized export
    # 0.234 -> 0.193); trec07p-dev 0.0119 -> 0.0150 (0.045), where the class-total
    # constant on unseen tokens pushed novel mail towards ham in a stream that is
    # 80% spam: a coincidence of its class balance that turns the other way on a
    # stream that is mostly ham. 1: Enron 0.159, Ling 0.124, sa 0.0532; 5: Enron 0.161,
    # Ling 0.115, sa 0.0563, trec 0.0153.
    evidence_prior: float = 3.0
    # The score is the mean over the message's distinct tokens and this many more
    # that count 0: the same idea for the message as evidence_prior for a token.
    # With evidence_prior 3, (1-ROCA)% 0 -> 5 -> 10: Enron-Spam 0.158 -> 0.144 -> 0.137,
    # Ling-Spam 0.120 -> 0.119 -> 0.121 (hm% at sm%=0.1 9.3 -> 9.4 -> 9.9), sa 0.0534
    # -> 0.0533 -> 0.0533, trec 0.0150 -> 0.0149 -> 0.0148, sa header-poor 0.1246 ->
    # 0.1248 -> 0.1252 (hm% 8.3 -> 8.7 -> 9.3).
    neutral_tokens: float = 5.0
    # The score's mean runs over only this many of the message's tokens, those whose
    # (weighted) log-odds are farthest from 0; 0: over all of them. A block of ordinary
    # words appended to spam cannot then dilute it (spamd.model.bayes.decisive_sum). Off: at first
    # contact on spamassassin, 30: unchanged stream 0.0385 -> 0.0368 but ham filed spam 0.05% ->
    # 0.19%, 150 ham words appended 5.2x -> 8.4x the unchanged stream's (1-ROCA)%; 75: unchanged
    # 0.0457 (docs/accuracy.md). The ham words are decisive too.
    decisive_tokens: int = 0
    # A run of word salad (40+ lower-case words with nothing but spaces between them,
    # spamd.mail.hidden.split_word_salad: a visible block of good words appended to spam, or a
    # person's unpunctuated note) counts as at most this many tokens in the score: its
    # distinct words share that weight, and are learned as any words. 0: they weigh 1 each.
    # First contact, 150 words of the stream's recent ham appended to spam ((1-ROCA)% x the
    # unchanged stream's, spam filed spam; docs/accuracy.md): spamassassin 0: 5.28x, 55.0%;
    # 10: 1.20x, 89.2%; 5: 1.11x, 89.8%; 3: 1.07x, 90.3% (unchanged 90.7%); trec07p-dev
    # 0: 2.40x; 10: 1.88x; 5: 1.65x. Unlike taking the run out ([parser] word_salad), a
    # person's note keeps its words: the suite's 40-word messages stay ham at 3.
    salad_tokens: float = 3.0
    # Verdict from the spam probability: below ham_threshold is ham, at or above
    # spam_threshold is spam, between is unsure (delivered to INBOX, marked Unsure).
    # People sort Unsure mail, and it is nearly all a filter trained on their corrections
    # ever learns (trec07p-dev, errors only: 166 of 173 trainings): the Unsure band is
    # that filter's thick threshold. (1-ROCA)%, trec07p-dev / spamassassin, errors-only
    # feedback: 0.25 / 0.75: 0.0272 / 0.0844 (Unsure 1.7% / 6.6%); 0.2 / 0.8: 0.0245 /
    # 0.0721; 0.15 / 0.85: 0.0204 / 0.0503 (2.4% / 10.1%); 0.1 / 0.9: 0.0223 / 0.0498
    # (3.1% / 12.4%). `people` protocol, seeds 1-3: 0.0592 / 0.245 -> 0.0390 / 0.191.
    # Full feedback ranks the same; at the thresholds, hm% / sm% / Unsure% 0.20 / 1.11 /
    # 0.9 -> 0.10 / 1.76 / 1.6 (trec), 0.10 / 6.59 / 2.5 -> 0.02 / 10.3 / 4.3 (sa): half
    # the ham in Junk, the costly error, for twice the Unsure mail.
    ham_threshold: float = 0.15
    spam_threshold: float = 0.85
    # Feature families (spamd/model/families.py), all off: none keeps full feedback where it
    # is (docs/accuracy.md). Each but the weights changes what the counts mean, so a
    # model built with other settings is refused. What a message adds to a token's
    # count for tf occurrences: "log" round(4 log(1 + tf)), "binary" 1, "log2" round(2 log(1 + tf)).
    stored_counts: str = "log"
    # The distinct character n-grams (n = 3, 4 or 5; 0: none) of the first ngram_chars
    # characters of the decoded headers and text, as tokens "g:<n-gram>".
    char_ngrams: int = 0
    ngram_chars: int = 3000
    # Orthogonal sparse bigrams of the body's first 500 words: pairs at distance 1-4,
    # the distance in the token ("osb2:free money").
    osb: bool = False
    # How much each family's log-odds weigh in the message's mean (and in its
    # denominator); the tokenizer's own tokens weigh 1.
    ngram_weight: float = 1.0
    osb_weight: float = 1.0
    # Mail-evidence families (spamd/mail/senders_claimed.py, links.py, attachments.py,
    # bulk.py; tokens weigh 1, as the tokenizer's): who claims to send the message
    # (display name against the From's registrable domain, Reply-To, Return-Path, a
    # claimed DKIM d=, free mail), where its links go, what is attached, how bulk mail
    # announces itself (one-click List-Unsubscribe, Feedback-ID, a mail service provider).
    # Switching one on or off keeps a stored model (it only adds tokens of its own), which
    # learns it from then on (spamd.model.families.settings_that_differ).
    # sender_claims on, the others off (docs/accuracy.md "Mail of the 2020s";
    # scripts/accuracy/ablate_model.py, geometric mean of the (1-ROCA)% ratios to the defaults
    # without it, full / errors / people seeds 1, 2, 3): modern-dev's 10 streams
    # sender_claims 0.632 / 0.981 / 0.962 / 0.964 / 0.989, bulk_marks 0.569 / 0.939 /
    # 0.915 / 0.935 / 1.030, link_targets 0.963 / 0.988 / 0.987 / 0.946 / 1.015,
    # attachment_kinds 0.990 / 1.034 / 1.007 / 1.000 / 0.995; the 20 development streams
    # sender_claims 0.954 / 0.996 / 0.906 / 0.999 / 0.955; earlier, seed 1
    # only: link_targets 0.992 / 1.028 / 1.057, attachment_kinds 0.992 / 1.009 / 1.118,
    # bulk_marks 1.018 / 1.003 / 1.110 (on top of sender_claims, people seeds 1-3: 1.222 /
    # 1.045 / 1.018). Analysis time (scripts/costs/evidence_cost.py, thread
    # CPU time): sender_claims 1.02-1.07x, all four 1.10-1.19x.
    sender_claims: bool = True
    link_targets: bool = False
    attachment_kinds: bool = False
    bulk_marks: bool = False
    # Sender authentication's outcomes as tokens (spamd/mail/auth/outcomes.py: auth:dkim:pass,
    # auth:dmarc:fail:p=reject, auth:aligned:DOMAIN). Needs [auth] enabled; a training then
    # verifies the message too. Off (docs/accuracy.md "Authentication outcomes"; ablate_model.py,
    # geometric mean of the (1-ROCA)% ratios full / errors / people): 20 development streams
    # 0.991 / 1.007 / 0.999 (worst 1.22 under errors, 1.35 under people); modern-dev's 10
    # 0.986 / 0.939 / 0.897, where it tells signed from unsigned mail (no key there verifies).
    # Measured with sender_claims off, before it became the default.
    auth_outcomes: bool = False
    # The structural evidence (the mail-evidence families and the authentication outcomes above)
    # scored apart from the words: the message's score is the words' mean log-odds plus
    # evidence_weight times the evidence tokens' own mean (over them and evidence_neutral more
    # that count 0), so a page of words cannot average it away; a claim (a domain or name the
    # message states unproven: from-org:, link-org:, ...) counts toward spam only. 0: the
    # evidence is among the words, as before. 0.25 (docs/accuracy.md "Evidence apart"; rated per
    # message, evidence_apart_prior 30): 20 development streams, geometric mean of the
    # (1-ROCA)% ratios to 0 (worst stream) full 0.966 (1.02), errors 1.001 (1.29), people seeds
    # 1 / 2 1.211 (4.19) / 1.034 (1.43); hard-dev after modern-dev, full: 8.63 -> 7.48, ham to
    # Junk 9.09% -> 7.27%; its later half after the first: 3.15 -> 2.06, spam to Junk 71.6% ->
    # 76.1%, ham 3.64% -> 1.82%. 0.5 with auth_outcomes: people 1.389 (3.89).
    evidence_weight: float = 0.25
    evidence_neutral: float = 2.0
    # evidence_prior for the evidence scored apart. Undiluted, a sender or mark seen in a
    # handful of trained messages decided verdicts on its own: early in a stream, and where
    # people teach only what was filed wrong. (1-ROCA)% with evidence_weight 0.25, trec07p-dev /
    # spamassassin, people feedback, prior 3 -> 15 -> 30 -> 60: 0.0305 / 0.1415 -> 0.0629 / 0.1586
    # -> 0.0240 / 0.1294 -> 0.0230 / 0.1316 (errors 0.0188 / 0.0540 -> 0.0230 / 0.0530 at 30);
    # hard-dev's later half after modern-dev and its first half, full feedback, 2.31 -> 2.06.
    evidence_apart_prior: float = 30.0
    # Estimation (spamd/model/estimation.py), both off (docs/accuracy.md "Estimation and the
    # training rule"; scripts/accuracy/ablate_model.py, 20 streams, geometric mean of the (1-ROCA)%
    # ratios full / errors / people). Rennie's weight normalization: each class's
    # log P(t|c) divided by its L1 norm over the buckets seen before the difference:
    # 1.41 / 4.05 / 3.74 (spamassassin full 0.0529 -> 0.1323, trec07p-dev 0.0148 -> 0.0152).
    weight_normalization: bool = False
    # Add log(N_spam / N_ham) of the messages learned to the message's log-odds sum
    # (divided by its tokens as they are): 0.999 / 0.987 / 1.023, worst stream 1.60 (people).
    class_prior: bool = False
    # Thick-threshold training (CRM114's, OSBF's): a message whose label its score
    # already says, by at least this |normalized log-odds|, is not learned (the verdict
    # cuts 0.15 / 0.85 lie at 0.315); a wrong, Unsure or less sure one is. inf: learn
    # every message. Full feedback, 20 streams (both corpora and their derived ones,
    # scripts/accuracy/ablate_model.py), geometric mean of the (1-ROCA)% ratios to inf (worst
    # stream): 0.5 0.941 (1.32), 1 0.866 (1.03), 2 0.815 (0.997: better on every stream;
    # trec07p-dev 0.0148 -> 0.0118, spamassassin 0.0529 -> 0.0522, 65% of the mail
    # learned), 3 0.807 (1.002), 4 0.817. People's corrections are wrong or Unsure
    # verdicts, which it always learns.
    train_margin: float = 2.0


@dataclass(frozen=True)
class StoreConfig:
    """Snapshot and journal policy."""

    # Write a snapshot at least this often while training happens.
    snapshot_interval_s: float = 300.0
    # ... and as soon as the journal grows past this size.
    journal_max_bytes: int = 16 * 1024 * 1024
    # Snapshots kept: the newest, and older ones to fall back to if it is damaged.
    snapshots_kept: int = 2
    # Entries of the trained-message ledger; the oldest are forgotten beyond this
    # (trimmed in batches: it may run up to 5% over before a trim). The same cap
    # bounds the verdicts remembered for live accuracy (spamd/people/accuracy.py).
    ledger_max_entries: int = 2_000_000


@dataclass(frozen=True)
class SmtpConfig:
    """The SMTP listener (content filter) and what it does with accepted mail."""

    host: str = "127.0.0.1"
    port: int = 10025
    # "deliver": file into the Maildir by verdict; "relay": hand to next_hop.
    mode: str = "deliver"
    next_hop_host: str = "127.0.0.1"
    next_hop_port: int = 10026
    next_hop_timeout_s: float = 30.0
    max_message_bytes: int = 32 * 1024 * 1024
    max_recipients: int = 100
    idle_timeout_s: float = 300.0
    data_timeout_s: float = 600.0
    # Peers allowed to connect; anything else is refused at connect time.
    # Loopback only by default: spamd is never an open relay.
    allowed_peers: tuple[str, ...] = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class MilterConfig:
    """The Postfix/Sendmail milter listener: headers added in place, optional reject."""

    # "HOST:PORT" to listen on (Postfix: smtpd_milters = inet:HOST:PORT). Empty: no milter.
    # Peers are checked against smtp.allowed_peers, loopback only by default.
    listen: str = ""
    # Spam probability at or above which the message is refused with 554 5.7.1.
    # 0 (the default): never refuse, only mark. Must be above 0.5 otherwise: an
    # empty model says 0.5 for every message.
    reject_at: float = 0.0
    # Bigger messages are not scored but answered 451 4.7.1, so the sender retries and
    # the admin can raise the limit: a 5xx would bounce mail for spamd's own setting.
    # Above Postfix's message_size_limit (10,240,000 by default) it never triggers.
    max_message_bytes: int = 32 * 1024 * 1024
    # Seconds a connection may sit between messages (Postfix keeps one open per SMTP
    # session), and one message (first header to end of body) may take.
    idle_timeout_s: float = 3600.0
    message_timeout_s: float = 600.0


@dataclass(frozen=True)
class SpamcConfig:
    """The SpamAssassin spamc/spamd protocol listener (for Exim, procmail, spamc, aiospamc)."""

    # "HOST:PORT" to listen on (SpamAssassin's own port is 783); empty: off.
    listen: str = ""
    # Let clients train the model with TELL (`spamc -L spam|ham|forget`), as
    # SpamAssassin's spamd --allow-tell. Off: TELL is answered 69 EX_UNAVAILABLE.
    allow_tell: bool = False
    # Peers allowed to connect. Empty: the same as [smtp] allowed_peers.
    allowed_peers: tuple[str, ...] = ()
    # Bigger messages are answered 65 EX_DATAERR. 0: the same as [smtp] max_message_bytes.
    max_message_bytes: int = 0
    # Seconds from connect to the end of the request headers (SpamAssassin's
    # --timeout-tcp is 30), and for the message body to arrive and the answer to go out.
    idle_timeout_s: float = 30.0
    data_timeout_s: float = 300.0
    # Open connections at most. At the cap a new connection takes the place of the
    # one silent longest (answered 75 EX_TEMPFAIL); one whose request is arriving is spared.
    max_connections: int = 1024
    # The threshold clients see in "Spam: True ; 7.3 / 5.0": spamd's spam_threshold
    # probability is shown as exactly this score (README "SpamAssassin clients").
    required_score: float = 5.0


@dataclass(frozen=True)
class LmtpConfig:
    """The LMTP listener (RFC 2033): mail scored once per recipient's user at final delivery."""

    # "HOST:PORT" to listen on (Postfix: virtual_transport = lmtp:inet:HOST:PORT); empty: off.
    listen: str = ""
    # Where scored mail goes: an LMTP server (Dovecot's lmtp) as "HOST:PORT" or an absolute
    # Unix socket path; empty: into spamd's own Maildirs ([maildir]), filed by verdict.
    next_hop: str = ""
    # Seconds for the next hop to answer any one command (its DATA replies included).
    next_hop_timeout_s: float = 60.0
    # Bigger messages are refused for every recipient with 552 (Postfix bounces them: set
    # it above Postfix's message_size_limit, 10,240,000 by default, and it never triggers).
    max_message_bytes: int = 32 * 1024 * 1024
    # Recipients in one transaction; more are answered 452 and Postfix sends them after.
    max_recipients: int = 1000
    # Seconds between commands, and for one message's DATA (its scoring and hand-on included).
    idle_timeout_s: float = 300.0
    data_timeout_s: float = 600.0
    # Peers allowed to connect; anything else is refused at connect time. Loopback only by default.
    allowed_peers: tuple[str, ...] = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class MaildirConfig:
    """Maildir++ delivery, watching and learning from moves."""

    # Maildirs served, each an INBOX with .Junk/.Trash subfolders. Empty: the one
    # under the data directory ("<data_dir>/Maildir").
    paths: tuple[str, ...] = ()
    # A directory holding one Maildir per user ("<root>/<user>/Maildir" or "<root>/<user>").
    root: str = ""
    junk_folder: str = ".Junk"
    trash_folder: str = ".Trash"
    # Score mail that arrives in INBOX new/ without spamd's headers and file it.
    watch_inbox: bool = True
    # Learn from spamd's own verdicts that are not Unsure (never over a user's correction).
    # Off: it learns every mistake nobody corrects. `people` protocol ((1-ROCA)%, seeds
    # 1-3, trec07p-dev / spamassassin, thresholds 0.15 / 0.85): off 0.0390 / 0.191;
    # on, only |log-odds| >= 0.6: 0.0789 / 0.179, >= 1.0: 0.0751 / 0.217; on for every
    # verdict (thresholds 0.25 / 0.75, seed 1): 0.420 / 0.088 against 0.044 / 0.213 off.
    autolearn: bool = False
    # Learn what people leave in place (settled mail, spamd/frontends/maildir/settle.py):
    # a message read and kept this many seconds after it arrived, in INBOX or any folder
    # but Junk and Trash, as ham; one left in Junk that long as spam. Never over a
    # person's decision. 0 turns it off. Three days: people who correct a filing do so
    # within a day or two (unmeasured); the mail already there at the first start is
    # older and is learned at once, so a new install is not Unsure on everything.
    settle_after: float = 259200.0
    # Mail spamd itself filed (its X-Spam-Status carries log_odds=) settles only when
    # that verdict was at least this sure (|normalized log-odds|); mail spamd never
    # scored (what was there before it, or came another way) always does. Settling
    # spamd's own filing also learns the mistakes nobody corrected. In the `people`
    # protocol ((1-ROCA)%, geometric mean of seeds 1-3, trec07p-dev / spamassassin,
    # thresholds 0.15 / 0.85): not settled (inf) 0.0390 / 0.191, margin 0.6 0.0541 /
    # 0.192, 0.3 0.0586 / 0.158; worse on one corpus, better on the other, so inf.
    settle_margin: float = math.inf
    # fsync each delivered message and its directory before answering 250.
    fsync: bool = True
    # Processes that write SMTP deliveries beside the event loop
    # (spamd/frontends/delivery.py): -1 for one when there are two cores or more,
    # 0 for none (the daemon's own threads write them).
    delivery_processes: int = -1


@dataclass(frozen=True)
class UsersConfig:
    """Per-user layers over the shared model (spamd/people/users.py, docs/users.md)."""

    # Distinct tokens one user's layer holds at most; past it the least counted go.
    max_tokens: int = 20_000
    # Users with a layer at most; past it the one trained least recently loses its layer.
    max_users: int = 10_000
    # Where a user's log-odds for a token and everyone else's differ in sign, the shared
    # log-odds move towards the user's by n / (n + backoff), n the user's count of the
    # token (about 3 a message): measured in spamd/people/users.py.
    backoff: float = 15.0
    # Score each user's mail as theirs: by where their mail from the message's senders
    # ends up (sender_moves), and with their token layer if token_moves (the layers
    # are built only then). On by default, because
    # people teach by correcting and disagree: measured in docs/users.md.
    score_per_user: bool = True
    # Join the user's token layer to the shared model's per token (backoff). Off by
    # default: over nine lists one user left and another reads (spamassassin and
    # trec07p-dev, scripts/accuracy/multi_user_stream.py), it filed the leaver's copies her
    # way after 5 corrections 16-97% of the time under errors-only feedback (0-97%
    # under full), and cost 1.10x the shared model's (1-ROCA)% per user where users
    # agree (sa; 1.08x on trec); the senders' rule below files all nine 100% her way at
    # 1.00x, and the layer joined to it costs 1.14x (spamd/people/senders.py).
    token_moves: bool = False
    # A user's next message from a sender (List-Id, From address) goes where they
    # moved this many of its messages (into Junk, or out of it), once that is where at
    # least sender_share of the sender's mail to them lies (spamd/people/senders.py); 0: off.
    sender_moves: int = 3
    sender_share: float = 0.8
    # (user, sender) pairs remembered at most; past it the one heard of least recently goes.
    # 100,000 users x 20 rescued senders each, embedded (scripts/scale/users_embedded_scale.py,
    # docs/users.md): about 300 bytes a pair resident and 28 in the snapshot.
    max_senders: int = 2_000_000
    # Delivered messages whose place (inbox or Junk) is remembered, the most recent; a move of
    # an older one counts as delivered to the other side and moved (as a label for mail
    # spamd never filed). About 330 bytes each resident.
    max_delivered: int = 200_000


@dataclass(frozen=True)
class AuthConfig:
    """Sender authentication (spamd/mail/auth/): who really sent a message, for the senders' rule."""

    # Verify DKIM and DMARC (and ARC from trusted sealers) of each scored message, and
    # read trusted Authentication-Results. Off: no sender is authenticated, so a sender a
    # user rescued gets only the bounded push (docs/users.md).
    enabled: bool = True
    # Authentication-Results with one of these authserv-ids (your MTA's, OpenDKIM's,
    # OpenDMARC's) are used as they are, instead of verifying; empty: none trusted.
    trusted_authserv_ids: tuple[str, ...] = ()
    # Received headers your own servers add, counted from the top: only Authentication-Results
    # above the last of them are trusted (RFC 8601 section 5); 0: none.
    trusted_hops: int = 1
    # "ADDRESS", "ADDRESS:PORT" or "[V6]:PORT"; empty: the system's (/etc/resolv.conf).
    nameservers: tuple[str, ...] = ()
    # Seconds of DNS one message may cost in all; past it the rest is a temporary error
    # (authenticates nothing, fails nothing) and the message is scored as it is.
    dns_budget_s: float = 2.0
    # SPF for the SMTP client spamd sees: its own listener's, or the one the MTA reports to
    # the milter (its IP, MAIL FROM, HELO). Only where that client is the sender's server:
    # behind Postfix or another relay spamd's listener sees the relay, and every message
    # would fail SPF. Never for spamc or a Maildir (no session).
    spf: bool = False
    # ARC sealers (d= of the ARC-Seal) whose passing chain vouches for a list's mail.
    trusted_arc_sealers: tuple[str, ...] = ()
    # What a DMARC failure under p=reject does: "score" (reported in X-Spam-Auth and explain,
    # the score unchanged) or "spam" (filed as spam).
    dmarc_reject_action: str = "score"


@dataclass(frozen=True)
class RedisConfig:
    """The shared store: model, ledger and training in one Redis for many daemons (unset: embedded)."""

    # redis://[:password@]HOST:PORT/DB (or rediss://, unix://); a Redis Cluster:
    # redis+cluster://[:password@]HOST:PORT[,HOST:PORT...] (rediss+cluster:// for TLS);
    # a primary under Redis Sentinel: redis+sentinel://[:password@]HOST:PORT[,HOST:PORT...]/MASTERNAME;
    # "" keeps the embedded store.
    url: str = ""
    # Every key spamd writes starts with this, so one Redis can hold several models
    # (on a cluster, wrapped in braces as the keys' hash tag: {spamd:}ham).
    prefix: str = "spamd:"
    # Connect and reply timeout: a hung Redis holds a message at most this long (then 451).
    timeout_s: float = 2.0
    # Training events kept in the Redis stream <prefix>events (approximately: trimmed with ~).
    events_max: int = 100_000
    # A training, a move and a move's sender count are acknowledged only once this many
    # replicas have it (Redis WAIT); 0: once the primary has it (replication is asynchronous).
    replicas_acked: int = 0
    # How long to wait for those replicas; then the request fails as a temporary error
    # (451, exit 75, a Maildir move retried) and its retry applies it once (the ledger).
    replica_timeout_s: float = 2.0


@dataclass(frozen=True)
class ControlConfig:
    # Unix socket for spamctl; relative paths are under the data directory.
    socket: str = "control.sock"


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus /metrics endpoint (spamd/frontends/metrics.py)."""

    # "HOST:PORT" to serve /metrics on, or a bare "PORT" for 127.0.0.1; "" (the
    # default) serves nothing.
    listen: str = ""
    # Peers allowed to scrape; anything else gets no answer. Loopback only by default.
    allowed_peers: tuple[str, ...] = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class WebConfig:
    """The web console (spamd/web/): overview, live accuracy, recent verdicts explained, training."""

    # "HOST:PORT" to serve the console on, or a bare "PORT" for 127.0.0.1; "" (the
    # default) serves nothing.
    listen: str = ""
    # Peers allowed to connect; anything else is disconnected unanswered. Loopback only by default.
    allowed_peers: tuple[str, ...] = ("127.0.0.1", "::1")
    # A password accepted beside the token (`spamctl web-token`), as
    # "scrypt$N$r$p$SALT$HASH" (hex; `spamctl web-token --hash` makes one). Empty: the token only.
    password_hash: str = ""
    # Show each verdict's Subject in the history. Off: it is personal data.
    show_subjects: bool = False
    # Verdicts the history remembers, the newest (about 350 bytes each).
    history_entries: int = 10_000
    # Bytes of the newest scored messages kept so the history can explain them; older
    # verdicts are listed without an explanation.
    history_message_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    # "auto": console on a terminal, JSON otherwise; or "json" / "console".
    format: str = "auto"


@dataclass(frozen=True)
class Config:
    data_dir: Path = DEFAULT_DATA_DIR
    parser: ParserConfig = field(default_factory=ParserConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    smtp: SmtpConfig = field(default_factory=SmtpConfig)
    milter: MilterConfig = field(default_factory=MilterConfig)
    spamc: SpamcConfig = field(default_factory=SpamcConfig)
    lmtp: LmtpConfig = field(default_factory=LmtpConfig)
    maildir: MaildirConfig = field(default_factory=MaildirConfig)
    users: UsersConfig = field(default_factory=UsersConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    log: LogConfig = field(default_factory=LogConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    web: WebConfig = field(default_factory=WebConfig)

    @property
    def state_dir(self) -> Path:
        """Where snapshots, the journal and the lock live."""
        return self.data_dir / "state"

    @property
    def spamc_allowed_peers(self) -> tuple[str, ...]:
        return self.spamc.allowed_peers or self.smtp.allowed_peers

    @property
    def spamc_max_message_bytes(self) -> int:
        return self.spamc.max_message_bytes or self.smtp.max_message_bytes

    @property
    def control_socket(self) -> Path:
        path = Path(self.control.socket).expanduser()
        return path if path.is_absolute() else self.data_dir / path

    def maildirs(self) -> list[Path]:
        """Every Maildir served: configured paths, those under root, or the default one."""
        found = [Path(p).expanduser() for p in self.maildir.paths]
        if self.maildir.root:
            root = Path(self.maildir.root).expanduser()
            if root.is_dir():
                for user_dir in sorted(p for p in root.iterdir() if p.is_dir()):
                    nested = user_dir / "Maildir"
                    # A link is kept as found (not taken for "no Maildir"): the daemon refuses to serve it.
                    found.append(nested if nested.is_dir() or nested.is_symlink() else user_dir)
        if not found:
            found.append(self.data_dir / "Maildir")
        return found


def metrics_address(config: Config) -> tuple[str, int]:
    """Where /metrics is served: `metrics.listen` as (host, port); a bare port is on 127.0.0.1."""
    listen = config.metrics.listen.strip()
    if listen.isdigit():
        listen = f"127.0.0.1:{listen}"
    return parse_host_port(listen, "metrics.listen")


def web_address(config: Config) -> tuple[str, int]:
    """Where the web console is served: `web.listen` as (host, port); a bare port is on 127.0.0.1."""
    listen = config.web.listen.strip()
    if listen.isdigit():
        listen = f"127.0.0.1:{listen}"
    return parse_host_port(listen, "web.listen")
