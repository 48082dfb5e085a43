"""An OTLP/HTTP profiles receiver for preload-tests/tests/otlp.rs, decoding with the
OpenTelemetry project's own Python package (`opentelemetry-proto`, the official `.proto` files
compiled by protobuf), not with the code that wrote the bytes.

    python3 otlp_receiver.py MODE [grpc]

Serves OTLP/HTTP, or with `grpc` the profiles service over gRPC (grpcio, with the package's
own service definition). Prints the port it listens on (loopback), then one JSON line per
request: its path (the gRPC method's for gRPC), headers (gRPC metadata),
and the request decoded and resolved through the dictionary (each profile's type, unit, period,
time range, and samples as function names leaf first, value and attributes), or the reason it
is malformed. MODE says how to answer: `ok` (200, an empty ExportProfilesServiceResponse),
`busy-once` (503 with Retry-After: 1 to the first request, then as `ok`), `fail` (500 always),
`reject` (200 with a partial success that rejects one profile), `slow` (reads the request,
then answers nothing for 60 s).
"""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

MODE = sys.argv[1]
SEEN = [0]


def check(cond, what):
    if not cond:
        raise ValueError(what)


def resolve(req):
    """The request as plain data, checking what the specification requires of it."""
    d = req.dictionary
    strings = list(d.string_table)
    check(strings and strings[0] == "", "string_table[0] must be ''")
    for name in ["mapping_table", "location_table", "function_table", "link_table",
                 "attribute_table", "stack_table"]:
        table = getattr(d, name)
        check(len(table) >= 1, f"{name} has no zero value")
        check(table[0].ByteSize() == 0, f"{name}[0] is not the zero value")

    def s(i):
        check(0 <= i < len(strings), f"string index {i} out of range")
        return strings[i]

    def attrs(indices):
        out = {}
        for i in indices:
            check(0 < i < len(d.attribute_table), f"attribute index {i} out of range")
            a = d.attribute_table[i]
            key = s(a.key_strindex)
            check(key not in out, f"attribute {key} twice")
            out[key] = a.value.string_value
        return out

    def frames(stack_index):
        check(0 <= stack_index < len(d.stack_table), f"stack index {stack_index} out of range")
        names = []
        for li in d.stack_table[stack_index].location_indices:
            check(0 < li < len(d.location_table), f"location index {li} out of range")
            loc = d.location_table[li]
            check(0 <= loc.mapping_index < len(d.mapping_table), "mapping index out of range")
            for line in loc.lines:
                check(0 < line.function_index < len(d.function_table), "function index out of range")
                names.append(s(d.function_table[line.function_index].name_strindex))
        return names

    mappings = [{"file": s(m.filename_strindex), "attributes": attrs(m.attribute_indices)}
                for m in list(d.mapping_table)[1:]]
    out = {"resources": [], "mappings": mappings}
    for rp in req.resource_profiles:
        res = {a.key: a.value.string_value for a in rp.resource.attributes}
        profiles = []
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                samples = []
                for smp in p.samples:
                    check(len(smp.values) == 1, "one value a sample")
                    samples.append({"frames": frames(smp.stack_index), "value": smp.values[0],
                                    "attributes": attrs(smp.attribute_indices)})
                profiles.append({
                    "scope": sp.scope.name,
                    "type": s(p.sample_type.type_strindex),
                    "unit": s(p.sample_type.unit_strindex),
                    "period_type": [s(p.period_type.type_strindex), s(p.period_type.unit_strindex)],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "duration_nano": p.duration_nano,
                    "samples": samples,
                })
        out["resources"].append({"attributes": res, "profiles": profiles})
    return out


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        seen = SEEN[0]
        SEEN[0] += 1
        line = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        try:
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            req = svc.ExportProfilesServiceRequest()
            req.ParseFromString(body)
            line["request"] = resolve(req)
        except Exception as e:  # noqa: BLE001 - the test reads the reason
            line["malformed"] = f"{type(e).__name__}: {e}"
        print(json.dumps(line), flush=True)
        if MODE == "slow":
            import time

            time.sleep(60)
        if "malformed" in line:
            return self.answer(400, line["malformed"].encode())
        if MODE == "fail" or (MODE == "busy-once" and seen == 0):
            code = 500 if MODE == "fail" else 503
            return self.answer(code, b"not now", [("Retry-After", "1")])
        resp = svc.ExportProfilesServiceResponse()
        if MODE == "reject":
            resp.partial_success.rejected_profiles = 1
            resp.partial_success.error_message = "alloc_objects is not wanted here"
        self.answer(200, resp.SerializeToString())


def serve_grpc():
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.profiles.v1development import (
        profiles_service_pb2_grpc as svc_grpc,
    )

    class Service(svc_grpc.ProfilesServiceServicer):
        def Export(self, request, context):
            seen = SEEN[0]
            SEEN[0] += 1
            line = {
                "path": "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
                "headers": {k: v for k, v in context.invocation_metadata()},
            }
            try:
                line["request"] = resolve(request)
            except Exception as e:  # noqa: BLE001 - the test reads the reason
                line["malformed"] = f"{type(e).__name__}: {e}"
            print(json.dumps(line), flush=True)
            if "malformed" in line:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, line["malformed"])
            if MODE == "fail":
                context.abort(grpc.StatusCode.INTERNAL, "not now")
            if MODE == "busy-once" and seen == 0:
                context.abort(grpc.StatusCode.UNAVAILABLE, "not now")
            resp = svc.ExportProfilesServiceResponse()
            if MODE == "reject":
                resp.partial_success.rejected_profiles = 1
                resp.partial_success.error_message = "alloc_objects is not wanted here"
            return resp

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    svc_grpc.add_ProfilesServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if len(sys.argv) > 2 and sys.argv[2] == "grpc":
    serve_grpc()
else:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
