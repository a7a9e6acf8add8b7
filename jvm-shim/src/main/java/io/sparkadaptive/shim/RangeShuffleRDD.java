package io.sparkadaptive.shim;

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
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;

import scala.Product2;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * Reads a PySpark shuffle in contiguous ranges: one task per range of reduce
 * partitions (Flink's flexible subpartition mapping).
 *
 * <p>A PySpark shuffle ({@code RDD.partitionBy}) carries {@code (hash, pickled
 * batch)} records; this RDD yields the pickled batches, like PySpark's own
 * {@code PythonRDD.valueOfPair}, so Python reads it with the shuffled RDD's
 * deserializer. Task {@code i} reads the slices of its spec in order. A slice
 * is either a range of whole partitions, read with one shuffle reader as
 * Spark SQL's coalesced reads do, or one partition restricted to a range of
 * map tasks (a piece of a skewed partition).
 *
 * <p>Spec syntax (from Python, one string): tasks separated by {@code ';'},
 * slices within a task by {@code ','}; {@code "s-e"} is whole partitions
 * {@code [s, e)}, {@code "j@a-b"} is partition {@code j}, maps {@code [a, b)}.
 */
public class RangeShuffleRDD extends RDD<byte[]> {
  private static final long serialVersionUID = 1L;
  private static final ClassTag<byte[]> BYTES = ClassTag$.MODULE$.apply(byte[].class);

  private final ShuffleDependency<?, ?, ?> dep;
  private final int[][] slices;

  private RangeShuffleRDD(ShuffleDependency<?, ?, ?> dep, int[][] slices) {
    super(dep.rdd().context(), seqOf(dep), BYTES);
    this.dep = dep;
    this.slices = slices;
  }

  /** The RDD for {@code spec} over the shuffle {@code dep}, wrapped for PySpark. */
  public static JavaRDD<byte[]> of(ShuffleDependency<?, ?, ?> dep, String spec) {
    return new JavaRDD<>(new RangeShuffleRDD(dep, parse(spec, dep.partitioner().numPartitions())),
        BYTES);
  }

  /** Flattened slices per task: (startPartition, endPartition, startMap, endMap) groups. */
  static int[][] parse(String spec, int partitions) {
    String[] tasks = spec.isEmpty() ? new String[0] : spec.split(";", -1);
    int[][] out = new int[tasks.length][];
    for (int t = 0; t < tasks.length; t++) {
      String[] parts = tasks[t].split(",");
      int[] flat = new int[parts.length * 4];
      for (int k = 0; k < parts.length; k++) {
        String s = parts[k];
        int at = s.indexOf('@');
        int dash = s.indexOf('-', at + 1);
        int a = Integer.parseInt(s.substring(at + 1, dash));
        int b = Integer.parseInt(s.substring(dash + 1));
        if (at >= 0) {
          int j = Integer.parseInt(s.substring(0, at));
          check(j >= 0 && j < partitions && a >= 0 && a < b, s);
          flat[k * 4] = j;
          flat[k * 4 + 1] = j + 1;
          flat[k * 4 + 2] = a;
          flat[k * 4 + 3] = b;
        } else {
          check(a >= 0 && a < b && b <= partitions, s);
          flat[k * 4] = a;
          flat[k * 4 + 1] = b;
          flat[k * 4 + 2] = 0;
          flat[k * 4 + 3] = Integer.MAX_VALUE;  // every map task, as Spark's own readers say it
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

  private static scala.collection.immutable.Seq<Dependency<?>> seqOf(Dependency<?> d) {
    List<Dependency<?>> one = new ArrayList<>(1);
    one.add(d);
    return CollectionConverters.asScala(one).toList();
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

  /** The values of each slice's records, one shuffle reader after the other. */
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
        current = open(flat[next], flat[next + 1], flat[next + 2], flat[next + 3]);
        next += 4;
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
        int startPartition, int endPartition, int startMap, int endMap) {
      ShuffleReadMetricsReporter metrics = context.taskMetrics().createTempShuffleReadMetrics();
      return (scala.collection.Iterator<Product2<Object, byte[]>>) (Object) SparkEnv.get()
          .shuffleManagerFor(dep)
          .getReader(dep.shuffleHandle(), startMap, endMap, startPartition, endPartition,
              context, metrics)
          .read();
    }
  }
}
