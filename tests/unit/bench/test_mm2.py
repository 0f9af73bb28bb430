"""bench.mm2's properties: MirrorMaker 2 with and without exactly-once source support (KIP-618); bench.compare's
ratios and medians (bench.report)."""

from bench.report import ratios
from bench.mm2 import mm2_properties


def _props(**kwargs) -> dict[str, str]:
    text = mm2_properties("r1", "src:9092", "dst:9092", ["t1", "t2"], 2, 2500, **kwargs)
    return dict(line.split(" = ", 1) for line in text.splitlines())


def test_exactly_once_enables_support_on_the_target_the_internal_rest_server_and_read_committed():
    props = _props(exactly_once_rest_port=41234)
    assert props["destination.exactly.once.source.support"] == "enabled"
    assert props["dedicated.mode.enable.internal.rest"] == "true"
    assert props["listeners"] == "http://127.0.0.1:41234"
    assert props["r1.consumer.isolation.level"] == "read_committed"
    # The rest of the flow is the at-least-once one, so the two differ only in exactly-once.
    plain = _props()
    assert {k: v for k, v in props.items() if k in plain} == plain


def test_at_least_once_sets_none_of_it():
    props = _props()
    assert not [k for k in props if "exactly.once" in k or "isolation.level" in k or k == "listeners"]
    assert props["r1->destination.topics"] == "t1|t2"


def test_the_ratio_table_sets_mm2_eos_against_mm2_and_worker_eos_against_mm2_eos():
    rows = [{"system": s, "record_bytes": 100, "msgs_per_s": v, "copy_msgs_per_s": None}
            for s, v in (("worker", 300), ("worker-eos", 240), ("mm2", 100), ("mm2-eos", 60))]
    got = {r["ratio"]: r["value"] for r in ratios(rows) if r["figure"] == "msgs_per_s"}
    assert got["mm2-eos/mm2"] == 0.6
    assert got["worker-eos/mm2-eos"] == 4.0
    assert got["worker-eos/worker"] == 0.8


def test_mirrormaker_gets_the_batch_size_the_worker_would_take_for_the_destinations_limit():
    assert _props()["destination.producer.batch.size"] == "1032204"
    assert "destination.producer.max.request.size" not in _props()
    props = _props(destination_limit=8_388_608)
    assert props["destination.producer.batch.size"] == str(8_388_608 - 8_388_608 // 64)
    assert props["destination.producer.max.request.size"] == "8388608"


def test_warm_up_runs_are_kept_but_not_in_the_medians():
    from bench.report import medians
    runs = [{"system": "worker", "record_bytes": 100, "repeat": -1, "msgs_per_s": 10, "warm_up": True},
            {"system": "worker", "record_bytes": 100, "repeat": 0, "msgs_per_s": 300},
            {"system": "worker", "record_bytes": 100, "repeat": 1, "msgs_per_s": 320}]
    [row] = medians(runs, ["worker"], [100], [])
    assert (row["repeats"], row["msgs_per_s"]) == (2, 310)
