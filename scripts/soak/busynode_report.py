#!/usr/bin/env python3
"""Summarise the busy-node soak's series (GPUDIAG_BUSY_NODE_SERIES, written
by collectors/busynode_test.go): a markdown table with one row per twelfth
of the run and a verdict comparing the last twelfth's RSS median and heap floor
with the second twelfth's (the first holds the window filling up and the
first epochs' caches). Standard library only; exits 1 when memory grew.
"""

import argparse
import csv
import statistics
import sys

BUCKETS = 12
# How much the last twelfth's median may exceed the second's before the run
# counts as growing (as scripts/soak/report.py's MEMORY_GROWTH).
MEMORY_GROWTH = 1.10
MB = 1024 * 1024
# The fewest rows (one every 10 s) a twelfth's median is judged on: one row
# is one point of the heap's GC sawtooth.
MIN_ROWS = 3


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("series")
    ap.add_argument("--speed", type=float, default=None,
                    help="only for the heading; the CSV's equiv_hours is what the table shows")
    args = ap.parse_args()

    with open(args.series, newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if len(rows) < 2:
        sys.exit(f"{args.series}: {len(rows)} rows; too short to summarise")
    end = rows[-1]["wall_seconds"]
    buckets = [[] for _ in range(BUCKETS)]
    for r in rows:
        buckets[min(BUCKETS - 1, int(r["wall_seconds"] / end * BUCKETS))].append(r)

    def med(rs, col, scale=1.0):
        return statistics.median(r[col] for r in rs) / scale if rs else None

    def top(rs, col, scale=1.0):
        return max(r[col] for r in rs) / scale if rs else None

    # The least heap allocated in a twelfth is the floor of the GC's
    # sawtooth: what survived a collection, the live heap. Medians of the
    # heap in use mix in garbage at whatever point of the cycle a row fell.
    def low(rs, col, scale=1.0):
        return min(r[col] for r in rs) / scale if rs else None

    last = rows[-1]
    speed = f" at {args.speed:g}x" if args.speed else ""
    print(f"### Busy-node soak{speed}: {end:.0f} s wall = {last['equiv_hours']:.2f} sampling hours, "
          f"{len(rows)} rows, {last['churns']:.0f} worker epochs churned, "
          f"{last['worker_pids_seen']:.0f} distinct worker PIDs seen by gpuprocess, "
          f"{last['gpu_samples']:.0f} gpu and {last['gpuprocess_samples']:.0f} gpuprocess samples")
    print()
    print("| equiv hours | rows | RSS p50 MB | RSS max MB | anon p50 MB | heap alloc, min MB | heap in use p50 / max MB "
          "| goroutines max | fds max | window MB | worker PIDs (last sample) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, b in enumerate(buckets):
        lo, hi = end * i / BUCKETS, end * (i + 1) / BUCKETS
        h = f"{lo * last['equiv_hours'] / end:.1f}–{hi * last['equiv_hours'] / end:.1f}"
        print(f"| {h} | {len(b)} | {fmt(med(b, 'vmrss_kib', 1024))} | {fmt(top(b, 'vmrss_kib', 1024))} "
              f"| {fmt(med(b, 'rssanon_kib', 1024))} | {fmt(low(b, 'heap_alloc_bytes', MB))} "
              f"| {fmt(med(b, 'heap_inuse_bytes', MB))} / {fmt(top(b, 'heap_inuse_bytes', MB))} "
              f"| {fmt(top(b, 'goroutines'), 0)} | {fmt(top(b, 'fds'), 0)} "
              f"| {fmt(top(b, 'window_bytes', MB), 2)} | {fmt(b[-1]['gpuprocess_worker_pids'] if b else None, 0)} |")
    print()

    second, final = buckets[1], buckets[-1]
    if len(second) < MIN_ROWS or len(final) < MIN_ROWS:
        print(f"verdict: too short to judge (the second and last twelfths hold {len(second)} and {len(final)} rows; "
              f"a median needs {MIN_ROWS}: run at least {BUCKETS * MIN_ROWS * 10} s)")
        return 0
    rss = med(final, "vmrss_kib") / med(second, "vmrss_kib")
    heap = low(final, "heap_alloc_bytes") / low(second, "heap_alloc_bytes")
    grew = [n for n, r in (("RSS", rss), ("live heap", heap)) if r > MEMORY_GROWTH]
    verdict = "GROWING: " + ", ".join(grew) if grew else "flat"
    print(f"verdict: {verdict} (last twelfth / second twelfth: RSS median {rss:.3f}, heap floor {heap:.3f}; "
          f"limit {MEMORY_GROWTH:.2f})")
    return 1 if grew else 0


if __name__ == "__main__":
    sys.exit(main())
