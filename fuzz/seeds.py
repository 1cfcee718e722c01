#!/usr/bin/env python3
"""Writes the hand-made seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

The seeds are realistic messages: NETCONF rpcs as netconf-tests/ sends them, SCI reports
and proofs as docs/sci-protocol.md describes them, C-PS requests and replies from
docs/cps-protocol.md, policy rules from the policy tests. Each harness in
src/fuzzing.rs documents the input layout (selector byte, separators) these follow.
Run from the repository root: python3 fuzz/seeds.py
"""

import base64
import gzip
import hashlib
import hmac
import json
import os
import struct
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
NC = "urn:ietf:params:xml:ns:netconf:base:1.0"
CATS = "urn:cats-sma:yang:cats-sma"
SN = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications"
YP = "urn:ietf:params:xml:ns:yang:ietf-yang-push"
NMDA = "urn:ietf:params:xml:ns:yang:ietf-netconf-nmda"
DS = "urn:ietf:params:xml:ns:yang:ietf-datastores"
POL = "urn:cats-sma:yang:cats-sma-policy"
PATCH = "urn:ietf:params:xml:ns:yang:ietf-yang-patch"


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def rpc(i, op):
    return f'<rpc message-id="{i}" xmlns="{NC}">{op}</rpc>'


def sci(csci, extra="", cs="AR1"):
    return f"<sci><csci-id>{csci}</csci-id><cs-id>{cs}</cs-id>{extra}</sci>"


OPS = {
    "get-config": "<get-config><source><running/></source></get-config>",
    "get-subtree": f'<get><filter type="subtree"><cats-sma xmlns="{CATS}"><scis><sci><csci-id/></sci></scis></cats-sma></filter></get>',
    "edit-merge": f'<edit-config><target><running/></target><config><cats-sma xmlns="{CATS}"><scis>{sci("10.0.0.7:80", "<description>third</description>")}</scis></cats-sma></config></edit-config>',
    "edit-delete": f'<edit-config xmlns:nc="{NC}"><target><running/></target><config><cats-sma xmlns="{CATS}"><scis><sci nc:operation="delete"><csci-id>sci-b</csci-id></sci></scis></cats-sma></config></edit-config>',
    "edit-candidate": f'<edit-config><target><candidate/></target><default-operation>replace</default-operation><test-option>test-then-set</test-option><error-option>rollback-on-error</error-option><config><cats-sma xmlns="{CATS}"><agent><csma-id>csma-2</csma-id></agent></cats-sma></config></edit-config>',
    "commit-confirmed": "<commit><confirmed/><confirm-timeout>60</confirm-timeout><persist>p1</persist></commit>",
    "validate": f'<validate><source><config><cats-sma xmlns="{CATS}"><scis>{sci("a:1")}</scis></cats-sma></config></source></validate>',
    "lock": "<lock><target><candidate/></target></lock>",
    "copy-config": f'<copy-config><target><running/></target><source><config><cats-sma xmlns="{CATS}"/></config></source></copy-config>',
    "get-data": f'<get-data xmlns="{NMDA}" xmlns:ds="{DS}"><datastore>ds:operational</datastore><xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:scis</xpath-filter><max-depth>3</max-depth><with-origin/></get-data>',
    "edit-data": f'<edit-data xmlns="{NMDA}" xmlns:ds="{DS}"><datastore>ds:running</datastore><config><cats-sma xmlns="{CATS}"><scis>{sci("b:2")}</scis></cats-sma></config></edit-data>',
    "get-schema": '<get-schema xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring"><identifier>cats-sma</identifier><format>yang</format></get-schema>',
    "establish-periodic": f'<establish-subscription xmlns="{SN}" xmlns:yp="{YP}" xmlns:ds="{DS}"><yp:datastore>ds:operational</yp:datastore><yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma</yp:datastore-xpath-filter><yp:periodic><yp:period>500</yp:period></yp:periodic></establish-subscription>',
    "create-subscription": '<create-subscription xmlns="urn:ietf:params:xml:ns:netconf:notification:1.0"><stream>NETCONF</stream></create-subscription>',
    "with-defaults": f'<get-config><source><running/></source><with-defaults xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-with-defaults">report-all-tagged</with-defaults></get-config>',
    "policy-edit": f'<edit-config><target><running/></target><config><cats-sma xmlns="{CATS}"><policy xmlns="{POL}"><rule><name>r1</name><priority>1</priority><condition>Site_GAS &lt; 100</condition><action>SET Security_Label = 5</action></rule></policy></cats-sma></config></edit-config>',
    "kill-session": "<kill-session><session-id>99</session-id></kill-session>",
    "close-session": "<close-session/>",
}

# framing: selector byte (bit 0: chunked; bits 1-3: max size 16 << n; bits 4-7: read size)
for name, op in list(OPS.items())[:4]:
    write("framing", "eom-" + name, bytes([0x0E | 0x30]) + (rpc(1, op) + "]]>]]>").encode())
    m = rpc(2, op).encode()
    write("framing", "chunked-" + name, bytes([0x0F | 0x50]) + b"\n#%d\n" % len(m) + m + b"\n##\n")
write("framing", "rfc6242-example", bytes([0x0B]) + b'\n#4\n<rpc\n#18\n message-id="102"\n\n##\n')
write("framing", "too-big", bytes([0x02]) + b"<" + b"x" * 100 + b"/>]]>]]><ok/>]]>]]>")

