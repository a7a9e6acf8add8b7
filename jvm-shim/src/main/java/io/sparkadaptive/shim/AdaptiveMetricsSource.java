package io.sparkadaptive.shim;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkEnv;
import org.apache.spark.metrics.MetricsSystem;
import org.apache.spark.metrics.source.Source;

/**
 * spark-adaptive's figures in Spark's own metrics system, as the source
 * {@code spark_adaptive} of the driver: every sink a shop configured
 * (JMX, Graphite, the JSON and Prometheus servlets, CSV) carries them.
 *
 * <p>Python pushes the current values every few seconds with {@link #update}
 * (one py4j call: {@code name=value} lines). Each name becomes a gauge that
 * reads the latest value; a name no longer given is removed. The source is
 * registered once: Spark's metrics system keeps a source's registry as a child
 * of its own (Dropwizard Metrics follows a child registry's additions and
 * removals), so gauges of a query that starts later appear in every sink, and
 * those of a query that went away disappear.
 *
 * <p>An instance method interface (not static) because Python reaches this
 * class through a class loader of its own, where py4j calls instance methods.
 */
public final class AdaptiveMetricsSource implements Source {
  private final MetricRegistry registry = new MetricRegistry();
  private final Map<String, Double> values = new ConcurrentHashMap<>();
  private MetricsSystem system;

  public AdaptiveMetricsSource() {}

  @Override
  public String sourceName() {
    return "spark_adaptive";
  }

  @Override
  public MetricRegistry metricRegistry() {
    return registry;
  }

  /**
   * Set every figure: one {@code name=value} per line; names not given are removed.
   *
   * @return false when there is no metrics system (no SparkEnv): nothing was registered
   */
  public synchronized boolean update(String lines) {
    Map<String, Double> next = new HashMap<>();
    for (String line : lines.split("\n")) {
      int eq = line.lastIndexOf('=');
      if (eq <= 0) {
        continue;
      }
      try {
        next.put(line.substring(0, eq), Double.parseDouble(line.substring(eq + 1)));
      } catch (NumberFormatException e) {
        // a value Python could not format as a number: leave that figure out
      }
    }
    for (String gone : new HashSet<>(values.keySet())) {
      if (!next.containsKey(gone)) {
        values.remove(gone);
        registry.remove(gone);
      }
    }
    for (Map.Entry<String, Double> e : next.entrySet()) {
      String name = e.getKey();
      if (values.put(name, e.getValue()) == null) {
        registry.register(name, (Gauge<Double>) () -> values.getOrDefault(name, Double.NaN));
      }
    }
    if (system == null) {
      SparkEnv env = SparkEnv.get();
      if (env == null) {
        return false;
      }
      system = env.metricsSystem();
      system.registerSource(this);
    }
    return true;
  }

  /** Remove the source from Spark's metrics system (at shutdown). */
  public synchronized void close() {
    if (system != null) {
      system.removeSource(this);
      system = null;
    }
    values.clear();
    registry.removeMatching((name, metric) -> true);
  }
}
