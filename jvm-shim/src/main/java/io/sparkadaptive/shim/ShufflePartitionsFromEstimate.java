package io.sparkadaptive.shim;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning;
import org.apache.spark.sql.catalyst.plans.physical.Partitioning;
import org.apache.spark.sql.catalyst.plans.physical.RangePartitioning;
import org.apache.spark.sql.catalyst.plans.physical.RoundRobinPartitioning;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.ShuffleQueryStageExec;
import org.apache.spark.sql.execution.exchange.ENSURE_REQUIREMENTS$;
import org.apache.spark.sql.execution.exchange.REBALANCE_PARTITIONS_BY_COL$;
import org.apache.spark.sql.execution.exchange.REBALANCE_PARTITIONS_BY_NONE$;
import org.apache.spark.sql.execution.exchange.REPARTITION_BY_COL$;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeLike;
import org.apache.spark.sql.execution.exchange.ValidateRequirements$;
import org.apache.spark.sql.internal.SQLConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.runtime.AbstractPartialFunction;

/**
 * AQE query-stage preparation rule: writes a query's shuffles in as many
 * partitions as its planned tasks need instead of always
 * {@code initialPartitionNum} ({@code batch.max-parallelism}).
 *
 * <p>AQE coalesces a shuffle's partitions into tasks of about
 * {@code advisoryPartitionSizeInBytes} once the map side is done, so the
 * partition count only has to be fine enough to balance those tasks. Each
 * partition costs a file in every map task (Spark's bypass writer, up to 200
 * partitions), which on a small query costs more than its work. So when Spark's
 * own size estimate of what goes into the query's shuffles (the logical plan's
 * {@code sizeInBytes}: file sizes scaled by row widths, not a bound, since a join
 * can return more rows than it reads) plans fewer tasks than the partition count
 * allows, every shuffle AQE may resize is written
 * in {@link #PARTITIONS_PER_TASK} partitions per planned task instead:
 * {@code min(initialPartitionNum, 8 * max(ceil(estimate / advisory), least tasks))},
 * where the least tasks are what AQE's coalescing keeps anyway (its
 * {@code minPartitionNum}, else the held task slots under {@code parallelismFirst}).
 * The factor leaves room for an estimate 8x too low (compressed input) before a
 * task has to read more than the advisory size.
 *
 * <p>One count per query, so co-partitioned joins stay co-partitioned: it is
 * decided once, tagged on the exchanges it resized, and exchanges AQE plans
 * again after a stage ran take the tagged count. When the first planning left
 * the count alone, exchanges planned after stages ran are sized from the
 * stages' real bytes (AQE's runtime statistics). Only shuffles that AQE itself
 * sizes are touched (origin {@code ENSURE_REQUIREMENTS}, count equal to
 * {@code initialPartitionNum}); a user's {@code repartition(n)} and bucketed
 * sides are left alone. A resized plan that fails Spark's own
 * {@code ValidateRequirements} is dropped for the plan as Spark made it.
 * The estimate is off when AQE or its coalescing is off, with
 * {@code spark.adaptive.batch.shuffle-partitions-from-estimate=false}, and for
 * a plan Spark plans with {@code applyFinalStageShuffleOptimizations=false}
 * (a cached plan, whose output partitioning Spark keeps as planned unless
 * {@code canChangeCachedPlanOutputPartitioning}).
 *
 * <p>The app's own count. With AQE, Spark writes shuffles in
 * {@code initialPartitionNum} partitions, in place of
 * {@code spark.sql.shuffle.partitions}. When spark-adaptive set
 * {@code initialPartitionNum} ({@link #setOwnInitialPartitionNum}) and a
 * session sets {@code spark.sql.shuffle.partitions} itself (at any time, for
 * instance {@code spark.conf.set} after activation), that count is what plain
 * Spark would write: the shuffles Spark sized from the conf (origin
 * {@code ENSURE_REQUIREMENTS}, {@code REPARTITION_BY_COL} or a rebalance) are
 * written in it, or in the estimate's count when that is smaller (the app's
 * count is the upper bound, as for one set before activation). This holds
 * also where the estimate is off, but not with AQE or its coalescing off (then
 * Spark writes {@code spark.sql.shuffle.partitions} itself).
 *
 * <p>A failure of the rule leaves the query's plan as Spark made it (logged once).
 */
