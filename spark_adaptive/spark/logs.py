"""spark-adaptive's log lines go through Spark's own logging (log4j).

spark-adaptive logs with Python's :mod:`logging` under the ``spark_adaptive``
logger. At activation, unless the app configured Python logging itself, a
handler hands each line to log4j in the driver's JVM, so it looks and behaves
like Spark's own: Spark's pattern and level names (``WARN``, not ``WARNING``),
Spark's appenders (stderr by default, files where the app configured them), the
level the app chose (``log4j2.properties``, ``spark.log.level``,
``SparkContext.setLogLevel``, and the shells' default of WARN).

log4j loggers are named after the Python ones with a Spark-like last part, so
Spark's console pattern (``%c{1}``) shows ``SparkAdaptiveScheduler``,
``SparkAdaptiveRuntime`` and so on, and a ``logger.*.name = spark_adaptive``
entry in ``log4j2.properties`` sets the level of all of them.

Levels: decisions at INFO, failures a query survives at WARN, failures it does
not at ERROR. When the JVM is gone (the app is shutting down) lines go to
stderr in Spark's pattern instead.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext

LOGGER = "spark_adaptive"
_LEVELS = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN",
           logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}
_FROM_LOG4J = {"ALL": logging.DEBUG, "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG,
               "INFO": logging.INFO, "WARN": logging.WARNING, "ERROR": logging.ERROR,
               "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}


def log4j_name(python_name: str) -> str:
    """``spark_adaptive.spark.warm_up`` -> ``spark_adaptive.spark.SparkAdaptiveWarmUp``."""
    head, _, last = python_name.rpartition(".")
    camel = "".join(part[:1].upper() + part[1:] for part in last.split("_"))
    return f"{head or LOGGER}.SparkAdaptive{camel if last != LOGGER else ''}"


def python_level(log4j_level: str) -> int:
    """A log4j level name as a Python logging level (unknown names: INFO)."""
    return _FROM_LOG4J.get(log4j_level.strip().upper(), logging.INFO)


def spark_line(record: logging.LogRecord) -> str:
    """A record in Spark's console pattern, ``yy/MM/dd HH:mm:ss LEVEL name: message``."""
    when = time.strftime("%y/%m/%d %H:%M:%S", time.localtime(record.created))
    level = _LEVELS.get(record.levelno, record.levelname)
    return f"{when} {level} {log4j_name(record.name).rsplit('.', 1)[-1]}: {record.getMessage()}"


class Log4jHandler(logging.Handler):
    """Hands records to log4j loggers in the driver's JVM; stderr when the JVM is gone."""

    def __init__(self, sc: SparkContext) -> None:
        super().__init__()
        self._sc = sc
        self._loggers: dict[str, Any] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            logger = self._logger(record.name)
            if record.levelno >= logging.ERROR:
                logger.error(message)
            elif record.levelno >= logging.WARNING:
                logger.warn(message)
            elif record.levelno >= logging.INFO:
                logger.info(message)
            else:
                logger.debug(message)
        except Exception:  # the JVM is gone or going: Spark's pattern on stderr
            try:
                sys.stderr.write(spark_line(record) + "\n")
            except Exception:
                pass

    def _logger(self, name: str) -> Any:
        logger = self._loggers.get(name)
        if logger is None:
            jvm: Any = self._sc._jvm
            if jvm is None:
                raise RuntimeError("the SparkContext has stopped")
            logger = jvm.org.apache.logging.log4j.LogManager.getLogger(log4j_name(name))
            self._loggers[name] = logger
        return logger


def log4j_level(sc: SparkContext) -> str | None:
    """The level log4j gives the logger ``spark_adaptive`` (its own entry, else the root's)."""
    try:
        jvm: Any = sc._jvm
        return str(jvm.org.apache.logging.log4j.LogManager.getLogger(LOGGER).getLevel()
                   .toString())
    except Exception:  # a JVM without log4j 2: leave the level as it is
        return None


def configure(sc: SparkContext) -> None:
    """Send spark-adaptive's lines through log4j, unless the app set Python logging up
    itself (a handler on ``spark_adaptive`` or on the root logger)."""
    logger = logging.getLogger(LOGGER)
    if logger.handlers or logging.getLogger().handlers:
        return
    logger.addHandler(Log4jHandler(sc))
    logger.propagate = False
    follow_spark_level(sc)


def follow_spark_level(sc: SparkContext) -> None:
    """Let through to log4j what log4j would log for ``spark_adaptive`` (after activation,
    and after ``setLogLevel``), where spark-adaptive's own handler is in place: records
    below it are dropped in Python, before any call into the JVM."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, Log4jHandler) for h in logger.handlers):
        return
    level = log4j_level(sc)
    if level is not None:
        logger.setLevel(python_level(level))