for name, op in OPS.items():
    write("xml_message", name, rpc(1, op))
    write("rpc", "admin-" + name, b"\x00" + rpc(1, op).encode())
write("xml_message", "hello", f'<hello xmlns="{NC}"><capabilities><capability>urn:ietf:params:netconf:base:1.1</capability></capabilities></hello>')
write("xml_message", "entities", f'<rpc message-id="a&amp;b" xmlns="{NC}"><get><filter><x xmlns="urn:x">&lt;&#65;&#x42;<![CDATA[c]]></x></filter></get></rpc>')
write("rpc", "guest-get-config", b"\x01" + rpc(1, OPS["get-config"]).encode())
write("rpc", "guest-edit", b"\x01" + rpc(1, OPS["edit-merge"]).encode())
write("rpc", "candidate-commit", b"\x00" + "]]>]]>".join(rpc(i, OPS[k]) for i, k in enumerate(["lock", "edit-candidate", "validate", "commit-confirmed"])).encode())

# subtree_filter: selector (0 get-config, 1 get, 2 get-data; bit 2: guest), then the filter
sub = {
    "containment": f'<filter type="subtree"><cats-sma xmlns="{CATS}"><scis><sci><csci-id/></sci></scis></cats-sma></filter>',
    "content-match": f'<filter type="subtree"><cats-sma xmlns="{CATS}"><scis><sci><cs-id>AR2</cs-id></sci></scis></cats-sma></filter>',
    "key-match": f'<filter type="subtree"><cats-sma xmlns="{CATS}"><collection><authentication><credential><key>c2Vj</key></credential></authentication></collection></cats-sma></filter>',
    "attr-match": f'<filter type="subtree"><cats-sma xmlns="{CATS}" xmlns:nc="{NC}"><scis nc:operation="x"/></cats-sma></filter>',
    "empty": '<filter type="subtree"/>',
    "no-ns": '<filter><cats-sma><agent/></cats-sma></filter>',
}
for i, (name, f) in enumerate(sub.items()):
    write("subtree_filter", name, bytes([i % 2 | (4 if i % 3 == 0 else 0)]) + f.encode())
write("subtree_filter", "get-data", b"\x02" + f'<subtree-filter><cats-sma xmlns="{CATS}"><scis/></cats-sma></subtree-filter>'.encode())

xp = {
    "scis": "/c:cats-sma/c:scis/c:sci",
    "predicate": "/c:cats-sma/c:scis/c:sci[c:cs-id='AR1']/c:description",
    "starts-with": "/c:cats-sma/c:collection/c:authentication/c:credential[starts-with(c:key,'c')]",
    "union": "/c:cats-sma/c:agent | /nacm:nacm",
    "count": "//*[count(../*) > 1]",
    "root": "/",
    "functions": "/c:cats-sma/c:scis/c:sci[string-length(c:csci-id) > 5 and not(contains(c:csci-id, ':'))]",
}
for i, (name, x) in enumerate(xp.items()):
    write("xpath_filter", name, bytes([i % 3 | (4 if i % 2 else 0)]) + x.encode())

# restconf_decoders: selector 0 path, 1 query, 2 fields, 3 media, 4 basic
for i, p in enumerate(["/cats-sma:cats-sma/scis/sci=188.3.67.3%3A67", "cats-sma:cats-sma/scis/sci=sci-b/cs-id=AR1", "ietf-netconf-acm:nacm/groups", "/cats-sma:cats-sma/agent/csma-id", "/cats-sma:cats-sma/cats-sma-cps:cps"]):
    write("restconf_decoders", f"path-{i}", b"\x00" + p.encode())
for i, q in enumerate(["depth=3&content=config&fields=scis/sci(csci-id;cs-id)", "with-defaults=report-all&depth=unbounded", "insert=after&point=%2Fcats-sma%3Acats-sma%2Fscis%2Fsci%3Da", "filter=%2Fc%3Aa&start-time=2026-11-30T10%3A00%3A00Z&stop-time=2026-12-30T10:00:00Z"]):
    write("restconf_decoders", f"query-{i}", b"\x01" + q.encode())
write("restconf_decoders", "fields", b"\x02" + b"cats-sma:cats-sma/scis/sci(csci-id;cs-id);agent")
for i, m in enumerate(["application/yang-data+json", "application/yang-data+xml;q=0.9, application/json;q=0.5, */*;q=0.1", "application/yang-patch+xml; charset=utf-8", "text/event-stream"]):
    write("restconf_decoders", f"media-{i}", b"\x03" + m.encode())
write("restconf_decoders", "basic", b"\x04Basic " + base64.b64encode(b"admin:secret"))

