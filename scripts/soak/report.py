#!/usr/bin/env python3
"""Turn a soak run's Prometheus range queries into a CSV, a table every two
trace-hours, an ASCII plot and a verdict (flat or growing). Called by
scripts/soak/soak.sh; standard library only.

Reads OUT/query/<column>.json (Prometheus query_range answers),
OUT/diagnose_codes.txt and OUT/loadavg.txt; writes OUT/soak.csv and
OUT/summary.md, prints the summary, and exits 1 when something grew.
"""

import argparse
import collections
import csv
import json
import os
import sys

BUCKET_HOURS = 2
# How much a bucket's median may exceed the 2-4 h bucket's (the window is
# full, every buffer has its steady size) in the last bucket before the run
# counts as growing. Medians, because a slow scrape on a busy machine holds
# buffers and connections for a while and lifts the maxima of a flat daemon.
MEMORY_GROWTH = 1.10
COUNT_GROWTH = 2  # goroutines, file descriptors: a leak adds one per request or sample


def load_columns(out, names):
    """{column: {unix time: value}} from the range queries."""
    cols = {}
    for name in names:
        with open(os.path.join(out, "query", name + ".json")) as f:
            answer = json.load(f)
        if answer.get("status") != "success":
            sys.exit(f"query for {name} failed: {answer}")
        series = answer["data"]["result"]
        if len(series) > 1:
            sys.exit(f"query for {name} returned {len(series)} series; want 1")
        cols[name] = {float(t): float(v) for t, v in series[0]["values"]} if series else {}
    return cols


def rows(cols, names, hours):
    """A row at every time the trace time was scraped, up to the given trace
    hours, with trace hours since the first and wall seconds since the start;
    a column without a value then (a rate's first seconds) stays None."""
    times = sorted(cols["trace_time_seconds"])
    if not times:
        sys.exit("no trace time was scraped")
    t0, trace0 = times[0], cols["trace_time_seconds"][times[0]]
    out = []
    for t in times:
        r = {"unix_time": t, "wall_seconds": t - t0,
             "trace_hours": (cols["trace_time_seconds"][t] - trace0) / 3600}
        if r["trace_hours"] > hours:
            break
        r.update({n: cols[n].get(t) for n in names if n not in ("trace_time_seconds", "up")})
        out.append(r)
    return out


