"""The C-PS gRPC stream with a real, independent gRPC stack (seed 004, Protocol Adapter,
centralized model: "the C-SMA establishes a gRPC stream to the C-PS for bidirectional
communication: streaming metric updates from C-SMA to C-PS, streaming policy updates or
queries from C-PS to C-SMA"): Python stubs generated from proto/ by grpcio-tools at test
time, and a grpcio server acting as the C-PS. It checks each C-SMA message's PSK MAC,
receives the advertisements (CS-ID filtered), sends a full-sync request, queries and
policy updates (MAC'd and counted as docs/cps-protocol.md says), and the test checks
running and the audit trail over NETCONF / the state directory."""

import base64
import hashlib
import hmac
import itertools
import json
import queue
import re
import threading
import time
from concurrent import futures

import grpc
import pytest
from lxml import etree

from conftest import CATS, NC, assert_ok, grpc_stubs, reset, sci, wait_until

CPS_NS = "urn:cats-sma:yang:cats-sma-cps"
POLICY_NS = "urn:cats-sma:yang:cats-sma-policy"
NACM = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm"
PSK = bytes(range(32))
CSMA = "py-csma"
SESSION_PATH = "/cats.sma.v1.CpsLink/Session"
OPERATOR = "cps-operator"
SCI_KEY = b"python-cps-grpc-sci-secret"
SCIS = {"188.3.67.3:67": "AR1", "188.3.67.4:70": "LLM1"}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """cps_pb2 / cps_pb2_grpc and sci_pb2 / sci_pb2_grpc generated from proto/ now, with
    grpcio-tools' protoc."""
    return grpc_stubs(tmp_path_factory.mktemp("cps_stubs"), "cats/sma/v1/cps.proto", "cats/sma/v1/sci.proto")


@pytest.fixture(scope="module")
def pb(stubs):
    return stubs["cps_pb2"], stubs["cps_pb2_grpc"]


