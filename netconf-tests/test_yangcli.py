"""yangcli (yuma123 2.13, a C client on libssh2) against the agent in batch mode, logging
in with the admin password.

yangcli predates NMDA module discovery: it reads the yang-library:1.1 capability as a
module capability with no module name ("??@2019-01-04") and never fetches
/yang-library, so it learns none of our modules from the server. The tests give it the
cats-sma modules from the repository (--modpath, --module), which is what its
schema-aware commands (merge, create, sget-config with a path) need. It edits the
candidate by default, since the server has :candidate. --display-mode=xml makes it print
every reply as XML."""

import re

import pytest
from lxml import etree

from conftest import CATS, NS, REPO, SCI_ID, assert_ok, sci, scis

OTHER = "10.0.3.1:80"


@pytest.fixture
def yangcli(agent, tmp_path):
    """Runs a yangcli script (a list of commands) against the agent; returns the output
    and the replies, in order, as (kind, rpc-reply element) with kind OK, Data or
    Error."""

    def run(*commands, schema=True):
        script = tmp_path / "commands.txt"
        script.write_text("\n".join(commands) + "\n")
        args = ["--display-mode=xml", f"--run-script={script}"]
        if schema:
            args = [f"--modpath={REPO / 'yang'}", "--module=cats-sma"] + args
        r = agent.yangcli(*args, home=tmp_path)
        assert "NETCONF session established" in r.stdout, r.stdout + r.stderr
        replies = []
        for kind, body in re.findall(
            r"RPC (OK|Data|Error) Reply \d+ for session \d+:\s*(<rpc-reply.*?</rpc-reply>)?",
            r.stdout,
            re.S,
        ):
            replies.append((kind, etree.fromstring(body.encode()) if body else None))
        return r.stdout, replies

    return run


def test_session_negotiates_base11_and_sees_the_capabilities(yangcli):
    """RFC 6241 8.1 and RFC 6242 4.1: yangcli (password login over libssh2) establishes a
    base:1.1 session and lists the server's protocol capabilities."""
    out, replies = yangcli("get-config source=running", schema=False)
    assert "Protocol version set to: RFC 6241 (base:1.1)" in out
    caps = out.split("Server Protocol Capabilities", 1)[1].split("Server Module Capabilities", 1)[0]
    for cap in [
        "base:1.1",
        "candidate:1.0",
        "writable-running:1.0",
        "startup:1.0",
        "validate:1.1",
        "xpath:1.0",
    ]:
        assert cap in caps, caps
    assert [kind for kind, _ in replies] == ["Data"]


def test_edit_commit_and_read_back(yangcli, m):
    """RFC 6241 7.2 and 8.3.4.1 through yangcli: merge an SCI into the candidate, commit,
    then read it back with sget-config (subtree) and xget (XPath with a key
    predicate)."""
    out, replies = yangcli(
        f"merge /cats-sma/scis/sci -- csci-id={OTHER} cs-id=AR5 expected-interval=7000",
        "commit",
        "sget-config /cats-sma/scis source=running",
        f"xget /cats-sma/scis/sci[csci-id='{OTHER}']/expected-interval",
    )
    kinds = [kind for kind, _ in replies]
    assert kinds == ["OK", "OK", "Data", "Data"], out
    assert scis(replies[2][1])[OTHER] == {
        "csci-id": OTHER,
        "cs-id": ["AR5"],
        "expected-interval": "7000",
    }
    assert scis(replies[3][1]) == {OTHER: {"csci-id": OTHER, "expected-interval": "7000"}}
    assert scis(m.get_config("running"))[OTHER]["expected-interval"] == "7000"


def test_create_of_an_existing_entry_is_data_exists(yangcli, m):
    """RFC 6241 7.2 create and Appendix A data-exists through yangcli's create command;
    yangcli stops its script at the error."""
    out, replies = yangcli(f"create /cats-sma/scis/sci -- csci-id={SCI_ID} cs-id=AR1", "commit")
    assert [kind for kind, _ in replies] == ["Error"], out
    reply = replies[0][1]
    assert reply.findtext("nc:rpc-error/nc:error-tag", namespaces=NS) == "data-exists"


def test_lock_unlock_and_get_schema(yangcli, m):
    """RFC 6241 7.5/7.6 and RFC 6022 3.1 through yangcli: lock and unlock running, then
    get-schema of cats-sma returns its YANG text."""
    out, replies = yangcli(
        "lock target=running",
        "unlock target=running",
        "get-schema identifier=cats-sma version='' format=yang",
        schema=False,
    )
    assert [kind for kind, _ in replies] == ["OK", "OK", "Data"], out
    text = replies[2][1].findtext("ncm:data", namespaces=NS)
    assert text.strip().startswith("module cats-sma {")
    assert f'namespace "{CATS}";' in text
    assert_ok(m.lock("running"))
    assert_ok(m.unlock("running"))


def test_xget_of_the_root(yangcli, m):
    """RFC 6241 8.9 through yangcli's `xget /` (its way to show everything): the root
    node is selected, so the reply holds all data, the configured SCI among it."""
    out, replies = yangcli("xget /")
    assert [kind for kind, _ in replies] == ["Data"], out
    assert SCI_ID in scis(replies[0][1])