def buckets(data):
    """Rows grouped by BUCKET_HOURS of trace time: [(start hour, rows)]."""
    groups = collections.OrderedDict()
    for r in data:
        groups.setdefault(int(r["trace_hours"] // BUCKET_HOURS) * BUCKET_HOURS, []).append(r)
    return list(groups.items())


def values(rs, name):
    return [r[name] for r in rs if r[name] is not None]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def mb(x):
    return f"{x / 1e6:.1f}"


def load_during(load, rs):
    """Mean load average sampled while the bucket's rows were scraped."""
    lo, hi = rs[0]["unix_time"] - 10, rs[-1]["unix_time"]
    xs = [v for t, v in load if lo <= t <= hi]
    return f"{sum(xs) / len(xs):.1f}" if xs else ""


def table(groups, load):
    head = ("| trace hours | wall s | load avg | heap alloc, min MB | heap in use, p50 / max MB "
            "| heap goal, p50 MB | resident, p50 / max MB | goroutines, p50 / max | open fds, p50 / max "
            "| threads, max | window MB / samples | scrape p50 / max ms | CPU, cores |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for start, rs in groups:
        v = lambda n: values(rs, n)
        both = lambda n, f: f"{f(median(v(n)))} / {f(max(v(n)))}"
        count = lambda x: f"{x:.0f}"
        lines.append("| " + " | ".join([
            f"{start}–{start + BUCKET_HOURS}",
            f"{rs[-1]['wall_seconds']:.0f}",
            load_during(load, rs),
            mb(min(v("heap_alloc_bytes"))),
            both("heap_inuse_bytes", mb),
            mb(median(v("heap_goal_bytes"))),
            both("resident_bytes", mb),
            both("goroutines", count),
            both("open_fds", count),
            count(max(v("threads"))),
            f"{mb(max(v('window_bytes')))} / {max(v('window_samples')):.0f}",
            both("scrape_seconds", lambda x: f"{x * 1e3:.1f}"),
            f"{sum(v('cpu_cores')) / len(v('cpu_cores')):.2f}" if v("cpu_cores") else "",
        ]) + " |")
    return "\n".join(lines)


def plot(data, width=72, height=14):
    """Heap in use (h) and resident memory (r) against trace hours."""
    data = [r for r in data if r["resident_bytes"] is not None and r["heap_inuse_bytes"] is not None]
    top = max(r["resident_bytes"] for r in data) * 1.05
    last = data[-1]["trace_hours"] or 1
    grid = [[" "] * width for _ in range(height)]
    for r in data:
        x = min(width - 1, int(r["trace_hours"] / last * (width - 1)))
        for key, mark in (("resident_bytes", "r"), ("heap_inuse_bytes", "h")):
            y = min(height - 1, int(r[key] / top * (height - 1)))
            grid[height - 1 - y][x] = mark
    lines = []
    for i, row in enumerate(grid):
        label = top * (height - 1 - i) / (height - 1)
        lines.append(f"{label / 1e6:6.1f} MB |" + "".join(row))
    lines.append(" " * 10 + "+" + "-" * width)
    lines.append(" " * 11 + f"0 h{'trace hours'.center(width - 10)}{last:.0f} h")
    lines.append(" " * 11 + "h = heap in use, r = resident memory")
    return "\n".join(lines)


def growth(groups):
    """Compare the last bucket's medians with the 2-4 h bucket's: what grew,
    or None when the run is too short to judge."""
    if len(groups) < 3:
        return None
    ref, last = groups[1][1], groups[-1][1]
    p50 = lambda rs, n: median(values(rs, n))
    found = []
    for n in ("heap_inuse_bytes", "heap_goal_bytes", "resident_bytes"):
        if p50(last, n) > MEMORY_GROWTH * p50(ref, n):
            found.append(f"{n} grew from {mb(p50(ref, n))} to {mb(p50(last, n))} MB")
    for n in ("goroutines", "open_fds"):
        if p50(last, n) > p50(ref, n) + COUNT_GROWTH:
            found.append(f"{n} grew from {p50(ref, n):.0f} to {p50(last, n):.0f}")
    return found


def read_counts(path):
    with open(path) as f:
        return collections.Counter(line.strip() for line in f if line.strip())


def read_load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(float(t), float(v)) for t, v in (line.split() for line in f if line.strip())]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--columns", required=True, help="column names, one a line")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--speed", required=True)
    ap.add_argument("--hours", required=True, type=float, help="trace hours to report; later rows are left out")
    a = ap.parse_args()
    names = a.columns.split()
    cols = load_columns(a.out, names)
    data = rows(cols, names, a.hours)
    fields = [k for k in data[0] if k != "unix_time"]
    with open(os.path.join(a.out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(data)

    codes = read_counts(os.path.join(a.out, "diagnose_codes.txt"))
    scrapes = collections.Counter("ok" if v == 1 else "failed" for v in cols["up"].values())
    groups = buckets(data)
    found = growth(groups)
    bad_codes = {c: n for c, n in codes.items() if c not in ("200", "429")}
    if bad_codes:
        found = (found or []) + [f"/diagnose answered {bad_codes}"]
    if found is None:
        result = "not judged: fewer than three 2-hour buckets"
    elif found:
        result = "GROWTH: " + "; ".join(found)
    else:
        result = (f"flat (medians of the last 2 h against 2–4 h: memory within {(MEMORY_GROWTH - 1) * 100:.0f}%, "
                  f"goroutines and fds within {COUNT_GROWTH})")
    summary = "\n".join([
        f"Soak: {a.trace} looped at {a.speed}x for {data[-1]['trace_hours']:.1f} trace hours "
        f"({data[-1]['wall_seconds']:.0f} s wall), Prometheus scraping every second; {len(data)} rows in soak.csv.",
        f"Scrapes over the run (Prometheus's up): {dict(scrapes)}. /diagnose answers: {dict(sorted(codes.items()))}.",
        "",
        table(groups, read_load(os.path.join(a.out, "loadavg.txt"))),
        "",
        "```",
        plot(data),
        "```",
        "",
        "Verdict: " + result,
    ])
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary + "\n")
    print(summary)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
