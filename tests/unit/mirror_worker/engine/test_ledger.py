"""The offset ledger: what is committable, halts and resend holds, positions, seeks and rewinds."""

from mirror_worker.engine.ledger import OffsetLedger

TP = ("orders", 0)


def test_only_checkpointed_offsets_become_committable():
    ledger = OffsetLedger()
    for offset in range(5):
        ledger.handed_over(TP, offset)
    checkpoint = ledger.checkpoint()
    ledger.handed_over(TP, 5)  # handed over after the checkpoint: not covered by its flush
    assert ledger.committable(checkpoint) == {TP: 5}


def test_committable_only_moves_forward():
    ledger = OffsetLedger()
    ledger.handed_over(TP, 9)
    ledger.mark_committed({TP: 10})
    assert ledger.committable(ledger.checkpoint()) == {}
    assert ledger.committable({TP: 7}) == {}


def test_halt_caps_commits_at_the_first_failed_offset():
    ledger = OffsetLedger()
    for offset in range(10):
        ledger.handed_over(TP, offset)
    ledger.halt(TP, 6, "too large")
    ledger.halt(TP, 8, "later failure")  # the earliest failure wins
    assert ledger.committable(ledger.checkpoint()) == {TP: 6}
    assert ledger.halted[TP].reason == "too large"


def test_forget_drops_revoked_partitions():
    ledger = OffsetLedger()
    ledger.handed_over(TP, 1)
    ledger.halt(TP, 1, "x")
    ledger.forget([TP])
    assert ledger.checkpoint() == {} and not ledger.is_halted(TP)


def test_step_over_takes_consumer_positions_past_offsets_without_records():
    ledger = OffsetLedger()
    a, b, c, d, e = ("t", 0), ("t", 1), ("t", 2), ("t", 3), ("t", 4)
    ledger.mark_committed({a: 10, b: 10, c: 10, d: 10})
    ledger.handed_over(a, 9)   # records 0..9 handed over, the commit marker at 10
    ledger.handed_over(b, 14)  # records up to 14 handed over: the consumer cannot be behind that
    ledger.halt(c, 10, "refused")

    taken = ledger.step_over({a: 11, b: 12, c: 11, d: 11, e: 5})

    # d idled at a marker since its start position; e has no position in the ledger at all.
    assert taken == {a: 11, d: 11}
    assert ledger.committable(ledger.checkpoint()) == {a: 11, b: 15, d: 11}


def test_ledger_position_seek_rewind_start():
    ledger = OffsetLedger()
    assert ledger.position(TP) is None
    ledger.start(TP, 3)
    assert ledger.position(TP) == 3 and ledger.committable(ledger.checkpoint()) == {}
    ledger.handed_over(TP, 7)
    assert ledger.position(TP) == 8
    assert ledger.rewind(TP) == 3  # back to the committed start: 3..7 are re-sent
    assert ledger.position(TP) == 3 and ledger.checkpoint() == {}
    ledger.seek(TP, 20)  # records 3..19 skipped (data loss, reset)
    assert ledger.committable(ledger.checkpoint()) == {TP: 20}


def test_a_resend_hold_caps_commits_then_rewinds_to_the_commit():
    ledger = OffsetLedger()
    ledger.start(TP, 0)
    for offset in range(8):
        ledger.handed_over(TP, offset)
    checkpoint = ledger.checkpoint()
    ledger.halt(TP, 5, "not delivered: Local: Message timed out", resend=True)
    assert ledger.resends() == {TP: "not delivered: Local: Message timed out"}
    offsets = ledger.committable(checkpoint)
    assert offsets == {TP: 5}  # nothing at or after the undelivered record
    ledger.mark_committed(offsets)
    assert ledger.rewind(TP) == 5  # re-sent from the commit
    assert ledger.resends() == {} and not ledger.is_halted(TP)


def test_a_refusal_makes_a_resend_hold_final():
    ledger = OffsetLedger()
    ledger.start(TP, 0)
    ledger.halt(TP, 5, "not delivered", resend=True)
    ledger.halt(TP, 6, "destination refused the record")  # later offset, but a refusal: stays halted
    assert ledger.resends() == {}
    ledger.rewind(TP)
    assert ledger.is_halted(TP)
