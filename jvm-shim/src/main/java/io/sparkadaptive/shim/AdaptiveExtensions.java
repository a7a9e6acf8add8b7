package io.sparkadaptive.shim;

import org.apache.spark.sql.SparkSessionExtensions;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * spark-adaptive's Spark SQL extensions, named in {@code spark.sql.extensions}
 * (spark-adaptive sets it at activation when the shim is present): the
 * query-stage preparation rule {@link ShufflePartitionsFromEstimate}.
 */
public final class AdaptiveExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectQueryStagePrepRule(new AbstractFunction1<>() {
      @Override
      public ShufflePartitionsFromEstimate apply(org.apache.spark.sql.SparkSession session) {
        return new ShufflePartitionsFromEstimate((org.apache.spark.sql.classic.SparkSession) session);
      }
    });
    return BoxedUnit.UNIT;
  }
}