class FakeCps:
    """A C-PS: verifies every C-SMA message's MAC, acknowledges advertisements, and sends
    whatever the test puts on the current stream."""

    def __init__(self, pb2, pb2_grpc):
        self.pb2 = pb2
        self.received = queue.Queue()
        self.bad_macs = []
        self.acked = 0
        self.stream = None
        self.streams = 0
        cps = self

        class Servicer(pb2_grpc.CpsLinkServicer):
            def Session(self, request_iterator, context):
                return cps.session(request_iterator, context)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb2_grpc.add_CpsLinkServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def session(self, requests, context):
        out = queue.Queue()
        st = {"out": out, "counter": itertools.count(1), "nonce": None, "context": context}
        self.streams += 1
        self.stream = st

        def read():
            try:
                for msg in requests:
                    s = f"STREAM\n{SESSION_PATH}\n{CSMA}\n{msg.timestamp_ms}\n{msg.nonce}\n".encode()
                    want = hmac.new(PSK, s + msg.body, hashlib.sha256).hexdigest()
                    if msg.mac != want or msg.key_id != "k1" or not msg.jws:
                        self.bad_macs.append(msg)
                    body = self.pb2.CsmaBody.FromString(msg.body)
                    kind = body.WhichOneof("kind")
                    self.received.put((kind, getattr(body, kind), msg))
                    if kind == "hello":
                        st["nonce"] = msg.nonce
                        self.send(st, "welcome", self.pb2.Welcome(acked_sequence=self.acked))
                    elif kind == "advertisement":
                        self.acked = max([self.acked] + [r.sequence for r in body.advertisement.reports])
                        n = len(body.advertisement.reports)
                        self.send(st, "ack", self.pb2.Ack(acked_sequence=self.acked, applied=n))
            except grpc.RpcError:
                pass
            out.put(None)

        threading.Thread(target=read, daemon=True).start()
        while True:
            item = out.get()
            if item is None:
                return
            yield item

    def send(self, st, kind, msg, mac=True):
        body = self.pb2.CpsBody(**{kind: msg}).SerializeToString()
        self.send_raw(st, body, mac=mac)

    def send_raw(self, st, body, mac=True):
        counter = next(st["counter"])
        tag = ""
        if mac:
            head = f"{CSMA}\n{st['nonce']}\n{counter}\n".encode()
            tag = hmac.new(PSK, head + body, hashlib.sha256).hexdigest()
        msg = self.pb2.CpsMessage(body=body, counter=counter, mac=tag)
        st["last"] = msg
        st["out"].put(msg)

    def push(self, kind, msg, **kw):
        self.send(self.stream, kind, msg, **kw)

    def expect(self, kinds, timeout=20, where=None):
        """The next C-SMA message of one of `kinds` (others are skipped) that `where` accepts."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                kind, body, _ = self.received.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if kind in kinds and (where is None or where(body)):
                return kind, body
        pytest.fail(f"no {kinds} from the C-SMA within {timeout} s")

    def end_stream(self):
        """The C-PS ends the current stream (as on a restart)."""
        self.stream["out"].put(None)

    def stop(self):
        self.server.stop(0)


def peer_config(port, policy_user=OPERATOR):
    user = f"<policy-user>{policy_user}</policy-user>" if policy_user else ""
    return (
        f"<agent><csma-id>{CSMA}</csma-id><site-id>site-py</site-id></agent>"
        f'<c-ps xmlns="{CPS_NS}"><peer><name>py</name><url>grpc://127.0.0.1:{port}</url>'
        "<allowed-cs-id>AR1</allowed-cs-id>"
        f"<psk><key-id>k1</key-id><key>{PSK.hex()}</key></psk>{user}"
        "<request-timeout>3000</request-timeout><backoff-initial>100</backoff-initial>"
        "<backoff-max>400</backoff-max></peer></c-ps>"
        "<collection><grpc><enabled>true</enabled><port>0</port></grpc>"
        "<authentication><credential><name>py</name><type>hmac-sha256</type>"
        f"<key>{base64.b64encode(SCI_KEY).decode()}</key></credential></authentication></collection>"
        "<scis>"
        + "".join(sci(c, "<credential-ref>py</credential-ref>", cs_id=cs) for c, cs in SCIS.items())
        + "</scis>"
    )


def push_reports(agent, stubs, seq):
    """Both SCIs report over the agent's SCI gRPC collector (so AR1 and LLM1 have metrics)."""
    pb2, pb2_grpc = stubs["sci_pb2"], stubs["sci_pb2_grpc"]
    port = None
    deadline = time.time() + 20
    while port is None and time.time() < deadline:
        for line in list(agent.log):
            found = re.search(r"SCI collection over gRPC \(TLS\) accepting reports at 127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
        time.sleep(0.05)
    assert port, "the agent logs where gRPC collection listens"
    cert = (agent.state_dir / "sci-grpc-cert.pem").read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=cert)
    with grpc.secure_channel(
        f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "localhost")]
    ) as ch:
        reports = []
        for csci, cs in SCIS.items():
            r = pb2.Report(csci_id=csci, cs_id=cs, sequence=seq, gas=400, computing_time=5, health=pb2.HEALTHY)
            r.timestamp.GetCurrentTime()
            ts = str(int(time.time()))
            sig = hmac.new(SCI_KEY, ts.encode() + b"\n" + r.SerializeToString(), hashlib.sha256).hexdigest()
            r.authorization = f"CATS-HMAC-SHA256 ts={ts}, sig={sig}"
            reports.append(r)
        verdicts = list(pb2_grpc.SciCollectorStub(ch).Stream(iter(reports), timeout=20))
    assert all(v.accepted for v in verdicts), verdicts


NACM_RULES = (
    f'<config xmlns="{NC}"><nacm xmlns="{NACM}">'
    f"<groups><group><name>cps</name><user-name>{OPERATOR}</user-name></group></groups>"
    "<rule-list><name>cps</name><group>cps</group>"
    "<rule><name>policy</name><module-name>*</module-name>"
    f'<path xmlns:c="{CATS}" xmlns:p="{POLICY_NS}">/c:cats-sma/p:policy</path>'
    "<access-operations>create update delete</access-operations><action>permit</action></rule>"
    "</rule-list></nacm></config>"
)


