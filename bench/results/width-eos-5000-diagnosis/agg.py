import collections
import sys

tot = collections.defaultdict(lambda: collections.defaultdict(float))
for line in open(sys.argv[1]):
    t, rest = line.split(" ", 1)
    name, value = rest.rsplit(" ", 1)
    base = name.split("{")[0]
    if base == "mirror_transaction_cycles_total":
        base += "{" + ("catch_up" if "catch_up" in name else "interval") + "}"
    tot[float(t)][base] += float(value)
ts = sorted(tot)
t0 = ts[0]
prev = None
for t in ts:
    row = tot[t]
    if prev is None or int(t - t0) // 2 != int(prev - t0) // 2:
        print(f"{t - t0:6.1f} produced {row['mirror_records_produced_total']:9.0f} consumed {row['mirror_records_consumed_total']:9.0f} "
              f"bp {row['mirror_backpressure_seconds_total']:6.2f} cyc_s {row['mirror_transaction_cycle_seconds_sum']:6.2f} "
              f"n {row['mirror_transaction_cycle_seconds_count']:4.0f} cu {row['mirror_transaction_cycles_total{catch_up}']:3.0f} "
              f"iv {row['mirror_transaction_cycles_total{interval}']:4.0f} inflight {row['mirror_records_in_flight']:6.0f}")
    prev = t
