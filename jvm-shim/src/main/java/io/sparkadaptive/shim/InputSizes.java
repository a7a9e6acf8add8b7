package io.sparkadaptive.shim;

import java.io.IOException;

import org.apache.hadoop.mapred.FileInputFormat;
import org.apache.hadoop.mapred.InputSplit;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.TextInputFormat;
import org.apache.spark.SparkContext;

/**
 * The bytes a file source reads, in one call from Python.
 *
 * <p>Flink's dynamic source parallelism inference sizes a source by its input
 * before it runs. For {@code sc.textFile(path)} that input is what Hadoop's
 * {@code TextInputFormat} lists: comma-separated globs, directories without
 * their hidden files ({@code _SUCCESS}, checksums), subdirectories only with
 * {@code mapreduce.input.fileinputformat.input.dir.recursive}. Asking the input
 * format itself, with Spark's Hadoop configuration, keeps those rules exactly
 * Spark's, and lists a directory of thousands of files inside the JVM instead of
 * over thousands of py4j calls.
 */
public final class InputSizes {
  private InputSizes() {}

  /**
   * The bytes {@code sc.textFile(path)} reads: the lengths of the input format's
   * splits, which cover every byte of every listed file once. Throws Hadoop's own
   * error when the path matches nothing.
   */
  public static long textFileBytes(SparkContext sc, String path) throws IOException {
    JobConf conf = new JobConf(sc.hadoopConfiguration());
    FileInputFormat.setInputPaths(conf, path);
    TextInputFormat format = new TextInputFormat();
    format.configure(conf);
    long total = 0;
    for (InputSplit split : format.getSplits(conf, 1)) {
      total += split.getLength();
    }
    return total;
  }
}