public final class ShufflePartitionsFromEstimate extends Rule<SparkPlan> {
  /** Partitions written per planned task. */
  public static final int PARTITIONS_PER_TASK = 8;
  /** Session conf that switches the estimate off (read at every planning). */
  public static final String ENABLED_KEY = "spark.adaptive.batch.shuffle-partitions-from-estimate";
  /** Spark's key: false where the final stage's output partitioning must stay (a cached plan). */
  static final String FINAL_STAGE_KEY = "spark.sql.adaptive.applyFinalStageShuffleOptimizations";
  static final String SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions";

  static final TreeNodeTag<Object> DECIDED = new TreeNodeTag<>("spark-adaptive.shuffle-partitions");
  private static final Logger LOG = LoggerFactory.getLogger(ShufflePartitionsFromEstimate.class);
  private static final AtomicBoolean WARNED_FAILURE = new AtomicBoolean();
  /** The initialPartitionNum spark-adaptive itself set for each SparkContext's sessions. */
  private static final Map<SparkContext, Integer> OWN_INITIAL =
      Collections.synchronizedMap(new WeakHashMap<>());

  private final SparkSession session;
  private volatile String warnedValue;

  public ShufflePartitionsFromEstimate(SparkSession session) {
    this.session = session;
  }

  /**
   * Says that spark-adaptive, not the app, set {@code initialPartitionNum} to {@code n} for
   * the sessions of {@code sc}: a session whose own {@code spark.sql.shuffle.partitions}
   * is set then has its shuffles written in that count, as on plain Spark. (An
   * {@code initialPartitionNum} the app set itself stays Spark's count, as on plain Spark.)
   */
  public static void setOwnInitialPartitionNum(SparkContext sc, int n) {
    OWN_INITIAL.put(sc, n);
  }

  @Override
  public SparkPlan apply(SparkPlan plan) {
    try {
      return resize(plan);
    } catch (Exception | LinkageError e) {
      if (e instanceof InterruptedException) {
        Thread.currentThread().interrupt();
      }
      if (WARNED_FAILURE.compareAndSet(false, true)) {
        LOG.warn("spark-adaptive: sizing a query's shuffles failed; the query runs with the "
            + "plan Spark made (said once, later failures are logged at DEBUG)", e);
      } else {
        LOG.debug("spark-adaptive: sizing a query's shuffles failed", e);
      }
      return plan;
    }
  }