# restconf_request: "METHOD target" line, headers, blank line, body; "~" = guest
reqs = {
    "get-scis": "GET /restconf/data/cats-sma:cats-sma/scis?depth=2\nAccept: application/yang-data+json\n\n",
    "get-fields": "GET /restconf/data/cats-sma:cats-sma?fields=scis/sci(csci-id)\nAccept: application/yang-data+xml\n\n",
    "post-sci": 'POST /restconf/data/cats-sma:cats-sma/scis\nContent-Type: application/yang-data+json\n\n{"cats-sma:sci":[{"csci-id":"10.1.1.1:80","cs-id":["AR9"]}]}',
    "put-xml": f'PUT /restconf/data/cats-sma:cats-sma/scis/sci=sci-b\nContent-Type: application/yang-data+xml\n\n<sci xmlns="{CATS}"><csci-id>sci-b</csci-id><cs-id>AR4</cs-id></sci>',
    "patch-merge": 'PATCH /restconf/data/cats-sma:cats-sma/agent\nContent-Type: application/yang-data+json\n\n{"cats-sma:agent":{"csma-id":"x"}}',
    "delete": "DELETE /restconf/data/cats-sma:cats-sma/scis/sci=10.0.0.6%3A80\n\n",
    "guest-get-keys": "~GET /restconf/data/cats-sma:cats-sma/collection\n\n",
    "operations": "GET /restconf/operations\n\n",
    "yang-library": "GET /restconf/yang-library-version\n\n",
    "rpc": 'POST /restconf/operations/ietf-subscribed-notifications:establish-subscription\nContent-Type: application/yang-data+json\n\n{"ietf-subscribed-notifications:input":{"stream":"NETCONF"}}',
    "streams": "GET /restconf/data/ietf-restconf-monitoring:restconf-state/streams\n\n",
}
for name, r in reqs.items():
    write("restconf_request", name, r)

# yang_patch: selector (bit 0: XML; bit 1: below scis; bit 2: guest), then the body
pj = {"ietf-yang-patch:yang-patch": {"patch-id": "p1", "edit": [
    {"edit-id": "e1", "operation": "create", "target": "/cats-sma:cats-sma/scis/sci=10.2.2.2%3A80", "value": {"cats-sma:sci": [{"csci-id": "10.2.2.2:80", "cs-id": ["AR1"]}]}},
    {"edit-id": "e2", "operation": "delete", "target": "/cats-sma:cats-sma/scis/sci=sci-b"},
    {"edit-id": "e3", "operation": "merge", "target": "/cats-sma:cats-sma/agent", "value": {"cats-sma:agent": {"csma-id": "c"}}}]}}
write("yang_patch", "json", b"\x00" + json.dumps(pj).encode())
pj2 = {"ietf-yang-patch:yang-patch": {"patch-id": "p2", "edit": [
    {"edit-id": "m", "operation": "replace", "target": "/sci=sci-b", "value": {"cats-sma:sci": [{"csci-id": "sci-b", "cs-id": ["AR5"]}]}},
    {"edit-id": "i", "operation": "insert", "target": "/sci=x", "where": "before", "point": "/sci=sci-b", "value": {"cats-sma:sci": [{"csci-id": "x", "cs-id": ["AR5"]}]}}]}}
write("yang_patch", "json-scis", b"\x02" + json.dumps(pj2).encode())
px = (f'<yang-patch xmlns="{PATCH}"><patch-id>p3</patch-id>'
      f'<edit><edit-id>e1</edit-id><operation>create</operation><target>/cats-sma:cats-sma/scis/sci=q</target>'
      f'<value><sci xmlns="{CATS}"><csci-id>q</csci-id><cs-id>AR1</cs-id></sci></value></edit>'
      f'<edit><edit-id>e2</edit-id><operation>remove</operation><target>/cats-sma:cats-sma/scis/sci=sci-b/description</target></edit>'
      f'</yang-patch>')
write("yang_patch", "xml", b"\x01" + px.encode())
write("yang_patch", "xml-guest", b"\x05" + px.encode())

# sci_report: selector (bit 0: CBOR), then the body (docs/sci-protocol.md)
rep = {"csci-id": "188.3.67.3:67", "cs-id": "AR1", "seq": 42, "timestamp": "2026-11-30T10:00:00Z", "gas": 400, "computing-time": 5, "health": "HEALTHY"}
write("sci_report", "json-one", b"\x00" + json.dumps(rep).encode())
full = dict(rep, sequence=43, cost=7, reputation=9, **{"security-label": 3})
del full["seq"]
write("sci_report", "json-batch", b"\x00" + json.dumps({"reports": [rep, full]}).encode())
write("sci_report", "json-array", b"\x00" + json.dumps([rep, dict(rep, seq=44, health="DEGRADED")]).encode())


def cbor(v):
    """A minimal CBOR encoder (maps, text, unsigned/negative ints, arrays, tag 1)."""
    def head(major, n):
        if n < 24:
            return bytes([major << 5 | n])
        for ai, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    if isinstance(v, tuple) and v[0] == "tag":
        return head(6, v[1]) + cbor(v[2])
    if isinstance(v, bool):
        return b"\xf5" if v else b"\xf4"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, dict):
        return head(5, len(v)) + b"".join(cbor(k) + cbor(x) for k, x in v.items())
    raise TypeError(v)


write("sci_report", "cbor-one", b"\x01" + cbor(rep))
write("sci_report", "cbor-epoch", b"\x01" + cbor(dict(rep, timestamp=("tag", 1, 1800000000))))
write("sci_report", "cbor-batch", b"\x01" + cbor({"reports": [rep, dict(rep, seq=45, timestamp=("tag", 0, "2026-11-30T10:00:05Z"))]}))

# sci_auth: proof \n claimed \n body (keys as in fuzzing.rs)
NOW = 1800000000
body = json.dumps(dict(rep, **{"csci-id": "sci-a"}))
sig = hmac.new(b"secret-key-of-sci-a", f"{NOW}\n{body}".encode(), hashlib.sha256).hexdigest()
write("sci_auth", "hmac", f"CATS-HMAC-SHA256 ts={NOW}, sig={sig}\nsci-a\n{body}")
write("sci_auth", "hmac-quoted", f'CATS-HMAC-SHA256 ts="{NOW - 10}", sig="{sig}"\nsci-a\n{body}')


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jws(header, claims, sign):
    signing_input = b64u(json.dumps(header).encode()) + "." + b64u(json.dumps(claims).encode())
    return signing_input + "." + b64u(sign(signing_input.encode()))