@pytest.fixture(scope="module")
def setup(agent, pb, stubs):
    cps = FakeCps(*pb)
    m = agent.connect()
    reset(m, peer_config(cps.port))
    assert_ok(m.edit_config(target="running", config=NACM_RULES))
    push_reports(agent, stubs, 1)
    yield cps, m
    cps.stop()
    m.edit_config(
        target="running",
        config=f'<config xmlns="{NC}" xmlns:nc="{NC}"><nacm xmlns="{NACM}" nc:operation="remove"/></config>',
    )


def session_leaf(m, path):
    reply = m.get(
        filter=("subtree", f'<cats-sma xmlns="{CATS}"><c-ps xmlns="{CPS_NS}"><peer><name>py</name></peer></c-ps></cats-sma>')
    )
    node = etree.fromstring(reply.data_xml.encode())
    steps = "/".join(f"{{{CPS_NS}}}{p}" for p in ["c-ps", "peer", "session", *path.split("/")])
    return node.findtext(f".//{{{CATS}}}cats-sma/{steps}")


def heartbeat_in_running(m):
    reply = m.get_config(
        source="running",
        filter=("subtree", f'<cats-sma xmlns="{CATS}"><policy xmlns="{POLICY_NS}"><update-control/></policy></cats-sma>'),
    )
    return etree.fromstring(reply.data_xml.encode()).findtext(f".//{{{POLICY_NS}}}heartbeat-interval")


def policy_edit(pb2, update_id, inner):
    xml = f'<cats-sma xmlns="{CATS}"><policy xmlns="{POLICY_NS}"><update-control>{inner}</update-control></policy></cats-sma>'
    return pb2.PolicyUpdate(update_id=update_id, format=pb2.EDIT_FORMAT_XML, config=xml)


def test_seed004_protocol_adapter_grpc_stream_opens_with_a_macd_hello_and_a_full_advertisement(setup):
    cps, m = setup
    _, hello = cps.expect({"hello"})
    assert (hello.csma_id, hello.site_id) == (CSMA, "site-py")
    _, ad = cps.expect(
        {"advertisement"}, where=lambda a: any(s.cs_id == "AR1" for r in a.reports for s in r.services)
    )
    assert ad.csma_id == CSMA and ad.reports[0].sequence > 0
    svc = [s for r in ad.reports for s in r.services]
    assert svc[0].gas > 0 and svc[0].health == cps.pb2.METRIC_HEALTH_HEALTHY, svc
    # Seed 004, C-PS Authentication: only allowed CS-IDs (AR1), never LLM1, though the
    # site serves both.
    assert {s.cs_id for s in svc} == {"AR1"}, ad
    assert not cps.bad_macs, "every C-SMA message carries the PSK MAC and the JWS"
    assert wait_until(lambda: session_leaf(m, "state") == "connected", 10)
    assert int(session_leaf(m, "grpc/streams-opened")) >= 1


def test_seed004_reconciliation_a_full_sync_request_on_the_stream_gets_a_full_advertisement(setup):
    cps, m = setup
    before = int(session_leaf(m, "full-syncs"))
    last = cps.acked
    cps.push("full_sync", cps.pb2.FullSyncRequest(reason="python C-PS lost its table"))
    _, ad = cps.expect(
        {"advertisement"},
        where=lambda a: any(r.kind == cps.pb2.REPORT_KIND_FULL and r.sequence > last for r in a.reports),
    )
    assert ad.reports[0].trigger == "resync"
    assert wait_until(lambda: int(session_leaf(m, "grpc/full-sync-requests")) >= 1)
    assert int(session_leaf(m, "full-syncs")) > before


