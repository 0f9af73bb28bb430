"""Scrape a worker's metrics each 0.5 s: DIR-<n>.txt keeps each process's last text, DIR-<n>.series its chosen lines."""
import sys
import time
import urllib.request

port, out = sys.argv[1], sys.argv[2]
KEEP = ("mirror_records_produced_total", "mirror_records_consumed_total", "mirror_backpressure_seconds_total",
        "mirror_transaction_cycles_total", "mirror_transaction_cycle_seconds_sum", "mirror_transaction_cycle_seconds_count",
        "mirror_records_in_flight")
n, seen = 0, False
while True:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        if not seen:
            n += 1
            seen = True
        now = time.time()
        open(f"{out}-{n}.txt", "w").write(f"# at {now:.1f}\n" + text)
        with open(f"{out}-{n}.series", "a") as f:
            for line in text.splitlines():
                if line.startswith(KEEP):
                    f.write(f"{now:.1f} {line}\n")
    except Exception:
        seen = False
    time.sleep(0.5)
