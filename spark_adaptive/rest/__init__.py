"""The REST API on the driver, and its client: a thin adapter over the scheduler.

* :mod:`~spark_adaptive.rest.api`: the routes and Flink's rules for them;
* :mod:`~spark_adaptive.rest.server`: the HTTP server the runtime starts
  (:func:`~spark_adaptive.rest.server.serve`): h11's strict parser under a small
  threaded socket server, one :mod:`~spark_adaptive.rest.connection` per client;
* :mod:`~spark_adaptive.rest.facade`: what the API asks of the scheduler, and
  how (on the scheduler thread);
* :mod:`~spark_adaptive.rest.openapi`: the OpenAPI document;
* :mod:`~spark_adaptive.rest.client` and :mod:`~spark_adaptive.rest.tables`:
  the ``spark-adaptive`` command's side.

Nothing here imports pyspark or py4j, so the command line starts fast.
"""