def hs256(key):
    return lambda m: hmac.new(key, m, hashlib.sha256).digest()


def ed25519(message):
    """Signs with the RFC 8037 A.1 test key (its public half is the JWKS of fuzzing.rs)."""
    d = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
    der = bytes.fromhex("302e020100300506032b657004220420") + d
    # Not subprocess: fuzz/select.py, beside this script, shadows the module it imports.
    with tempfile.TemporaryDirectory() as t:
        key, msg, sig = (os.path.join(t, n) for n in ("k.der", "m", "s"))
        open(key, "wb").write(der)
        open(msg, "wb").write(message)
        argv = ["openssl", "pkeyutl", "-sign", "-keyform", "DER", "-inkey", key, "-rawin", "-in", msg, "-out", sig]
        pid = os.posix_spawnp("openssl", argv, os.environ)
        assert os.waitpid(pid, 0)[1] == 0, "openssl pkeyutl failed"
        return open(sig, "rb").read()


body_b = json.dumps(dict(rep, **{"csci-id": "sci-b"}))
claims = {"sub": "sci-b", "iss": "site-1", "aud": "csma-1", "iat": NOW - 5, "exp": NOW + 55, "nbf": NOW - 5,
          "body_sha256": b64u(hashlib.sha256(body_b.encode()).digest())}
key_b = b"secret-key-of-sci-b-thirty-two-bytes"
write("sci_auth", "jwt", f"Bearer {jws({'alg': 'HS256', 'typ': 'JWT'}, claims, hs256(key_b))}\n\n{body_b}")
write("sci_auth", "jwt-aud-array", f"Bearer {jws({'alg': 'HS256'}, dict(claims, aud=['x', 'csma-1']), hs256(key_b))}\nsci-b\n{body_b}")
write("sci_auth", "jwt-eddsa", f"Bearer {jws({'alg': 'EdDSA', 'kid': 'ed-1'}, claims, ed25519)}\n\n{body_b}")
write("sci_auth", "jwt-es256-unverifiable", f"Bearer {jws({'alg': 'ES256', 'kid': 'ec-1'}, claims, lambda m: bytes(64))}\n\n{body_b}")
write("sci_auth", "jwt-confusion", f"Bearer {jws({'alg': 'HS256', 'kid': 'ed-1'}, claims, hs256(b'11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo'))}\n\n{body_b}")
write("sci_auth", "jwt-crit", f"Bearer {jws({'alg': 'HS256', 'crit': ['exp-ext'], 'exp-ext': 1}, claims, hs256(key_b))}\n\n{body_b}")
write("sci_auth", "jwt-body-swapped", f"Bearer {jws({'alg': 'HS256'}, claims, hs256(key_b))}\n\n{body_b.replace('sci-b', 'sci-a')}")
none = b64u(b'{"alg":"none"}')
write("sci_auth", "jwt-none", f"Bearer {none}.{b64u(json.dumps(claims).encode())}.\n\n{body_b}")

# cps_wire: selector (bit 0: C-SMA side decodes a reply; bit 1: PSK configured; bit 2: the
# harness signs), "METHOD uri", headers, blank line, body
report = {"sequence": 1764500000123456, "kind": "delta", "trigger": "metric-change", "generated-at": "2026-11-30T12:00:00.123Z",
          "services": [{"cs-id": "AR1", "gas": 320, "computing-time": 5, "health": "HEALTHY", "sci-count": 2}],
          "withdrawn": ["LLM1"], "sci-withdrawn": ["188.3.67.4:70"]}
batch = json.dumps({"csma-id": "csma-1", "site-id": "site-1", "reports": [report]}).encode()
snap = json.dumps({"csma-id": "csma-1", "report": dict(report, kind="full", withdrawn=[], **{"sci-withdrawn": []})}).encode()
hdr = "x-cats-csma-id: csma-1\nx-cats-key-id: k1\nx-cats-timestamp: %d\nx-cats-nonce: 7\n"
write("cps_wire", "post-batch", b"\x00POST /cats/metrics\nx-cats-csma-id: csma-1\ncontent-type: application/json\n\n" + batch)
write("cps_wire", "post-gzip-signed", b"\x06POST /cats/metrics\n" + (hdr % -1500).encode() + b"content-encoding: gzip\n\n" + gzip.compress(batch))
write("cps_wire", "put-snapshot-signed", b"\x06PUT /cats/metrics/site-1\n" + (hdr % 20).encode() + b"\n" + snap)
write("cps_wire", "put-unsigned", b"\x02PUT /cats/metrics/site-1\nx-cats-csma-id: csma-1\nx-cats-key-id: k1\nx-cats-timestamp: 1\nx-cats-nonce: 1\nx-cats-signature: 00ff\n\n" + snap)
write("cps_wire", "delete", b"\x00DELETE /cats/metrics/188.3.67.4%3A70\nx-cats-csma-id: csma-1\nx-cats-site-id: site-1\nx-cats-sequence: 9\n\n")
write("cps_wire", "get-site", b"\x00GET /cats/metrics\nx-cats-csma-id: csma-1\nx-cats-site-id: site-1\n\n")
# Issue 13: the seed's URIs, keepalive, XML and CBOR bodies (docs/cps-protocol.md, Encodings).
row = {"csci-id": "188.3.67.3:67", "cs-id": "AR1", "state": "healthy", "gas": 400, "computing-time": 5,
       "health": "HEALTHY", "cost": 12, "reputation": 8, "security-label": 3}