  private SparkPlan resize(SparkPlan plan) {
    SQLConf conf = session.sessionState().conf();
    if (!conf.adaptiveExecutionEnabled() || !conf.coalesceShufflePartitionsEnabled()) {
      return plan;
    }
    int initial = conf.numShufflePartitions();
    int cap = appCount(conf, initial);
    boolean estimating = enabled(conf.getConfString(ENABLED_KEY, "true"))
        && !"false".equalsIgnoreCase(conf.getConfString(FINAL_STAGE_KEY, "true").trim());
    if (!estimating && cap == initial) {
      return plan;
    }
    List<ShuffleExchangeExec> resizable = new ArrayList<>();
    List<Integer> decided = new ArrayList<>();
    boolean capped = cap != initial;
    collect(plan, initial, capped, resizable, decided);
    if (resizable.isEmpty()) {
      return plan;
    }
    int n;
    String why = null;
    if (!decided.isEmpty()) {
      n = decided.get(0);  // the count this query's earlier stages were written in
      for (int d : decided) {
        if (d != n) {
          return plan;  // not ours to reconcile; Spark's plan stands
        }
      }
    } else {
      n = cap;
      boolean onlyAqes = true;  // the estimate sizes only the shuffles AQE itself plans
      for (ShuffleExchangeExec e : resizable) {
        onlyAqes &= e.shuffleOrigin() == ENSURE_REQUIREMENTS$.MODULE$;
      }
      if (estimating && onlyAqes) {
        BigInteger estimate = BigInteger.ZERO;
        boolean known = true;
        for (ShuffleExchangeExec e : resizable) {
          Option<LogicalPlan> link = e.child().logicalLink();
          if (link.isEmpty()) {
            known = false;  // no estimate: the count stays
            break;
          }
          BigInteger size = link.get().stats().sizeInBytes().bigInteger();
          estimate = estimate.max(size);
        }
        if (known) {
          long advisory = (Long) conf.getConf(SQLConf.ADVISORY_PARTITION_SIZE_IN_BYTES());
          long least = leastTasks(conf);
          BigInteger tasks = estimate.add(BigInteger.valueOf(advisory - 1))
              .divide(BigInteger.valueOf(Math.max(1, advisory))).max(BigInteger.valueOf(least));
          BigInteger want = tasks.multiply(BigInteger.valueOf(PARTITIONS_PER_TASK));
          if (want.compareTo(BigInteger.valueOf(cap)) < 0) {
            n = want.intValueExact();
            why = String.format("Spark estimates at most %d bytes into a shuffle: %s task(s) "
                + "at %d bytes per task, at least %d", estimate, tasks, advisory, least);
          }
        }
      }
      if (n == initial) {
        return plan;
      }
    }
    final int count = n;
    SparkPlan resized = plan.transformUp(new AbstractPartialFunction<SparkPlan, SparkPlan>() {
      @Override
      public boolean isDefinedAt(SparkPlan p) {
        // By what the node is, not by membership: an exchange above a resized one is a
        // copy with new children by the time transformUp reaches it.
        return p instanceof ShuffleExchangeExec e && resizable(e, initial, capped);
      }

      @Override
      public <A1 extends SparkPlan, B1> B1 applyOrElse(A1 p, scala.Function1<A1, B1> fallback) {
        if (!isDefinedAt(p)) {
          return fallback.apply(p);
        }
        ShuffleExchangeExec e = (ShuffleExchangeExec) p;
        // The node with only its partitioning changed. Through makeCopy with the node's own
        // fields, because ShuffleExchangeExec's fields differ between Spark releases (4.3
        // added one), so that one jar works on every Spark the package supports.
        Object[] fields = new Object[e.productArity()];
        for (int i = 0; i < fields.length; i++) {
          fields[i] = e.productElement(i);
        }
        fields[0] = withCount(e.outputPartitioning(), count);
        ShuffleExchangeExec out = (ShuffleExchangeExec) e.makeCopy(fields);
        out.copyTagsFrom(e);
        out.setTagValue(DECIDED, count);
        @SuppressWarnings("unchecked")
        B1 b = (B1) out;
        return b;
      }
    });
    if (!ValidateRequirements$.MODULE$.validate(resized)) {
      // A side whose partitioning is not the conf's (a bucketed table, a repartition(n)) that
      // happens to have the same count: a normal case, Spark's plan is right as it is.
      LOG.debug("spark-adaptive: writing this query's shuffles in {} partitions instead of {} "
          + "breaks its partitioning requirements; Spark's count stands", count, initial);
      return plan;
    }
    if (why != null) {
      LOG.info("spark-adaptive: {} shuffle(s) of this query written in {} partitions instead of "
          + "{} ({} per task): {}", resizable.size(), count, initial, PARTITIONS_PER_TASK, why);
    } else if (decided.isEmpty()) {
      LOG.debug("spark-adaptive: {} shuffle(s) of this query written in {} partitions, the "
          + "session's {}, instead of initialPartitionNum {}", resizable.size(), count,
          SHUFFLE_PARTITIONS_KEY, initial);
    }
    return resized;
  }