def test_seed004_protocol_adapter_queries_are_answered_with_what_the_cps_may_see(setup):
    cps, _ = setup
    cps.push("query", cps.pb2.Query(query_id=7))
    _, a = cps.expect({"answer"}, where=lambda a: a.query_id == 7)
    assert a.error == "" and a.state.kind == cps.pb2.REPORT_KIND_FULL
    assert [s.cs_id for s in a.state.services] == ["AR1"], a
    assert a.state.services[0].sci_count == 1
    cps.push("query", cps.pb2.Query(query_id=6, cs_id="AR1"))
    _, a = cps.expect({"answer"}, where=lambda a: a.query_id == 6)
    assert a.error == "" and [s.cs_id for s in a.state.services] == ["AR1"], a
    cps.push("query", cps.pb2.Query(query_id=8, cs_id="LLM1"))
    _, a = cps.expect({"answer"}, where=lambda a: a.query_id == 8)
    assert a.error == "not-authorized"


def test_seed004_policy_engine_a_cps_policy_update_is_committed_to_running_as_its_nacm_user(setup, agent):
    cps, m = setup
    cps.push("policy", policy_edit(cps.pb2, 1, "<heartbeat-interval>45</heartbeat-interval>"))
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 1)
    assert r.applied and r.error_tag == "" and r.changes >= 1, r
    assert heartbeat_in_running(m) == "45"
    trail = (agent.state_dir / "audit.log").read_text()
    records = [json.loads(line) for line in trail.splitlines() if line.strip()]
    assert any(
        rec.get("operation") == "c-ps-policy-update" and rec.get("user") == OPERATOR and rec.get("outcome") == "success"
        for rec in records
    ), trail[-2000:]
    assert any(rec.get("user") == OPERATOR and rec.get("datastore") == "running" for rec in records), trail[-2000:]
    # RFC 7951 JSON works the same way.
    doc = {"cats-sma:cats-sma": {"cats-sma-policy:policy": {"update-control": {"heartbeat-interval": 46}}}}
    cps.push("policy", cps.pb2.PolicyUpdate(update_id=4, format=cps.pb2.EDIT_FORMAT_JSON, config=json.dumps(doc)))
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 4)
    assert r.applied, r
    assert heartbeat_in_running(m) == "46"
    assert int(session_leaf(m, "grpc/policy-updates-applied")) >= 2


def test_seed004_policy_engine_an_update_failing_validation_or_nacm_is_refused_and_running_unchanged(setup):
    cps, m = setup
    before = heartbeat_in_running(m)
    # libyang: min-interval (5) must not exceed heartbeat-interval.
    cps.push("policy", policy_edit(cps.pb2, 2, "<heartbeat-interval>3</heartbeat-interval>"))
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 2)
    assert not r.applied and r.error_tag and "min-interval" in r.message, r
    # NACM: the C-PS's user may write the policy subtree only.
    agent_edit = cps.pb2.PolicyUpdate(
        update_id=3,
        format=cps.pb2.EDIT_FORMAT_XML,
        config=f'<cats-sma xmlns="{CATS}"><agent><site-id>hijacked</site-id></agent></cats-sma>',
    )
    cps.push("policy", agent_edit)
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 3)
    assert not r.applied and r.error_tag == "access-denied", r
    assert heartbeat_in_running(m) == before
    site = m.get_config(source="running", filter=("subtree", f'<cats-sma xmlns="{CATS}"><agent/></cats-sma>'))
    assert "hijacked" not in site.data_xml
    assert int(session_leaf(m, "grpc/policy-updates-refused")) >= 2


def test_seed004_policy_engine_an_update_while_a_netconf_session_locks_running_is_refused_in_use(setup):
    cps, m = setup
    before = heartbeat_in_running(m)
    with m.locked("running"):
        cps.push("policy", policy_edit(cps.pb2, 20, "<heartbeat-interval>52</heartbeat-interval>"))
        _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 20, timeout=10)
        assert not r.applied and r.error_tag == "in-use", r
        assert heartbeat_in_running(m) == before
    # The lock released, the same edit goes through: nothing was left half done.
    cps.push("policy", policy_edit(cps.pb2, 21, "<heartbeat-interval>52</heartbeat-interval>"))
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 21, timeout=10)
    assert r.applied, r
    assert heartbeat_in_running(m) == "52"