sci_update = {"csma-id": "csma-1", "site-id": "site-1", "sequence": 9, "sci": row}
keepalive = {"csma-id": "csma-1", "site-id": "site-1", "sequence": 9}


def to_xml(name, v):
    """The XML of docs/cps-protocol.md: one element per member, lists repeated."""
    if isinstance(v, dict):
        return f"<{name}>" + "".join(to_xml(k, x) for k, x in v.items()) + f"</{name}>"
    if isinstance(v, list):
        return "".join(to_xml(name, x) for x in v)
    if isinstance(v, bool):
        return f"<{name}>{'true' if v else 'false'}</{name}>"
    return f"<{name}>{v}</{name}>"


def xml_body(root, v):
    inner = to_xml(root, v)
    return (f'<{root} xmlns="urn:cats-sma:cps:1">' + inner[len(root) + 2:]).encode()


def to_cbor(v):
    """Minimal RFC 8949 encoder: maps, arrays, text, unsigned integers, booleans."""
    def head(major, n):
        if n < 24:
            return bytes([major << 5 | n])
        for ai, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    if isinstance(v, bool):
        return b"\xf5" if v else b"\xf4"
    if isinstance(v, int):
        return head(0, v)
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(to_cbor(x) for x in v)
    return head(5, len(v)) + b"".join(to_cbor(k) + to_cbor(x) for k, x in v.items())


batch_v = {"csma-id": "csma-1", "site-id": "site-1", "reports": [report]}
write("cps_wire", "post-batch-xml", b"\x00POST /cats/metrics\nx-cats-csma-id: csma-1\ncontent-type: application/xml\n\n" + xml_body("metric-batch", batch_v))
write("cps_wire", "post-batch-cbor", b"\x00POST /cats/metrics\nx-cats-csma-id: csma-1\ncontent-type: application/cbor\n\n" + to_cbor(batch_v))
write("cps_wire", "put-sci-signed", b"\x06PUT /cats/metrics/188.3.67.3:67\n" + (hdr % 10).encode() + b"\n" + json.dumps(sci_update).encode())
write("cps_wire", "put-sci-xml", b"\x00PUT /cats/metrics/188.3.67.3:67\nx-cats-csma-id: csma-1\ncontent-type: application/xml\n\n" + xml_body("sci-update", sci_update))
write("cps_wire", "put-sci-cbor", b"\x00PUT /cats/metrics/188.3.67.3:67\nx-cats-csma-id: csma-1\ncontent-type: application/cbor\n\n" + to_cbor(sci_update))
write("cps_wire", "get-sci", b"\x00GET /cats/metrics/188.3.67.3:67\nx-cats-csma-id: csma-1\naccept: application/cbor\n\n")
write("cps_wire", "get-site-xml", b"\x00GET /cats/metrics\nx-cats-csma-id: csma-1\nx-cats-site-id: site-1\naccept: application/xml\n\n")
write("cps_wire", "keepalive-xml", b"\x00POST /cats/keepalive\nx-cats-csma-id: csma-1\ncontent-type: application/xml\n\n" + xml_body("keepalive", keepalive))
write("cps_wire", "keepalive-signed", b"\x06POST /cats/keepalive\n" + (hdr % 5).encode() + b"\n" + json.dumps(keepalive).encode())
ack_v = {"acked-sequence": 5, "applied": 1, "stale": 0, "full-sync-requested": False, "keepalive": True, "entry-ttl": 180, "refresh-interval": 45}
write("cps_wire", "reply-ack-xml", b"\x03x\n\n" + xml_body("ack", ack_v))
write("cps_wire", "reply-ack-cbor", b"\x05x\n\n" + to_cbor(ack_v))
write("cps_wire", "reply-sci-state-xml", b"\x03x\n\n" + xml_body("sci-state", {"site-id": "site-1", "sequence": 9, "sci": row}))
write("cps_wire", "select", b"\x00GET /cats/select?cs-id=AR1&ingress=ingress+1\n\n")
write("cps_wire", "sync", b"\x00POST /cats/sync/site%2D1\n\n")
write("cps_wire", "reply-ack", b"\x01x\n\n" + b'{"acked-sequence": 1764500000123456, "applied": 3, "stale": 0, "full-sync-requested": false}')
write("cps_wire", "reply-state", b"\x01site%201\n\n" + json.dumps({"site-id": "site-1", "csma-id": "csma-1", "acked-sequence": 5, "full-sync-requested": True, "services": report["services"]}).encode())
write("cps_wire", "reply-error", b"\x01x\n\n" + b'{"error": "stale-timestamp", "detail": "timestamp 40000 ms away"}')
write("cps_wire", "reply-gzip", b"\x01x\n\n" + gzip.compress(b'{"acked-sequence": 1}'))

