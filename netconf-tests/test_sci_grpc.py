"""gRPC push with a real, independent gRPC stack (seed 004, SCI Collection Interface, push
mode: "gRPC streaming (bidirectional)"): Python stubs generated from proto/ by
grpcio-tools at test time, grpcio over TLS (the agent's generated certificate), an SCI
that proves each streamed report with CATS-HMAC-SHA256 over the bytes Python's protobuf
serialises, a Batch call proven by its metadata, and the service listed by server
reflection (grpcio-reflection)."""

import base64
import hashlib
import hmac
import re
import time

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from conftest import assert_ok, grpc_stubs, reset, sci

KEY = b"python-grpc-sci-shared-secret"
SCI = "py-sci-1"


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """sci_pb2 / sci_pb2_grpc generated from proto/ now, with grpcio-tools' protoc."""
    s = grpc_stubs(tmp_path_factory.mktemp("stubs"), "cats/sma/v1/sci.proto")
    return s["sci_pb2"], s["sci_pb2_grpc"]


@pytest.fixture(scope="module")
def channel(agent):
    """collection/grpc enabled (TLS, port 0) with SCI py-sci-1 and its HMAC credential; a
    grpcio channel to the port the agent logs."""
    m = agent.connect()
    key = base64.b64encode(KEY).decode()
    reset(
        m,
        "<collection><grpc><enabled>true</enabled><port>0</port></grpc>"
        f"<authentication><credential><name>py</name><type>hmac-sha256</type><key>{key}</key></credential>"
        "</authentication></collection>"
        "<scis>" + sci(SCI, "<credential-ref>py</credential-ref>") + "</scis>",
    )
    port = None
    deadline = time.time() + 20
    while port is None and time.time() < deadline:
        for line in agent.log:
            found = re.search(r"SCI collection over gRPC \(TLS\) accepting reports at 127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
        time.sleep(0.1)
    assert port, "the agent logs where gRPC collection listens:\n" + "\n".join(agent.log[-20:])
    cert = (agent.state_dir / "sci-grpc-cert.pem").read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=cert)
    ch = grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "localhost")])
    grpc.channel_ready_future(ch).result(timeout=20)
    yield ch
    ch.close()
    reset(m)


def report(pb2, seq, cs_id="AR1", csci=SCI):
    r = pb2.Report(
        csci_id=csci, cs_id=cs_id, sequence=seq, gas=400, computing_time=5, health=pb2.HEALTHY,
        correlation_id=f"py-{seq}",
    )
    r.timestamp.GetCurrentTime()
    return r


def hmac_proof(body):
    ts = str(int(time.time()))
    sig = hmac.new(KEY, ts.encode() + b"\n" + body, hashlib.sha256).hexdigest()
    return f"CATS-HMAC-SHA256 ts={ts}, sig={sig}"


def signed(pb2, seq, **kw):
    """docs/sci-protocol.md: serialise without authorization, sign, then set it."""
    r = report(pb2, seq, **kw)
    r.authorization = hmac_proof(r.SerializeToString())
    return r


def test_seed004_sci_collection_grpc_stream_gives_a_verdict_per_report(pb, channel):
    pb2, pb2_grpc = pb
    stub = pb2_grpc.SciCollectorStub(channel)
    verdicts = list(stub.Stream(iter([signed(pb2, 1), signed(pb2, 2, cs_id="AR9"), report(pb2, 3)]), timeout=20))
    got = [(v.correlation_id, v.accepted, v.reason) for v in verdicts]
    assert got == [
        ("py-1", True, ""),
        ("py-2", False, "unauthorized-cs-id"),
        ("py-3", False, "unauthenticated"),
    ], verdicts
    assert verdicts[0].sequence == 1 and verdicts[0].csci_id == SCI


