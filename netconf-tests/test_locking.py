"""Locks (RFC 6241 7.5, 7.6, 8.3.5), and how sessions that end release them: close-session
(7.8) and kill-session (7.9)."""

import pytest

from conftest import (
    SCI_ID,
    assert_ok,
    one_error,
    reset,
    sci,
    scis,
    scis_config,
    wait_until,
)

OTHER = "10.0.0.2:80"


@pytest.fixture(autouse=True)
def clean(agent, nc):
    """Starts from a known running configuration; afterwards waits until the sessions of
    the test are gone and their locks released, so the next test starts unlocked."""
    reset(nc(), "<scis>" + sci(SCI_ID) + "</scis>")
    yield
    agent.close_clients()
    probe = agent.connect()

    def unlocked():
        for ds in ("running", "candidate", "startup"):
            if not probe.lock(ds).ok:
                return False
            assert_ok(probe.unlock(ds))
        return True

    assert wait_until(unlocked), "a lock outlived the session holding it"
    assert_ok(probe.discard_changes())
    probe.close_session()


def test_lock_denied_names_the_holder(nc):
    """RFC 6241 7.5 and Appendix A lock-denied: a lock held by another session is
    refused with error-type protocol, and error-info carries the holder's session-id."""
    a, b = nc(), nc()
    assert_ok(a.lock("running"))
    e = one_error(b.lock("running"))
    assert (e["tag"], e["type"]) == ("lock-denied", "protocol")
    assert e["info"].get("session-id") == str(a.session_id)


def test_locked_running_refuses_edits_of_other_sessions(nc):
    """RFC 6241 7.5 and Appendix A in-use: while a session holds the running lock, other
    sessions cannot change running; the holder can."""
    a, b = nc(), nc()
    assert_ok(a.lock("running"))
    e = one_error(b.edit_config(target="running", config=scis_config(sci(OTHER))))
    assert e["tag"] == "in-use"
    assert e["type"] in ("protocol", "application")
    assert set(scis(b.get_config("running"))) == {SCI_ID}
    assert_ok(a.edit_config(target="running", config=scis_config(sci(OTHER))))
    assert set(scis(b.get_config("running"))) == {SCI_ID, OTHER}
    assert_ok(a.unlock("running"))
    assert_ok(b.edit_config(target="running", config=scis_config(sci(OTHER, op="delete"))))


def test_unlock_by_another_session_fails(nc):
    """RFC 6241 7.6: <unlock> fails when the session did not obtain the lock; the lock
    stays with its holder."""
    a, b, c = nc(), nc(), nc()
    assert_ok(a.lock("candidate"))
    e = one_error(b.unlock("candidate"))
    # The RFC names no error-tag for this case; a refusal is what matters.
    assert e["tag"] in ("operation-failed", "lock-denied", "in-use")
    e = one_error(c.lock("candidate"))
    assert e["tag"] == "lock-denied"
    assert e["info"].get("session-id") == str(a.session_id)
    assert_ok(a.unlock("candidate"))


def test_unlock_of_an_unlocked_datastore_fails(nc):
    """RFC 6241 7.6: <unlock> fails when the lock is not active."""
    e = one_error(nc().unlock("startup"))
    assert e["tag"] in ("operation-failed", "lock-denied")


def test_lock_on_a_modified_candidate_is_denied(nc):
    """RFC 6241 7.5: the candidate cannot be locked while it holds changes that are not
    committed or discarded; after discard-changes it can."""
    a, b = nc(), nc()
    assert_ok(a.edit_config(target="candidate", config=scis_config(sci(OTHER))))
    e = one_error(b.lock("candidate"))
    assert e["tag"] == "lock-denied"
    assert_ok(a.discard_changes())
    assert_ok(b.lock("candidate"))
    assert_ok(b.unlock("candidate"))


def test_close_session_releases_its_locks(nc):
    """RFC 6241 7.8: <close-session> is answered <ok/>, the session ends and its locks are
    released."""
    a, b = nc(), nc()
    assert_ok(a.lock("running"))
    assert_ok(a.close_session())
    assert wait_until(lambda: not a.connected), "the server kept the session open"
    assert wait_until(lambda: b.lock("running").ok)
    assert_ok(b.unlock("running"))


def test_kill_session_ends_the_victim_and_releases_its_locks(nc):
    """RFC 6241 7.9: <kill-session> ends another session, its locks are released and
    the killer can take them."""
    victim, killer = nc(), nc()
    assert_ok(victim.lock("running"))
    assert_ok(victim.lock("candidate"))
    assert_ok(killer.kill_session(victim.session_id))
    assert_ok(killer.lock("running"))
    assert_ok(killer.lock("candidate"))
    assert wait_until(lambda: not victim.connected), "the killed session is still open"
    assert_ok(killer.unlock("candidate"))
    assert_ok(killer.unlock("running"))


def test_kill_session_of_the_own_session_is_invalid_value(nc):
    """RFC 6241 7.9: a session-id equal to the current session is answered with
    invalid-value."""
    m = nc()
    e = one_error(m.kill_session(m.session_id))
    assert e["tag"] == "invalid-value"
    assert m.get_config("running").ok
