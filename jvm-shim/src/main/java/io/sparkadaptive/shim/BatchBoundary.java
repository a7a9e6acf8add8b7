package io.sparkadaptive.shim;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

import org.apache.spark.sql.streaming.StreamingQueryStatus;

/**
 * Holds back new micro-batches of a streaming query exactly at a batch boundary.
 *
 * <p>Spark has no graceful stop for Structured Streaming: {@code stop()}
 * interrupts whatever runs. Its micro-batch loop starts a trigger only while
 * the query's state is ACTIVE, so setting the state to TERMINATED between two
 * batches ends the loop cleanly. Setting it during a batch is not safe: a
 * batch whose offsets are written checks the state again before it executes
 * (Spark 4.x {@code MicroBatchExecution.runBatch}) and abandons itself,
 * leaving an unfinished batch in the checkpoint.
 *
 * <p>The boundary is found with Spark's own synchronization: a trigger builds
 * its batch (offset log included) and commits it while holding the query's
 * {@code awaitProgressLock}, and signals {@code awaitProgressLockCondition}
 * under that lock once the trigger has finished. This class takes the lock, and
 * while it holds it no batch can be constructed: if no trigger is active it
 * sets TERMINATED; otherwise it waits on the condition (which releases the
 * lock) and looks again when woken. What remains is a window of a few
 * instructions between a trigger's state check and its start, which the query
 * driver covers by finishing an unfinished batch after the stop.
 *
 * <p>Spark's internals are reached by reflection on the query's
 * {@code StreamExecution} ({@code StreamingQueryWrapper.streamingQuery()}),
 * whose package moved in Spark 4.1; only the public status class is compiled
 * against. An instance method, because py4j calls instance methods on objects
 * of the shim's own class loader.
 */
public final class BatchBoundary {
  public BatchBoundary() {}

  /**
   * Hold back new micro-batches of {@code execution} once no batch is running.
   *
   * @return true once held (the query will start no new batch), false if a batch
   *     was still running after {@code timeoutMs}
   */
  public boolean holdNewBatches(Object execution, long timeoutMs) throws Exception {
    ReentrantLock lock = (ReentrantLock) call(execution, "awaitProgressLock");
    Condition progress = (Condition) call(execution, "awaitProgressLockCondition");
    @SuppressWarnings("unchecked")
    AtomicReference<Object> state = (AtomicReference<Object>) call(execution, "state");
    Object terminated = terminatedLike(state.get());
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    lock.lock();
    try {
      while (true) {
        StreamingQueryStatus status = (StreamingQueryStatus) call(execution, "status");
        if (!status.isTriggerActive()) {
          state.set(terminated);
          return true;
        }
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        // Woken when a trigger finishes; the bounded wait also covers a signal missed
        // while this thread was not yet waiting.
        progress.awaitNanos(Math.min(left, TimeUnit.MILLISECONDS.toNanos(50)));
      }
    } finally {
      lock.unlock();
    }
  }

  private static Object call(Object target, String name) throws Exception {
    Method m = target.getClass().getMethod(name);
    return m.invoke(target);
  }

  /** Spark's TERMINATED state object, from the package of the state object it is given. */
  private static Object terminatedLike(Object anyState) throws Exception {
    String pkg = anyState.getClass().getPackage().getName();
    Class<?> cls = Class.forName(pkg + ".TERMINATED$", true, anyState.getClass().getClassLoader());
    Field module = cls.getField("MODULE$");
    return module.get(null);
  }
}
