"""NETCONF Access Control (RFC 8341) with a second, non-recovery user: the RFC defaults,
rules written by the recovery user, read filtering, write and operation denial, counters."""

import subprocess

import pytest
from lxml import etree

from conftest import AGENT_BIN, CATS, NC, Agent, assert_ok, config, errors, one_error, reset, sci, scis_config

NACM = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm"
OPER, OPER_PW = "oper", "oper-pw"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    work = tmp_path_factory.mktemp("nacm")
    hashed = subprocess.run(
        [str(AGENT_BIN), "hash-password"], input=OPER_PW, capture_output=True, text=True, check=True
    ).stdout.strip()
    boot = work / "boot.toml"
    boot.write_text(f'[[users]]\nname = "{OPER}"\npassword_hash = "{hashed}"\n')
    a = Agent(work, extra_args=["--config", str(boot)]).start()
    yield a
    a.stop()


def nacm_rules(*rules):
    body = "".join(
        f"<rule><name>{n}</name><module-name>{mod}</module-name>{target}"
        f"<access-operations>{ops}</access-operations><action>{act}</action></rule>"
        for n, mod, target, ops, act in rules
    )
    return (
        f'<config xmlns="{NC}"><nacm xmlns="{NACM}">'
        f"<groups><group><name>ops</name><user-name>{OPER}</user-name></group></groups>"
        f"<rule-list><name>ops</name><group>ops</group>{body}</rule-list></nacm></config>"
    )


def clear_nacm(admin):
    admin.edit_config(
        target="running",
        config=f'<config xmlns="{NC}" xmlns:nc="{NC}"><nacm xmlns="{NACM}" nc:operation="remove"/></config>',
    )


def counter(admin, name):
    reply = admin.get(filter=("subtree", f'<nacm xmlns="{NACM}"><{name}/></nacm>'))
    return int(etree.fromstring(reply.data_xml.encode()).findtext(f".//{{{NACM}}}{name}"))


def test_defaults_deny_writes_and_permit_reads(agent):
    """RFC 8341 3.2 and 3.4.5: write-default deny, read-default permit; the recovery user
    (admin) is not restricted."""
    admin, oper = agent.connect(), agent.connect(user=OPER, password=OPER_PW)
    reset(admin, "<scis>" + sci("10.9.9.9:80") + "</scis>")
    clear_nacm(admin)
    before = counter(admin, "denied-data-writes")
    err = one_error(oper.edit_config(target="running", config=scis_config(sci("10.8.8.8:80"))))
    assert err["tag"] == "access-denied"
    assert counter(admin, "denied-data-writes") == before + 1
    # Reads are permitted by default: the SCI is visible.
    assert "10.9.9.9:80" in oper.get_config(source="running").data_xml


def test_default_deny_all_operations(agent):
    """RFC 8341 3.2.6 / 3.4.4: kill-session and delete-config need an explicit permit;
    close-session is always allowed."""
    admin, oper = agent.connect(), agent.connect(user=OPER, password=OPER_PW)
    clear_nacm(admin)
    before = counter(admin, "denied-operations")
    assert one_error(oper.kill_session(admin.session_id))["tag"] == "access-denied"
    assert one_error(oper.delete_config(target="startup"))["tag"] == "access-denied"
    assert counter(admin, "denied-operations") == before + 2


def test_rules_permit_writes_and_filter_reads(agent):
    """RFC 8341 3.4.5 and 3.4.6: a data-node rule permits writes under /cats-sma/scis; a
    read deny rule hides /cats-sma/agent from the user without an error; the NACM
    configuration (default-deny-all) stays hidden."""
    admin, oper = agent.connect(), agent.connect(user=OPER, password=OPER_PW)
    reset(admin, "<agent><csma-id>csma-1</csma-id></agent>")
    rules = nacm_rules(
        ("scis", "cats-sma", f'<path xmlns:c="{CATS}">/c:cats-sma/c:scis</path>', "*", "permit"),
        ("hide-agent", "cats-sma", f'<path xmlns:c="{CATS}">/c:cats-sma/c:agent</path>', "read", "deny"),
    )
    assert_ok(admin.edit_config(target="running", config=rules))
    try:
        assert_ok(oper.edit_config(target="running", config=scis_config(sci("10.7.7.7:80"))))
        seen = oper.get_config(source="running").data_xml
        assert "10.7.7.7:80" in seen
        assert "csma-1" not in seen, "denied data is filtered out"
        assert NACM not in seen, "the NACM configuration is default-deny-all"
        # Writes outside the permitted subtree are still denied.
        err = one_error(oper.edit_config(target="running", config=config("<agent><site-id>s</site-id></agent>")))
        assert err["tag"] == "access-denied"
        # The recovery user sees everything.
        assert "csma-1" in admin.get_config(source="running").data_xml
    finally:
        clear_nacm(admin)


def test_exec_rule_denies_an_operation(agent):
    """RFC 8341 3.4.4: a protocol-operation rule denying get-config."""
    admin, oper = agent.connect(), agent.connect(user=OPER, password=OPER_PW)
    rules = nacm_rules(("no-get-config", "ietf-netconf", "<rpc-name>get-config</rpc-name>", "exec", "deny"))
    assert_ok(admin.edit_config(target="running", config=rules))
    try:
        err = one_error(oper.get_config(source="running"))
        assert err["tag"] == "access-denied"
        assert oper.get().ok
    finally:
        clear_nacm(admin)


def test_sci_credentials_are_default_deny_all(agent):
    """RFC 8341 3.2.6 with the cats-sma module's nacm:default-deny-all on
    /cats-sma/collection/authentication: the SCI secrets are neither readable nor writable
    without an explicit rule, even though reads are permitted by default."""
    admin, oper = agent.connect(), agent.connect(user=OPER, password=OPER_PW)
    clear_nacm(admin)
    cred = (
        "<collection><authentication><credential><name>k1</name><type>hmac-sha256</type>"
        "<key>c2VjcmV0LWtleS1mb3ItdGVzdHMh</key></credential></authentication></collection>"
    )
    reset(admin, cred + "<scis>" + sci("10.7.7.7:80", "<credential-ref>k1</credential-ref>") + "</scis>")
    assert "c2VjcmV0LWtleS1mb3ItdGVzdHMh" in admin.get_config(source="running").data_xml
    seen = oper.get_config(source="running").data_xml
    assert "10.7.7.7:80" in seen, "the rest stays readable"
    assert "c2VjcmV0LWtleS1mb3ItdGVzdHMh" not in seen and "<credential>" not in seen
    # An explicit permit rule (read only) makes the key readable; writes stay denied.
    assert_ok(
        admin.edit_config(
            target="running",
            config=nacm_rules(
                ("read-creds", "cats-sma", f'<path xmlns:c="{CATS}">/c:cats-sma/c:collection/c:authentication</path>', "read", "permit")
            ),
        )
    )
    assert "c2VjcmV0LWtleS1mb3ItdGVzdHMh" in oper.get_config(source="running").data_xml
    # Writes stay denied: the default write rule is deny, and the rule above is read-only.
    err = one_error(oper.edit_config(target="running", config=config("<collection><authentication><timestamp-window>60</timestamp-window></authentication></collection>")))
    assert err["tag"] == "access-denied"
    clear_nacm(admin)
    reset(admin)
