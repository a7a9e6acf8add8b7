"""What /metrics and the sample ring cost the driver.

Two measurements, printed and written to ``benchmarks/results/observability.json``:

* **Time per scrape.** A local driver (``local[2]``) with spark-adaptive on runs 1, then
  10 streaming queries (rate source to memory sink, named); ``GET /metrics`` is read
  ``--scrapes`` times on one kept-alive connection, as Prometheus does, and timed from
  request to the last byte. Beside it, ``GET /queries`` (the JSON listing) for scale.
* **Memory held by the sample ring.** In this process, with ``tracemalloc``: one full
  ring (``spark.adaptive.rest.samples.capacity``, 300 by default) of distinct samples,
  the bytes it holds per query, and for 100 queries.

    .venv/bin/python benchmarks/observability.py --scrapes 200
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spark_adaptive.core.streaming.samples import Sample, SampleRing

RESULTS = Path(__file__).resolve().parent / "results"


def ring_bytes(capacity: int) -> int:
    """Bytes one full ring of distinct samples holds (what tracemalloc sees allocated)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ring = SampleRing(capacity)
    for i in range(capacity):
        ring.add(Sample(1.7e9 + i * 2.0, "Executing", 4, 4, 2, 100.0 + i, 110.0 + i,
                        float(i), 1.5 + i / 1000))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(ring) == capacity
    return held


def _timed_gets(url: str, path: str, token: str, n: int) -> tuple[list[float], int]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    times, size = [], 0
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            body = resp.read()
            times.append(time.perf_counter() - t0)
            assert resp.status == 200, (resp.status, body[:200])
            size = len(body)
    finally:
        conn.close()
    return times, size


def scrape_costs(query_counts: list[int], scrapes: int) -> list[dict[str, Any]]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_adaptive

    token = "benchmark"
    spark = (SparkSession.builder.master("local[2]").appName("observability-benchmark")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    out: list[dict[str, Any]] = []
    queries: list[Any] = []
    try:
        rt = spark_adaptive.enable(spark, **{"rest.port": "0", "rest.token": token})
        assert rt.rest is not None
        url = rt.rest.url
        with tempfile.TemporaryDirectory() as tmp:
            for count in query_counts:
                while len(queries) < count:
                    i = len(queries)
                    queries.append(
                        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
                        .writeStream.format("memory").queryName(f"q{i}")
                        .option("checkpointLocation", f"{tmp}/cp{i}")
                        .trigger(processingTime="1 second").start())
                deadline = time.monotonic() + 120
                while any(not q.recentProgress for q in queries):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the queries did not run a batch in 120 s")
                    time.sleep(0.5)
                _timed_gets(url, "/metrics", token, 5)  # warm up
                metrics, metrics_bytes = _timed_gets(url, "/metrics", token, scrapes)
                listing, listing_bytes = _timed_gets(url, "/queries", token, scrapes)
                row = {"queries": count, "scrapes": scrapes,
                       "metrics_ms_median": statistics.median(metrics) * 1000,
                       "metrics_ms_p95": sorted(metrics)[int(0.95 * (scrapes - 1))] * 1000,
                       "metrics_bytes": metrics_bytes,
                       "queries_ms_median": statistics.median(listing) * 1000,
                       "queries_bytes": listing_bytes}
                print(f"{count:>3} queries: /metrics median {row['metrics_ms_median']:.1f} ms, "
                      f"p95 {row['metrics_ms_p95']:.1f} ms, {metrics_bytes} bytes; "
                      f"/queries median {row['queries_ms_median']:.1f} ms", flush=True)
                out.append(row)
            for q in queries:
                q.stop()
    finally:
        spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--queries", default="1,10", help="query counts, comma-separated")
    ap.add_argument("--capacity", type=int, default=300)
    args = ap.parse_args()

    held = ring_bytes(args.capacity)
    print(f"sample ring: {args.capacity} samples hold {held} bytes per query "
          f"({held * 100 / 1e6:.1f} MB for 100 queries)", flush=True)
    rows = scrape_costs([int(x) for x in args.queries.split(",")], args.scrapes)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "observability.json"
    path.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "ring_capacity":
                                args.capacity, "ring_bytes_per_query": held,
                                "scrapes": rows}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
