package io.sparkadaptive.shim;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.Dependency;
import org.apache.spark.MapOutputStatistics;
import org.apache.spark.MapOutputTracker;
import org.apache.spark.MapOutputTrackerMaster;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.ShuffleStatus;
import org.apache.spark.SimpleFutureAction;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.MapStatus;

import scala.Option;

/**
 * The bytes every map task of a shuffle wrote for every reduce partition.
 *
 * <p>The adaptive batch scheduler decides how many tasks read a shuffle, and
 * which partitions each reads, only once the map side has finished (Flink's
 * rule: a consumer is decided when all its producers are done). This class
 * runs the map side of a shuffle on its own ({@code SparkContext.submitMapStage},
 * the call Spark SQL's adaptive execution uses), then reads the sizes the map
 * tasks reported to the driver's {@code MapOutputTrackerMaster}.
 *
 * <p>Sizes come from Spark's {@code MapStatus}: exact up to about 10% (Spark
 * stores each block size as a power of 1.1), and above 2,000 reduce partitions
 * averaged for small blocks. That is the same precision adaptive query
 * execution decides on.
 *
 * <p>Results cross py4j as one string, so Python pays one call, not one per
 * number: a first line {@code "<partitions> <maps>"}, then one line per reduce
 * partition with the bytes each map task wrote for it, comma-separated.
 */
public final class ShuffleSizes {
  private ShuffleSizes() {}

  /** The shuffle the lineage of {@code rdd} reads first (through narrow dependencies), or null. */
  public static ShuffleDependency<?, ?, ?> nearestShuffle(RDD<?> rdd) {
    Deque<RDD<?>> todo = new ArrayDeque<>();
    Set<Integer> seen = new HashSet<>();
    todo.add(rdd);
    while (!todo.isEmpty()) {
      RDD<?> r = todo.poll();
      if (!seen.add(r.id())) {
        continue;
      }
      scala.collection.Iterator<Dependency<?>> it = r.dependencies().iterator();
      while (it.hasNext()) {
        Dependency<?> d = it.next();
        if (d instanceof ShuffleDependency) {
          return (ShuffleDependency<?, ?, ?>) d;
        }
        todo.add(d.rdd());
      }
    }
    return null;
  }

  /**
   * Run the map side of {@code dep} (Spark skips it if its outputs exist) and return the
   * bytes it wrote in all. Fails as a job fails when a map task fails.
   */
  public static long runMapStage(SparkContext sc, ShuffleDependency<?, ?, ?> dep) throws Exception {
    if (dep.rdd().partitions().length == 0) {
      return 0L;
    }
    long total = 0;
    for (long b : sc.submitMapStage(dep).get().bytesByPartitionId()) {
      total += b;
    }
    return total;
  }

  /**
   * Run the map sides of {@code deps} at once, as Spark runs the independent parents of a
   * stage, and return the bytes each wrote. Fails as a job fails when a map task fails; the
   * other map sides are then cancelled.
   */
  public static long[] runMapStages(SparkContext sc, ShuffleDependency<?, ?, ?>[] deps)
      throws Exception {
    List<SimpleFutureAction<MapOutputStatistics>> running = new ArrayList<>(deps.length);
    long[] totals = new long[deps.length];
    try {
      for (ShuffleDependency<?, ?, ?> dep : deps) {
        // Spark refuses a map stage without tasks: such a side wrote nothing.
        running.add(dep.rdd().partitions().length == 0 ? null : sc.submitMapStage(dep));
      }
      for (int k = 0; k < deps.length; k++) {
        if (running.get(k) != null) {
          for (long b : running.get(k).get().bytesByPartitionId()) {
            totals[k] += b;
          }
        }
      }
    } catch (Exception e) {
      for (SimpleFutureAction<MapOutputStatistics> f : running) {
        if (f != null && !f.isCompleted()) {
          f.cancel();
        }
      }
      throw e;
    }
    return totals;
  }

  /**
   * The sizes of a finished shuffle, in the format described above. Throws
   * IllegalStateException when the tracker does not know the shuffle or a map
   * output is missing (an executor was lost since), so the caller can fall back.
   */
  public static String sizes(int shuffleId, int partitions) {
    MapOutputTracker tracker = SparkEnv.get().mapOutputTracker();
    if (!(tracker instanceof MapOutputTrackerMaster)) {
      throw new IllegalStateException("not on the driver: no MapOutputTrackerMaster");
    }
    Option<ShuffleStatus> status =
        ((MapOutputTrackerMaster) tracker).shuffleStatuses().get(shuffleId);
    if (status.isEmpty()) {
      throw new IllegalStateException("shuffle " + shuffleId + " is not registered");
    }
    // The read lock keeps a concurrent map-output update from tearing the array.
    MapStatus[] maps = status.get().withMapStatuses(
        (scala.Function1<MapStatus[], MapStatus[]>) statuses -> statuses.clone());
    StringBuilder out = new StringBuilder(16 + partitions * (maps.length * 7 + 1));
    out.append(partitions).append(' ').append(maps.length);
    for (int m = 0; m < maps.length; m++) {
      if (maps[m] == null) {
        throw new IllegalStateException("shuffle " + shuffleId + " lost the output of map " + m);
      }
    }
    for (int j = 0; j < partitions; j++) {
      out.append('\n');
      for (int m = 0; m < maps.length; m++) {
        if (m > 0) {
          out.append(',');
        }
        out.append(maps[m].getSizeForBlock(j));
      }
    }
    return out.toString();
  }
}
