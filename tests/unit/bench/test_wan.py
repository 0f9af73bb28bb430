"""bench.wan's pure parts: how an RTT becomes two latency toxics, the run order, and the table's ratios."""

import pytest

from bench.wan import conditions, goal_lines, markdown, proxy_ports, runs_at, split_rtt, wan_rows


@pytest.mark.parametrize("rtt, expected", [(0, (0, 0)), (25, (12, 13)), (50, (25, 25)), (100, (50, 50))])
def test_an_rtt_is_split_over_both_directions_and_adds_up(rtt, expected):
    assert split_rtt(rtt) == expected
    assert sum(split_rtt(rtt)) == rtt


def test_a_negative_rtt_is_refused():
    with pytest.raises(ValueError, match="round-trip time must be >= 0 ms, got -1"):
        split_rtt(-1)


def test_loopback_is_measured_once_then_each_side_at_each_rtt_above_zero():
    assert conditions(["destination", "source"], [0, 25, 50]) == [
        ("loopback", 0, 0), ("destination", 25, 0), ("destination", 50, 0), ("source", 25, 0), ("source", 50, 0)]


def test_a_loss_adds_one_row_per_side_at_the_goals_rtt_after_the_rest():
    assert conditions(["destination", "source"], [0, 100], loss_pct=1, goal_rtt=50) == [
        ("loopback", 0, 0), ("destination", 100, 0), ("source", 100, 0), ("destination", 50, 1), ("source", 50, 1)]


def test_the_worker_runs_everywhere_and_its_peers_only_where_they_are_compared_without_loss():
    assert runs_at("worker", 200, 0, [0, 50]) and runs_at("worker-eos", 50, 1, [0, 50])
    assert runs_at("mm2", 50, 0, [0, 50]) and runs_at("bare", 0, 0, [0, 50])
    assert not runs_at("mm2", 200, 0, [0, 50])
    assert not runs_at("bare", 50, 1, [0, 50])


def test_the_proxy_ports_are_read_from_the_mirrors_bootstrap_servers():
    assert proxy_ports("127.0.0.1:40001,127.0.0.1:40002") == [40001, 40002]


def test_a_loss_row_is_its_own_row_kept_against_loopback_and_named_in_the_table():
    lossy = [{**_run("destination", 50, "worker", 45_000, 60_000, repeat), "loss_pct": 1} for repeat in (0, 1)]
    rows = wan_rows(RUNS + lossy, ["worker", "mm2"], 1024, [])
    lost = [r for r in rows if r["loss_pct"] == 1]
    assert [(r["system"], r["msgs_per_s"], r["msgs_per_s_kept"], r["msgs_per_s_x_mm2"]) for r in lost] == [
        ("worker", 45_000, 0.41, None)]  # MirrorMaker 2 did not run with the loss: no multiple, no empty mm2 row
    assert len(goal_lines(rows, 50)) == 2  # the goal is judged without loss
    meta = {"date": "d", "cpus": 2, "records": 1000, "record_bytes": 1024, "partitions": 6, "repeats": 2,
            "load_start": [1], "load_end": [2], "latency_labels": [], "goal_rtt": 50, "loss_pct": 1}
    table = markdown(rows, meta)
    assert "| destination, 1% loss | 50 | worker | 45,000 | 60,000 | 41% |" in table
    assert "drops 1% of the packets both ways" in table.splitlines()[0]


def _run(side, rtt, system, msgs, copy, repeat=0):
    return {"side": side, "rtt_ms": rtt, "system": system, "record_bytes": 1024, "repeat": repeat,
            "msgs_per_s": msgs, "copy_msgs_per_s": copy, "p50_ms_10000": 9.0, "p99_ms_10000": 20.0}


RUNS = [
    _run("loopback", 0, "worker", 100_000, 200_000), _run("loopback", 0, "worker", 120_000, 220_000, 1),
    _run("loopback", 0, "mm2", 40_000, 90_000), _run("loopback", 0, "mm2", 40_000, 90_000, 1),
    _run("destination", 50, "worker", 90_000, 150_000), _run("destination", 50, "worker", 100_000, 150_000, 1),
    _run("destination", 50, "mm2", 30_000, 70_000), _run("destination", 50, "mm2", 34_000, 70_000, 1),
]


