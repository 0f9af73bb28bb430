"""The worker, MirrorMaker 2 and the bare copy loop across a WAN (`make bench-wan`).

    .venv/bin/python -m bench.wan [--records 1000000] [--sizes 100,1024] [--rtts 0,50,100,200]
        [--sides destination,source] [--systems worker,worker-eos,mm2,bare] [--peer-rtts 0,50] [--loss-pct 1]
        [--repeats 2] [--latency-s 5] [--latency-rate 10000] (and bench.compare's flags)
        [--destination-max-message-bytes 8388608 --worker-args "--queue.size 40000"]  (docs/operations/wan.md)

Two one-node Kafka clusters are started for the run (devstack.kafka_cluster, size 1), each broker
advertising its Toxiproxy proxy on the clients' listener. Every mirror reaches both clusters only through
the proxies; the bench itself (preload, the watcher of the destination's high watermarks, the live
producer and the latency probe) uses the brokers' direct listener, so only the mirror's traffic crosses
the WAN and the probes measure the mirror, not their own round trips.

A round-trip time of R ms on one side is a latency toxic of R//2 ms upstream (requests) and R - R//2 ms
downstream (answers) on that cluster's proxy; the other side stays at loopback (side "both": on both clusters'
proxies at once). RTT 0 (both proxies, no
toxic) is the baseline of both sides. Toxiproxy delays the bytes, not TCP itself: the mirror's socket
runs to the proxy over loopback, so this measures what the Kafka protocol does with a round trip (fetches
and produce requests in flight), not a TCP window too small for the bandwidth-delay product.

A loss row (--loss-pct P, 1 by default; 0 for none) puts each side at --goal-rtt and drops P % of the
packets on its proxy's connections both ways (bench/packet_loss.py: iptables, so root; what it models and
what not is said there).

Per condition (side, RTT, loss) the systems run in turn on the same preloaded topic, each as bench.compare
runs it (msgs/s from launch, copy msgs/s from the first record to the last, p50/p99 of live records produced
at --latency-rate while the mirror keeps running). The worker runs in every condition, in both modes;
MirrorMaker 2, the bare loop and a base tree's worker only at --peer-rtts (loopback and the goal's RTT by
default) and without loss. Medians of --repeats. Per record size (--sizes; one preloaded topic each) writes
bench/results/wan-<size>.json (median rows), wan-<size>-runs.json (every run, settings, load) and
wan-<size>.md (the table and the goal check: at --goal-rtt ms the worker keeps >= 80 % of its RTT-0
throughput and >= 2.5x MirrorMaker 2's); with a single size, wan.json, wan-runs.json and wan.md.
Then, per size, the worker's RSS over --rss-records records (10M by default; 0: none), with each side in
turn --goal-rtt ms away (the WAN sizes in effect), sampled each second: <out>-rss.json and a line per side
under the table.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from bench.charts import redraw
from bench.compare import build_parser, rss_over_records
from bench.harness import (
    SYSTEMS,
    Clusters,
    delete_topics,
    latency_labels,
    preload,
    refuse_missing_flags,
    run_one,
    system_procs,
    warm_up,
)
from bench.packet_loss import PacketLoss, refuse_unless_able
from bench.report import _rate_name, medians
from devstack.kafka_cluster import FaultStack
from devstack.toxics import Proxy, proxies, reset

LOOPBACK = "loopback"
KEEPS, BEATS_MM2 = 0.8, 2.5  # the goal (issue 28): share of RTT-0 throughput kept, and times MirrorMaker 2
RSS_GOAL_MIB = 200  # issue 45: the worker's peak RSS over 10M records with the WAN sizes in effect


def split_rtt(rtt_ms: int) -> tuple[int, int]:
    """A round-trip time as (upstream, downstream) latency in whole ms: a request waits one, its answer the other."""
    if rtt_ms < 0:
        raise ValueError(f"round-trip time must be >= 0 ms, got {rtt_ms}")
    return rtt_ms // 2, rtt_ms - rtt_ms // 2


def allow_larger_batches(bootstrap: str, max_message_bytes: int) -> None:
    """Each broker's `message.max.bytes` (a dynamic broker setting): the largest record batch a
    topic without its own `max.message.bytes` accepts. The worker keeps its `batch.size` within it
    (engine/mirrored_producers.py fit_batches), so larger batches on a WAN need the destination to take them first."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[
        ConfigEntry("message.max.bytes", str(max_message_bytes), incremental_operation=AlterConfigOpType.SET)])
        for broker in admin.list_topics(timeout=30).brokers]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)


