package io.sparkadaptive.shim;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning;
import org.apache.spark.sql.catalyst.plans.physical.Partitioning;
import org.apache.spark.sql.catalyst.plans.physical.RangePartitioning;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.ShuffleQueryStageExec;
import org.apache.spark.sql.execution.exchange.ENSURE_REQUIREMENTS$;
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
 * Off when AQE or its coalescing is off, or with
 * {@code spark.adaptive.batch.shuffle-partitions-from-estimate=false}.
 */
public final class ShufflePartitionsFromEstimate extends Rule<SparkPlan> {
  /** Partitions written per planned task. */
  public static final int PARTITIONS_PER_TASK = 8;
  /** Session conf that switches the rule off (read at every planning). */
  public static final String ENABLED_KEY = "spark.adaptive.batch.shuffle-partitions-from-estimate";

  static final TreeNodeTag<Object> DECIDED = new TreeNodeTag<>("spark-adaptive.shuffle-partitions");
  private static final Logger LOG = LoggerFactory.getLogger(ShufflePartitionsFromEstimate.class);

  private final SparkSession session;
  private volatile String warnedValue;

  public ShufflePartitionsFromEstimate(SparkSession session) {
    this.session = session;
  }

  @Override
  public SparkPlan apply(SparkPlan plan) {
    SQLConf conf = session.sessionState().conf();
    if (!conf.adaptiveExecutionEnabled() || !conf.coalesceShufflePartitionsEnabled()
        || !enabled(conf.getConfString(ENABLED_KEY, "true"))) {
      return plan;
    }
    int initial = conf.numShufflePartitions();
    List<ShuffleExchangeExec> resizable = new ArrayList<>();
    List<Integer> decided = new ArrayList<>();
    collect(plan, initial, resizable, decided);
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
      BigInteger estimate = BigInteger.ZERO;
      for (ShuffleExchangeExec e : resizable) {
        Option<LogicalPlan> link = e.child().logicalLink();
        if (link.isEmpty()) {
          return plan;  // no estimate: keep Spark's count
        }
        BigInteger size = link.get().stats().sizeInBytes().bigInteger();
        estimate = estimate.max(size);
      }
      long advisory = (Long) conf.getConf(SQLConf.ADVISORY_PARTITION_SIZE_IN_BYTES());
      long least = leastTasks(conf);
      BigInteger tasks = estimate.add(BigInteger.valueOf(advisory - 1))
          .divide(BigInteger.valueOf(Math.max(1, advisory))).max(BigInteger.valueOf(least));
      BigInteger want = tasks.multiply(BigInteger.valueOf(PARTITIONS_PER_TASK));
      if (want.compareTo(BigInteger.valueOf(initial)) >= 0) {
        return plan;
      }
      n = want.intValueExact();
      why = String.format("Spark estimates at most %d bytes into a shuffle: %s task(s) at %d "
          + "bytes per task, at least %d", estimate, tasks, advisory, least);
    }
    final int count = n;
    SparkPlan resized = plan.transformUp(new AbstractPartialFunction<SparkPlan, SparkPlan>() {
      @Override
      public boolean isDefinedAt(SparkPlan p) {
        // By what the node is, not by membership: an exchange above a resized one is a
        // copy with new children by the time transformUp reaches it.
        return p instanceof ShuffleExchangeExec e && resizable(e, initial);
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
      LOG.warn("spark-adaptive: writing this query's shuffles in {} partitions instead of {} "
          + "breaks its partitioning requirements; Spark's count stands", count, initial);
      return plan;
    }
    if (why != null) {
      LOG.info("spark-adaptive: {} shuffle(s) of this query written in {} partitions instead of "
          + "{} ({} per task): {}", resizable.size(), count, initial, PARTITIONS_PER_TASK, why);
    }
    return resized;
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
    RangePartitioning r = (RangePartitioning) p;
    return r.copy(r.ordering(), n);
  }

  /** A shuffle AQE sized at {@code initial} partitions, which this rule has not resized. */
  private static boolean resizable(ShuffleExchangeExec e, int initial) {
    Partitioning p = e.outputPartitioning();
    return e.shuffleOrigin() == ENSURE_REQUIREMENTS$.MODULE$
        && p.numPartitions() == initial  // not e.numPartitions(): that samples a range shuffle
        && e.getTagValue(DECIDED).isEmpty()
        && (p instanceof HashPartitioning || p instanceof RangePartitioning);
  }

  /**
   * Shuffles this rule may resize, and the counts it gave the shuffles of stages
   * already planned for this query.
   */
  private static void collect(SparkPlan p, int initial, List<ShuffleExchangeExec> resizable,
                              List<Integer> decided) {
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
    if (p instanceof ShuffleExchangeExec e && resizable(e, initial)) {
      resizable.add(e);
    }
    scala.collection.Iterator<SparkPlan> it = p.children().iterator();
    while (it.hasNext()) {
      collect(it.next(), initial, resizable, decided);
    }
  }
}
