"""Issue 11 classes 1 and 3 with a real client (ncclient): a user whose NACM read is denied
on the C-PS PSK and the SCI credential keys (nacm:default-deny-all) gets the same reply for
right and wrong guesses through XPath and subtree filters, and expensive filters are
refused with resource-denied while the session and the admin go on."""

import re
import subprocess

import pytest

from conftest import AGENT_BIN, CATS, NC, Agent, assert_ok, one_error

CPS = "urn:cats-sma:yang:cats-sma-cps"
OPER, OPER_PW = "oper", "oper-pw"
CRED_KEY = "c2VjcmV0LWtleS0wMTIzNDU2Nzg5"
PSK = "c0ffee00c0ffee00c0ffee00c0ffee00"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile-nacm")
    hashed = subprocess.run(
        [str(AGENT_BIN), "hash-password"], input=OPER_PW, capture_output=True, text=True, check=True
    ).stdout.strip()
    boot = work / "boot.toml"
    boot.write_text(f'[[users]]\nname = "{OPER}"\npassword_hash = "{hashed}"\n')
    a = Agent(work, extra_args=["--config", str(boot)]).start()
    admin = a.connect()
    assert_ok(
        admin.edit_config(
            target="running",
            config=f"""<config xmlns="{NC}"><cats-sma xmlns="{CATS}">
              <agent><csma-id>c1</csma-id><site-id>s1</site-id></agent>
              <collection><authentication><credential><name>cred</name><type>hmac-sha256</type>
                <key>{CRED_KEY}</key></credential></authentication></collection>
              <scis><sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id><credential-ref>cred</credential-ref></sci></scis>
              <c-ps xmlns="{CPS}"><peer><name>p1</name><url>http://127.0.0.1:9/</url><allowed-cs-id>AR1</allowed-cs-id>
                <psk><key-id>k1</key-id><key>{PSK}</key></psk></peer></c-ps></cats-sma></config>""",
        )
    )
    yield a
    a.stop()


def body(reply):
    """The reply without its message-id (ncclient numbers every rpc)."""
    return re.sub(r'message-id="[^"]*"', "", reply.xml)


@pytest.mark.parametrize(
    "template",
    [
        "/c:cats-sma[starts-with(c:collection/c:authentication/c:credential/c:key,'{g}')]",
        "/c:cats-sma/p:c-ps/p:peer[starts-with(p:psk/p:key,'{g}')]",
        "/c:cats-sma/p:c-ps/p:peer[substring(p:psk/p:key,1,1)='{g}']/p:name",
    ],
)
def test_issue11_class1_xpath_guesses_answer_alike(agent, template):
    """RFC 8341 3.4.5: the filter runs over what oper may read, so the right guess ('c')
    and a wrong one ('x') get the same reply, over get-config and get."""
    oper = agent.connect(user=OPER, password=OPER_PW)
    ns = {"c": CATS, "p": CPS}
    for op in (lambda f: oper.get_config(source="running", filter=f), lambda f: oper.get(filter=f)):
        right = body(op(("xpath", (ns, template.format(g="c")))))
        wrong = body(op(("xpath", (ns, template.format(g="x")))))
        assert right == wrong
        assert PSK not in right and CRED_KEY not in right


def test_issue11_class1_subtree_content_match_on_psk(agent):
    """RFC 6241 6.2.5 content match on psk/key: no difference between the key and another."""
    oper = agent.connect(user=OPER, password=OPER_PW)

    def f(k):
        return f'<cats-sma xmlns="{CATS}"><c-ps xmlns="{CPS}"><peer><psk><key>{k}</key></psk></peer></c-ps></cats-sma>'

    assert body(oper.get_config(source="running", filter=("subtree", f(PSK)))) == body(
        oper.get_config(source="running", filter=("subtree", f(PSK.replace("c", "d"))))
    )


def test_issue11_class3_expensive_filter_is_resource_denied(agent):
    """Issue 11 class 3: `//*[count(//*)>=0]` is refused before it runs; the session and the
    admin are still served."""
    oper = agent.connect(user=OPER, password=OPER_PW)
    err = one_error(oper.get_config(source="running", filter=("xpath", "//*[count(//*)>=0]")))
    assert err["tag"] == "resource-denied", err
    assert "sci-a" in oper.get_config(source="running").xml
    assert PSK in agent.connect().get_config(source="running").xml
