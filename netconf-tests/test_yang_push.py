"""YANG-Push over NETCONF with a real client: RFC 8639 dynamic subscriptions (establish,
modify, delete, kill; event streams with filters and replay), RFC 8641 datastore
subscriptions (periodic push-update, on-change push-change-update with a YANG Patch) on
running and operational, and the RFC 8639 error identities. ncclient has no
establish-subscription call: `dispatch` sends the RPC, `take_notification` receives."""

import datetime
import json
import re
import time
import urllib.request

import pytest
from lxml import etree

from conftest import CATS, NC, Agent, config, reset, sci, scis_config, assert_ok, wait_until

SN = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications"
YP = "urn:ietf:params:xml:ns:yang:ietf-yang-push"
NOTIF = "urn:ietf:params:xml:ns:netconf:notification:1.0"
BASE_NOTIF = "urn:ietf:params:xml:ns:yang:ietf-netconf-notifications"
NS = {"sn": SN, "yp": YP, "c": CATS, "nc": NC, "n": NOTIF, "b": BASE_NOTIF}
SCI = "10.9.9.9:80"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    a = Agent(tmp_path_factory.mktemp("push"), ["--sci-listen", "127.0.0.1:0", "--sci-plain-http"]).start()
    found = None
    for line in a.log:
        mt = re.search(r"SCI reports: http://([0-9.]+:\d+)/", line)
        if mt:
            found = mt.group(1)
    assert found, "no SCI collector address in the ready line"
    a.sci_addr = found
    yield a
    a.stop()


SEQ = [0]


