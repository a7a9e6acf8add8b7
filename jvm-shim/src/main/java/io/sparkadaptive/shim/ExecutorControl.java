package io.sparkadaptive.shim;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.ExecutorProcessLost;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.cluster.CoarseGrainedClusterMessages;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;

/**
 * Declares an executor lost right away, the way Spark's own HeartbeatReceiver
 * does when an executor's heartbeats time out (after spark.network.timeout,
 * 120 s by default).
 *
 * <p>spark-adaptive detects a silent executor much sooner. Asking the cluster
 * manager to kill it is not enough on its own: a hung (stopped) process does
 * not act on SIGTERM, and its tasks stay assigned to it until the driver drops
 * it. Sending RemoveExecutor to the scheduler backend makes the driver
 * reschedule those tasks at once.
 *
 * <p>An instance method (not static) because Python reaches this class through
 * a class loader of its own, where py4j can call instance methods only.
 */
public final class ExecutorControl {
  public ExecutorControl() {}

  /** @return false when the scheduler backend is not a CoarseGrainedSchedulerBackend */
  public boolean declareLost(SparkContext sc, String executorId, String reason) {
    SchedulerBackend backend = sc.schedulerBackend();
    if (!(backend instanceof CoarseGrainedSchedulerBackend)) {
      return false;
    }
    CoarseGrainedSchedulerBackend cg = (CoarseGrainedSchedulerBackend) backend;
    cg.driverEndpoint().send(new CoarseGrainedClusterMessages.RemoveExecutor(
        executorId, new ExecutorProcessLost(reason, scala.Option.empty(), false)));
    return true;
  }
}
