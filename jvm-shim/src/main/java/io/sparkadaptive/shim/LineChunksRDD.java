package io.sparkadaptive.shim;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.NoSuchElementException;

import org.apache.hadoop.io.Text;
import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.HadoopRDD;
import org.apache.spark.rdd.RDD;

import scala.Product2;
import scala.collection.immutable.Seq;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The lines of {@code sc.textFile(path)} handed to Python in chunks.
 *
 * <p>PySpark's {@code textFile} decodes each line to a Java string, encodes it
 * again and sends it to the Python worker as a frame of its own, which Python
 * reads with two calls and decodes: that costs more per line than splitting the
 * line into fields. This RDD reads the same splits of the same {@code HadoopRDD}
 * and sends each task's lines as UTF-8 chunks of about {@code chunkBytes},
 * lines joined by {@code '\n'}, which Python decodes once per chunk and splits.
 * With Hadoop's default record delimiter a line holds no {@code '\n'} (it ends at
 * {@code \n}, {@code \r} or {@code \r\n}), so the split gives back exactly the
 * lines; a chunk of {@code k} lines has {@code k - 1} separators, so an empty line
 * is an empty string, as in PySpark. A line that is not ASCII goes through
 * {@code Text.toString} and back to UTF-8, as PySpark sends it, so bytes that are
 * not UTF-8 become U+FFFD exactly as there. Partitions and preferred locations are the
 * {@code HadoopRDD}'s.
 */
public final class LineChunksRDD extends RDD<byte[]> {
  private static final long serialVersionUID = 1L;
  private static final ClassTag<byte[]> BYTES = ClassTag$.MODULE$.apply(byte[].class);

  private final int chunkBytes;

  private LineChunksRDD(HadoopRDD<?, ?> lines, int chunkBytes) {
    super(lines, BYTES);
    this.chunkBytes = chunkBytes;
  }

  /**
   * Chunks of the lines an RDD made by {@code sc.textFile} reads (the {@code HadoopRDD}
   * it maps to strings), wrapped for PySpark. Throws {@code IllegalArgumentException}
   * when {@code textFile} is not one map over a {@code HadoopRDD}, or {@code chunkBytes}
   * is not positive.
   */
  public static JavaRDD<byte[]> of(RDD<?> textFile, int chunkBytes) {
    if (chunkBytes <= 0) {
      throw new IllegalArgumentException("chunkBytes must be positive, got " + chunkBytes);
    }
    if (textFile.dependencies().length() != 1
        || !(textFile.dependencies().head().rdd() instanceof HadoopRDD)) {
      throw new IllegalArgumentException(textFile + " is not sc.textFile's map over a HadoopRDD");
    }
    HadoopRDD<?, ?> hadoop = (HadoopRDD<?, ?>) textFile.dependencies().head().rdd();
    LineChunksRDD chunks = new LineChunksRDD(hadoop, chunkBytes);
    chunks.setName(textFile.name());
    return new JavaRDD<>(chunks, BYTES);
  }

  private RDD<?> lines() {
    return dependencies().head().rdd();
  }

  @Override
  public Partition[] getPartitions() {
    return lines().partitions();
  }

  @Override
  public Seq<String> getPreferredLocations(Partition split) {
    return lines().preferredLocations(split);
  }

  @Override
  @SuppressWarnings("unchecked")
  public scala.collection.Iterator<byte[]> compute(Partition split, TaskContext context) {
    scala.collection.Iterator<Product2<?, Text>> records =
        (scala.collection.Iterator<Product2<?, Text>>) (Object) lines().iterator(split, context);
    return new Chunks(records, chunkBytes);
  }

  /** Lines joined by '\n' until a chunk holds at least {@code chunkBytes}. */
  private static final class Chunks extends scala.collection.AbstractIterator<byte[]> {
    private final scala.collection.Iterator<Product2<?, Text>> records;
    private final int chunkBytes;
    private byte[] buf;
    private int len;

    Chunks(scala.collection.Iterator<Product2<?, Text>> records, int chunkBytes) {
      this.records = records;
      this.chunkBytes = chunkBytes;
      this.buf = new byte[Math.min(chunkBytes, 1 << 16) + 1];
    }

    @Override
    public boolean hasNext() {
      return records.hasNext();
    }

    @Override
    public byte[] next() {
      if (!records.hasNext()) {
        throw new NoSuchElementException("no lines left");
      }
      len = 0;
      boolean first = true;
      while (records.hasNext() && (first || len < chunkBytes)) {
        Text line = records.next()._2();  // Hadoop reuses this object: copy now
        byte[] bytes = line.getBytes();
        int n = line.getLength();
        if (!ascii(bytes, n)) {  // as PySpark sends it: decoded (bad bytes to U+FFFD), encoded
          bytes = line.toString().getBytes(StandardCharsets.UTF_8);
          n = bytes.length;
        }
        if (len + n + 1 > buf.length) {
          buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + n + 1));
        }
        if (!first) {
          buf[len++] = '\n';
        }
        System.arraycopy(bytes, 0, buf, len, n);
        len += n;
        first = false;
      }
      return Arrays.copyOf(buf, len);
    }

    private static boolean ascii(byte[] bytes, int n) {
      for (int i = 0; i < n; i++) {
        if (bytes[i] < 0) {
          return false;
        }
      }
      return true;
    }
  }
}
