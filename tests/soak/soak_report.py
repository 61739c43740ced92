#!/usr/bin/env python3
"""The report and the pass/fail checks of tests/soak/soak.sh (see there for what is checked).

Inputs: bench's JSON summary (with two `intervals`, the halves of the measured run), the RSS
samples ("MS_SINCE_START RSS_KIB" per line), the server's /metrics text after the run, the exit
codes of bench and of the server's SIGTERM. Prints the report; exits 1 on any failed check.
"""
import argparse
import json
import re
import statistics
import sys

MIN_WINDOW_MS = 5000  # RSS is the median of the samples of a window: this long at least


def rss_window(samples, start_ms, end_ms):
    values = [rss for t, rss in samples if start_ms <= t < end_ms]
    return statistics.median(values) if values else None


def read_rss(path):
    samples = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                samples.append((int(parts[0]), int(parts[1])))
    return samples


def server_counts(metrics_text):
    """(non-OK responses, calls in flight) from the Prometheus text; None when absent."""
    non_ok, in_flight = 0, None
    for line in metrics_text.splitlines():
        m = re.match(r'posenc_requests_total\{(.*)\} (\S+)$', line)
        if m and 'code="OK"' not in m.group(1):
            non_ok += int(float(m.group(2)))
        m = re.match(r'posenc_in_flight_requests (\S+)$', line)
        if m:
            in_flight = int(float(m.group(1)))
    return non_ok, in_flight


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--bench', required=True)
    p.add_argument('--bench-rc', type=int, required=True)
    p.add_argument('--rss', required=True)
    p.add_argument('--metrics', required=True)
    p.add_argument('--server-rc', required=True)
    p.add_argument('--warmup-ms', type=int, required=True)
    p.add_argument('--end-ms', type=int, required=True)
    p.add_argument('--max-rss-growth-pct', type=float, required=True)
    p.add_argument('--rss-slack-mib', type=float, required=True)
    p.add_argument('--max-p99-ratio', type=float, required=True)
    a = p.parse_args()

    failures = []
    try:
        with open(a.bench) as f:
            bench = json.load(f)
    except (OSError, ValueError) as e:
        print(f'soak: FAIL: no bench summary ({e}; bench exit code {a.bench_rc})')
        return 1
    lat = bench['latency_ms']
    print(f"calls {bench['calls']}  errors {bench['errors']}  QPS {bench['qps']}  "
          f"MB/s {bench['mb_per_s']}  p50 {lat['p50']} ms  p90 {lat['p90']} ms  "
          f"p99 {lat['p99']} ms  max {lat['max']} ms")
    if bench['errors'] or a.bench_rc != 0:
        failures.append(f"bench: {bench['errors']} errors {bench['errors_by_code']} "
                        f"(exit code {a.bench_rc}): {bench.get('first_error', '')}")

    halves = bench.get('intervals', [])
    if len(halves) != 2:
        failures.append(f'expected two halves from bench --interval, got {len(halves)}')
    else:
        first, second = halves
        for name, h in (('first', first), ('second', second)):
            print(f"{name} half {h['start_s']}-{h['end_s']} s: calls {h['calls']}  "
                  f"QPS {h['qps']}  p50 {h['p50_ms']} ms  p99 {h['p99_ms']} ms  "
                  f"max {h['max_ms']} ms")
        ratio = second['p99_ms'] / first['p99_ms'] if first['p99_ms'] > 0 else float('inf')
        print(f'p99 second/first half: {ratio:.2f} (limit {a.max_p99_ratio})')
        if ratio > a.max_p99_ratio:
            failures.append(f'p99 grew {ratio:.2f}x from the first half to the second')

    samples = read_rss(a.rss)
    window_ms = max(MIN_WINDOW_MS, (a.end_ms - a.warmup_ms) // 8)
    warm = rss_window(samples, a.warmup_ms, a.warmup_ms + window_ms)
    end = rss_window(samples, a.end_ms - window_ms, a.end_ms + 1)
    if warm is None or end is None:
        failures.append(f'too few RSS samples ({len(samples)})')
    else:
        growth = 100.0 * (end - warm) / warm
        growth_mib = (end - warm) / 1024
        peak = max(rss for _, rss in samples)
        print(f'RSS after warm-up {warm / 1024:.1f} MiB, at the end {end / 1024:.1f} MiB, '
              f'growth {growth:+.2f} % = {growth_mib:+.2f} MiB (limit {a.max_rss_growth_pct} % '
              f'and {a.rss_slack_mib} MiB), peak {peak / 1024:.1f} MiB ({len(samples)} samples; '
              f'medians of {window_ms / 1000:.0f} s windows)')
        if growth >= a.max_rss_growth_pct and growth_mib > a.rss_slack_mib:
            failures.append(f'RSS grew {growth:.2f} % ({growth_mib:.2f} MiB) after the warm-up')

    with open(a.metrics) as f:
        non_ok, in_flight = server_counts(f.read())
    print(f'server metrics after the run: non-OK responses {non_ok}, in flight {in_flight}; '
          f'exit code after SIGTERM {a.server_rc}')
    if non_ok != 0:
        failures.append(f'the server answered {non_ok} calls with an error')
    if in_flight != 0:
        failures.append(f'server in-flight gauge {in_flight} after the run (expected 0)')
    if a.server_rc != '0':
        failures.append(f'server exit code after SIGTERM: {a.server_rc} (expected 0)')

    for f in failures:
        print(f'soak: FAIL: {f}')
    print('soak: PASS' if not failures else 'soak: FAILED')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