# push_params: the operation element
push = {
    "periodic": f'<establish-subscription xmlns="{SN}" xmlns:yp="{YP}" xmlns:ds="{DS}"><yp:datastore>ds:running</yp:datastore><yp:datastore-subtree-filter><cats-sma xmlns="{CATS}"/></yp:datastore-subtree-filter><yp:periodic><yp:period>100</yp:period><yp:anchor-time>2026-11-30T10:00:00Z</yp:anchor-time></yp:periodic><stop-time>2030-01-01T00:00:00Z</stop-time></establish-subscription>',
    "on-change": f'<establish-subscription xmlns="{SN}" xmlns:yp="{YP}" xmlns:ds="{DS}"><yp:datastore>ds:operational</yp:datastore><yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:scis</yp:datastore-xpath-filter><yp:on-change><yp:dampening-period>10</yp:dampening-period><yp:sync-on-start>false</yp:sync-on-start><yp:excluded-change>delete</yp:excluded-change></yp:on-change></establish-subscription>',
    "stream": f'<establish-subscription xmlns="{SN}"><stream>NETCONF</stream><stream-xpath-filter xmlns:n="urn:ietf:params:xml:ns:yang:ietf-netconf-notifications">/n:netconf-config-change</stream-xpath-filter><replay-start-time>2026-11-30T10:00:00Z</replay-start-time><encoding>encode-xml</encoding></establish-subscription>',
    "modify": f'<modify-subscription xmlns="{SN}" xmlns:yp="{YP}"><id>3</id><yp:periodic><yp:period>200</yp:period></yp:periodic><yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:agent</yp:datastore-xpath-filter></modify-subscription>',
    "delete": f'<delete-subscription xmlns="{SN}"><id>3</id></delete-subscription>',
}
for name, x in push.items():
    write("push_params", name, x)

# policy: condition \n action (src/engine/policy tests and docs/configuration.md)
rules = [
    ("IF Site_GAS < 100", "THEN SET Security_Label = 5"),
    ("SCI_Health = DEGRADED", "REDUCE SCI_GAS BY 50%"),
    ("NOT (Cost > 100 OR Reputation <= 3) AND TRUE", "CLAMP Site_Computing_Time TO 1..3600000"),
    ("IF Time IN Maintenance_Window", "THEN SUPPRESS_UPDATES"),
    ("Time IN mw", "SET Cost = 4294967295"),
    ("Time IN 'mw' AND Site_Health != UNHEALTHY", "REDUCE Site_GAS BY 12.345%"),
    ("100 > SCI_Computing_Time", "SET SCI_Computing_Time = 0"),
]
for i, (c, a) in enumerate(rules):
    write("policy", f"rule-{i}", f"{c}\n{a}")

# sci_grpc: selector (bit 0: ReportBatch, else one stream Report), then the protobuf
# message (proto/cats/sma/v1/sci.proto), encoded by hand: varints and length-delimited fields.
def pb_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(number, value):
    if isinstance(value, int):
        return pb_varint(number << 3) + pb_varint(value & (2**64 - 1))
    if isinstance(value, str):
        value = value.encode()
    return pb_varint(number << 3 | 2) + pb_varint(len(value)) + value


def pb_report(csci, seq, auth=None, **extra):
    ts = pb_field(1, 1795860000) + pb_field(2, 5)
    m = (pb_field(1, csci) + pb_field(2, "AR1") + pb_field(3, seq) + pb_field(4, ts) + pb_field(5, 400)
         + pb_field(6, 5) + pb_field(7, 1) + pb_field(11, "corr-1"))
    for number, v in extra.items():
        m += pb_field(int(number[1:]), v)
    if auth:
        m += pb_field(15, auth)
    return m


write("sci_grpc", "stream-one", b"\x00" + pb_report("188.3.67.3:67", 42))
write("sci_grpc", "stream-optional", b"\x00" + pb_report("188.3.67.3:67", 43, f8=7, f9=9, f10=3))
write("sci_grpc", "stream-negative", b"\x00" + pb_report("sci-a", 44, f5=-5))
write("sci_grpc", "stream-hmac", b"\x00" + pb_report("sci-a", 45, auth="CATS-HMAC-SHA256 ts=1800000000, sig=" + "00" * 32))
# cps_grpc: selector (bit 0: a PSK peer), then a CpsMessage (proto/cats/sma/v1/cps.proto):
# body (an encoded CpsBody), counter, MAC (hex HMAC-SHA256 under b"fuzz-psk" over
# "csma-1\n7\n<counter>\n" + body).
def cps_message(kind, inner, counter=1, psk=False):
    import hashlib
    import hmac as _hmac
    body = pb_field(kind, inner)
    m = pb_field(1, body) + pb_field(2, counter)
    if psk:
        m += pb_field(3, _hmac.new(b"fuzz-psk", f"csma-1\n7\n{counter}\n".encode() + body, hashlib.sha256).hexdigest())
    return m


write("cps_grpc", "welcome", b"\x00" + cps_message(1, pb_field(1, 42) + pb_field(3, 1) + pb_field(4, 180)))
write("cps_grpc", "ack-psk", b"\x01" + cps_message(2, pb_field(1, 43) + pb_field(2, 1), psk=True))
write("cps_grpc", "refusal", b"\x00" + cps_message(3, pb_field(1, "sequence-mismatch") + pb_field(2, "x")))
write("cps_grpc", "full-sync-psk", b"\x01" + cps_message(4, pb_field(1, "restart"), counter=3, psk=True))
write("cps_grpc", "policy-xml", b"\x00" + cps_message(5, pb_field(1, 1) + pb_field(2, 1) + pb_field(3, '<cats-sma xmlns="urn:cats-sma:yang:cats-sma"/>')))
write("cps_grpc", "policy-json", b"\x01" + cps_message(5, pb_field(1, 2) + pb_field(2, 2) + pb_field(3, '{"cats-sma:cats-sma":{}}'), psk=True))
write("cps_grpc", "query", b"\x00" + cps_message(6, pb_field(1, 9) + pb_field(2, "AR1")))
write("cps_grpc", "bad-mac", b"\x01" + cps_message(6, pb_field(1, 9)) + pb_field(3, "00" * 32))
write("sci_grpc", "batch", b"\x01" + pb_field(1, pb_report("188.3.67.3:67", 46)) + pb_field(1, pb_report("sci-a", 47)))

