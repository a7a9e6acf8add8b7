"""The REST API's options (``spark.adaptive.rest.*``), one group of
:class:`spark_adaptive.settings.Settings`."""

from __future__ import annotations

from dataclasses import dataclass

from spark_adaptive.core.options import PREFIX, is_loopback, option


@dataclass(frozen=True)
class RestSettings:
    """Where the REST API listens, and who may use it."""

    enabled: bool = option(
        "rest.enabled", "bool", True, "Serve the REST API on the driver.")
    host: str = option(
        "rest.host", "string", "127.0.0.1",
        "Address the REST API binds. Anything but loopback requires rest.token.")
    port: int = option(
        "rest.port", "int", 4050,
        "First port tried for the REST API; the next free one is taken if it is busy "
        "(logged), as the Spark UI does. 0 picks any free port.", minimum=0, maximum=65535)
    token: str | None = option(
        "rest.token", "string", None,
        "Bearer token every REST request must carry, but those of the operators' page (/ and "
        "/ui/*, which hold no data). Required to bind anywhere but loopback.",
        secret=True)
    sample_interval: float = option(
        "rest.samples.interval", "duration", 2.0,
        "How often each query is sampled for the operators' page (state, parallelism, slots, "
        "executors, rates, backlog).", unit="s", minimum=0.1)
    sample_capacity: int = option(
        "rest.samples.capacity", "int", 300,
        "Samples kept per query, the oldest dropped first: with the interval, how far back "
        "the page's chart reaches (300 at 2s: ten minutes), and the memory they hold.",
        minimum=1, maximum=100000)

    def problems(self) -> list[str]:
        if self.enabled and not is_loopback(self.host) and not self.token:
            return [f"{PREFIX}rest.host={self.host} binds beyond loopback; set "
                    f"{PREFIX}rest.token to a secret every request must carry"]
        return []
