"""The model on disk: snapshot round trip, journal replay and every recovery path.

Files are damaged the way disks and crashes damage them (cut, flipped, wrong
version); failures are injected at the file layer (a real lock held by another
process, /dev/full under the journal descriptor, RLIMIT_FSIZE), never by mocking.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import ModelConfig, StoreConfig
from spamd.engine.engine import Engine
from spamd.errors import CorruptStateError, StateLockedError, StoreError
from spamd.model.bayes import Label, MultinomialNB, featurize
from spamd.store import (
    JOURNAL_MAGIC,
    Ledger,
    Store,
    TrainingRecord,
    apply_record,
    decode_snapshot,
    encode_snapshot,
    frame_record,
)
from tests import core_helpers as h
from tests.redis_helpers import with_redis

BITS = 10
MODEL = ModelConfig(hash_bits=BITS)
STORE = StoreConfig()


def record(
    seq: int, tokens: list[str], label: Label | None, previous: Label | None = None, key: bytes | None = None
) -> TrainingRecord:
    key = key if key is not None else seq.to_bytes(16, "big")
    return TrainingRecord(seq, key, label, previous, True, "test", featurize(tokens, BITS), 1000.0 + seq, BITS)


def replayed(records: list[TrainingRecord]) -> tuple[MultinomialNB, Ledger]:
    """The state a list of records describes, built without the store."""
    model, ledger = MultinomialNB(MODEL), Ledger(STORE.ledger_max_entries)
    for r in records:
        apply_record(model, ledger, r)
    return model, ledger


def open_store(state_dir: Path, model: ModelConfig = MODEL, **kw) -> Store:
    store = Store(state_dir, model, STORE, durable=kw.pop("durable", False), **kw)
    store.lock()
    return store


def write_journal(state_dir: Path, records: list[TrainingRecord]) -> bytes:
    store = open_store(state_dir)
    store.load()
    for r in records:
        store.append(r)
    store.close()
    return (state_dir / "journal-000000000000.log").read_bytes()


SAMPLE = [
    record(1, ["cheap", "pills", "cheap"], Label.SPAM),
    record(2, ["meeting", "agenda"], Label.HAM),
    record(3, ["cheap", "pills", "cheap"], Label.HAM, previous=Label.SPAM, key=(1).to_bytes(16, "big")),
    record(4, ["meeting", "agenda"], None, previous=Label.HAM, key=(2).to_bytes(16, "big")),
    record(5, ["lunch", "friday", "é"], Label.HAM),
]


# ---------------------------------------------------------------- snapshots


records_strategy = st.lists(
    st.tuples(
        st.lists(st.text("abcdefgh", min_size=1, max_size=3), max_size=12),
        st.sampled_from(list(Label)),
        st.binary(min_size=16, max_size=16),
        st.booleans(),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(
    items=records_strategy,
    seq=st.integers(0, 2**40),
    counters=st.dictionaries(st.text(max_size=8), st.integers(0, 2**40), max_size=3),
)
def test_snapshot_round_trips_exactly(items, seq, counters):
    model, ledger = MultinomialNB(MODEL), Ledger(1000)
    for tokens, label, key, user in items:
        model.learn_one(featurize(tokens, BITS), label)
        ledger.set(key, label, user)
    data = encode_snapshot(model, ledger, seq, counters)
    snap = decode_snapshot(data, MODEL, 1000, "test")
    assert snap.seq == seq and snap.counters == counters
    assert snap.model.state_equals(model)
    assert snap.ledger.equals(ledger)
    assert list(snap.ledger._entries) == list(ledger._entries)  # order too: it decides eviction


def test_snapshot_through_the_store_round_trips(tmp_path):
    config = h.small_config(tmp_path)
    engine = Engine.open(config, durable=True)
    for i in range(30):
        engine.train(h.numbered_message(i), Label(i % 2), "test", user=bool(i % 3))
    path = engine.snapshot()
    model, ledger, seq = h.local_model(engine), h.local_ledger(engine), engine.trainer.seq
    engine.close()
    assert path.name == f"snapshot-{seq:012d}.spamd"
    store = Store(config.state_dir, config.model, config.store)
    store.lock()
    loaded = store.load()
    store.close()
    assert loaded.model.state_equals(model) and loaded.ledger.equals(ledger) and loaded.seq == seq
    assert loaded.recovery.snapshot == str(path) and loaded.recovery.replayed == 0
    assert loaded.recovery.problems == []


def test_snapshot_leaves_no_temp_files(tmp_path):
    config = h.small_config(tmp_path)
    engine = Engine.open(config)
    engine.train(h.numbered_message(1), Label.SPAM, "test")
    engine.snapshot()
    engine.close()
    assert not [p.name for p in config.state_dir.iterdir() if ".tmp" in p.name]


# ---------------------------------------------------------------- journal replay


def test_journal_cut_at_every_byte_replays_the_whole_records(tmp_path):
    data = write_journal(tmp_path / "source", SAMPLE)
    ends = [len(JOURNAL_MAGIC)]
    for r in SAMPLE:
        ends.append(ends[-1] + len(frame_record(r)))
    assert ends[-1] == len(data)
    for cut in range(len(data) + 1):
        state_dir = tmp_path / f"cut{cut}"
        state_dir.mkdir()
        journal = state_dir / "journal-000000000000.log"
        journal.write_bytes(data[:cut])
        store = open_store(state_dir)
        loaded = store.load()
        whole = sum(1 for end in ends[1:] if end <= cut)
        model, ledger = replayed(SAMPLE[:whole])
        assert loaded.model.state_equals(model), cut
        assert loaded.ledger.equals(ledger), cut
        assert loaded.seq == whole
        torn = cut not in (0, *ends)
        assert bool(loaded.recovery.problems) == torn, (cut, loaded.recovery.problems)
        if torn:
            good = max([0] + [e for e in ends if e <= cut])
            assert journal.read_bytes() == data[: max(good, len(JOURNAL_MAGIC))]
            assert (state_dir / f"journal-000000000000.log.torn-{good}").read_bytes() == data[good:cut]
        # The journal is appendable again and the next start is clean.
        store.append(record(whole + 1, ["after"], Label.SPAM))
        store.close()
        store = open_store(state_dir)
        again = store.load()
        store.close()
        assert again.recovery.problems == [] and again.seq == whole + 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=records_strategy, data=st.data())
def test_journal_cut_anywhere_property(tmp_path_factory, items, data):
    records = [record(i + 1, tokens, label, key=key) for i, (tokens, label, key, _) in enumerate(items)]
    journal = write_journal(tmp_path_factory.mktemp("src"), records)
    cut = data.draw(st.integers(0, len(journal)))
    state_dir = tmp_path_factory.mktemp("cut")
    (state_dir / "journal-000000000000.log").write_bytes(journal[:cut])
    store = open_store(state_dir)
    loaded = store.load()
    store.close()
    whole, end = 0, len(JOURNAL_MAGIC)
    for r in records:
        end += len(frame_record(r))
        if end > cut:
            break
        whole += 1
    model, ledger = replayed(records[:whole])
    assert loaded.model.state_equals(model) and loaded.ledger.equals(ledger) and loaded.seq == whole


def test_damaged_record_in_the_middle_is_refused(tmp_path):
    data = bytearray(write_journal(tmp_path, SAMPLE))
    second = len(JOURNAL_MAGIC) + len(frame_record(SAMPLE[0]))
    data[second + 12] ^= 0xFF  # inside the second record's payload: its CRC fails
    journal = tmp_path / "journal-000000000000.log"
    journal.write_bytes(bytes(data))
    store = open_store(tmp_path)
    with pytest.raises(CorruptStateError) as e:
        store.load()
    store.close()
    assert str(journal) in str(e.value) and f"byte {second}" in str(e.value)
    assert journal.read_bytes() == bytes(data)  # nothing cut, nothing replaced


def test_torn_tail_in_an_older_segment_is_refused(tmp_path):
    data = write_journal(tmp_path, SAMPLE[:2])
    (tmp_path / "journal-000000000000.log").write_bytes(data[:-3])
    (tmp_path / "journal-000000000002.log").write_bytes(JOURNAL_MAGIC)
    store = open_store(tmp_path)
    with pytest.raises(CorruptStateError, match="journal-000000000000.log: ends in a torn record"):
        store.load()
    store.close()


def test_missing_records_between_segments_are_refused(tmp_path):
    write_journal(tmp_path, SAMPLE[:2])
    later = tmp_path / "journal-000000000004.log"
    later.write_bytes(JOURNAL_MAGIC + frame_record(record(5, ["x"], Label.HAM)))
    store = open_store(tmp_path)
    with pytest.raises(CorruptStateError, match="jumps from record 2 to 5"):
        store.load()
    store.close()


def test_journal_with_a_foreign_header_is_refused(tmp_path):
    (tmp_path / "journal-000000000000.log").write_bytes(b"NOTSPAMD" + b"\x00" * 40)
    store = open_store(tmp_path)
    with pytest.raises(CorruptStateError, match="bad magic"):
        store.load()
    store.close()


# ---------------------------------------------------------------- snapshots damaged


def trained_engine(data_dir: Path, snapshots: int, per_step: int = 8):
    """An engine with `snapshots` snapshots and training before, between and after them."""
    config = h.small_config(data_dir, snapshots_kept=3)
    engine = Engine.open(config)
    i = 0
    for _ in range(snapshots):
        for _ in range(per_step):
            engine.train(h.numbered_message(i), Label(i % 2), "test")
            i += 1
        engine.snapshot()
    for _ in range(per_step):
        engine.train(h.numbered_message(i), Label(i % 2), "test")
        i += 1
    return config, engine


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    elif how == "truncate":
        del data[len(data) // 2 :]
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "empty"])
def test_damaged_newest_snapshot_falls_back_to_older_plus_journal(tmp_path, how):
    config, engine = trained_engine(tmp_path, snapshots=2)
    expected_model, expected_ledger, seq = h.local_model(engine), h.local_ledger(engine), engine.trainer.seq
    engine.close()
    snaps = sorted(config.state_dir.glob("snapshot-*.spamd"))
    assert len(snaps) == 2
    damage(snaps[-1], how)
    engine = Engine.open(config)
    try:
        assert engine.model.state_equals(expected_model)
        assert h.local_ledger(engine).equals(expected_ledger)
        assert engine.trainer.seq == seq
        assert engine.recovery.snapshot == str(snaps[0])
        assert engine.recovery.replayed == 16
        assert len(engine.recovery.problems) == 1 and str(snaps[-1]) in engine.recovery.problems[0]
        # The next snapshot supersedes the damaged one and the start after it is clean.
        newest = engine.snapshot()
    finally:
        engine.close()
    engine = Engine.open(config)
    engine.close()
    assert engine.recovery.problems == [] and engine.recovery.snapshot == str(newest)


def test_every_snapshot_damaged_refuses_to_start(tmp_path):
    config, engine = trained_engine(tmp_path, snapshots=2)
    engine.close()
    snaps = sorted(config.state_dir.glob("snapshot-*.spamd"))
    for path in snaps:
        damage(path, "flip")
    with pytest.raises(CorruptStateError) as e:
        Engine.open(config)
    message = str(e.value)
    assert all(str(p) in message for p in snaps)
    assert "checksum" in message and "backup" in message
    # Nothing was replaced by an empty model, and the lock was released.
    assert [p.read_bytes() for p in snaps] == [p.read_bytes() for p in sorted(config.state_dir.glob("snapshot-*"))]
    store = open_store(config.state_dir, config.model)
    store.close()


def rewrite_outer(path: Path, **changes) -> None:
    outer = msgpack.unpackb(path.read_bytes(), raw=False)
    outer.update(changes)
    path.write_bytes(msgpack.packb(outer, use_bin_type=True))


def test_snapshot_version_mismatch(tmp_path):
    config, engine = trained_engine(tmp_path, snapshots=1)
    engine.close()
    (snap,) = config.state_dir.glob("snapshot-*.spamd")
    rewrite_outer(snap, version=99)
    with pytest.raises(CorruptStateError) as e:
        Engine.open(config)
    assert str(snap) in str(e.value) and "version 99" in str(e.value)
    rewrite_outer(snap, format="something-else", version=1)
    with pytest.raises(CorruptStateError, match="not a spamd snapshot"):
        Engine.open(config)


def test_snapshot_hash_bits_mismatch(tmp_path):
    config, engine = trained_engine(tmp_path, snapshots=1)
    engine.close()
    other = h.small_config(tmp_path, hash_bits=14)
    with pytest.raises(CorruptStateError) as e:
        Engine.open(other)
    assert "hash_bits = 12" in str(e.value) and "14" in str(e.value)
    assert "snapshot-" in str(e.value)


def test_prune_keeps_what_recovery_needs(tmp_path):
    config, engine = trained_engine(tmp_path, snapshots=5, per_step=3)
    expected = engine.model
    engine.close()
    snaps = sorted(config.state_dir.glob("snapshot-*.spamd"))
    assert len(snaps) == config.store.snapshots_kept == 3
    # The oldest kept snapshot alone, plus the journal, still rebuilds everything.
    for path in snaps[1:]:
        damage(path, "flip")
    engine = Engine.open(config)
    engine.close()
    assert engine.model.state_equals(expected) and engine.recovery.snapshot == str(snaps[0])


# ---------------------------------------------------------------- lock and write failures


def test_lock_held_by_another_process(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import fcntl, sys
            f = open({str(state_dir / "lock")!r}, "a+b")
            fcntl.flock(f, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.read()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None  # stdout=PIPE
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateLockedError, match=str(state_dir)):
            Engine.open(h.small_config(tmp_path))
    finally:
        holder.communicate("", timeout=10)
    Engine.open(h.small_config(tmp_path)).close()  # free again once it exits


def test_second_engine_in_the_same_process_is_refused(tmp_path):
    config = h.small_config(tmp_path)
    engine = Engine.open(config)
    try:
        with pytest.raises(StateLockedError):
            Engine.open(config)
    finally:
        engine.close()


def test_journal_append_on_a_full_disk(tmp_path):
    """/dev/full under the journal's descriptor: every write fails with ENOSPC."""
    config = h.small_config(tmp_path)
    engine = Engine.open(config)
    for i in range(5):
        engine.train(h.numbered_message(i), Label(i % 2), "test")
    before = MultinomialNB(config.model)
    apply_all = h.local_model(engine)
    before.counts[:] = apply_all.counts
    before.token_totals[:] = apply_all.token_totals
    before.doc_totals[:] = apply_all.doc_totals
    before.distinct = apply_all.distinct
    store = engine.store
    assert isinstance(store, Store) and store.journal_path is not None and store._journal_fd is not None
    journal = store.journal_path.read_bytes()
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, store._journal_fd)
    finally:
        os.close(full)
    with pytest.raises(StoreError, match="disk full.*nothing was learned"):
        engine.train(h.numbered_message(99), Label.SPAM, "test")
    assert engine.model.state_equals(before) and engine.trainer.seq == 5
    assert engine.trainer.label_of(engine.classifier.analyze(h.numbered_message(99)).key) is None
    engine.close()
    assert store.journal_path.read_bytes() == journal
    engine = Engine.open(config)
    engine.close()
    assert engine.model.state_equals(before) and engine.recovery.problems == []