# sse_event: chunk-size selector, then a text/event-stream (WHATWG HTML 9.2.5).
write("sse_event", "reports", b"\x03" + b"\xef\xbb\xbf: hello\r\nid: 1\r\nevent: report\r\ndata: {\"csci-id\":\"sci-a\"}\r\n\r\n"
      + b"retry: 2000\nid: 2\ndata: a\ndata: b\n\n")
write("sse_event", "cr-only", b"\x00" + b"data: x\r\rdata: y\r\r\rid\r\r")
write("sse_event", "oversized", b"\x07" + b"data: " + b"x" * 300 + b"\n\n" + (b"data: " + b"y" * 200 + b"\n") * 6 + b"\ndata: ok\n\n")


# bgp_message: selector (bit 0: 2-octet AS, the rest: chunk size), then what a BGP
# neighbor sends (RFC 4271 section 4, RFC 9552 BGP-LS, docs/routing-protocols.md).
def bgp(kind, body):
    return b"\xff" * 16 + struct.pack(">HB", 19 + len(body), kind) + body


def tlv(t, v):
    return struct.pack(">HH", t, len(v)) + v


BGP_OPEN = bgp(1, struct.pack(">BHH4s", 4, 65001, 90, bytes([10, 255, 0, 1]))
               + bytes([16, 2, 14]) + bytes([1, 4, 0x40, 0x04, 0, 71]) + bytes([2, 0])
               + bytes([65, 4]) + struct.pack(">I", 65001))
BGP_KEEPALIVE = bgp(4, b"")
LS_NLRI = tlv(3, bytes([5]) + struct.pack(">Q", 0)
              + tlv(256, tlv(512, struct.pack(">I", 65000)) + tlv(515, bytes([10, 255, 0, 2])))
              + tlv(265, bytes([24, 198, 51, 100])))
MP_REACH = struct.pack(">HBB", 16388, 71, 4) + bytes([127, 0, 0, 1, 0]) + LS_NLRI
LS_ATTR = (tlv(65000, struct.pack(">I", 500)) + tlv(65001, struct.pack(">I", 12)) + tlv(65002, b"AR1")
           + tlv(65003, b"\x00") + tlv(65009, struct.pack(">Q", 42)))
ATTRS = (bytes([0x40, 1, 1, 0]) + bytes([0x40, 2, 0]) + bytes([0x40, 5, 4]) + struct.pack(">I", 100)
         + bytes([0x90, 14]) + struct.pack(">H", len(MP_REACH)) + MP_REACH
         + bytes([0x90, 29]) + struct.pack(">H", len(LS_ATTR)) + LS_ATTR)
BGP_UPDATE = bgp(2, struct.pack(">H", 0) + struct.pack(">H", len(ATTRS)) + ATTRS)
MP_UNREACH = struct.pack(">HB", 16388, 71) + LS_NLRI
BGP_WITHDRAW = bgp(2, struct.pack(">HH", 0, 4 + len(MP_UNREACH)) + bytes([0x90, 15]) + struct.pack(">H", len(MP_UNREACH)) + MP_UNREACH)
OPAQUE = bgp(2, struct.pack(">H", 0) + struct.pack(">H", len(ATTRS) - len(LS_ATTR) + 4 + 4 + len(LS_ATTR))
             + ATTRS[:-len(LS_ATTR) - 4] + bytes([0x90, 29]) + struct.pack(">H", 4 + len(LS_ATTR)) + tlv(1157, LS_ATTR))
write("bgp_message", "session", b"\x00" + BGP_OPEN + BGP_KEEPALIVE + BGP_UPDATE + BGP_WITHDRAW + BGP_KEEPALIVE)
write("bgp_message", "chunked", b"\x0e" + BGP_OPEN + BGP_UPDATE)
write("bgp_message", "opaque", b"\x40" + OPAQUE)
write("bgp_message", "refresh-notification", b"\x00" + bgp(5, struct.pack(">HBB", 16388, 0, 71)) + bgp(3, bytes([6, 2])))
write("bgp_message", "tlvs", b"\x02" + LS_ATTR)


# grasp_message: CBOR GRASP messages as a peer sends them to the synchronization listener
# (RFC 8990 section 2.5.6.1, CDDL in section 4), back to back.
def grasp_req_syn(sid, name):
    return cbor([4, sid, [name, 4, 6]])


write("grasp_message", "req-syn", grasp_req_syn(4242, "CATS:ServiceMetrics"))
write("grasp_message", "decline-then-synch", grasp_req_syn(7, "EX1:Other") + grasp_req_syn(8, "CATS:ServiceMetrics"))
write("grasp_message", "negotiate-invalid", cbor([3, 9, ["CATS:ServiceMetrics", 2, 6, {"gas": 1}]]) + b"\xff\x00")
# [M_FLOOD, 1, h'7f000001', 5000, [objective, []]]: the byte string written by hand.
write("grasp_message", "flood", b"\x85\x09\x01\x44\x7f\x00\x00\x01\x19\x13\x88"
      + cbor([["CATS:ServiceMetrics", 4, 6, {"site-id": "s"}], []]))


