"""The <rpc> envelope and broken messages (RFC 6241 4.1-4.3, Appendix A; RFC 6242 4),
sent over a raw SSH channel: no NETCONF client lets one send an <rpc> without message-id
or XML that is not well-formed. (netconf-console2 wraps `--rpc` content in its own <rpc>
with a message-id, and its raw-file mode needs a message-id to match the reply: without
one it stops with an IndexError before sending anything.)"""

import pytest
from lxml import etree

from conftest import NC, errors, one_error, xml

GET_CONFIG = "<get-config><source><running/></source></get-config>"


def rpc(message_id, body, attrs=""):
    mid = "" if message_id is None else f' message-id="{message_id}"'
    return f'<rpc xmlns="{NC}"{mid}{attrs}>{body}</rpc>'


@pytest.fixture(params=[True, False], ids=["base1.1", "base1.0"])
def raw(request, agent):
    s = agent.raw(base11=request.param)
    yield s
    s.close()


def serves(raw, message_id="after"):
    """The session still answers a well-formed request."""
    reply = raw.rpc(rpc(message_id, GET_CONFIG))
    return reply.get("message-id") == message_id and reply.find(f"{{{NC}}}data") is not None


def test_missing_message_id(raw):
    """RFC 6241 4.1: an <rpc> without message-id is answered with missing-attribute,
    error-type rpc, error-info naming the attribute (message-id) and the element (rpc);
    the session goes on."""
    reply = raw.rpc(rpc(None, GET_CONFIG))
    assert reply.tag == f"{{{NC}}}rpc-reply"
    e = one_error(reply)
    assert (e["tag"], e["type"]) == ("missing-attribute", "rpc")
    assert e["info"] == {"bad-attribute": "message-id", "bad-element": "rpc"}
    assert serves(raw)


def test_reply_echoes_the_rpc_attributes(raw):
    """RFC 6241 4.2: <rpc-reply> carries the message-id and every other attribute of the
    <rpc>, with their namespaces."""
    ex = "http://example.net/content/1.0"
    reply = raw.rpc(rpc("101", GET_CONFIG, attrs=f' xmlns:ex="{ex}" ex:user-id="fred"'))
    assert reply.get("message-id") == "101"
    assert reply.get(f"{{{ex}}}user-id") == "fred"
    assert not errors(reply)


def test_malformed_xml_on_base11_is_malformed_message(agent):
    """RFC 6241 Appendix A malformed-message (error-type rpc): a base:1.1 session that
    sends XML that is not well-formed gets malformed-message, and keeps being served."""
    s = agent.raw(base11=True)
    s.send(f'<rpc xmlns="{NC}" message-id="1"><get-config><source><running/></source></get-config>')
    e = one_error(xml(s.receive()))
    assert (e["tag"], e["type"]) == ("malformed-message", "rpc")
    assert serves(s)
    s.close()


def test_malformed_xml_on_base10_is_not_malformed_message(agent):
    """RFC 6241 Appendix A: malformed-message is new in base:1.1 and MUST NOT be sent to
    base:1.0 clients; such a client still gets an rpc-error and keeps its session."""
    s = agent.raw(base11=False)
    s.send(f'<rpc xmlns="{NC}" message-id="1"><get-config><source><running/>')
    e = one_error(xml(s.receive()))
    assert e["tag"] != "malformed-message"
    assert serves(s)
    s.close()


def test_unknown_operation_in_the_base_namespace(nc):
    """RFC 6241 Appendix A operation-not-supported: an operation of the base namespace the
    server does not implement is refused with error-type protocol (or application)."""
    m = nc()
    e = one_error(m.dispatch(etree.fromstring(f'<frobnicate xmlns="{NC}"/>')))
    assert e["tag"] == "operation-not-supported"
    assert e["type"] in ("protocol", "application")
    assert m.get_config("running").ok
