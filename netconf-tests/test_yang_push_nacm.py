"""YANG-Push honours NACM (RFC 8641 section 3.9, RFC 8341 section 3.4.5/3.4.6): every
pushed node, in push-update and in each push-change-update edit, is one the receiver may
read; kill-subscription is default-deny-all (RFC 8639 section 5)."""

import re
import subprocess

import pytest
from lxml import etree

from conftest import AGENT_BIN, CATS, NC, Agent, assert_ok, one_error, reset, sci
from test_nacm import OPER, OPER_PW, clear_nacm, nacm_rules
from test_yang_push import NS, OPERATIONAL, SCI, SN, entry_filter, establish, report, rpc_error, take


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    work = tmp_path_factory.mktemp("push-nacm")
    hashed = subprocess.run(
        [str(AGENT_BIN), "hash-password"], input=OPER_PW, capture_output=True, text=True, check=True
    ).stdout.strip()
    boot = work / "boot.toml"
    boot.write_text(f'[[users]]\nname = "{OPER}"\npassword_hash = "{hashed}"\n')
    a = Agent(work, extra_args=["--config", str(boot), "--sci-listen", "127.0.0.1:0", "--sci-plain-http"]).start()
    a.sci_addr = next(
        mt.group(1) for line in a.log if (mt := re.search(r"SCI reports: http://([0-9.]+:\d+)/", line))
    )
    yield a
    a.stop()


@pytest.fixture
def admin(agent):
    admin = agent.connect()
    reset(
        admin,
        "<scis>" + sci(SCI, "<authentication>none</authentication>") + "</scis>"
        "<validation><anomaly><gas-change-window>1</gas-change-window></anomaly></validation>",
    )
    yield admin
    clear_nacm(admin)
    agent.close_clients()


def test_denied_leaf_is_never_pushed(agent, admin):
    """A read-deny rule on the GAS leaf: the receiver's push-update and push-change-update
    carry the entry without it, while an unrestricted receiver gets it."""
    rules = nacm_rules(
        (
            "no-gas",
            "cats-sma",
            f'<path xmlns:c="{CATS}">/c:cats-sma/c:metric-cache/c:entry/c:gas</path>',
            "read",
            "deny",
        ),
    )
    assert_ok(admin.edit_config(target="running", config=rules))
    report(agent, 300)
    oper = agent.connect(user=OPER, password=OPER_PW)
    on_change = OPERATIONAL + entry_filter() + "<yp:on-change/>"
    establish(oper, on_change)
    establish(admin, on_change)
    sync = take(oper, "push-update")
    entry = sync.find(".//c:entry", NS)
    assert entry is not None and entry.findtext("c:csci-id", namespaces=NS) == SCI
    assert entry.find("c:gas", NS) is None
    assert take(admin, "push-update").findtext(".//c:entry/c:gas", namespaces=NS) == "300"
    report(agent, 320, health="DEGRADED")
    upd = take(oper, "push-change-update")
    value = upd.find(".//yp:edit/yp:value/c:entry", NS)
    assert value.findtext("c:health", namespaces=NS) == "degraded"
    assert value.find("c:gas", NS) is None, etree.tostring(upd)
    assert take(admin, "push-change-update").findtext(".//yp:edit/yp:value/c:entry/c:gas", namespaces=NS) == "320"


def test_denied_subtree_yields_no_edits(agent, admin):
    """A read-deny rule on the whole metric cache: nothing of it reaches the receiver."""
    rules = nacm_rules(
        ("no-cache", "cats-sma", f'<path xmlns:c="{CATS}">/c:cats-sma/c:metric-cache</path>', "read", "deny"),
    )
    assert_ok(admin.edit_config(target="running", config=rules))
    oper = agent.connect(user=OPER, password=OPER_PW)
    establish(oper, OPERATIONAL + entry_filter() + "<yp:on-change/>")
    sync = take(oper, "push-update")
    assert sync.find(".//c:entry", NS) is None
    report(agent, 10)
    assert oper.take_notification(timeout=1.0) is None


def test_kill_subscription_is_default_deny_all(agent, admin):
    oper = agent.connect(user=OPER, password=OPER_PW)
    sid, _ = establish(admin, "<stream>NETCONF</stream>")
    err = rpc_error(oper, f'<kill-subscription xmlns="{SN}"><id>{sid}</id></kill-subscription>')
    assert err.findtext("nc:error-tag", namespaces=NS) == "access-denied"
