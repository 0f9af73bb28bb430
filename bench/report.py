"""bench.compare's figures from its runs: the medians over the repeats (warm-up runs left out), the ratios
between systems, and the markdown table docs/benchmarks/index.md includes. bench.wan uses the medians and
the rates' names in its own table."""

from __future__ import annotations

import statistics


def _rate_name(label: str) -> str:
    return "half load" if label == "half" else f"{int(label):,}/s"


FIELDS = ("msgs_per_s", "mb_per_s", "copy_msgs_per_s", "cpu_s", "broker_cpu_s", "peak_rss_mib", "first_record_s")


def medians(runs: list[dict], systems: list[str], sizes: list[int], labels: list[str]) -> list[dict]:
    rows = []
    for size in sizes:
        for system in systems:
            ok = [r for r in runs if r["system"] == system and r["record_bytes"] == size and "error" not in r
                  and not r.get("warm_up")]
            row = {"system": system, "record_bytes": size, "repeats": len(ok)}
            for field in FIELDS + tuple(f"p{q}_ms_{label}" for label in labels for q in (50, 99)):
                values = [r[field] for r in ok if r.get(field) is not None]
                row[field] = round(statistics.median(values), 2) if values else None
            rows.append(row)
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    out = []
    by = {(r["system"], r["record_bytes"]): r for r in rows}
    for (system, size), row in by.items():
        if system != "worker":
            continue
        for other in ("mm2", "bare"):
            peer = by.get((other, size))
            for field in ("msgs_per_s", "copy_msgs_per_s"):
                if peer and row.get(field) and peer.get(field):
                    out.append({"record_bytes": size, "ratio": f"worker/{other}", "figure": field,
                                "value": round(row[field] / peer[field], 2)})
    for (system, size), row in by.items():
        one = by.get(("worker@1", size))
        if system == "worker" and one and row is not one:
            for field in ("msgs_per_s", "copy_msgs_per_s"):
                if row.get(field) and one.get(field):
                    out.append({"record_bytes": size, "ratio": "worker/worker@1", "figure": field,
                                "value": round(row[field] / one[field], 2)})
        # From launch only: exactly-once records show up on the destination a transaction at a time, so
        # the first-to-last-record rate of one run swings wildly with where the first commit falls.
        for eos, peer in (("worker-eos", "worker"), ("mm2-eos", "mm2"), ("worker-eos", "mm2-eos")):
            if system == eos and by.get((peer, size), {}).get("msgs_per_s") and row.get("msgs_per_s"):
                out.append({"record_bytes": size, "ratio": f"{eos}/{peer}", "figure": "msgs_per_s",
                            "value": round(row["msgs_per_s"] / by[(peer, size)]["msgs_per_s"], 2)})
    return out


def markdown(rows: list[dict], ratio_rows: list[dict], meta: dict) -> str:
    labels = meta.get("latency_labels", [])
    def fmt(value, digits=0):
        if value is None:
            return "-"
        return f"{value:,.{digits}f}"

    lines = [
        f"Measured {meta['date']} on {meta['cpus']} cores, {meta['records']:,} records per run, {meta['repeats']} "
        f"repeats (medians; {meta.get('warm_up_runs', 0)} uncounted warm-up run(s) first), {meta['procs']} "
        f"process(es)/task(s) per system (`system@N`: N); load average "
        f"{meta['load_start']} at start, {meta['load_end']} at end (a shared machine: figures are noisy).",
        *([f"Brokers: {meta['kafka']['heap_mb']} MiB heap, {meta['kafka']['gc']} collector."]
          if "kafka" in meta else []),
        "",
        "| system | record B | msgs/s | MB/s | copy msgs/s | "
        + "".join(f"p50 ms @{_rate_name(label)} | p99 ms @{_rate_name(label)} | " for label in labels)
        + "CPU s | broker CPU s | peak RSS MiB | first record s |",
        "|---|---:|---:|---:|---:|" + "---:|---:|" * len(labels) + "---:|---:|---:|---:|",
    ]
    for r in rows:
        latencies = "".join(f"{fmt(r.get(f'p50_ms_{label}'), 1)} | {fmt(r.get(f'p99_ms_{label}'), 1)} | "
                            for label in labels)
        lines.append(
            f"| {r['system']} | {r['record_bytes']} | {fmt(r['msgs_per_s'])} | {fmt(r['mb_per_s'], 1)} | "
            f"{fmt(r['copy_msgs_per_s'])} | {latencies}{fmt(r['cpu_s'], 1)} | {fmt(r.get('broker_cpu_s'), 1)} | "
            f"{fmt(r['peak_rss_mib'])} | {fmt(r['first_record_s'], 1)} |"
        )
    if ratio_rows:
        lines += ["", "| record B | ratio | msgs/s (from launch) | copy msgs/s |", "|---:|---|---:|---:|"]
        keyed = {}
        for r in ratio_rows:
            keyed.setdefault((r["record_bytes"], r["ratio"]), {})[r["figure"]] = r["value"]
        for (size, ratio), figures in sorted(keyed.items()):
            lines.append(f"| {size} | {ratio} | {figures.get('msgs_per_s', '-')} | {figures.get('copy_msgs_per_s', '-')} |")
    rss = meta.get("rss")
    if rss:
        quarters = ", ".join(f"{v}" for v in rss["rss_mib_at_quarters"])
        lines += ["", f"Worker RSS over {rss['records']:,} records of 100 B: {quarters} MiB at 25/50/75/100 %; "
                      f"max {rss['rss_mib_max']} MiB."]
    return "\n".join(lines) + "\n"