def conditions(sides: list[str], rtts: list[int], loss_pct: float = 0, goal_rtt: int = 50
               ) -> list[tuple[str, int, float]]:
    """(side, RTT, % packets lost) in run order: the loopback baseline once, then each side at each RTT above 0,
    then, with a loss, each side at the goal's RTT losing that share of its packets."""
    return [(LOOPBACK, 0, 0), *((side, rtt, 0) for side in sides for rtt in rtts if rtt > 0),
            *((side, goal_rtt, loss_pct) for side in sides if loss_pct > 0)]


EVERYWHERE = ("worker", "worker-eos")  # the systems measured in every condition; the others are peers


def runs_at(system: str, rtt: int, loss_pct: float, peer_rtts: list[int]) -> bool:
    """The worker in both modes runs in every condition; the peers (MirrorMaker 2, the bare loop, a base tree's
    worker) only at the RTTs their comparison is judged at (--peer-rtts) and without loss: at 200 ms MirrorMaker 2
    alone would take most of the run."""
    return system in EVERYWHERE or (rtt in peer_rtts and not loss_pct)


def proxy_ports(bootstrap_servers: str) -> list[int]:
    return [int(address.rsplit(":", 1)[1]) for address in bootstrap_servers.split(",") if address]


SIDES = ("source", "destination", "both")


def side_clusters(side: str) -> tuple[str, ...]:
    """The clusters a side's RTT (or loss) is put in front of: one, or both for "both"."""
    return ("source", "destination") if side == "both" else (side,)


def set_rtt(cluster_proxies: list[Proxy], rtt_ms: int) -> None:
    upstream, downstream = split_rtt(rtt_ms)
    for proxy in cluster_proxies:
        proxy.latency(upstream, streams=("upstream",))
        proxy.latency(downstream, streams=("downstream",))


# ------------------------------------------------------------------------------------------- report
def wan_rows(runs: list[dict], systems: list[str], size: int, labels: list[str]) -> list[dict]:
    """Median rows per (side, RTT, system), each with its share of the system's loopback figure and,
    for the worker, its multiple of MirrorMaker 2's at the same side and RTT."""
    rows = []
    for side, rtt, loss in dict.fromkeys((r["side"], r["rtt_ms"], r.get("loss_pct", 0)) for r in runs):
        same = [r for r in runs if (r["side"], r["rtt_ms"], r.get("loss_pct", 0)) == (side, rtt, loss)]
        here = [s for s in systems if any(r["system"] == s for r in same)]
        rows += [{"side": side, "rtt_ms": rtt, "loss_pct": loss, **row}
                 for row in medians(same, here, [size], labels)]
    base = {r["system"]: r for r in rows if r["side"] == LOOPBACK}
    peers = {(r["side"], r["rtt_ms"], r["loss_pct"], r["system"]): r for r in rows}
    for row in rows:
        for field in ("msgs_per_s", "copy_msgs_per_s"):
            row[f"{field}_kept"] = _ratio(row.get(field), base.get(row["system"], {}).get(field))
            mm2 = peers.get((row["side"], row["rtt_ms"], row["loss_pct"], "mm2"), {})
            row[f"{field}_x_mm2"] = _ratio(row.get(field), mm2.get(field)) if row["system"] == "worker" else None
    return rows


def _ratio(value, of) -> float | None:
    return round(value / of, 2) if value and of else None


