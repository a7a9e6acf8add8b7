package io.sparkadaptive.shim;

import java.io.IOException;

import org.apache.hadoop.mapred.InputSplit;
import org.apache.spark.Partition;
import org.apache.spark.rdd.HadoopPartition;
import org.apache.spark.rdd.HadoopRDD;
import org.apache.spark.rdd.RDD;

/**
 * The bytes a file source reads, in one call from Python.
 *
 * <p>Flink's dynamic source parallelism inference sizes a source by its input
 * before it runs. For {@code sc.textFile(path)} that input is what Hadoop's
 * {@code TextInputFormat} lists: comma-separated globs, directories without
 * their hidden files ({@code _SUCCESS}, checksums), subdirectories only with
 * {@code mapreduce.input.fileinputformat.input.dir.recursive}. Reading the splits
 * the input format made for the RDD itself keeps those rules exactly Spark's,
 * lists a directory of thousands of files inside the JVM instead of over
 * thousands of py4j calls, and lists it once: the RDD keeps its splits for the job.
 */
public final class InputSizes {
  private InputSizes() {}

  /**
   * The bytes an RDD made by {@code sc.textFile} reads: the lengths of its
   * {@code HadoopRDD}'s splits, found through the RDD's single-parent chain. Asking
   * for them lists the input once, and the {@code HadoopRDD} keeps the splits, so the
   * job that runs it does not list again. Throws Hadoop's own error when the path
   * matches nothing, and {@code IllegalArgumentException} when the chain holds no
   * {@code HadoopRDD}.
   */
  public static long splitBytes(RDD<?> rdd) throws IOException {
    RDD<?> r = rdd;
    while (!(r instanceof HadoopRDD)) {
      if (r.dependencies().length() != 1) {
        throw new IllegalArgumentException(rdd + " does not read one HadoopRDD");
      }
      r = r.dependencies().head().rdd();
    }
    long total = 0;
    for (Partition p : r.partitions()) {
      total += ((InputSplit) ((HadoopPartition) p).inputSplit().value()).getLength();
    }
    return total;
  }
}
