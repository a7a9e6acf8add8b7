"""Streaming apps as users write them, run once without and once with spark-adaptive.

``python differential_app.py --master M --enabled true|false --work DIR --out OUT.json``
runs every scenario below in one SparkSession and writes what each observed:
results of sinks, the StreamingQuery API's answers, listener events, the exceptions
raised and where. ``test_differential.py`` runs it twice and compares the two files
scenario by scenario. Nothing here imports spark_adaptive: with ``--enabled true`` it
is switched on by ``spark.adaptive.enabled`` alone, as a user would.

Each scenario returns a dict of observations that must not depend on timing or on the
partition count: sorted rows, booleans, exception class names, event sequences with
repeats collapsed. Inputs are files, so every run reads the same micro-batches.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

SCHEMA = "id INT, word STRING, n INT"
FILES, ROWS_PER_FILE = 3, 20
WORDS = ("apple", "pear", "plum", "fig", "kiwi")

Scenario = Callable[[SparkSession, str], dict[str, Any]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


# -- inputs and helpers ---------------------------------------------------------------------
def write_input(work: str) -> str:
    """Three JSON files of 20 rows: one micro-batch each with maxFilesPerTrigger=1."""
    path = os.path.join(work, "input")
    os.makedirs(path, exist_ok=True)
    for f in range(FILES):
        with open(os.path.join(path, f"part-{f}.json"), "w") as out:
            for i in range(ROWS_PER_FILE):
                row = f * ROWS_PER_FILE + i
                out.write(json.dumps({"id": row, "word": WORDS[row % len(WORDS)],
                                      "n": row % 7}) + "\n")
    return path


def stream(spark: SparkSession, work: str) -> Any:
    return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
            .json(os.path.join(work, "input")))


def rows(df: Any) -> list[list[Any]]:
    return sorted([list(r) for r in df.collect()], key=repr)


def error(e: BaseException) -> dict[str, Any]:
    """What an exception says to an app: its class and the first line of its message."""
    text = str(e).strip().splitlines()
    return {"class": type(e).__name__, "module": type(e).__module__,
            "first_line": text[0][:200] if text else ""}


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def progress_summary(q: Any) -> dict[str, Any]:
    recent = q.recentProgress
    last = q.lastProgress
    return {
        "last_is_dict": isinstance(last, dict),
        "last_keys": sorted(k for k in (last or {}) if k not in ("observedMetrics",)),
        "last_id_matches": last is not None and last["id"] == str(q.id),
        "last_run_id_matches": last is not None and last["runId"] == str(q.runId),
        "recent_rows": sum(p["numInputRows"] for p in recent),
        "recent_batch_ids_increase": all(
            a["batchId"] < b["batchId"] for a, b in zip(recent, recent[1:], strict=False)),
    }


# -- sinks --------------------------------------------------------------------------------------
@scenario
def memory_sink_aggregation(spark: SparkSession, work: str) -> dict[str, Any]:
    q = (stream(spark, work).groupBy("word").agg(F.count("*").alias("c"), F.sum("n").alias("s"))
         .writeStream.outputMode("complete").format("memory").queryName("word_counts").start())
    q.processAllAvailable()
    out = {"rows": rows(spark.table("word_counts")), "active": q.isActive,
           "name": q.name, **progress_summary(q)}
    q.stop()
    out["active_after_stop"] = q.isActive
    out["exception_after_stop"] = q.exception()
    return out


@scenario
def file_sink_parquet(spark: SparkSession, work: str) -> dict[str, Any]:
    out_dir = os.path.join(work, "parquet-out")
    q = (stream(spark, work).where("n > 2").select("id", "word")
         .writeStream.format("parquet").option("path", out_dir)
         .option("checkpointLocation", os.path.join(work, "parquet-cp")).start())
    q.processAllAvailable()
    q.stop()
    return {"rows": rows(spark.read.parquet(out_dir)),
            "committed_batches": len(os.listdir(os.path.join(work, "parquet-cp", "commits")))}


@scenario
def foreach_batch_sink(spark: SparkSession, work: str) -> dict[str, Any]:
    seen: list[tuple[int, list[list[Any]]]] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.append((batch_id, rows(df)))

    q = (stream(spark, work).groupBy("word").count().writeStream.outputMode("update")
         .foreachBatch(collect).option("checkpointLocation", os.path.join(work, "fb-cp"))
         .start())
    q.processAllAvailable()
    q.stop()
    return {"batches": sorted(seen)}


class RowWriter:
    """A ForeachWriter writing each row to a file of its partition and epoch."""

    def __init__(self, out: str) -> None:
        self.out = out

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.path = os.path.join(self.out, f"{epoch_id}-{partition_id}-{os.getpid()}.jsonl")
        self.rows: list[str] = []
        return True

    def process(self, row: Any) -> None:
        self.rows.append(json.dumps([row["id"], row["word"]]))

    def close(self, error: BaseException | None) -> None:
        if self.rows:
            with open(self.path, "w") as f:
                f.write("\n".join(self.rows) + "\n")


@scenario
def foreach_writer_sink(spark: SparkSession, work: str) -> dict[str, Any]:
    out = os.path.join(work, "foreach-out")
    os.makedirs(out, exist_ok=True)
    q = (stream(spark, work).writeStream.foreach(RowWriter(out))
         .option("checkpointLocation", os.path.join(work, "foreach-cp")).start())
    q.processAllAvailable()
    q.stop()
    written = []
    for path in glob.glob(os.path.join(out, "*.jsonl")):
        with open(path) as f:
            written += [json.loads(line) for line in f]
    return {"rows": sorted(written, key=repr)}


CONSOLE_START, CONSOLE_END = "@@console-sink-start", "@@console-sink-end"


def jvm_print(spark: SparkSession, line: str) -> None:
    """A line on the JVM's stdout, where the console sink prints (in order with it)."""
    out = spark.sparkContext._jvm.System.out  # type: ignore[union-attr]
    out.println(line)
    out.flush()


