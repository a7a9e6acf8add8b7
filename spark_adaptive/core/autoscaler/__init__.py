"""The autoscaler: Flink's operator algorithm for Spark Structured Streaming, live first.

Pure: it imports the standard library and ``spark_adaptive.core.events``,
``.clock``, ``.options`` (and the error tree) only, so it stays independent of
the streaming scheduler and the batch code and is tested on virtual time.

* :class:`AutoscalerConfig` (``config``): every ``spark.adaptive.autoscaler.*`` key.
* :class:`LoadSample`, :class:`QueryView` (``samples``): the inputs.
* :class:`QueryAutoscaler` (``policy``): one per query; ``observe``,
  ``evaluate``, ``on_rescale_completed``, ``last_decision``.
* :class:`ScalingDecision`, :class:`DecisionInputs` (``decision``): the outputs.
* ``window``, ``scalability``, ``planning``: the parts the policy is made of.
"""

from spark_adaptive.core.autoscaler.config import AutoscalerConfig, autoscaler_options
from spark_adaptive.core.autoscaler.decision import DecisionInputs, ScalingDecision
from spark_adaptive.core.autoscaler.policy import QueryAutoscaler
from spark_adaptive.core.autoscaler.samples import LoadSample, QueryView

__all__ = [
    "AutoscalerConfig",
    "DecisionInputs",
    "LoadSample",
    "QueryAutoscaler",
    "QueryView",
    "ScalingDecision",
    "autoscaler_options",
]
