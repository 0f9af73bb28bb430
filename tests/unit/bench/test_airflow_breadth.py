"""bench.airflow_breadth's pure parts: the spec it writes (valid, mostly one-topic mirrors, one DAG file each),
the scheduler log lines it reads, and its summary and tables."""

from __future__ import annotations

import json

from mirror_airflow.dag_factory import render

from bench.airflow_breadth import breadth_spec, dag_ids, mirror_names, topics_of
from bench.airflow_probe import loop_durations_ms, summary
from bench.airflow_report import markdown
from mirror_worker.api import load_entries


def test_the_breadth_spec_is_valid_and_gives_one_dag_file_per_mirror(tmp_path):
    names = mirror_names(100)
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps(breadth_spec("127.0.0.1:1", "127.0.0.1:2", names)))
    entries = load_entries(path)
    assert [e.name for e in entries] == names and all(e.error is None for e in entries)
    assert len({e.config.group_id for e in entries}) == 100
    wide = [n for n in names if len(topics_of(n, int(n[1:]) % 10 == 0)) > 1]
    assert len(wide) == 10  # most mirrors select one topic
    selected = entries[0].config.topic_filter().select({t: None for t in topics_of("b000", True) + ["breadth.b001"]})
    assert sorted(selected) == topics_of("b000", True)
    render(path, tmp_path / "dags")
    assert len(list((tmp_path / "dags").glob("mirror__*.py"))) == 100
    assert len(dag_ids(names)) == 400 and "mirror__b042__lag" in dag_ids(names)


def test_loop_durations_are_read_after_the_offset(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("scheduler | Ran scheduling loop in 12.50 ms\n")
    offset = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("scheduler | [debug] Ran scheduling loop in 3.25 ms\nother line\n"
                     "scheduler | Ran scheduling loop in 40.00 ms\n")
    durations, end = loop_durations_ms(log, offset)
    assert durations == [3.25, 40.0] and end == log.stat().st_size


def _results() -> dict:
    phase = {"mirrors": 3, "dags": 12, "seconds": 60, "loop_ms": summary([5, 6]), "loops_per_s": 0.9,
             "cpu_share": {"scheduler": 0.1, "dag-processor": 0.2, "api-server": 0.01, "triggerer": 0.02}}
    look = {"s": 0.5, "mirrors": 100, "still_measuring": 0}
    return {"runs": [{"when": "now", "parts": ["parse"], "host_cpus": 2, "load_average": [1.0]}],
               "mirrors": 100, "topics": 130,
               "parse": {"files": 100, "parse_s_per_file": summary([1.5, 2.0]), "import_errors": [],
                         "all_parsed_s": 200.0, "few": phase, "all": {**phase, "mirrors": 100, "dags": 400}},
               "dashboard": {"cold": look, "kept": [look], "remeasured": [look], "page_remeasured": look,
                             "kept_median_s": 0.5, "remeasured_median_s": 0.5},
               "pause": {"mirrors": ["b001", "b002"], "running_tasks": [["mirror__b002", "run_worker", "default_pool"]],
                         "default_pool_slots": 128, "parallelism": 4, "pause_to_stop_s": 7.0,
                         "rss_mib_per_running_mirror": {"b001": {"task": 300.0, "worker_only": 90.0}},
                         "others_copied_after_pause_s": {"b002": 3.0}, "paused_destination_records": 20}}


def test_summary_and_tables():
    assert summary([]) == {"n": 0}
    assert summary([1, 2, 3, 4, 10]) == {"n": 5, "median": 3, "p95": 10, "max": 10, "sum": 20}
    results = _results()
    text = markdown(results)
    assert "| 100 | 400 | 1.75 / 2 / 2 | 0 | 200 s |" in text
    assert "| 3 mirrors | 12 | 5.5 / 6 | 0.9 | 0.1 / 0.2 / 0.01 / 0.02 |" in text
    assert "| 2 | 1 (of 128) | 4 | 300 / 90 | 7 | 3 | 0 of 20 |" in text


def test_a_merged_run_replaces_only_the_parts_it_measured(tmp_path):
    import json as json_module

    from bench.airflow_report import write_results

    out = tmp_path / "airflow-breadth"
    first = {k: v for k, v in _results().items() if k != "runs"}
    write_results(first, out, ["dashboard", "parse", "pause"])
    written = json_module.loads((tmp_path / "airflow-breadth.json").read_text())
    assert written["parse"] == first["parse"] and len(written["runs"]) == 1
    again = {**first["dashboard"], "kept_median_s": 0.25}
    write_results({"mirrors": 100, "topics": 130, "dashboard": again}, out, ["dashboard"], merge=True)
    merged = json_module.loads((tmp_path / "airflow-breadth.json").read_text())
    assert merged["parse"] == first["parse"] and merged["dashboard"]["kept_median_s"] == 0.25
    assert [run["parts"] for run in merged["runs"]] == [["dashboard", "parse", "pause"], ["dashboard"]]
    assert "| page, samples kept (< 10 s old), median of 5 | 0.25 |" in (tmp_path / "airflow-breadth.md").read_text()