def goal_lines(rows: list[dict], goal_rtt: int) -> list[str]:
    """Whether the worker meets the goal at `goal_rtt` on each side, for both throughput figures."""
    lines = []
    for row in rows:
        if row["system"] != "worker" or row["rtt_ms"] != goal_rtt or row.get("loss_pct"):
            continue
        for field, name in (("msgs_per_s", "msgs/s from launch"), ("copy_msgs_per_s", "copy msgs/s")):
            kept, times = row.get(f"{field}_kept"), row.get(f"{field}_x_mm2")
            met = kept is not None and times is not None and kept >= KEEPS and times >= BEATS_MM2
            lines.append(f"- {row['side']} side, {goal_rtt} ms, {name}: worker keeps {_pct(kept)} of loopback "
                         f"(goal >= {KEEPS:.0%}), {_x(times)} MirrorMaker 2 (goal >= {BEATS_MM2}x): "
                         f"**{'met' if met else 'not met'}**")
    return lines


def _settings(meta: dict) -> str:
    """What the run changed from the defaults, said in the table's header (the worker's flags, its client
    properties, the destination's batch limit)."""
    said = [f"{name} `{meta[key]}`" for key, name in (
        ("worker_args", "worker flags"), ("producer_props", "worker producer properties"),
        ("consumer_props", "worker consumer properties"),
        ("destination_max_message_bytes", "destination message.max.bytes")) if meta.get(key)]
    return f" Changed from the defaults: {'; '.join(said)}." if said else ""


def where(row: dict) -> str:
    """The side, and the share of its packets lost when the row has a loss."""
    return f"{row['side']}, {row['loss_pct']:g}% loss" if row.get("loss_pct") else row["side"]


def _loss_said(meta: dict) -> str:
    if not meta.get("loss_pct"):
        return ""
    return (f" A loss row drops {meta['loss_pct']:g}% of the packets both ways on that side's proxy connections "
            "(iptables, MSS clamped to 1,448 B; TCP's own round trip stays loopback's: bench/packet_loss.py).")


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _x(value) -> str:
    return "-" if value is None else f"{value}x"


def markdown(rows: list[dict], meta: dict) -> str:
    labels = meta["latency_labels"]

    def fmt(value, digits=0):
        return "-" if value is None else f"{value:,.{digits}f}"

    lines = [
        f"Measured {meta['date']} on {meta['cpus']} cores, {meta['records']:,} records of {meta['record_bytes']} B "
        f"per run, {meta['partitions']} partitions, {meta['repeats']} repeats (medians); load average "
        f"{meta['load_start']} at start, {meta['load_end']} at end (a shared machine: figures are noisy). "
        "RTT through Toxiproxy between the mirror and the named side's cluster (half of it each way); "
        "loopback: both clusters through their proxies, no latency." + _loss_said(meta) + _settings(meta),
        "",
        "| side | RTT ms | system | msgs/s | copy msgs/s | kept (msgs/s) | kept (copy) | x MM2 (msgs/s) | "
        "x MM2 (copy) | "
        + "".join(f"p50 ms @{_rate_name(label)} | p99 ms @{_rate_name(label)} | " for label in labels)
        + "CPU s | peak RSS MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|---:|" * len(labels) + "---:|---:|",
    ]
    for r in rows:
        latencies = "".join(f"{fmt(r.get(f'p50_ms_{label}'), 1)} | {fmt(r.get(f'p99_ms_{label}'), 1)} | "
                            for label in labels)
        lines.append(
            f"| {where(r)} | {r['rtt_ms']} | {r['system']} | {fmt(r['msgs_per_s'])} | {fmt(r['copy_msgs_per_s'])} | "
            f"{_pct(r['msgs_per_s_kept'])} | {_pct(r['copy_msgs_per_s_kept'])} | {_x(r['msgs_per_s_x_mm2'])} | "
            f"{_x(r['copy_msgs_per_s_x_mm2'])} | {latencies}{fmt(r['cpu_s'], 1)} | {fmt(r.get('peak_rss_mib'), 1)} |"
        )
    goal = goal_lines(rows, meta["goal_rtt"])
    if goal:
        lines += ["", f"Goal at {meta['goal_rtt']} ms (issue 28):", *goal]
    return "\n".join(lines) + "\n"