@scenario
def console_sink(spark: SparkSession, work: str) -> dict[str, Any]:
    # The console sink prints from the JVM, between the two markers; the test reads the
    # process's stdout and compares the printed batches too.
    jvm_print(spark, CONSOLE_START)
    q = (stream(spark, work).groupBy("word").count().writeStream.outputMode("complete")
         .format("console").option("numRows", 50).option("truncate", False).start())
    q.processAllAvailable()
    out = {"active": q.isActive, **progress_summary(q)}
    q.stop()
    jvm_print(spark, CONSOLE_END)
    return out


@scenario
def table_sink(spark: SparkSession, work: str) -> dict[str, Any]:
    q = (stream(spark, work).select("id", "word").writeStream
         .option("checkpointLocation", os.path.join(work, "table-cp")).toTable("words_table"))
    q.processAllAvailable()
    q.stop()
    return {"rows": rows(spark.table("words_table"))}


# -- the StreamingQuery API --------------------------------------------------------------------
@scenario
def await_termination(spark: SparkSession, work: str) -> dict[str, Any]:
    running = (stream(spark, work).writeStream.format("noop")
               .option("checkpointLocation", os.path.join(work, "await-cp")).start())
    out: dict[str, Any] = {"with_timeout_while_running": running.awaitTermination(0.5)}
    try:
        running.awaitTermination(-1)
    except Exception as e:
        out["negative_timeout"] = error(e)
    running.stop()
    out["after_stop"] = running.awaitTermination(1)
    out["after_stop_no_timeout"] = running.awaitTermination()
    once = (stream(spark, work).groupBy("word").count().writeStream.outputMode("complete")
            .format("memory").queryName("once_counts").trigger(availableNow=True).start())
    out["available_now_returns"] = once.awaitTermination()
    out["available_now_active"] = once.isActive
    out["available_now_rows"] = rows(spark.table("once_counts"))
    out["status_keys"] = sorted(once.status)
    out["status_message"] = once.status["message"]
    return out