# flow_message: IPFIX and NetFlow v9 datagrams as an A-ER sends them, each prefixed by a
# 2-octet length. The first two are softflowd 1.1.0's exports of a pcap of two UDP flows
# (template and data sets in one message).
def lp(*msgs):
    return b"".join(struct.pack(">H", len(m)) + m for m in msgs)


SOFTFLOWD_IPFIX = bytes.fromhex("000a01c46b11e63a0000000200000000000200480400001000080004000c000400160004001500040001000400020004000a0004000e0004003d00010088000100070002000b00020004000100060001003c000100050001000200400401000e00080004000c000400160004001500040001000400020004000a0004000e0004003d0001008800010020000200040001003c0001000500010002004808000010001b0010001c001000160004001500040001000400020004000a0004000e0004003d00010088000100070002000b00020004000100060001003c000100050001000200400801000e001b0010001c001000160004001500040001000400020004000a0004000e0004003d000100880001008b000200040001003c00010005000100030022010000060001008f000400a00008013100040132000401300002005200100100002a000015c2000001a23deb556200000001000000000001742e706361700000000000000000000004000058c000020ac6336401fffffd2dfffffd3400000c0c000000030000000000000000000101bb9c4011000400c6336401c000020afffffd2dfffffd340000028000000005000000000000000001019c4001bb11000400")
SOFTFLOWD_V9 = bytes.fromhex("00090002000000006b11e90b0000000100000000000000480400001000080004000c000400160004001500040001000400020004000a0004000e0004003d00010088000100070002000b00020004000100060001003c000100050001000000400401000e00080004000c000400160004001500040001000400020004000a0004000e0004003d0001008800010020000200040001003c0001000500010000004808000010001b0010001c001000160004001500040001000400020004000a0004000e0004003d00010088000100070002000b00020004000100060001003c000100050001000000400801000e001b0010001c001000160004001500040001000400020004000a0004000e0004003d000100880001008b000200040001003c0001000500010001001a01000004000c000200040022000400230001005200100100001d000000000000000101742e706361700000000000000000000004000059c000020ac6336401fff4feacfff4feb300000c0c000000030000000000000000000101bb9c4011000400c6336401c000020afff4feacfff4feb30000028000000005000000000000000001019c4001bb1100040000")


def ipfix(domain, sets):
    return struct.pack(">HHIII", 10, 16 + len(sets), 0x60000000, 1, domain) + sets


T300 = struct.pack(">HHHH", 2, 24, 300, 4) + struct.pack(">HHHHHHHH", 8, 4, 12, 4, 2, 8, 1, 8)
D300 = struct.pack(">HH", 300, 28) + bytes([192, 0, 2, 1, 198, 51, 100, 7]) + struct.pack(">QQ", 3, 180)
write("flow_message", "softflowd-ipfix", lp(SOFTFLOWD_IPFIX))
write("flow_message", "softflowd-v9", lp(SOFTFLOWD_V9))
write("flow_message", "template-data-withdraw", lp(ipfix(0, T300 + D300), ipfix(0, struct.pack(">HHHH", 2, 8, 300, 0)),
                                                   ipfix(0, D300), ipfix(0, struct.pack(">HHHH", 2, 8, 2, 0))))
write("flow_message", "data-before-template", lp(ipfix(7, D300 + T300 + D300)))


# stamp_packet: STAMP test packets (RFC 8762 section 4.2.1) and reflected ones (4.3.1),
# unauthenticated, 44 octets; the first is sequence number 1 (the sender's first probe).
STAMP_TEST = struct.pack(">IQH", 1, 0xE8000000_00000000, 0x1601) + bytes(30)
STAMP_REFLECTED = (struct.pack(">IQH", 1, 0xE8000000_80000000, 0x1601) + bytes(2)
                   + struct.pack(">QIQH", 0xE8000000_40000000, 1, 0xE8000000_00000000, 0x1601) + bytes(2) + bytes([64]) + bytes(3))
write("stamp_packet", "test", STAMP_TEST)
write("stamp_packet", "reflected", STAMP_REFLECTED)
write("stamp_packet", "padded", STAMP_TEST + bytes(56))


# overload_wire: the DOIC AVPs of a peer report in their text form (seed 003, RFC 8581
# section 6, src/overload/wire.rs), one header value (no selector; both decoders run on it).
write("overload_wire", "supported", "feature-vector=17;peer-algo=1;source-id=csma-1")
write("overload_wire", "supported-hex", "feature-vector=0x10; source-id=x; future=1")
write("overload_wire", "olr", "sequence=1764806400000;report-type=2;reduction=30;validity=30;source-id=cps-1")
write("overload_wire", "olr-ends", "sequence=2;report-type=2;reduction=0;validity=0;source-id=cps-1")
write("overload_wire", "olr-no-validity", "Sequence=7; Report-Type=2; Reduction=100; Source-ID=cps-2")
write("overload_wire", "source-id-encoded", "feature-vector=17;peer-algo=1;source-id=csma%3B%201%3D%C3%A9")
write("overload_wire", "malformed", "sequence=1;sequence=2;report-type=2;reduction=101;validity=86401;source-id=%ff;junk")