def test_seed004_sci_collection_grpc_batch_is_proven_by_its_metadata(pb, channel):
    pb2, pb2_grpc = pb
    stub = pb2_grpc.SciCollectorStub(channel)
    batch = pb2.ReportBatch(reports=[report(pb2, 10), report(pb2, 11)])
    reply = stub.Batch(batch, metadata=[("authorization", hmac_proof(batch.SerializeToString()))], timeout=20)
    assert reply.accepted == 2, reply
    assert [v.correlation_id for v in reply.verdicts] == ["py-10", "py-11"]
    # The proof is bound to the bytes: another batch under it is refused as a whole.
    other = pb2.ReportBatch(reports=[report(pb2, 12)])
    with pytest.raises(grpc.RpcError) as e:
        stub.Batch(other, metadata=[("authorization", hmac_proof(batch.SerializeToString()))], timeout=20)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value


def test_seed004_sci_collection_grpc_services_are_listed_by_reflection(pb, channel):
    db = ProtoReflectionDescriptorDatabase(channel)
    services = list(db.get_services())
    assert "cats.sma.v1.SciCollector" in services, services
    fd = db.FindFileContainingSymbol("cats.sma.v1.SciCollector")
    assert fd.name == "cats/sma/v1/sci.proto"
    assert [m.name for m in fd.service[0].method] == ["Stream", "Batch"]


# ----- gRPC pull: grpcio serves SciAgent, the agent calls it ---------------------------------


def test_seed004_sci_collection_grpc_pull_from_a_grpcio_sci_agent(pb, agent):
    """Seed 004, pull mode ("HTTP GET or gRPC unary"): a grpcio server plays the SCI and
    serves cats.sma.v1.SciAgent/GetReport; the agent pulls it on the target's interval
    (grpc://, allow-plaintext), checks the report's own HMAC proof (Report.authorization
    over the Report serialised without it, as for Stream) and caches it; the metric cache
    and the target's state are read back over NETCONF."""
    from concurrent import futures

    from lxml import etree

    pb2, pb2_grpc = pb
    asked = []

    class Agent(pb2_grpc.SciAgentServicer):
        def GetReport(self, request, context):
            asked.append(request.csci_id)
            r = report(pb2, 5000 + len(asked), csci=request.csci_id)
            r.gas = 321
            r.authorization = hmac_proof(r.SerializeToString())
            return r

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb2_grpc.add_SciAgentServicer_to_server(Agent(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    m = agent.connect()
    try:
        key = base64.b64encode(KEY).decode()
        reset(
            m,
            f"<collection><authentication><credential><name>py</name><type>hmac-sha256</type><key>{key}</key>"
            "</credential></authentication>"
            f"<pull><target><csci-id>{SCI}</csci-id><url>grpc://127.0.0.1:{port}</url><interval>1</interval>"
            "<allow-plaintext>true</allow-plaintext></target></pull></collection>"
            "<scis>" + sci(SCI, "<credential-ref>py</credential-ref>") + "</scis>",
        )
        ns = {"c": "urn:cats-sma:yang:cats-sma"}
        flt = (
            '<cats-sma xmlns="urn:cats-sma:yang:cats-sma">'
            f"<metric-cache><entry><csci-id>{SCI}</csci-id></entry></metric-cache>"
            f"<collection><pull><target><csci-id>{SCI}</csci-id><state/></target></pull></collection></cats-sma>"
        )
        got = {}

        def pulled():
            root = etree.fromstring(m.get(filter=("subtree", flt)).xml.encode())
            got["gas"] = root.findtext(".//c:metric-cache/c:entry/c:gas", namespaces=ns)
            got["seq"] = root.findtext(".//c:metric-cache/c:entry/c:sequence-number", namespaces=ns)
            st = ".//c:collection/c:pull/c:target/c:state/c:"
            got["transport"] = root.findtext(st + "transport", namespaces=ns)
            got["pulls"] = int(root.findtext(st + "pulls", default="0", namespaces=ns))
            return got["gas"] == "321" and got["pulls"] >= 2

        deadline = time.time() + 30
        while not pulled() and time.time() < deadline:
            time.sleep(0.2)
        assert got["gas"] == "321" and got["pulls"] >= 2, got
        assert got["transport"] == "grpc", got
        assert int(got["seq"]) > 5000, got
        assert asked and set(asked) == {SCI}, asked
    finally:
        server.stop(0)
        reset(m)