def rss_across(stack, direct: Clusters, mirror: Clusters, size: int, sides: list[str], workdir: Path, args,
               out: Path) -> list[dict]:
    """The worker's RSS over --rss-records records of `size` B with each side in turn --goal-rtt ms away (the WAN
    sizes in effect): <out>-rss.json, and a line per side under the table in <out>.md."""
    found = []
    for side in sides:
        reset(stack.toxiproxy)
        for name in side_clusters(side):
            set_rtt(proxies(stack[name]), args.goal_rtt)
        rss = rss_over_records(direct, args.rss_records, workdir, args, size=size, mirror=mirror)
        found.append({"side": side, "rtt_ms": args.goal_rtt, **rss})
        print(json.dumps({k: v for k, v in found[-1].items() if k != "series"}), flush=True)
    reset(stack.toxiproxy)
    out.with_name(out.name + "-rss.json").write_text(json.dumps(found, indent=2) + "\n")
    table = out.with_suffix(".md")
    if table.exists():
        table.write_text(table.read_text() + "\n" + "\n".join(rss_lines(found, RSS_GOAL_MIB)) + "\n")
    return found


def rss_lines(found: list[dict], goal_mib: float) -> list[str]:
    """One line per side: the worker's peak RSS over the records, against the goal."""
    lines = []
    for row in found:
        peak = row.get("rss_mib_max")
        verdict = "-" if peak is None else ("met" if peak <= goal_mib else "not met")
        lines.append(f"- peak RSS over {row['records']:,} records of {row['record_bytes']} B, {row['side']} "
                     f"{row['rtt_ms']} ms away: {'-' if peak is None else f'{peak:.1f}'} MiB (goal <= "
                     f"{goal_mib:g} MiB): **{verdict}**")
    return lines


def write_results(runs: list[dict], systems: list[str], size: int, sides: list[str], rtts: list[int],
                  load_start: list[float], args, out: Path) -> str:
    """<out>.json (median rows), <out>-runs.json (every run, settings, load), <out>.md (the table); the table."""
    labels = latency_labels(args.latency_rate) if args.latency_s > 0 else []
    rows = wan_rows(runs, systems, size, labels)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(), "records": args.records,
        "record_bytes": size, "repeats": max(r["repeat"] for r in runs) + 1, "partitions": args.partitions,
        "procs": args.procs, "rtts": rtts, "sides": sides, "goal_rtt": args.goal_rtt, "latency_labels": labels,
        "latency_rate": args.latency_rate, "latency_s": args.latency_s, "worker_args": args.worker_args,
        "producer_props": args.producer_props, "consumer_props": args.consumer_props,
        "destination_max_message_bytes": args.destination_max_message_bytes,
        "loss_pct": args.loss_pct, "peer_rtts": args.peer_rtts,
        "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    out.with_name(out.name + "-runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=2) + "\n")
    table = markdown(rows, meta)
    out.with_suffix(".md").write_text(table)
    redraw(out.name, out.parent)  # the docs' charts of this result, when a page shows it (bench/charts.py)
    return table


