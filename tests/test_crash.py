"""Power cuts: spamd SIGKILLed at random moments under load, restarted, and checked each time.

8 SMTP clients send tagged messages and `spamctl train` runs beside them; after
each kill the daemon is started again on the same data directory and must come
up by itself, with every message that got a 250 in the Maildir exactly once (at
the next hop, in relay mode), no partial file in new/ or cur/, and every
training spamctl reported done in the model. Some rounds also leave a torn
journal record or a torn newest snapshot, as a power cut could. The long run of
the same loop is scripts/robustness/crash_rounds.py.
"""

from __future__ import annotations

import pytest

from tests.attack_helpers import CrashRounds, NextHop

pytestmark = pytest.mark.slow


def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path):
    rounds = CrashRounds(tmp_path, clients=8, seed=6)
    for number in range(20):
        rounds.run_round(number)
    repeats = rounds.final_check()
    summary = rounds.summary()
    assert summary["kills"] == 20
    # The rounds did real work: mail acknowledged and training reported done in most of them.
    assert summary["messages_acknowledged"] >= 100, summary
    assert summary["trainings_reported_done"] >= 16 * 20 and sum(repeats.values()) == summary["trainings_reported_done"]
    # The simulated power-cut damage was met and recovered from by the daemon itself.
    assert summary["torn_journal_tails_cut"] >= 1 and summary["damaged_snapshots_skipped"] >= 1, summary
    assert not summary["refused_before_kill"], summary


def test_sigkill_in_relay_mode_every_acknowledged_message_reached_the_next_hop(tmp_path):
    with NextHop() as next_hop:
        rounds = CrashRounds(tmp_path, clients=8, relay_port=next_hop.port, seed=7, damage=False)
        for number in range(6):
            rounds.run_round(number, next_hop)
        daemon, _ = rounds.start()
        try:
            rounds.check(6, next_hop, daemon.proc.pid)
        finally:
            daemon.kill()
    summary = rounds.summary()
    assert summary["messages_acknowledged"] >= 30, summary
    assert not summary["refused_before_kill"], summary


def test_temp_files_of_a_write_cut_short_are_removed_at_start(tmp_path):
    # A kill inside write_atomically leaves `.<name>.tmp-<pid>` (up to a snapshot's size
    # each); found by scripts/robustness/crash_rounds.py, where they piled up in the state directory.
    rounds = CrashRounds(tmp_path, clients=0, damage=False)
    state = rounds.state
    state.mkdir(parents=True)
    stale = [state / ".snapshot-000000000007.spamd.tmp-4242", rounds.data / ".maildir-index.msgpack.tmp-4242"]
    for path in stale:
        path.write_bytes(b"half a snapshot")
    daemon, _ = rounds.start()
    try:
        assert not any(path.exists() for path in stale)
        assert daemon.events("snapshot_temp_removed")[0]["files"] == [stale[0].name]
    finally:
        daemon.kill()
