package io.sparkadaptive.shim;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.ArrayList;
import java.util.List;
import java.util.NoSuchElementException;

import org.apache.spark.Dependency;
import org.apache.spark.Partition;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.RDD;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;

import scala.Product2;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * Reads one PySpark shuffle, or several, in contiguous ranges: one task per
 * range of reduce partitions (Flink's flexible subpartition mapping).
 *
 * <p>A PySpark shuffle ({@code RDD.partitionBy}) carries {@code (hash, pickled
 * batch)} records; this RDD yields the pickled batches, like PySpark's own
 * {@code PythonRDD.valueOfPair}, so Python reads it with the shuffled RDD's
 * deserializer (every shuffle read must share it). Task {@code i} reads the
 * slices of its spec in order. A slice is either a range of whole partitions,
 * read with one shuffle reader as Spark SQL's coalesced reads do, or one
 * partition restricted to a range of map tasks (a piece of a skewed
 * partition). The RDD depends on every shuffle it is given; each slice reads
 * one of them, so the records of different shuffles come one slice after
 * another, untagged: a reader that must tell them apart (a join's sides) tags
 * its records before the shuffle.
 *
 * <p>Spec syntax (from Python, one string): tasks separated by {@code ';'},
 * slices within a task by {@code ','}; {@code "s-e"} is whole partitions
 * {@code [s, e)}, {@code "j@a-b"} is partition {@code j}, maps {@code [a, b)};
 * either may start with {@code "k:"} to read shuffle {@code k} (0-based, in the
 * order given to {@link #ofShuffles}) instead of shuffle 0.
 */
public class RangeShuffleRDD extends RDD<byte[]> {
  private static final long serialVersionUID = 1L;
  private static final ClassTag<byte[]> BYTES = ClassTag$.MODULE$.apply(byte[].class);

  /** Ints per slice in {@link #slices}: shuffle, startPartition, endPartition, startMap, endMap. */
  private static final int SLICE = 5;

  private final ShuffleDependency<?, ?, ?>[] deps;
  private final int[][] slices;

  private RangeShuffleRDD(ShuffleDependency<?, ?, ?>[] deps, int[][] slices) {
    super(deps[0].rdd().context(), seqOf(deps), BYTES);
    this.deps = deps;
    this.slices = slices;
  }

  /** The RDD for {@code spec} over the shuffle {@code dep}, wrapped for PySpark. */
  public static JavaRDD<byte[]> of(ShuffleDependency<?, ?, ?> dep, String spec) {
    return ofShuffles(new ShuffleDependency<?, ?, ?>[] {dep}, spec);
  }

  /**
   * The RDD for {@code spec} over the shuffles {@code deps} (slice prefix {@code "k:"} reads
   * {@code deps[k]}), wrapped for PySpark.
   */
  public static JavaRDD<byte[]> ofShuffles(ShuffleDependency<?, ?, ?>[] deps, String spec) {
    if (deps.length == 0) {
      throw new IllegalArgumentException("a range read needs at least one shuffle");
    }
    int[] partitions = new int[deps.length];
    for (int k = 0; k < deps.length; k++) {
      partitions[k] = deps[k].partitioner().numPartitions();
    }
    return new JavaRDD<>(new RangeShuffleRDD(deps.clone(), parse(spec, partitions)), BYTES);
  }

  /**
   * Flattened slices per task: {@link #SLICE} ints each (shuffle, startPartition, endPartition,
   * startMap, endMap). {@code partitions[k]} is the partition count of shuffle {@code k}.
   */
  static int[][] parse(String spec, int[] partitions) {
    String[] tasks = spec.isEmpty() ? new String[0] : spec.split(";", -1);
    int[][] out = new int[tasks.length][];
    for (int t = 0; t < tasks.length; t++) {
      String[] parts = tasks[t].split(",");
      int[] flat = new int[parts.length * SLICE];
      for (int k = 0; k < parts.length; k++) {
        String s = parts[k];
        int colon = s.indexOf(':');
        int shuffle = colon < 0 ? 0 : Integer.parseInt(s.substring(0, colon));
        check(shuffle >= 0 && shuffle < partitions.length, s);
        int n = partitions[shuffle];
        int at = s.indexOf('@');
        int dash = s.indexOf('-', Math.max(at, colon) + 1);
        int a = Integer.parseInt(s.substring(Math.max(at, colon) + 1, dash));
        int b = Integer.parseInt(s.substring(dash + 1));
        int o = k * SLICE;
        flat[o] = shuffle;
        if (at >= 0) {
          int j = Integer.parseInt(s.substring(colon + 1, at));
          check(j >= 0 && j < n && a >= 0 && a < b, s);
          flat[o + 1] = j;
          flat[o + 2] = j + 1;
          flat[o + 3] = a;
          flat[o + 4] = b;
        } else {
          check(a >= 0 && a < b && b <= n, s);
          flat[o + 1] = a;
          flat[o + 2] = b;
          flat[o + 3] = 0;
          flat[o + 4] = Integer.MAX_VALUE;  // every map task, as Spark's own readers say it
        }
      }
      out[t] = flat;
    }
    return out;
  }

  private static void check(boolean ok, String slice) {
    if (!ok) {
      throw new IllegalArgumentException("bad shuffle slice '" + slice + "'");
    }
  }

  private static scala.collection.immutable.Seq<Dependency<?>> seqOf(Dependency<?>[] deps) {
    List<Dependency<?>> all = new ArrayList<>(deps.length);
    for (Dependency<?> d : deps) {
      all.add(d);
    }
    return CollectionConverters.asScala(all).toList();
  }

  @Override
  public Partition[] getPartitions() {
    Partition[] out = new Partition[slices.length];
    for (int i = 0; i < slices.length; i++) {
      out[i] = new RangePartition(i);
    }
    return out;
  }

  @Override
  public scala.collection.Iterator<byte[]> compute(Partition split, TaskContext context) {
    return new SliceIterator(slices[split.index()], context);
  }

  /** A task of this RDD; its slices live in the RDD, which every task carries anyway. */
  private static final class RangePartition implements Partition {
    private static final long serialVersionUID = 1L;
    private final int index;

    RangePartition(int index) {
      this.index = index;
    }

    @Override
    public int index() {
      return index;
    }

    @Override
    public int hashCode() {
      return index;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof RangePartition && ((RangePartition) o).index == index;
    }
  }

  /** The values of each slice's records, one shuffle reader after the other, in spec order. */
  private final class SliceIterator extends scala.collection.AbstractIterator<byte[]> {
    private final int[] flat;
    private final TaskContext context;
    private int next;
    private scala.collection.Iterator<Product2<Object, byte[]>> current;

    SliceIterator(int[] flat, TaskContext context) {
      this.flat = flat;
      this.context = context;
    }

    @Override
    public boolean hasNext() {
      while (current == null || !current.hasNext()) {
        if (next >= flat.length) {
          return false;
        }
        current = open(deps[flat[next]], flat[next + 1], flat[next + 2], flat[next + 3],
            flat[next + 4]);
        next += SLICE;
      }
      return true;
    }

    @Override
    public byte[] next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      return current.next()._2();
    }

    @SuppressWarnings("unchecked")
    private scala.collection.Iterator<Product2<Object, byte[]>> open(
        ShuffleDependency<?, ?, ?> dep, int startPartition, int endPartition, int startMap,
        int endMap) {
      ShuffleReadMetricsReporter metrics = context.taskMetrics().createTempShuffleReadMetrics();
      return (scala.collection.Iterator<Product2<Object, byte[]>>) (Object) shuffleManager(dep)
          .getReader(dep.shuffleHandle(), startMap, endMap, startPartition, endPartition,
              context, metrics)
          .read();
    }
  }

  /** Spark 4.3 picks a shuffle manager per dependency ({@code SparkEnv.shuffleManagerFor});
   *  earlier releases have one ({@code SparkEnv.shuffleManager}). Looked up as a method
   *  handle, so that one jar works on every Spark the package supports. (Not with
   *  {@code Class.getMethod}: that resolves the types of all of SparkEnv's methods, and some
   *  of those need classes pyspark does not ship.) */
  private static final MethodHandle SHUFFLE_MANAGER_FOR = shuffleManagerFor();

  private static MethodHandle shuffleManagerFor() {
    try {
      return MethodHandles.publicLookup().findVirtual(SparkEnv.class, "shuffleManagerFor",
          MethodType.methodType(ShuffleManager.class, ShuffleDependency.class));
    } catch (NoSuchMethodException | IllegalAccessException e) {
      return null;
    }
  }

  static ShuffleManager shuffleManager(ShuffleDependency<?, ?, ?> dep) {
    SparkEnv env = SparkEnv.get();
    if (SHUFFLE_MANAGER_FOR == null) {
      return env.shuffleManager();
    }
    try {
      return (ShuffleManager) SHUFFLE_MANAGER_FOR.invoke(env, dep);
    } catch (RuntimeException | Error e) {
      throw e;
    } catch (Throwable e) {
      throw new IllegalStateException("SparkEnv.shuffleManagerFor failed", e);
    }
  }
}
