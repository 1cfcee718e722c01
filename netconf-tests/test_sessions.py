"""Many sessions at once (RFC 6241 1.2: a server serves several sessions concurrently;
cats-sma allows 256 by default), and the end of a session with <close-session> (7.8)."""

import threading
from concurrent.futures import ThreadPoolExecutor

from conftest import NC, SCI_ID, assert_ok, reset, sci, scis

SESSIONS = 100


def test_a_hundred_concurrent_sessions(agent):
    """RFC 6241 1.2 and 7.1: 100 ncclient sessions are open at the same time (a barrier
    holds each one open until all are), each does a <get-config> and sees the same
    running configuration, each under its own session-id."""
    m = agent.connect()
    reset(m, "<scis>" + sci(SCI_ID) + "</scis>")
    m.close_session()

    all_open = threading.Barrier(SESSIONS, timeout=120)

    def one(_):
        s = agent.connect(timeout=120)
        try:
            all_open.wait()
            reply = s.get_config("running")
            return s.session_id, scis(reply)
        finally:
            s.close_session()

    with ThreadPoolExecutor(SESSIONS) as pool:
        results = list(pool.map(one, range(SESSIONS)))
    assert len({sid for sid, _ in results}) == SESSIONS
    for _, found in results:
        assert found == {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]}}


def test_close_session_ends_the_session(agent):
    """RFC 6241 7.8: <close-session> is answered <ok/> and the server then closes the
    session (the channel reaches end of file)."""
    s = agent.raw(base11=True)
    reply = s.rpc(f'<rpc xmlns="{NC}" message-id="9"><close-session/></rpc>')
    assert reply.get("message-id") == "9"
    assert_ok(reply)
    try:
        leftover = s.chan.recv(1024)
    except OSError:
        leftover = b""
    assert leftover == b""
    s.close()