def test_journal_append_past_the_file_size_limit(tmp_path):
    """RLIMIT_FSIZE in a child: the append is cut part-way (EFBIG), rolled back, reported."""
    script = textwrap.dedent(f"""
        import json, os, resource, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from spamd.engine.engine import Engine
        from spamd.errors import StoreError
        from spamd.model.bayes import Label
        from tests import core_helpers as h
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        engine = Engine.open(h.small_config(Path({str(tmp_path)!r})))
        for i in range(5):
            engine.train(h.numbered_message(i), Label(i % 2), "test")
        size = engine.store.journal_bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, resource.RLIM_INFINITY))
        outcome = {{"size": size}}
        try:
            engine.train(h.numbered_message(99, "x " * 200), Label.SPAM, "test")
            outcome["error"] = None
        except StoreError as e:
            outcome["error"] = str(e)
        outcome["seq"] = engine.trainer.seq
        outcome["file"] = os.path.getsize(engine.store.journal_path)
        engine.close()
        print(json.dumps(outcome))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["error"] and "cannot record training" in outcome["error"]
    assert outcome["seq"] == 5
    assert outcome["file"] == outcome["size"]  # the partial frame was cut back off
    engine = Engine.open(h.small_config(tmp_path))
    engine.close()
    assert engine.trainer.seq == 5 and engine.recovery.problems == []
    assert int(engine.model.doc_totals.sum()) == 5


@pytest.mark.parametrize("written, configured", [(14, 10), (10, 14)])
def test_journal_only_state_with_another_hash_bits_is_refused(tmp_path, written, configured):
    # Before the first snapshot only the journal holds the state; its records name
    # their hash_bits, so replay into a smaller (IndexError) or larger (silently wrong
    # buckets) model is refused, naming the file and the setting.
    engine = Engine.open(h.small_config(tmp_path, hash_bits=written))
    for i in range(3):
        engine.train(h.numbered_message(i), Label.SPAM, "test")
    engine.close()
    with pytest.raises(
        CorruptStateError,
        match=f"journal-000000000000.log: record 1 .*hash_bits = {written}, the config says {configured}",
    ):
        Engine.open(h.small_config(tmp_path, hash_bits=configured))


def test_whole_but_undecodable_record_is_refused_not_cut(tmp_path):
    # A record with a right CRC was written whole: treating it as a torn tail would
    # silently drop training (as a format change once did), so it is refused.
    engine = Engine.open(h.small_config(tmp_path))
    engine.train(h.numbered_message(1), Label.SPAM, "test")
    engine.close()
    journal = next((tmp_path / "state").glob("journal-*.log"))
    payload = msgpack.packb({"seq": 2, "something": "else"}, use_bin_type=True)
    with open(journal, "ab") as f:
        f.write(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
    size = journal.stat().st_size
    with pytest.raises(CorruptStateError, match=r"journal-000000000000\.log: record at byte \d+ is whole"):
        Engine.open(h.small_config(tmp_path))
    assert journal.stat().st_size == size  # nothing cut


def test_journal_of_another_format_version_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal-000000000000.log").write_bytes(b"SPAMDJ01" + b"\0" * 40)
    with pytest.raises(CorruptStateError, match="journal format '01', this spamd reads '02'"):
        Engine.open(h.small_config(tmp_path))


def test_torn_tail_kept_aside_until_its_segment_is_pruned(tmp_path):
    config = h.small_config(tmp_path, snapshots_kept=1)
    engine = Engine.open(config)
    engine.train(h.numbered_message(1), Label.SPAM, "test")
    engine.close()
    journal = tmp_path / "state" / "journal-000000000000.log"
    with open(journal, "ab") as f:
        f.write(b"\x40\x00\x00\x00torn")  # a record cut short by a crash
    engine = Engine.open(config)
    aside = list((tmp_path / "state").glob("journal-*.log.torn-*"))
    assert len(aside) == 1 and engine.recovery.problems
    engine.train(h.numbered_message(2), Label.HAM, "test")
    engine.snapshot()  # at seq 2: segment 0 (records 1-2) is needed by no kept snapshot after the next
    engine.train(h.numbered_message(3), Label.HAM, "test")
    engine.snapshot()
    engine.close()
    assert not journal.exists() and not aside[0].exists()


# ---------------------------------------------------------------- export / import, either store


@pytest.fixture(params=["local", "redis", "redis-cluster"])
def open_engine(request, tmp_path):
    """Engines over each store: the embedded one in a state directory, a real Redis or Redis Cluster (each name a prefix)."""
    opened: list[Engine] = []

    def make(name: str) -> Engine:
        config = h.small_config(tmp_path / name)
        if request.param == "redis":
            config = with_redis(config, request.getfixturevalue("redis_plain_url"), prefix=f"{name}:")
        elif request.param == "redis-cluster":
            config = with_redis(config, request.getfixturevalue("redis_cluster_url"), prefix=f"{name}:")
        engine = Engine.open(config, durable=False)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()


def test_export_then_import_is_the_same_state_in_either_store(open_engine):
    source = open_engine("a")
    for i in range(30):
        source.train(h.numbered_message(i), Label(i % 2), "test", user=bool(i % 3))
    source.train(h.numbered_message(4), Label.SPAM, "test")  # a correction: moves to the ledger's end
    source.untrain(h.numbered_message(7), "test")
    exported = source.export_snapshot()
    target = open_engine("b")
    target.import_snapshot(exported, "export of a")
    a = decode_snapshot(exported, source.config.model, 1000, "a")
    b = decode_snapshot(target.export_snapshot(), target.config.model, 1000, "b")
    assert b.model.state_equals(a.model) and b.ledger.equals(a.ledger)
    assert list(b.ledger.as_dict()) == list(a.ledger.as_dict())  # order too: it decides eviction
    assert target.train(h.numbered_message(4), Label.SPAM, "test") == "skipped_repeat"
    with pytest.raises(StoreError, match="import refused, nothing changed"):
        target.import_snapshot(exported[:-10], "a cut export")
    assert target.train(h.numbered_message(4), Label.SPAM, "test") == "skipped_repeat"
