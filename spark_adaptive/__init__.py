"""spark-adaptive: Flink-style elastic scaling for Apache Spark."""

__version__ = "0.1.0"