  /**
   * The most partitions this session's shuffles are written in: the session's own
   * {@code spark.sql.shuffle.partitions} when it set one and {@code initial} is the
   * {@code initialPartitionNum} spark-adaptive set (plain Spark would write that count),
   * else {@code initial}.
   */
  private int appCount(SQLConf conf, int initial) {
    Integer own = OWN_INITIAL.get(session.sparkContext());
    if (own == null || own != initial || !conf.contains(SHUFFLE_PARTITIONS_KEY)) {
      return initial;
    }
    int n = conf.defaultNumShufflePartitions();
    return n > 0 ? n : initial;
  }

  /**
   * The session's value of {@link #ENABLED_KEY}: true or false, any case. Any other
   * value leaves Spark's plans alone and is logged once, naming the key and the value.
   */
  private boolean enabled(String value) {
    String v = value.trim();
    if (v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false")) {
      return v.equalsIgnoreCase("true");
    }
    if (!v.equals(warnedValue)) {
      warnedValue = v;
      LOG.warn("spark-adaptive: {}='{}' is not valid (accepted values: true, false); "
          + "shuffles keep Spark's partition count", ENABLED_KEY, v);
    }
    return false;
  }

  /** The tasks AQE's coalescing keeps at least: its minPartitionNum, else held slots or 1. */
  private long leastTasks(SQLConf conf) {
    Option<Object> min = conf.getConf(SQLConf.COALESCE_PARTITIONS_MIN_PARTITION_NUM());
    if (min.isDefined()) {
      return Math.max(1, (Integer) min.get());
    }
    boolean first = (Boolean) conf.getConf(SQLConf.COALESCE_PARTITIONS_PARALLELISM_FIRST());
    return first ? Math.max(1, session.leafNodeDefaultParallelism()) : 1;
  }

  private static Partitioning withCount(Partitioning p, int n) {
    if (p instanceof HashPartitioning h) {
      return h.copy(h.expressions(), n);
    }
    if (p instanceof RoundRobinPartitioning) {
      return new RoundRobinPartitioning(n);
    }
    RangePartitioning r = (RangePartitioning) p;
    return r.copy(r.ordering(), n);
  }

  /**
   * A shuffle sized at {@code initial} partitions from the conf, which this rule has not
   * resized: one AQE plans to meet an operator's requirement, and with {@code capped} (the
   * app's own count applies) also a repartition by columns or a rebalance, whose count is
   * the conf's too.
   */
  private static boolean resizable(ShuffleExchangeExec e, int initial, boolean capped) {
    Partitioning p = e.outputPartitioning();
    Object origin = e.shuffleOrigin();
    boolean fromConf = origin == ENSURE_REQUIREMENTS$.MODULE$
        || (capped && (origin == REPARTITION_BY_COL$.MODULE$
            || origin == REBALANCE_PARTITIONS_BY_COL$.MODULE$
            || origin == REBALANCE_PARTITIONS_BY_NONE$.MODULE$));
    return fromConf
        && p.numPartitions() == initial  // not e.numPartitions(): that samples a range shuffle
        && e.getTagValue(DECIDED).isEmpty()
        && (p instanceof HashPartitioning || p instanceof RangePartitioning
            || (capped && p instanceof RoundRobinPartitioning));
  }

  /**
   * Shuffles this rule may resize, and the counts it gave the shuffles of stages
   * already planned for this query.
   */
  private static void collect(SparkPlan p, int initial, boolean capped,
                              List<ShuffleExchangeExec> resizable, List<Integer> decided) {
    if (p instanceof ShuffleQueryStageExec s) {
      ShuffleExchangeLike shuffle = s.shuffle();
      if (shuffle instanceof ShuffleExchangeExec e) {
        Option<Object> tag = e.getTagValue(DECIDED);
        if (tag.isDefined()) {
          decided.add((Integer) tag.get());
        }
      }
      return;
    }
    if (p instanceof ShuffleExchangeExec e && resizable(e, initial, capped)) {
      resizable.add(e);
    }
    scala.collection.Iterator<SparkPlan> it = p.children().iterator();
    while (it.hasNext()) {
      collect(it.next(), initial, capped, resizable, decided);
    }
  }
}
