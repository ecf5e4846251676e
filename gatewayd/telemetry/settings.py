"""``[telemetry]``: where OpenTelemetry traces and metrics go (OTLP), read without the SDK.

Off unless the file sets ``otlp_endpoint`` (or ``enabled = true``, the endpoint then coming
from ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` as the OpenTelemetry SDK reads them). Headers, TLS
certificates and compression come from the standard ``OTEL_EXPORTER_OTLP_*`` variables,
which the SDK's exporters read themselves; ``OTEL_SDK_DISABLED=true`` turns it all off.
This module imports nothing of OpenTelemetry: a daemon with telemetry off never loads it.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from gatewayd.config_tables import ConfigError, Section

PROTOCOLS = ("http/protobuf", "grpc")


@attrs.frozen
class TelemetrySettings:
    endpoint: str | None  # None: the OTEL_EXPORTER_OTLP_* variables (or the SDK's default) say where
    protocol: str = "http/protobuf"  # or "grpc"
    traces: bool = True
    metrics: bool = True
    sample_ratio: float = 1.0  # of the traces this gateway starts; a client's sampled flag is followed
    capture_content: bool = False  # prompts and answers on the client spans (gen_ai.input/output.messages)
    propagate: bool = True  # send traceparent/tracestate on to providers that take them
    service_name: str = "gatewayd"
    metrics_interval_s: float = 60.0
    max_queue: int = 2048  # spans waiting for export; more are dropped and counted
    batch_size: int = 128  # spans per export request
    export_delay_s: float = 2.0  # a partial batch waits at most this long
    export_timeout_s: float = 10.0  # one export request, retries included

    def signal_endpoint(self, signal: str) -> str | None:
        """The URL for ``signal`` ("traces" or "metrics"): for http/protobuf the base endpoint
        with ``/v1/<signal>`` added, as the SDK does for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        if self.endpoint is None:
            return None
        if self.protocol == "grpc":
            return self.endpoint
        return self.endpoint.rstrip("/") + f"/v1/{signal}"


def read_settings(table: Any, env: Mapping[str, str]) -> TelemetrySettings | None:
    """``[telemetry]`` (None: off), or ``ConfigError`` naming the key."""
    if table is None or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    s = Section(table, "telemetry")
    s.unknown({"enabled", "otlp_endpoint", "protocol", "traces", "metrics", "sample_ratio", "capture_content",
               "propagate", "service_name", "metrics_interval_s", "max_queue", "batch_size", "export_delay_s",
               "export_timeout_s"})
    endpoint = s.str("otlp_endpoint", None)
    if not s.bool("enabled", endpoint is not None):
        return None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"telemetry.otlp_endpoint: must start with http:// or https:// (got {endpoint!r})")
    default_protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    protocol = s.str("protocol", default_protocol if default_protocol in PROTOCOLS else "http/protobuf",
                     choices=PROTOCOLS)
    ratio = float(s.number("sample_ratio", 1.0))
    if ratio > 1:
        raise ConfigError(f"telemetry.sample_ratio: must be between 0 and 1 (got {ratio})")
    settings = TelemetrySettings(
        endpoint=endpoint, protocol=protocol, traces=s.bool("traces", True), metrics=s.bool("metrics", True),
        sample_ratio=ratio, capture_content=s.bool("capture_content", False), propagate=s.bool("propagate", True),
        service_name=s.str("service_name", env.get("OTEL_SERVICE_NAME") or "gatewayd"),
        metrics_interval_s=float(s.number("metrics_interval_s", 60.0, minimum=0.1)),
        max_queue=s.number("max_queue", 2048, minimum=1, integer=True),
        batch_size=s.number("batch_size", 128, minimum=1, integer=True),
        export_delay_s=float(s.number("export_delay_s", 2.0, minimum=0.01)),
        export_timeout_s=float(s.number("export_timeout_s", 10.0, minimum=0.1)),
    )
    if not (settings.traces or settings.metrics):
        return None
    return settings