# ------------------------------------------------------------------------------------------- run
def main(argv: list[str] | None = None) -> int:
    parser = build_parser(__doc__)
    parser.add_argument("--rtts", default="0,50,100,200", help="round-trip times in ms, comma-separated")
    parser.add_argument("--sides", default="destination,source",
                        help="which cluster the RTT is put in front of (source, destination, or both at once)")
    parser.add_argument("--goal-rtt", type=int, default=50, help="the RTT the goal is checked at")
    parser.add_argument("--peer-rtts", default=None,
                        help="RTTs at which the peers (mm2, bare, worker-base) run too; the worker and worker-eos run "
                             "at every one (default: 0 and --goal-rtt)")
    parser.add_argument("--loss-pct", type=float, default=1.0,
                        help="a row per side at --goal-rtt losing this share of its packets (root, iptables); 0: none")
    parser.add_argument("--destination-max-message-bytes", type=int, default=None, metavar="BYTES",
                        help="the destination brokers' message.max.bytes (Kafka's: 1048588): the worker's batches "
                             "follow it (docs/operations/wan.md), and MirrorMaker 2's and the bare loop's with them")
    parser.set_defaults(sizes="100,1024", repeats=2, systems="worker,worker-eos,mm2,bare", latency_rate="10000",
                        rss_records=10_000_000, out=str(Path(__file__).resolve().parent / "results" / "wan"))
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    sides = [s for s in args.sides.split(",") if s]
    rtts = [int(r) for r in args.rtts.split(",") if r]
    args.peer_rtts = [int(r) for r in args.peer_rtts.split(",") if r] if args.peer_rtts else [0, args.goal_rtt]
    if set(sides) - set(SIDES):
        parser.error(f"--sides: unknown {sorted(set(sides) - set(SIDES))}")
    if any(system_procs(s, args.procs)[0] not in SYSTEMS for s in systems):
        parser.error(f"--systems: one of {systems} is unknown")
    refuse_missing_flags(parser, systems, args)
    refuse_unless_able(args.loss_pct)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load_start = [round(x, 2) for x in os.getloadavg()]
    tables = []
    with tempfile.TemporaryDirectory(prefix="bench-wan-") as tmp:
        stack = FaultStack(Path(tmp) / "stack", size=1, heap_mb=args.kafka_heap_mb)
        stack.up()
        try:
            direct = Clusters(stack["source"].direct_bootstrap_servers, stack["destination"].direct_bootstrap_servers)
            mirror = Clusters(stack["source"].bootstrap_servers, stack["destination"].bootstrap_servers)
            args.broker_pids = [node.process.pid() for cluster in ("source", "destination")
                                for node in stack[cluster].nodes if node.process.pid()]
            if args.destination_max_message_bytes:
                allow_larger_batches(direct.destination, args.destination_max_message_bytes)
            workdir = Path(args.logs or tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            print(f"brokers warm: produce->consume p50 {warm_up(direct, args.partitions)} ms", flush=True)
            for size in sizes:
                # One size keeps the file names of before (<out>.md); several write <out>-<size>.md each.
                out = Path(args.out) if len(sizes) == 1 else Path(f"{args.out}-{size}")
                tables.append(run_size(stack, direct, mirror, size, systems, sides, rtts, workdir, args, out,
                                       load_start))
                if args.rss_records > 0:
                    found = rss_across(stack, direct, mirror, size, sides, workdir, args, out)
                    tables[-1] += "\n" + "\n".join(rss_lines(found, RSS_GOAL_MIB)) + "\n"
        finally:
            stack.down()
    print("\n" + "\n".join(tables))
    return 0


def run_size(stack, direct: Clusters, mirror: Clusters, size: int, systems: list[str], sides: list[str],
             rtts: list[int], workdir: Path, args, out: Path, load_start: list[float]) -> str:
    """Every repeat of every condition for one record size, on one preloaded topic; the table, written after each
    repeat (a run cut short by a deadline keeps what it measured)."""
    topic = f"bench-{size}-{uuid.uuid4().hex[:6]}"
    took = preload(direct.source, topic, args.records, size, args.partitions)
    print(f"preloaded {args.records:,} x {size} B into {topic} in {took:.1f}s", flush=True)
    runs: list[dict] = []
    half_rate, table = None, ""
    for repeat in range(args.repeats):
        for side, rtt, loss in conditions(sides, rtts, args.loss_pct, args.goal_rtt):
            reset(stack.toxiproxy)
            for name in side_clusters(side) if rtt else ():
                set_rtt(proxies(stack[name]), rtt)
            lossy = PacketLoss([port for name in side_clusters(side)
                                for port in proxy_ports(stack[name].bootstrap_servers)], loss) if loss else nullcontext()
            with lossy:
                for system in systems:
                    if not runs_at(system, rtt, loss, args.peer_rtts):
                        continue
                    row = run_one(system, size, repeat, direct, topic, workdir, args, half_rate, mirror=mirror)
                    if system == "worker" and half_rate is None and row.get("copy_msgs_per_s"):
                        half_rate = row["copy_msgs_per_s"] / 2
                    runs.append({"side": side, "rtt_ms": rtt, "loss_pct": loss, **row})
                    print(json.dumps(runs[-1]), flush=True)
        table = write_results(runs, systems, size, sides, rtts, load_start, args, out)
    reset(stack.toxiproxy)
    delete_topics(direct.source, topic)
    return table


if __name__ == "__main__":
    sys.exit(main())
