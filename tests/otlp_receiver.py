"""A real OTLP receiver on loopback for the telemetry tests: OTLP/HTTP (protobuf) and OTLP/gRPC.

It decodes what the gateway's exporters send with the OpenTelemetry protobuf definitions
(``opentelemetry-proto``) and keeps the spans and metric points, flattened for asserts.
``delay_s`` makes every answer slow (a collector that hangs), ``status`` makes the HTTP one
refuse (a collector that is failing); a receiver never started, or stopped, is one that is down.
"""

from __future__ import annotations

import http.server
import threading
import time
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(items) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


class Received:
    """Spans and metric points, appended by the receiver threads."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep  # False: only count the spans (the bench: its load generator shares this process)
        self.count = 0
        self.lock = threading.Lock()
        self.spans: list[dict] = []
        self.metrics: list[dict] = []
        self.resources: list[dict] = []
        self.delay_s = 0.0
        self.status = 200
        self.headers: list[dict[str, str]] = []  # each HTTP export's headers

    def add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.count += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            if not self.keep:
                return
            for rs in request.resource_spans:
                self.resources.append(attributes(rs.resource.attributes))
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append({
                            "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(), "attributes": attributes(s.attributes),
                            "events": [(e.name, attributes(e.attributes)) for e in s.events],
                            "status": s.status.code, "scope": ss.scope.name,
                        })

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            point = {"name": m.name, "unit": m.unit, "kind": kind, "attributes": attributes(p.attributes)}
                            if kind == "histogram":
                                point.update(count=p.count, sum=p.sum, bounds=list(p.explicit_bounds))
                            else:
                                point["value"] = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                            self.metrics.append(point)

    def named(self, prefix: str) -> list[dict]:
        with self.lock:
            return [s for s in self.spans if s["name"].startswith(prefix)]


class HttpReceiver:
    """OTLP/HTTP: ``POST /v1/traces`` and ``/v1/metrics`` with protobuf bodies."""

    def __init__(self, keep: bool = True) -> None:
        self.received = received = Received(keep)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.headers.append({k.lower(): v for k, v in self.headers.items()})
                if received.delay_s:
                    time.sleep(received.delay_s)
                if received.status != 200:
                    self.send_response(received.status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    received.add_traces(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                    answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    if received.keep:
                        received.add_metrics(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
                    answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]  # an exporter that gave up
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver:
    """OTLP/gRPC: the collector's TraceService and MetricsService."""

    def __init__(self) -> None:
        self.received = received = Received()

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 - the service's name
                received.add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                received.add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.stop(0)
