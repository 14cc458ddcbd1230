"""SpamAssassin's spamc/spamd protocol, so Exim's `spam =`, spamc, procmail recipes and aiospamc talk to spamd.

A request is `VERB SPAMC/1.x`, header lines, an empty line and the message
(SpamAssassin's spamd/PROTOCOL); the answer is `SPAMD/1.1 <code> <EX_name>`,
headers, an empty line and, by command, the message with spamd's X-Spam-*
headers, a report or a list of symbols. Scoring goes through the Scorer (the
same headers and the same `message_scored` line as mail over SMTP); TELL
trains through Scorer.learn / Scorer.forget (ledger, journal fsynced before the
answer). Nothing here computes a score: it maps spamd's verdict onto
SpamAssassin's score scale and writes the protocol.

The answers follow SpamAssassin 4's spamd.raw byte for byte where a client
reads them (spamc's libspamc.c, Exim's src/spam.c, aiospamc), with these
deliberate differences, each because a client would otherwise be misled:
- REPORT_IFSPAM says `Spam: True/False` (spamd says Yes/No, which spamc's own
  parser reads as "not spam");
- a damaged zlib body is 65 EX_DATAERR and a message over the size cap 65
  EX_DATAERR (spamd: 69 EX_UNAVAILABLE, which `spamc -X` turns into a retry);
- TELL with `Set: local` needs a valid `Message-class` (spamd learns ham);
- answers are never compressed: neither spamc nor aiospamc inflates one, and
  SpamAssassin's spamd does not compress its answers either.

The package: `protocol` reads requests within bounds, `answers` maps a verdict onto
SpamAssassin's scale and writes the replies, `server` is the listener.
"""
