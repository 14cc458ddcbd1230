"""Accuracy regression guard on the SpamAssassin public corpus and streams derived from it (TREC online protocol).

Runs the same code path as `spamctl eval`. The bounds sit just above what the
defaults reach, so a regression fails CI; the derived streams (spamd_lab.variants)
stand in for mail of other shapes: a parser that loses the body of a message
with no empty line after its headers, or a tokenizer that drops unsegmented
CJK text, fails here even though the corpus as it is would not show it.
"""

from pathlib import Path

import pytest

from spamd.config import Config
from spamd.evaluation.trec import evaluate_index
from spamd_lab.variants import write_variant

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
SPAMASSASSIN_INDEX = CORPORA / "spamassassin" / "index"

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not SPAMASSASSIN_INDEX.exists(), reason=f"corpus not found: {SPAMASSASSIN_INDEX}"),
]


def test_spamassassin_online_accuracy_stays_below_bound():
    results, report = evaluate_index(Config(), SPAMASSASSIN_INDEX)
    assert report.messages == 6046 and report.skipped == 0
    # 0.0529 / 4.00 when written.
    assert report.one_minus_roca_pct < 0.058, report
    assert report.hm_at_sm01_pct < 4.4, report
    # Below bogofilter 1.2.5 on the same protocol (0.108 / 8.67): the floor.
    assert report.one_minus_roca_pct < 0.108 and report.hm_at_sm01_pct < 8.67


# variant: (bound on (1-ROCA)%, bound on hm% at sm%=0.1); spamd when written, and
# bogofilter 1.2.5 on the same stream (scripts/accuracy/compare_bogofilter.py --variants):
DERIVED_BOUNDS = {
    # header-poor: Subject and the MIME fields only. spamd 0.1228 / 8.47, bogofilter 0.262 / 25.3
    # (0.1230 / 8.48 and 0.261 / 25.4 when the 5 messages left with no header were still scored)
    "subject-only": (0.132, 9.3),
    # no empty line after the headers. spamd 0.0546 / 3.93 (0.0973 before the parser fix), bogofilter 0.110 / 16.3
    "no-empty-line": (0.059, 4.4),
    # a tokenized export (Subject line, then lower-cased text). spamd 0.1893 / 15.7, bogofilter 0.698 / 31.8
    "bare-tokenized": (0.200, 17.0),
    # unsegmented CJK text. spamd 0.0795 / 9.01 (0.175 before character pairs), bogofilter 0.190 / 24.2;
    # 0.0707 / 9.78 -> 0.0649 / 10.46 with the evidence scored apart ([model] evidence_weight 0 -> 0.25)
    "cjk": (0.072, 11.0),
}


@pytest.mark.parametrize("variant", sorted(DERIVED_BOUNDS))
def test_derived_streams_stay_below_bound(variant, tmp_path):
    index = write_variant(SPAMASSASSIN_INDEX, variant, tmp_path)
    _, report = evaluate_index(Config(), index)
    # Subject only: 5 ham of the corpus have no Subject, so no header field is left of
    # them, and eval skips them as `spamctl train` refuses them (not a mail message).
    skipped = 5 if variant == "subject-only" else 0
    assert report.messages == 6046 - skipped and report.skipped == skipped
    roca_bound, hm_bound = DERIVED_BOUNDS[variant]
    assert report.one_minus_roca_pct < roca_bound, report
    assert report.hm_at_sm01_pct < hm_bound, report