def test_rows_are_medians_with_the_share_of_loopback_kept_and_the_multiple_of_mm2():
    rows = {(r["side"], r["system"]): r for r in wan_rows(RUNS, ["worker", "mm2"], 1024, ["10000"])}
    worker = rows[("destination", "worker")]
    assert (worker["msgs_per_s"], worker["msgs_per_s_kept"], worker["msgs_per_s_x_mm2"]) == (95_000, 0.86, 2.97)
    assert (worker["copy_msgs_per_s_kept"], worker["copy_msgs_per_s_x_mm2"]) == (0.71, 2.14)
    assert rows[("destination", "mm2")]["msgs_per_s_x_mm2"] is None
    assert rows[("loopback", "worker")]["msgs_per_s_kept"] == 1.0


def test_the_goal_is_judged_per_figure_and_the_table_says_so():
    rows = wan_rows(RUNS, ["worker", "mm2"], 1024, ["10000"])
    assert goal_lines(rows, 50) == [
        "- destination side, 50 ms, msgs/s from launch: worker keeps 86% of loopback (goal >= 80%), "
        "2.97x MirrorMaker 2 (goal >= 2.5x): **met**",
        "- destination side, 50 ms, copy msgs/s: worker keeps 71% of loopback (goal >= 80%), "
        "2.14x MirrorMaker 2 (goal >= 2.5x): **not met**",
    ]
    meta = {"date": "d", "cpus": 2, "records": 1000, "record_bytes": 1024, "partitions": 6, "repeats": 2,
            "load_start": [1], "load_end": [2], "latency_labels": ["10000"], "goal_rtt": 50}
    table = markdown(rows, meta)
    assert "| destination | 50 | worker | 95,000 | 150,000 | 86% | 71% | 2.97x | 2.14x | 9.0 | 20.0 | - |" in table
    assert "p99 ms @10,000/s" in table
    assert "Changed from the defaults" not in table


def test_the_table_says_what_the_run_changed_from_the_defaults():
    rows = wan_rows(RUNS, ["worker", "mm2"], 1024, [])
    meta = {"date": "d", "cpus": 2, "records": 1000, "record_bytes": 1024, "partitions": 6, "repeats": 2,
            "load_start": [1], "load_end": [2], "latency_labels": [], "goal_rtt": 50,
            "worker_args": "--queue.size 40000", "producer_props": "batch.size=4194304", "consumer_props": "",
            "destination_max_message_bytes": 8388608}
    header = markdown(rows, meta).splitlines()[0]
    assert header.endswith("Changed from the defaults: worker flags `--queue.size 40000`; worker producer properties "
                           "`batch.size=4194304`; destination message.max.bytes `8388608`.")


def test_the_rss_lines_judge_each_side_against_the_goal():
    from bench.wan import rss_lines

    found = [{"side": "destination", "rtt_ms": 50, "records": 10_000_000, "record_bytes": 100, "rss_mib_max": 157.3},
             {"side": "source", "rtt_ms": 50, "records": 10_000_000, "record_bytes": 100, "rss_mib_max": 281.0},
             {"side": "source", "rtt_ms": 50, "records": 10, "record_bytes": 100, "rss_mib_max": None}]
    assert rss_lines(found, 200) == [
        "- peak RSS over 10,000,000 records of 100 B, destination 50 ms away: 157.3 MiB (goal <= 200 MiB): **met**",
        "- peak RSS over 10,000,000 records of 100 B, source 50 ms away: 281.0 MiB (goal <= 200 MiB): **not met**",
        "- peak RSS over 10 records of 100 B, source 50 ms away: - MiB (goal <= 200 MiB): **-**",
    ]


def test_the_both_side_puts_the_round_trip_in_front_of_both_clusters():
    from bench.wan import SIDES, side_clusters

    assert side_clusters("both") == ("source", "destination")
    assert side_clusters("source") == ("source",) and "both" in SIDES
