package io.sparkadaptive.shim;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.JobFailed;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.storage.RDDInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A SparkListener that keeps task-level work inside the JVM.
 *
 * <p>Spark calls a listener for every task start and end. Through py4j each of
 * those calls is a round trip to Python, which slows down a job of many short
 * tasks (measurements: docs/benchmarks.md, Listener overhead and Spark itself).
 * This listener handles task events here (it only keeps each stage's task
 * durations, for skew reports and busy time) and hands Python just the events
 * spark-adaptive acts on: executors added, removed and heartbeating, stages
 * submitted and completed, jobs started and ended, the streaming query events
 * Spark posts on the same bus (started, progress, idle, terminated) for every
 * session, so Python needs no StreamingQueryListener of its own, and the
 * application's end (also when Spark stops the SparkContext itself).
 *
 * <p>Events are encoded as one JSON object per line and delivered in batches
 * by a daemon thread, one py4j call per batch, to a {@code Consumer<String>}
 * (a Python object). Listener methods only enqueue: they never block and never
 * throw into Spark's listener bus, also when Python is gone.
 *
 * <p>The queue is bounded, so that a Python side that falls behind (or stalls)
 * never grows the driver's memory:
 * <ul>
 *   <li>heartbeats are coalesced: only each executor's latest waits, whatever
 *       the number that arrived;
 *   <li>stage and job events (the task-level detail) are dropped and counted
 *       ({@link #dropped()}) while {@link #capacity()} events wait, in pairs:
 *       a start is dropped when the queue has no room for it and for the ends
 *       of the starts already passed on, and an end is dropped exactly when its
 *       start was. An end whose start reached Python is never dropped, so
 *       Python never holds a job or stage as running that has ended (which
 *       would keep batch executors for good);
 *   <li>executor, streaming-query and application events are never dropped:
 *       they come at the pace of executors and micro-batches, not of tasks.
 * </ul>
 * The first drop is one WARN line; every drop is counted.
 *
 * <p>Events lost because a delivery to Python failed (Python gone, its handler
 * threw) are counted too ({@link #lost()}, {@link #failures()}); the first
 * failure is logged with its error.
 */
public class AdaptiveListener extends SparkListener {
  private final BlockingQueue<String> queue = new LinkedBlockingQueue<>();
  private final Map<Long, long[]> taskDurations = new ConcurrentHashMap<>();
  private final Map<Long, Integer> taskCounts = new ConcurrentHashMap<>();
  private final AtomicLong delivered = new AtomicLong();
  private final AtomicLong batches = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private final AtomicLong lost = new AtomicLong();
  private final AtomicBoolean warnedDrop = new AtomicBoolean();
  private final AtomicBoolean warnedFailure = new AtomicBoolean();
  /** Guards the four id sets below (Spark's bus calls from one thread; close() from another). */
  private final Object idsLock = new Object();
  /** Jobs and stages whose start was passed on and whose end has not come yet. */
  private final TreeSet<Long> openJobs = new TreeSet<>();
  private final TreeSet<Long> openStages = new TreeSet<>();
  /** Jobs and stages whose start was dropped: their ends are dropped too. */
  private final TreeSet<Long> droppedJobs = new TreeSet<>();
  private final TreeSet<Long> droppedStages = new TreeSet<>();
  /** Each executor's latest heartbeat not yet delivered (executor id to epoch millis). */
  private final Map<String, Long> heartbeats = new ConcurrentHashMap<>();
  private volatile int capacity = 10_000;
  private volatile Consumer<String> sink;
  private volatile Thread dispatcher;
  private volatile boolean running;
  private volatile String lastError = "";
  private int maxBatch = 1000;

  /**
   * The most ids each of the four sets above keeps. An end Spark's own listener bus dropped
   * never comes, so its id would stay; beyond this the oldest (lowest) ids are forgotten.
   */
  static final int TRACKED_IDS = 10_000;
  private static final Logger LOG = LoggerFactory.getLogger(AdaptiveListener.class);

  /** Start delivering batches to {@code sink}. */
  public synchronized void start(Consumer<String> sink) {
    this.sink = sink;
    if (dispatcher != null) {
      return;
    }
    running = true;
    Thread t = new Thread(this::dispatchLoop, "spark-adaptive-shim-dispatch");
    t.setDaemon(true);
    dispatcher = t;
    t.start();
  }

  /** Stop delivering; events still queued are delivered first (bounded wait). */
  public synchronized void close(long timeoutMs) {
    running = false;
    Thread t = dispatcher;
    if (t != null) {
      t.interrupt();
      try {
        t.join(timeoutMs);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    dispatcher = null;
    sink = null;
    queue.clear();
    heartbeats.clear();
    synchronized (idsLock) {
      openJobs.clear();
      openStages.clear();
      droppedJobs.clear();
      droppedStages.clear();
    }
    if (dropped.get() > 0 || lost.get() > 0) {
      LOG.info("spark-adaptive: the listener dropped {} stage and job event(s) while Python "
          + "was behind, and lost {} event(s) in {} failed deliveries", dropped.get(),
          lost.get(), failures.get());
    }
  }

  public long delivered() { return delivered.get(); }
  public long batches() { return batches.get(); }
  public long failures() { return failures.get(); }
  public String lastError() { return lastError; }
  public int queued() { return queue.size() + heartbeats.size(); }
  public long dropped() { return dropped.get(); }
  /** Events in batches whose delivery to Python failed. */
  public long lost() { return lost.get(); }
  public int capacity() { return capacity; }
  public void setCapacity(int n) { capacity = Math.max(1, n); }
  public void setMaxBatch(int n) { maxBatch = Math.max(1, n); }

  private void dispatchLoop() {
    List<String> buf = new ArrayList<>();
    while (running || !queue.isEmpty()) {
      boolean interrupted = false;
      try {
        String first = queue.poll(200, TimeUnit.MILLISECONDS);
        if (first != null) {
          buf.add(first);
          queue.drainTo(buf, maxBatch - 1);
        }
      } catch (InterruptedException e) {
        queue.drainTo(buf, maxBatch);
        interrupted = true;
      }
      // After what is queued, so that an executor's heartbeat follows its ExecutorAdded.
      for (String id : new ArrayList<>(heartbeats.keySet())) {
        Long at = heartbeats.remove(id);
        if (at != null) {
          buf.add(new Json("ExecutorHeartbeat").num("time", at).str("executor_id", id).close());
        }
      }
      if (buf.isEmpty()) {
        if (interrupted) {
          break;
        }
        continue;
      }
      Consumer<String> s = sink;
      if (s != null && !buf.isEmpty()) {
        try {
          s.accept(String.join("\n", buf));
          delivered.addAndGet(buf.size());
          batches.incrementAndGet();
        } catch (Throwable t) {
          // Python went away or its handler failed: count it, never propagate.
          failures.incrementAndGet();
          lost.addAndGet(buf.size());
          lastError = String.valueOf(t);
          if (running && warnedFailure.compareAndSet(false, true)) {
            LOG.warn("spark-adaptive: delivering {} Spark event(s) to Python failed; they are "
                + "lost and counted (spark_adaptive_events_dropped_total), and later failures "
                + "are only counted", buf.size(), t);
          }
        }
      }
      buf.clear();
    }
  }

  /** An executor or query event: always queued. */
  private void emit(Json j) {
    if (running) {
      queue.offer(j.close());
    }
  }

  /**
   * A stage or job start ({@code id} in {@code open}): passed on when the queue has room for
   * it and for the ends of the starts passed on before it (at most half the capacity is kept
   * for those), else dropped, counted and remembered in {@code droppedIds}, so that its end
   * is dropped too.
   */
  private void emitStart(Json j, long id, TreeSet<Long> open, TreeSet<Long> droppedIds) {
    if (!running) {
      return;
    }
    int c = capacity;
    synchronized (idsLock) {
      int reserved = Math.min(openJobs.size() + openStages.size(), c / 2);
      if (queue.size() + reserved + 2 > c) {
        track(droppedIds, id);
      } else {
        track(open, id);
        queue.offer(j.close());
        return;
      }
    }
    dropped.incrementAndGet();
    if (warnedDrop.compareAndSet(false, true)) {
      LOG.warn("spark-adaptive: {} events wait for Python (spark.adaptive.listener.queue"
          + ".capacity {}): stage and job events are dropped, each start with its end, until it "
          + "catches up, and counted in spark_adaptive_events_dropped_total (said once)",
          queue.size(), c);
    }
  }

  /** A stage or job end: dropped exactly when its start was, else always passed on. */
  private void emitEnd(Json j, long id, TreeSet<Long> open, TreeSet<Long> droppedIds) {
    if (!running) {
      return;
    }
    boolean startDropped;
    synchronized (idsLock) {
      open.remove(id);
      startDropped = droppedIds.remove(id);
    }
    if (startDropped) {
      dropped.incrementAndGet();
      return;
    }
    queue.offer(j.close());
  }

  private static void track(TreeSet<Long> set, long id) {
    set.add(id);
    while (set.size() > TRACKED_IDS) {
      set.pollFirst();
    }
  }

  // -- executors --------------------------------------------------------------
  @Override
  public void onExecutorAdded(SparkListenerExecutorAdded e) {
    emit(new Json("ExecutorAdded").num("time", e.time()).str("executor_id", e.executorId())
        .str("host", e.executorInfo().executorHost()).num("cores", e.executorInfo().totalCores()));
  }

  @Override
  public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
    emit(new Json("ExecutorRemoved").num("time", e.time()).str("executor_id", e.executorId())
        .str("reason", e.reason()));
  }

  @Override
  public void onExecutorMetricsUpdate(SparkListenerExecutorMetricsUpdate e) {
    if ("driver".equals(e.execId())) {
      return;
    }
    if (running) {
      heartbeats.put(e.execId(), System.currentTimeMillis());
    }
  }

  // -- stages and jobs -----------------------------------------------------------
  @Override
  public void onStageSubmitted(SparkListenerStageSubmitted e) {
    StageInfo s = e.stageInfo();
    taskDurations.put(key(s), new long[Math.max(1, s.numTasks())]);
    taskCounts.put(key(s), 0);
    emitStart(new Json("StageSubmitted").num("time", optLong(s.submissionTime(), now()))
        .num("stage_id", s.stageId()).num("attempt", s.attemptNumber())
        .num("num_tasks", s.numTasks()).str("name", s.name())
        .str("job_group", group(e.properties())), key(s), openStages, droppedStages);
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd e) {
    long k = ((long) e.stageId() << 16) | (e.stageAttemptId() & 0xffff);
    long[] d = taskDurations.get(k);
    if (d == null || e.taskInfo() == null) {
      return;
    }
    synchronized (d) {
      int n = taskCounts.getOrDefault(k, 0);
      if (n < d.length) {
        d[n] = e.taskInfo().duration();
        taskCounts.put(k, n + 1);
      }
    }
  }

  @Override
  public void onStageCompleted(SparkListenerStageCompleted e) {
    StageInfo s = e.stageInfo();
    TaskMetrics m = s.taskMetrics();
    long submitted = optLong(s.submissionTime(), -1);
    long completed = optLong(s.completionTime(), now());
    Json j = new Json("StageCompleted").num("time", completed).num("stage_id", s.stageId())
        .num("attempt", s.attemptNumber()).num("num_tasks", s.numTasks()).str("name", s.name())
        .num("input_bytes", m == null ? 0 : m.inputMetrics().bytesRead())
        .num("shuffle_read_bytes", m == null ? 0 : m.shuffleReadMetrics().totalBytesRead())
        .num("shuffle_write_bytes", m == null ? 0 : m.shuffleWriteMetrics().bytesWritten())
        .dbl("duration", submitted < 0 ? 0.0 : (completed - submitted) / 1000.0);
    if (s.failureReason().isDefined()) {
      j.str("failure", s.failureReason().get());
    }
    String plan = planOf(s);
    if (plan != null) {
      j.str("plan", plan);
    }
    long k = key(s);
    long[] d = taskDurations.remove(k);
    Integer n = taskCounts.remove(k);
    if (d != null && n != null && n > 0) {
      long[] done = Arrays.copyOf(d, n);
      Arrays.sort(done);
      long total = 0;
      for (long t : done) {
        total += t;
      }
      j.dbl("max_task_duration", done[n - 1] / 1000.0)
          .dbl("median_task_duration", done[n / 2] / 1000.0)
          .dbl("task_time", total / 1000.0);
    }
    emitEnd(j, k, openStages, droppedStages);
  }

  // -- streaming queries ------------------------------------------------------------
  @Override
  public void onOtherEvent(SparkListenerEvent e) {
    if (e instanceof StreamingQueryListener.QueryProgressEvent) {
      StreamingQueryListener.QueryProgressEvent p = (StreamingQueryListener.QueryProgressEvent) e;
      emit(new Json("QueryProgress").num("time", now()).raw("progress", p.progress().json()));
    } else if (e instanceof StreamingQueryListener.QueryStartedEvent) {
      StreamingQueryListener.QueryStartedEvent s = (StreamingQueryListener.QueryStartedEvent) e;
      emit(new Json("QueryStarted").num("time", now()).str("query_id", s.id().toString())
          .str("run_id", s.runId().toString()).str("name", s.name()));
    } else if (e instanceof StreamingQueryListener.QueryIdleEvent) {
      StreamingQueryListener.QueryIdleEvent i = (StreamingQueryListener.QueryIdleEvent) e;
      emit(new Json("QueryIdle").num("time", now()).str("query_id", i.id().toString())
          .str("run_id", i.runId().toString()));
    } else if (e instanceof StreamingQueryListener.QueryTerminatedEvent) {
      StreamingQueryListener.QueryTerminatedEvent t =
          (StreamingQueryListener.QueryTerminatedEvent) e;
      emit(new Json("QueryTerminated").num("time", now()).str("query_id", t.id().toString())
          .str("run_id", t.runId().toString())
          .str("exception", t.exception().isDefined() ? t.exception().get() : null)
          .str("error_class", t.errorClassOnException().isDefined()
              ? t.errorClassOnException().get() : null));
    }
  }

  /**
   * Names of the RDDs that read by a spark-adaptive helper's plan start with this, then the
   * plan's id, then a space and what the RDD reads if it has a name of its own (the Python
   * side's {@code spark_adaptive.core.events.PLAN_RDD_PREFIX}).
   */
  static final String PLAN_RDD_PREFIX = "spark-adaptive plan ";

  /** The id of the helper plan one of the stage's RDDs reads by, from its name, or null. */
  static String planOf(StageInfo s) {
    scala.collection.Iterator<RDDInfo> it = s.rddInfos().iterator();
    while (it.hasNext()) {
      String name = it.next().name();
      if (name != null && name.startsWith(PLAN_RDD_PREFIX)) {
        String rest = name.substring(PLAN_RDD_PREFIX.length());
        int space = rest.indexOf(' ');
        String id = space < 0 ? rest : rest.substring(0, space);
        if (!id.isEmpty()) {
          return id;
        }
      }
    }
    return null;
  }

  @Override
  public void onJobStart(SparkListenerJobStart e) {
    StringBuilder ids = new StringBuilder("[");
    scala.collection.Iterator<Object> it = e.stageIds().iterator();
    while (it.hasNext()) {
      if (ids.length() > 1) {
        ids.append(',');
      }
      ids.append(it.next());
    }
    emitStart(new Json("JobStarted").num("time", e.time()).num("job_id", e.jobId())
        .raw("stage_ids", ids.append(']').toString()).str("job_group", group(e.properties()))
        .str("execution_id", e.properties() == null
            ? null : e.properties().getProperty("spark.sql.execution.id")),
        e.jobId(), openJobs, droppedJobs);
  }

  @Override
  public void onJobEnd(SparkListenerJobEnd e) {
    Json j = new Json("JobEnded").num("time", e.time()).num("job_id", e.jobId());
    if (e.jobResult() instanceof JobFailed) {
      j.bool("succeeded", false).str("failure", String.valueOf(((JobFailed) e.jobResult()).exception()));
    } else {
      j.bool("succeeded", true);
    }
    emitEnd(j, e.jobId(), openJobs, droppedJobs);
  }

  // -- the application ----------------------------------------------------------------
  /**
   * The application ended: Spark stopped the SparkContext, from Python's {@code stop()} or
   * on its own (the cluster manager ended the app, a fatal scheduler error). Python shuts
   * spark-adaptive down when this arrives, after every event before it.
   */
  @Override
  public void onApplicationEnd(SparkListenerApplicationEnd e) {
    emit(new Json("ApplicationEnded").num("time", e.time()));
  }

  // -- helpers --------------------------------------------------------------------
  private static long key(StageInfo s) {
    return ((long) s.stageId() << 16) | (s.attemptNumber() & 0xffff);
  }

  private static long now() {
    return System.currentTimeMillis();
  }

  private static long optLong(scala.Option<Object> o, long dflt) {
    return o.isDefined() ? ((Number) o.get()).longValue() : dflt;
  }

  private static String group(Properties p) {
    return p == null ? null : p.getProperty("spark.jobGroup.id");
  }
}