def report(agent, gas, health="HEALTHY", csci=SCI):
    SEQ[0] += 1
    body = json.dumps(
        {
            "csci-id": csci,
            "cs-id": "AR1",
            "seq": SEQ[0],
            "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "gas": gas,
            "computing-time": 5,
            "health": health,
        }
    ).encode()
    req = urllib.request.Request(
        f"http://{agent.sci_addr}/reports", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200, r.read()


def rpc(m, body):
    """Sends an RPC with ncclient's dispatch; returns the parsed <rpc-reply>."""
    reply = m.dispatch(etree.fromstring(body))
    return etree.fromstring(reply.xml.encode())


def rpc_error(m, body):
    from ncclient.operations import RaiseMode

    m.raise_mode = RaiseMode.NONE
    try:
        root = rpc(m, body)
    finally:
        m.raise_mode = RaiseMode.ALL
    errs = root.findall("nc:rpc-error", NS)
    assert len(errs) == 1, etree.tostring(root)
    return errs[0]


def establish(m, inner):
    root = rpc(m, f'<establish-subscription xmlns="{SN}" xmlns:yp="{YP}">{inner}</establish-subscription>')
    sid = root.findtext("sn:id", namespaces=NS)
    assert sid is not None, etree.tostring(root)
    return int(sid), root


def notifications(m, timeout):
    """The notifications arriving within `timeout` seconds: (root, its content elements)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = m.take_notification(timeout=0.5)
        if n is None:
            continue
        root = etree.fromstring(n.notification_xml.encode())
        yield root, [c for c in root if etree.QName(c).localname != "eventTime"]


def take(m, name, timeout=10):
    """The next notification whose content is `name` (others skipped)."""
    for _, content in notifications(m, timeout):
        if etree.QName(content[0]).localname == name:
            return content[0]
    raise AssertionError(f"no {name} within {timeout}s")


def no_notification(m, name, wait=1.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        n = m.take_notification(timeout=0.2)
        if n is None:
            continue
        root = etree.fromstring(n.notification_xml.encode())
        content = [c for c in root if etree.QName(c).localname != "eventTime"][0]
        assert etree.QName(content).localname != name, n.notification_xml


OPERATIONAL = '<yp:datastore xmlns:ds="urn:ietf:params:xml:ns:yang:ietf-datastores">ds:operational</yp:datastore>'
RUNNING = '<yp:datastore xmlns:ds="urn:ietf:params:xml:ns:yang:ietf-datastores">ds:running</yp:datastore>'


def entry_filter(csci=SCI):
    return f"<yp:datastore-xpath-filter xmlns:c=\"{CATS}\">/c:cats-sma/c:metric-cache/c:entry[c:csci-id='{csci}']</yp:datastore-xpath-filter>"


@pytest.fixture
def m(nc):
    m = nc()
    # GAS jumps are the point of these tests, not anomalies.
    reset(
        m,
        "<scis>" + sci(SCI, "<authentication>none</authentication>") + "</scis>"
        "<validation><anomaly><gas-change-window>1</gas-change-window></anomaly></validation>",
    )
    yield m


def test_periodic_push_update_of_operational(m, agent):
    """RFC 8641 3.3: a periodic subscription sends push-update with the selected data
    every period; the id in the reply is the id in the notifications."""
    report(agent, 410)
    sid, _ = establish(m, OPERATIONAL + entry_filter() + "<yp:periodic><yp:period>20</yp:period></yp:periodic>")
    for _ in range(2):
        upd = take(m, "push-update")
        assert upd.findtext("yp:id", namespaces=NS) == str(sid)
        e = upd.find("yp:datastore-contents/c:cats-sma/c:metric-cache/c:entry", NS)
        assert e is not None, etree.tostring(upd)
        assert e.findtext("c:csci-id", namespaces=NS) == SCI
        assert e.findtext("c:gas", namespaces=NS) == "410"
        # Only what the filter selects.
        assert upd.find("yp:datastore-contents/c:cats-sma/c:scis", NS) is None


def test_on_change_report_yields_one_yang_patch_edit(m, agent):
    """RFC 8641 3.7: a report that changes an SCI's GAS yields a push-change-update whose
    YANG Patch replaces that cache entry, with the new value."""
    report(agent, 100)
    sid, _ = establish(
        m,
        OPERATIONAL
        + entry_filter()
        + "<yp:on-change><yp:sync-on-start>true</yp:sync-on-start></yp:on-change>",
    )
    sync = take(m, "push-update")
    assert sync.findtext("yp:datastore-contents/c:cats-sma/c:metric-cache/c:entry/c:gas", namespaces=NS) == "100"
    report(agent, 250)
    upd = take(m, "push-change-update")
    assert upd.findtext("yp:id", namespaces=NS) == str(sid)
    edits = upd.findall("yp:datastore-changes/yp:yang-patch/yp:edit", NS)
    assert len(edits) == 1, etree.tostring(upd)
    e = edits[0]
    assert e.findtext("yp:operation", namespaces=NS) == "replace"
    assert e.findtext("yp:target", namespaces=NS) == "/cats-sma:cats-sma/metric-cache/entry=10.9.9.9%3A80"
    assert e.findtext("yp:value/c:entry/c:gas", namespaces=NS) == "250"


def test_on_change_dampening_batches_changes(m, agent):
    """RFC 8641 3.4.1: within the dampening period changes are batched; the last value of
    an object is sent once."""
    report(agent, 1)
    establish(
        m,
        OPERATIONAL
        + entry_filter()
        + "<yp:on-change><yp:dampening-period>150</yp:dampening-period><yp:sync-on-start>false</yp:sync-on-start></yp:on-change>",
    )
    report(agent, 2)
    first = take(m, "push-change-update")
    assert first.findtext(".//yp:edit/yp:value/c:entry/c:gas", namespaces=NS) == "2"
    for g in (3, 4, 5):
        report(agent, g)
    second = take(m, "push-change-update")
    edits = second.findall(".//yp:edit", NS)
    assert len(edits) == 1
    assert edits[0].findtext("yp:value/c:entry/c:gas", namespaces=NS) == "5"


def test_on_change_of_running_config(m, agent):
    """RFC 8641 on running: a commit that creates an SCI is a create edit."""
    establish(
        m,
        RUNNING
        + f'<yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:scis</yp:datastore-xpath-filter>'
        + "<yp:on-change><yp:sync-on-start>false</yp:sync-on-start></yp:on-change>",
    )
    assert_ok(m.edit_config(target="running", config=scis_config(sci("10.7.7.7:1"))))
    upd = take(m, "push-change-update")
    edits = upd.findall(".//yp:edit", NS)
    created = [e for e in edits if e.findtext("yp:operation", namespaces=NS) == "create"]
    assert created, etree.tostring(upd)
    assert created[0].findtext("yp:target", namespaces=NS) == "/cats-sma:cats-sma/scis/sci=10.7.7.7%3A1"
    assert created[0].findtext("yp:value/c:sci/c:csci-id", namespaces=NS) == "10.7.7.7:1"


def test_excluded_change_is_not_sent(m, agent):
    """RFC 8641 excluded-change: excluded operations are not pushed."""
    establish(
        m,
        RUNNING
        + f'<yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:scis</yp:datastore-xpath-filter>'
        + "<yp:on-change><yp:sync-on-start>false</yp:sync-on-start><yp:excluded-change>create</yp:excluded-change></yp:on-change>",
    )
    assert_ok(m.edit_config(target="running", config=scis_config(sci("10.7.7.8:1"))))
    assert_ok(m.edit_config(target="running", config=scis_config(sci("10.7.7.8:1", op="delete"))))
    upd = take(m, "push-change-update")
    ops = [e.findtext("yp:operation", namespaces=NS) for e in upd.findall(".//yp:edit", NS)]
    assert ops == ["delete"], etree.tostring(upd)


def test_stream_subscription_with_filter_and_replay(m, agent, nc):
    """RFC 8639 2.4.2: a NETCONF stream subscription with an XPath filter; replay from the
    log ends with replay-completed, then live events follow."""
    start = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    sub = nc()
    sid, _ = establish(
        sub,
        "<stream>NETCONF</stream>"
        + f'<stream-xpath-filter xmlns:b="{BASE_NOTIF}">/b:netconf-config-change</stream-xpath-filter>'
        + f"<replay-start-time>{start}</replay-start-time>",
    )
    # The reset by the fixture (a copy-config) is in the replay log.
    take(sub, "netconf-config-change")
    done = take(sub, "replay-completed")
    assert done.findtext("sn:id", namespaces=NS) == str(sid)
    assert_ok(m.edit_config(target="running", config=scis_config(sci("10.5.5.5:5"))))
    live = take(sub, "netconf-config-change")
    assert live.findtext("b:datastore", namespaces=NS) == "running"
    # Session starts are filtered out, and counted as excluded.
    nc()
    no_notification(sub, "netconf-session-start")
    state = etree.fromstring(
        m.get(filter=("subtree", f'<subscriptions xmlns="{SN}"/>')).data_xml.encode()
    )
    rx = state.find(f".//sn:subscription[sn:id='{sid}']/sn:receivers/sn:receiver", NS)
    assert rx is not None
    assert int(rx.findtext("sn:sent-event-records", namespaces=NS)) >= 2
    assert int(rx.findtext("sn:excluded-event-records", namespaces=NS)) >= 1
    assert rx.findtext("sn:state", namespaces=NS) == "active"


def test_modify_delete_and_kill(m, agent, nc):
    """RFC 8639 2.4.3-2.4.5: modify-subscription changes the period (subscription-modified
    follows); delete-subscription ends it; kill-subscription from another session
    terminates one with subscription-terminated (no-such-subscription)."""
    sid, _ = establish(m, OPERATIONAL + entry_filter() + "<yp:periodic><yp:period>500</yp:period></yp:periodic>")
    take(m, "push-update")
    assert_ok(
        rpc(
            m,
            f'<modify-subscription xmlns="{SN}" xmlns:yp="{YP}"><id>{sid}</id>'
            "<yp:periodic><yp:period>20</yp:period></yp:periodic></modify-subscription>",
        )
    )
    mod = take(m, "subscription-modified")
    assert mod.findtext("yp:periodic/yp:period", namespaces=NS) == "20"
    take(m, "push-update", timeout=3)
    assert_ok(rpc(m, f'<delete-subscription xmlns="{SN}"><id>{sid}</id></delete-subscription>'))
    time.sleep(0.3)
    while m.take_notification(timeout=0.1) is not None:
        pass
    no_notification(m, "push-update", wait=0.6)

    sid2, _ = establish(m, OPERATIONAL + entry_filter() + "<yp:periodic><yp:period>1000</yp:period></yp:periodic>")
    other = nc()
    err = rpc_error(other, f'<delete-subscription xmlns="{SN}"><id>{sid2}</id></delete-subscription>')
    assert err.findtext("nc:error-app-tag", namespaces=NS) == "ietf-subscribed-notifications:no-such-subscription"
    assert_ok(rpc(other, f'<kill-subscription xmlns="{SN}"><id>{sid2}</id></kill-subscription>'))
    term = take(m, "subscription-terminated")
    assert term.findtext("sn:id", namespaces=NS) == str(sid2)
    assert term.findtext("sn:reason", namespaces=NS).endswith(":no-such-subscription")


SERVER = "urn:cats-sma:yang:cats-sma-netconf-server"


def take_json(m, timeout=10):
    """The next notification of an encode-json subscription: (envelope eventTime, the
    decoded RFC 7951 document)."""
    for root, content in notifications(m, timeout):
        text = etree.tostring(root)
        assert len(content) == 1, text
        assert content[0].tag == f"{{{SERVER}}}json-notification", text
        return root.findtext("n:eventTime", namespaces=NS), json.loads(content[0].findtext(f"{{{SERVER}}}message"))
    raise AssertionError(f"no notification within {timeout}s")


def test_rfc8639_2_4_2_encode_json_over_netconf_sends_rfc7951_text(m, agent):
    """RFC 8639 2.4.2 encode-json on a NETCONF subscription (RFC 8640): every message,
    push-update and subscription-modified alike, is an RFC 5277 <notification> whose content
    is cats-sma-netconf-server:json-notification holding the RFC 7951 text (RFC 8040 6.4
    envelope, the envelope's eventTime inside); the data is the filter's selection."""
    report(agent, 333)
    sid, _ = establish(
        m,
        OPERATIONAL
        + entry_filter()
        + "<yp:periodic><yp:period>500</yp:period></yp:periodic><encoding>encode-json</encoding>",
    )
    stamp, doc = take_json(m)
    env = doc["ietf-restconf:notification"]
    assert env["eventTime"] == stamp
    upd = env["ietf-yang-push:push-update"]
    assert upd["id"] == sid
    entries = upd["datastore-contents"]["cats-sma:cats-sma"]["metric-cache"]["entry"]
    assert [e["csci-id"] for e in entries] == [SCI]
    assert entries[0]["gas"] == 333
    assert "scis" not in upd["datastore-contents"]["cats-sma:cats-sma"]
    assert_ok(
        rpc(
            m,
            f'<modify-subscription xmlns="{SN}" xmlns:yp="{YP}"><id>{sid}</id>'
            "<yp:periodic><yp:period>20</yp:period></yp:periodic></modify-subscription>",
        )
    )
    deadline = time.monotonic() + 10
    while True:
        _, doc = take_json(m)
        env = doc["ietf-restconf:notification"]
        if "ietf-subscribed-notifications:subscription-modified" in env:
            break
        assert time.monotonic() < deadline, "no subscription-modified"
    mod = env["ietf-subscribed-notifications:subscription-modified"]
    assert mod["id"] == sid
    assert mod["ietf-yang-push:periodic"]["period"] == 20
    _, doc = take_json(m, timeout=3)
    assert "ietf-yang-push:push-update" in doc["ietf-restconf:notification"]
    assert_ok(rpc(m, f'<delete-subscription xmlns="{SN}"><id>{sid}</id></delete-subscription>'))


@pytest.mark.parametrize(
    "inner,tag,app_tag",
    [
        ("<stream>nope</stream>", "invalid-value", "ietf-subscribed-notifications:stream-unavailable"),
        (
            OPERATIONAL + "<yp:periodic><yp:period>1</yp:period></yp:periodic>",
            "invalid-value",
            "ietf-yang-push:period-unsupported",
        ),
        (
            '<yp:datastore xmlns:ds="urn:ietf:params:xml:ns:yang:ietf-datastores">ds:startup</yp:datastore>'
            "<yp:periodic><yp:period>100</yp:period></yp:periodic>",
            "invalid-value",
            "ietf-yang-push:datastore-not-subscribable",
        ),
        (
            OPERATIONAL
            + f'<yp:datastore-xpath-filter xmlns:c="{CATS}">/c:cats-sma/c:statistics</yp:datastore-xpath-filter>'
            + "<yp:on-change/>",
            "invalid-value",
            "ietf-yang-push:on-change-unsupported",
        ),
        (
            '<stream>NETCONF</stream><encoding xmlns:r="urn:cats-sma:yang:cats-sma-notif-receivers">r:encode-cbor</encoding>',
            "invalid-value",
            "ietf-subscribed-notifications:encoding-unsupported",
        ),
        (
            "<stream>NETCONF</stream><stream-filter-name>no-such-filter</stream-filter-name>",
            "invalid-value",
            "ietf-subscribed-notifications:filter-unavailable",
        ),
    ],
)
def test_establish_errors_carry_the_rfc_identity(m, inner, tag, app_tag):
    """RFC 8639 2.4.6 / RFC 8640 2.4: refusals name the error identity in error-app-tag."""
    err = rpc_error(m, f'<establish-subscription xmlns="{SN}" xmlns:yp="{YP}">{inner}</establish-subscription>')
    assert err.findtext("nc:error-tag", namespaces=NS) == tag
    assert err.findtext("nc:error-app-tag", namespaces=NS) == app_tag


def test_resync_and_its_errors(m, agent):
    """RFC 8641 4.4.3: resync-subscription sends a push-update of an on-change
    subscription; for another kind of subscription it is no-such-subscription-resync."""
    report(agent, 77)
    sid, _ = establish(
        m, OPERATIONAL + entry_filter() + "<yp:on-change><yp:sync-on-start>false</yp:sync-on-start></yp:on-change>"
    )
    assert_ok(rpc(m, f'<resync-subscription xmlns="{YP}"><id>{sid}</id></resync-subscription>'))
    upd = take(m, "push-update")
    assert upd.findtext(".//c:entry/c:gas", namespaces=NS) == "77"
    err = rpc_error(m, f'<resync-subscription xmlns="{YP}"><id>999999</id></resync-subscription>')
    assert err.findtext("nc:error-app-tag", namespaces=NS) == "ietf-yang-push:no-such-subscription-resync"


def test_several_subscriptions_interleaved_with_rpcs(m, agent):
    """RFC 8639: several subscriptions on one session, RPCs answered in between."""
    a, _ = establish(m, OPERATIONAL + entry_filter() + "<yp:periodic><yp:period>20</yp:period></yp:periodic>")
    b, _ = establish(m, "<stream>cats-sma</stream>")
    assert a != b
    assert m.get_config(source="running").ok
    seen = set()
    for _ in range(3):
        seen.add(take(m, "push-update").findtext("yp:id", namespaces=NS))
    assert seen == {str(a)}
