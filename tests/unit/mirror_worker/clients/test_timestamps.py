"""The produce-timestamp rule shared by the worker, the catch-up and the check (mirror_worker/clients/timestamps.py)."""

from mirror_worker.clients.timestamps import EPOCH_ZERO_STAMP_MS, expected_destination_timestamp, produced_timestamp


def test_a_timestamp_is_produced_as_it_is_but_the_epoch_goes_out_one_millisecond_later():
    assert produced_timestamp(1_795_927_330_383) == 1_795_927_330_383
    assert produced_timestamp(1) == 1
    assert produced_timestamp(0) == EPOCH_ZERO_STAMP_MS == 1  # librdkafka would read 0 as "now"


def test_a_record_without_a_timestamp_is_left_for_the_producer_to_stamp():
    assert produced_timestamp(-1) == 0


def test_the_check_expects_what_the_copy_produced():
    for stamp in (0, 1, 2, 1_795_927_330_383):
        assert expected_destination_timestamp(stamp) == produced_timestamp(stamp)
