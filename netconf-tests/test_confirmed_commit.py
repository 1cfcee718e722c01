"""Confirmed commit (RFC 6241 section 8.4, :confirmed-commit:1.1) with ncclient:
rollback on timeout, confirmation, persist / persist-id across sessions, cancel-commit,
rollback when the committing session ends or is killed."""

import time

from conftest import assert_ok, one_error, reset, sci, scis_config

CAP = "urn:ietf:params:netconf:capability:confirmed-commit:1.1"


def _has(m, csci):
    return csci in m.get_config(source="running").data_xml


def _stage(m, csci):
    assert_ok(m.edit_config(target="candidate", config=scis_config(sci(csci))))


def test_capability_announced(nc):
    """RFC 6241 8.4.1: the server announces :confirmed-commit:1.1."""
    assert CAP in nc().server_capabilities


def test_rolls_back_when_not_confirmed_in_time(nc):
    """8.4.1: without a confirming commit before confirm-timeout, running reverts."""
    m = nc()
    reset(m)
    _stage(m, "10.4.0.1:80")
    assert_ok(m.commit(confirmed=True, timeout="1"))
    assert _has(m, "10.4.0.1:80")
    time.sleep(2.5)
    assert not _has(m, "10.4.0.1:80")


def test_confirming_commit_keeps_the_change(nc):
    """8.4.1: a commit without <confirmed> confirms the pending commit."""
    m = nc()
    reset(m)
    _stage(m, "10.4.0.2:80")
    assert_ok(m.commit(confirmed=True, timeout="1"))
    assert_ok(m.commit())
    time.sleep(2)
    assert _has(m, "10.4.0.2:80")


def test_persist_lets_another_session_confirm_or_cancel(nc):
    """8.4.5.1 / 8.4.9 (1.1): with persist, another session confirms or cancels with the
    persist-id; a wrong persist-id is refused."""
    a, b = nc(), nc()
    reset(a)
    _stage(a, "10.4.0.3:80")
    assert_ok(a.commit(confirmed=True, timeout="30", persist="pid-1"))
    a.close_session()
    assert _has(b, "10.4.0.3:80"), "persist survives the session that committed"
    assert one_error(b.cancel_commit(persist_id="wrong"))["tag"] == "invalid-value"
    assert_ok(b.cancel_commit(persist_id="pid-1"))
    assert not _has(b, "10.4.0.3:80")
    _stage(b, "10.4.0.4:80")
    assert_ok(b.commit(confirmed=True, timeout="30", persist="pid-2"))
    c = nc()
    assert_ok(c.commit(persist_id="pid-2"))
    assert _has(c, "10.4.0.4:80")


def test_session_end_rolls_back_a_commit_without_persist(nc):
    """8.4.1: if the session that issued the confirmed commit ends, running reverts."""
    a, b = nc(), nc()
    reset(a)
    _stage(a, "10.4.0.5:80")
    assert_ok(a.commit(confirmed=True, timeout="60"))
    a.close_session()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _has(b, "10.4.0.5:80"):
        time.sleep(0.05)
    assert not _has(b, "10.4.0.5:80")


def test_kill_session_rolls_back_the_victims_commit(nc):
    """7.9 with 8.4.1: killing the committing session rolls its confirmed commit back."""
    a, b = nc(), nc()
    reset(a)
    _stage(a, "10.4.0.6:80")
    assert_ok(a.commit(confirmed=True, timeout="60"))
    assert_ok(b.kill_session(a.session_id))
    assert not _has(b, "10.4.0.6:80")


def test_cancel_commit_without_a_pending_commit_fails(nc):
    """8.4.9: cancel-commit with nothing pending is an error."""
    m = nc()
    assert one_error(m.cancel_commit())["tag"] == "operation-failed"
