"""RFC 5277 event notifications on the NETCONF stream and the RFC 6470 base
notifications, received by ncclient (create_subscription + take_notification)."""

import datetime

from lxml import etree

from conftest import CATS, NC, assert_ok, config, one_error, reset, sci, scis_config

NOTIF = "urn:ietf:params:xml:ns:netconf:notification:1.0"
BASE_NOTIF = "urn:ietf:params:xml:ns:yang:ietf-netconf-notifications"
NS = {"n": NOTIF, "b": BASE_NOTIF}


def _take(m, name, timeout=5):
    """The next notification whose content element is `name` (others are skipped)."""
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout)
    while datetime.datetime.now() < deadline:
        n = m.take_notification(timeout=0.5)
        if n is None:
            continue
        root = etree.fromstring(n.notification_xml.encode())
        content = [c for c in root if etree.QName(c).localname != "eventTime"][0]
        if etree.QName(content).localname == name:
            return root, content
    raise AssertionError(f"no {name} notification within {timeout}s")


def _iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_capabilities_announced(nc):
    """RFC 5277 3.1: :notification:1.0 and :interleave:1.0."""
    caps = set(nc().server_capabilities)
    assert "urn:ietf:params:netconf:capability:notification:1.0" in caps
    assert "urn:ietf:params:netconf:capability:interleave:1.0" in caps


def test_config_change_is_notified_with_changed_by_and_edits(nc):
    """RFC 6470 2.1 netconf-config-change: changed-by (username, session-id), datastore
    running, one edit per changed subtree with its target and operation."""
    sub, editor = nc(), nc()
    reset(editor)
    assert_ok(sub.create_subscription())
    assert_ok(editor.edit_config(target="running", config=scis_config(sci("10.1.1.1:80"))))
    root, change = _take(sub, "netconf-config-change")
    assert root.find("n:eventTime", NS) is not None
    assert change.findtext("b:changed-by/b:username", namespaces=NS) == "admin"
    assert change.findtext("b:changed-by/b:session-id", namespaces=NS) == editor.session_id
    assert change.findtext("b:datastore", namespaces=NS) == "running"
    targets = [e.findtext("b:target", namespaces=NS) for e in change.findall("b:edit", NS)]
    assert any("sci" in t and "10.1.1.1:80" in t for t in targets), targets
    ops = {e.findtext("b:operation", namespaces=NS) for e in change.findall("b:edit", NS)}
    assert ops <= {"create", "delete", "replace", "merge", "remove"}


def test_session_start_and_end_are_notified(nc, agent):
    """RFC 6470 2.2 and 2.3: netconf-session-start, and netconf-session-end with the
    termination reason (closed) and killed-by for kill-session."""
    sub = nc()
    assert_ok(sub.create_subscription())
    other = nc()
    _, start = _take(sub, "netconf-session-start")
    assert start.findtext("b:session-id", namespaces=NS) == other.session_id
    other.close_session()
    _, end = _take(sub, "netconf-session-end")
    assert end.findtext("b:termination-reason", namespaces=NS) == "closed"
    victim, killer = nc(), nc()
    assert_ok(killer.kill_session(victim.session_id))
    for _ in range(5):
        _, end = _take(sub, "netconf-session-end")
        if end.findtext("b:session-id", namespaces=NS) == victim.session_id:
            break
    assert end.findtext("b:termination-reason", namespaces=NS) == "killed"
    assert end.findtext("b:killed-by", namespaces=NS) == killer.session_id


def test_replay_from_start_time_then_replay_complete(nc):
    """RFC 5277 2.1.1 and 3.3: startTime replays logged events, then replayComplete."""
    editor = nc()
    reset(editor)
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=2)
    assert_ok(editor.edit_config(target="running", config=scis_config(sci("10.2.2.2:80"))))
    sub = nc()
    assert_ok(sub.create_subscription(start_time=_iso(before)))
    _take(sub, "netconf-config-change")
    _take(sub, "replayComplete")


def test_stop_time_ends_with_notification_complete(nc):
    """RFC 5277 2.2.2: a subscription with stopTime ends with notificationComplete."""
    sub = nc()
    now = datetime.datetime.now(datetime.timezone.utc)
    start = _iso(now - datetime.timedelta(seconds=60))
    stop = _iso(now + datetime.timedelta(seconds=1))
    assert_ok(sub.create_subscription(start_time=start, stop_time=stop))
    _take(sub, "replayComplete")
    _take(sub, "notificationComplete", timeout=8)


def test_filter_selects_notifications(nc):
    """RFC 5277 3.6: a subtree filter on the event content: only session-end passes."""
    sub, editor = nc(), nc()
    reset(editor)
    flt = ("subtree", f'<netconf-session-end xmlns="{BASE_NOTIF}"/>')
    assert_ok(sub.create_subscription(filter=flt))
    assert_ok(editor.edit_config(target="running", config=scis_config(sci("10.3.3.3:80"))))
    editor.close_session()
    root, content = _take(sub, "netconf-session-end")
    assert etree.QName(content).namespace == BASE_NOTIF


def test_create_subscription_errors(nc):
    """RFC 5277 2.1.1: unknown stream → invalid-value; stopTime without startTime is an
    error; one subscription per session."""
    m = nc()
    bad_stream = etree.fromstring(
        f'<create-subscription xmlns="{NOTIF}"><stream>NOPE</stream></create-subscription>'
    )
    assert one_error(m.dispatch(bad_stream))["tag"] == "invalid-value"
    stop_only = etree.fromstring(
        f'<create-subscription xmlns="{NOTIF}"><stopTime>2030-01-01T00:00:00Z</stopTime></create-subscription>'
    )
    assert one_error(m.dispatch(stop_only))["tag"] in ("missing-element", "bad-element")
    assert_ok(m.create_subscription())
    second = m.create_subscription()
    assert one_error(second)["tag"] == "in-use"


def test_rpcs_interleave_with_notifications(nc):
    """RFC 5277 6 (:interleave): a subscribed session keeps answering RPCs."""
    sub = nc()
    assert_ok(sub.create_subscription())
    for _ in range(5):
        reply = sub.get_config(source="running")
        assert reply.ok