@scenario
def runtime_failure(spark: SparkSession, work: str) -> dict[str, Any]:
    @F.udf("int")
    def explode_on_42(i: int) -> int:
        if i == 42:
            raise ValueError("row 42 is poison")
        return i

    q = (stream(spark, work).select(explode_on_42("id").alias("id")).writeStream
         .format("noop").option("checkpointLocation", os.path.join(work, "fail-cp")).start())
    out: dict[str, Any] = {}
    try:
        q.awaitTermination()
        out["raised"] = None
    except Exception as e:
        out["raised"] = error(e)
        out["mentions_cause"] = "row 42 is poison" in str(e)
    out["active"] = q.isActive
    exc = q.exception()
    out["exception"] = None if exc is None else type(exc).__name__
    out["exception_mentions_cause"] = exc is not None and "row 42 is poison" in str(exc)
    try:
        q.processAllAvailable()
        out["process_all_after_failure"] = None
    except Exception as e:
        out["process_all_after_failure"] = type(e).__name__
    return out


@scenario
def errors_at_start(spark: SparkSession, work: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cases: dict[str, Callable[[], Any]] = {
        "aggregation_in_append_mode": lambda: stream(spark, work).groupBy("word").count()
        .writeStream.outputMode("append").format("memory").queryName("bad_append").start(),
        "unknown_sink_format": lambda: stream(spark, work).writeStream
        .format("no.such.sink.Format").start(),
        "file_sink_without_path": lambda: stream(spark, work).writeStream.format("parquet")
        .option("checkpointLocation", os.path.join(work, "nopath-cp")).start(),
        "unknown_output_mode": lambda: stream(spark, work).writeStream.outputMode("sometimes")
        .format("noop").start(),
    }
    for name, start in cases.items():
        t0 = time.monotonic()
        try:
            q = start()
            q.stop()
            out[name] = None
        except Exception as e:
            out[name] = error(e)
            out[name + "_at_once"] = time.monotonic() - t0 < 5.0
    first = (stream(spark, work).writeStream.format("memory").queryName("taken_name").start())
    try:
        second = stream(spark, work).writeStream.format("memory").queryName("taken_name").start()
        second.stop()
        out["duplicate_name"] = None
    except Exception as e:
        out["duplicate_name"] = error(e)
    first.stop()
    return out


class Recorder(StreamingQueryListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802
        self.events.append(("started", str(event.id), str(event.runId)))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        self.events.append(("progress", str(event.progress.id), str(event.progress.runId)))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass  # depends on timing

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        self.events.append(("terminated", str(event.id), str(event.runId)))


@scenario
def listener_events(spark: SparkSession, work: str) -> dict[str, Any]:
    recorder = Recorder()
    spark.streams.addListener(recorder)
    try:
        q = (stream(spark, work).groupBy("word").count().writeStream.outputMode("complete")
             .format("memory").queryName("listened").trigger(availableNow=True).start())
        q.awaitTermination()
        wait_until(lambda: any(e[0] == "terminated" for e in recorder.events))
    finally:
        spark.streams.removeListener(recorder)
    # Late events of earlier scenarios' queries may still be on the bus: keep this one's.
    mine = [e for e in recorder.events if e[1] == str(q.id)]
    kinds: list[str] = []
    for kind, _, _ in mine:
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    return {"sequence": kinds,
            "progress_events": sum(e[0] == "progress" for e in mine),
            "run_ids_are_the_run's": all(e[2] == str(q.runId) for e in mine)}


@scenario
def streams_manager(spark: SparkSession, work: str) -> dict[str, Any]:
    spark.streams.resetTerminated()
    a = (stream(spark, work).writeStream.format("noop").queryName("manager_a")
         .option("checkpointLocation", os.path.join(work, "mgr-a")).start())
    b = (stream(spark, work).writeStream.format("noop").queryName("manager_b")
         .option("checkpointLocation", os.path.join(work, "mgr-b")).start())
    out: dict[str, Any] = {
        "get_returns_the_query": spark.streams.get(str(a.id)).id == a.id,
        "get_name": spark.streams.get(str(b.id)).name,
        "active_names": sorted(q.name for q in spark.streams.active),
        "any_termination_while_running": spark.streams.awaitAnyTermination(0.5),
    }
    a.stop()
    out["any_termination_after_a_stop"] = spark.streams.awaitAnyTermination(5)
    out["active_after_a_stop"] = sorted(q.name for q in spark.streams.active)
    b.stop()
    spark.streams.resetTerminated()
    out["any_termination_after_reset"] = spark.streams.awaitAnyTermination(0.5)
    return out


@scenario
def identity_across_app_restarts(spark: SparkSession, work: str) -> dict[str, Any]:
    cp = os.path.join(work, "identity-cp")

    def start() -> Any:
        return (stream(spark, work).groupBy("word").count().writeStream.outputMode("update")
                .format("noop").queryName("identity").option("checkpointLocation", cp).start())

    first = start()
    first.processAllAvailable()
    first_id, first_run = first.id, first.runId
    first.stop()
    second = start()
    second.processAllAvailable()
    out = {"same_id_from_the_checkpoint": second.id == first_id,
           "new_run_id": second.runId != first_run,
           "name": second.name,
           "id_is_a_uuid": len(str(second.id)) == 36,
           "rows_after_restart": sum(p["numInputRows"] for p in second.recentProgress)}
    second.stop()
    return out


@scenario
def session_checkpoint_root(spark: SparkSession, work: str) -> dict[str, Any]:
    root = os.path.join(work, "session-root")
    spark.conf.set("spark.sql.streaming.checkpointLocation", root)
    try:
        q = (stream(spark, work).groupBy("word").count().writeStream.outputMode("complete")
             .format("memory").queryName("rooted").start())
        q.processAllAvailable()
        q.stop()
        unnamed = stream(spark, work).writeStream.format("noop").start()
        unnamed.processAllAvailable()
        unnamed.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    return {"rows": rows(spark.table("rooted")),
            "checkpoint_dirs": len(os.listdir(root))}


# -- the runner -----------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--enabled", choices=("true", "false"), required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--cores-max", default="")
    args = ap.parse_args()
    builder = (SparkSession.builder.master(args.master).appName("differential")
               .config("spark.adaptive.enabled", args.enabled)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.executor.memory", "512m")
               .config("spark.sql.streaming.stateStore.providerClass",
                       "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
               .config("spark.sql.warehouse.dir", os.path.join(args.work, "warehouse")))
    if args.cores_max:
        builder = builder.config("spark.cores.max", args.cores_max)
    spark = builder.getOrCreate()
    if not args.master.startswith("local"):
        # Executors register within seconds; queries started before would be rescaled once
        # they do, which changes nothing observable but the runs listeners see.
        tracker = spark.sparkContext._jsc.sc().statusTracker()
        executors = int(args.cores_max or 1)  # one-core workers' executors
        wait_until(lambda: len(tracker.getExecutorInfos()) > executors, timeout=120)
    write_input(args.work)
    results: dict[str, Any] = {"managed": "spark_adaptive" in sys.modules}
    only = set(filter(None, args.only.split(",")))
    for name, fn in SCENARIOS.items():
        if only and name not in only:
            continue
        work = os.path.join(args.work, name)
        os.makedirs(work, exist_ok=True)
        os.symlink(os.path.join(args.work, "input"), os.path.join(work, "input"))
        t0 = time.monotonic()
        sink = io.StringIO()
        try:
            with redirect_stdout(sink):
                results[name] = fn(spark, work)
        except Exception as e:
            results[name] = {"scenario_failed": error(e), "trace": traceback.format_exc()}
        print(f"{name}: {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True, default=str)
    spark.stop()


if __name__ == "__main__":
    main()