def test_seed004_cps_authentication_a_replayed_cps_message_is_rejected_and_not_applied_twice(setup):
    cps, m = setup
    st = cps.stream
    cps.push("query", cps.pb2.Query(query_id=12))
    cps.expect({"answer"}, where=lambda a: a.query_id == 12)
    st["out"].put(st["last"])
    _, rej = cps.expect({"rejected"})
    assert rej.reason == "replayed", rej
    cps.push("query", cps.pb2.Query(query_id=13))
    cps.expect({"answer"}, where=lambda a: a.query_id == 13)
    assert int(session_leaf(m, "grpc/rejected-replayed")) >= 1
    assert int(session_leaf(m, "grpc/queries-answered")) >= 2


def test_seed004_security_malformed_or_unauthenticated_cps_messages_are_rejected_and_the_stream_survives(setup):
    cps, m = setup
    cps.send_raw(cps.stream, b"\xff\xff\xff\xff")
    _, rej = cps.expect({"rejected"})
    assert rej.reason == "malformed", rej
    cps.push("query", cps.pb2.Query(query_id=9), mac=False)
    _, rej = cps.expect({"rejected"})
    assert rej.reason == "unauthenticated", rej
    # The same stream still answers.
    cps.push("query", cps.pb2.Query(query_id=10))
    cps.expect({"answer"}, where=lambda a: a.query_id == 10)
    assert int(session_leaf(m, "grpc/rejected-malformed")) >= 1
    assert int(session_leaf(m, "grpc/rejected-unauthenticated")) >= 1


def test_seed004_security_a_flood_of_bad_cps_messages_is_counted_not_logged_one_by_one(setup, agent):
    cps, m = setup
    before = int(session_leaf(m, "grpc/rejected-malformed"))
    logged = sum("C-PS message rejected" in line for line in list(agent.log))
    for _ in range(40):
        cps.send_raw(cps.stream, b"\xff\xff\xff\xff")
    for _ in range(40):
        _, rej = cps.expect({"rejected"})
        assert rej.reason == "malformed", rej
    assert wait_until(lambda: int(session_leaf(m, "grpc/rejected-malformed")) >= before + 40)
    now = sum("C-PS message rejected" in line for line in list(agent.log))
    assert now - logged <= 8, f"{now - logged} warnings for 40 rejected messages"
    # The stream is fine.
    cps.push("query", cps.pb2.Query(query_id=14))
    cps.expect({"answer"}, where=lambda a: a.query_id == 14)


def test_seed004_cps_failure_a_cps_restart_mid_stream_reconnects_full_syncs_and_sequences_continue(setup):
    cps, m = setup
    last = cps.acked
    opened = cps.streams
    cps.end_stream()
    cps.expect({"hello"})
    _, ad = cps.expect(
        {"advertisement"}, where=lambda a: any(r.kind == cps.pb2.REPORT_KIND_FULL for r in a.reports)
    )
    assert ad.reports[0].sequence > last, "the sequence continues across streams"
    assert cps.streams > opened
    assert wait_until(lambda: session_leaf(m, "state") == "connected", 10)


def test_seed004_policy_engine_a_cps_without_policy_user_has_its_updates_refused(setup, agent):
    cps, m = setup
    reset(m, peer_config(cps.port, policy_user=None))
    # Reconfigured: a new session and stream.
    cps.expect({"hello"})
    cps.expect({"advertisement"})
    before = heartbeat_in_running(m)
    cps.push("policy", policy_edit(cps.pb2, 11, "<heartbeat-interval>50</heartbeat-interval>"))
    _, r = cps.expect({"policy_result"}, where=lambda r: r.update_id == 11)
    assert not r.applied and r.error_tag == "access-denied" and "policy-user" in r.message, r
    assert heartbeat_in_running(m) == before
