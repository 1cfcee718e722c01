"""netconf-console2 (Tail-f's console, a separate client stack on ncclient) against the
agent, logging in with the admin password: edits, locks, candidate, startup, schema and
raw RPCs, one subprocess per command line as an operator would run it.

netconf-console2 prints one XML document per operation it runs, and stops at the first
one that fails (exit code 255 then)."""

import re

import pytest
from lxml import etree

from conftest import CATS, NC, NS, SCI_ID, assert_ok, data, errors, sci, scis

OTHER = "10.0.2.1:80"


def outputs(result):
    """The XML documents netconf-console2 printed, in order."""
    text = re.sub(r"<\?xml[^>]*\?>", "", result.stdout)
    return list(etree.fromstring(f"<out>{text}</out>".encode()))


@pytest.fixture
def write(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def test_create_then_create_again(agent, m, write):
    """RFC 6241 7.2 create and Appendix A data-exists through netconf-console2
    `--edit-config FILE` (the file holds the content of <config>, operation attributes
    included): the first create succeeds, the second fails with data-exists."""
    f = write(
        "create.xml",
        f'<cats-sma xmlns="{CATS}" xmlns:nc="{NC}"><scis><sci nc:operation="create">'
        f"<csci-id>{OTHER}</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma>",
    )
    first = agent.netconf_console("--edit-config", f)
    assert first.returncode == 0, first.stdout + first.stderr
    assert [o.tag for o in outputs(first)] == [f"{{{NC}}}ok"]
    again = agent.netconf_console("--edit-config", f)
    assert again.returncode != 0
    (err,) = outputs(again)
    assert err.tag == f"{{{NC}}}rpc-error"
    assert err.findtext("nc:error-tag", namespaces=NS) == "data-exists"
    assert set(scis(m.get_config("running"))) == {SCI_ID, OTHER}


def test_get_config_with_an_xpath_and_report_all(agent, m):
    """RFC 6241 8.9 and RFC 6243 3.1 through netconf-console2: `--get-config -x` with a
    prefix bound by `--ns`, and `--with-defaults report-all` reports the default
    expected-interval."""
    r = agent.netconf_console(
        "--get-config",
        "-x",
        f"/c:cats-sma/c:scis/c:sci[c:csci-id='{SCI_ID}']",
        "--ns",
        f"c={CATS}",
        "--with-defaults",
        "report-all",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (d,) = outputs(r)
    assert d.findtext("c:cats-sma/c:scis/c:sci/c:expected-interval", namespaces=NS) == "5000"


def test_lock_held_elsewhere_is_denied(agent, m):
    """RFC 6241 7.5 lock-denied through netconf-console2 `--lock`: the error names the
    session that holds the lock."""
    assert_ok(m.lock("running"))
    r = agent.netconf_console("--lock")
    assert r.returncode != 0
    (err,) = outputs(r)
    assert err.findtext("nc:error-tag", namespaces=NS) == "lock-denied"
    assert err.findtext("nc:error-info/nc:session-id", namespaces=NS) == str(m.session_id)
    assert_ok(m.unlock("running"))


def test_locked_candidate_edit_and_commit_in_one_session(agent, m, write):
    """RFC 6241 8.3.5.1 (lock, edit, commit, unlock on the candidate) as one
    netconf-console2 command line: every step succeeds and running has the change."""
    f = write(
        "agent.xml",
        f'<cats-sma xmlns="{CATS}"><agent><csma-id>console</csma-id></agent></cats-sma>',
    )
    r = agent.netconf_console(
        "--db", "candidate", "--lock", "--edit-config", f, "--commit", "--unlock"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert [o.tag for o in outputs(r)] == [f"{{{NC}}}ok"] * 4
    assert (
        data(m.get_config("running")).findtext("c:cats-sma/c:agent/c:csma-id", namespaces=NS)
        == "console"
    )


def test_failed_step_leaves_no_lock_behind(agent, m, write):
    """RFC 6241 7.5: a session that ends (here netconf-console2 giving up after its edit
    failed) releases its candidate lock, and its uncommitted changes go with it."""
    f = write(
        "dup.xml",
        f'<cats-sma xmlns="{CATS}" xmlns:nc="{NC}"><scis><sci nc:operation="create">'
        f"<csci-id>{SCI_ID}</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma>",
    )
    r = agent.netconf_console("--db", "candidate", "--lock", "--edit-config", f, "--commit")
    assert r.returncode != 0
    assert [o.tag for o in outputs(r)] == [f"{{{NC}}}ok", f"{{{NC}}}rpc-error"]
    assert_ok(m.lock("candidate"))
    assert_ok(m.unlock("candidate"))


def test_copy_running_to_startup_and_read_startup(agent, m):
    """RFC 6241 8.7.1 through netconf-console2 `--copy-running-to-startup`, then
    `--get-config --db startup` shows the saved configuration."""
    r = agent.netconf_console("--copy-running-to-startup", "--get-config", "--db", "startup")
    assert r.returncode == 0, r.stdout + r.stderr
    ok, d = outputs(r)
    assert ok.tag == f"{{{NC}}}ok"
    assert d.findtext("c:cats-sma/c:scis/c:sci/c:csci-id", namespaces=NS) == SCI_ID


def test_get_schema(agent):
    """RFC 6022 3.1 through netconf-console2 `--get-schema`: the YANG text of cats-sma;
    an unknown module is invalid-value."""
    r = agent.netconf_console("--get-schema", "cats-sma")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "module cats-sma {" in r.stdout
    bad = agent.netconf_console("--get-schema", "no-such-module")
    assert bad.returncode != 0
    (err,) = outputs(bad)
    assert err.findtext("nc:error-tag", namespaces=NS) == "invalid-value"


def test_raw_rpc_file(agent, m, write):
    """RFC 6241 7.1 and 6 through netconf-console2 `--rpc FILE`: the file's operation is
    sent as is (inside the console's own <rpc>), here a <get-config> with a subtree
    filter."""
    f = write(
        "get.xml",
        f'<get-config xmlns="{NC}"><source><running/></source><filter type="subtree">'
        f'<cats-sma xmlns="{CATS}"><scis><sci><csci-id/></sci></scis></cats-sma>'
        "</filter></get-config>",
    )
    r = agent.netconf_console("--rpc", f)
    assert r.returncode == 0, r.stdout + r.stderr
    (reply,) = outputs(r)
    assert not errors(reply)
    assert [e.text for e in reply.iter(f"{{{CATS}}}csci-id")] == [SCI_ID]


def test_raw_rpc_of_an_unknown_operation(agent, write):
    """RFC 6241 Appendix A operation-not-supported through `--rpc`: an unknown operation
    in the base namespace."""
    f = write("unknown.xml", f'<frobnicate xmlns="{NC}"/>')
    r = agent.netconf_console("--rpc", f)
    assert r.returncode != 0
    (err,) = outputs(r)
    assert err.findtext("nc:error-tag", namespaces=NS) == "operation-not-supported"
    assert err.findtext("nc:error-type", namespaces=NS) in ("protocol", "application")


def test_kill_session(agent, nc):
    """RFC 6241 7.9 through netconf-console2 `--kill-session`: the victim's lock is
    released."""
    victim, other = nc(), nc()
    assert_ok(victim.lock("startup"))
    r = agent.netconf_console("--kill-session", str(victim.session_id))
    assert r.returncode == 0, r.stdout + r.stderr
    assert_ok(other.lock("startup"))
    assert_ok(other.unlock("startup"))
