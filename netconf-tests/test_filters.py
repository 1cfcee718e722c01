"""Filtering of <get-config> and <get>: the subtree filter examples of RFC 6241 section
6.4 adapted to /cats-sma (its SCIs stand in for the RFC's users), and XPath filters with
prefixes (section 8.9)."""

import pytest

from lxml import etree

from conftest import CATS, NC, NS, SCI_ID, data, reset, sci, scis

SECOND = "10.0.0.6:80"
C = f'xmlns="{CATS}"'
ALL_SCIS = {
    SCI_ID: {
        "csci-id": SCI_ID,
        "cs-id": ["AR1", "AR2"],
        "description": "first",
        "expected-interval": "7000",
    },
    SECOND: {"csci-id": SECOND, "cs-id": ["AR3"], "description": "second"},
}


@pytest.fixture(scope="module")
def m(agent):
    """One session over one configuration for all filter tests (they only read)."""
    m = agent.connect()
    reset(
        m,
        "<agent><csma-id>csma-1</csma-id></agent><scis>"
        + sci(
            SCI_ID,
            "<cs-id>AR2</cs-id><expected-interval>7000</expected-interval><description>first</description>",
        )
        + sci(SECOND, "<description>second</description>", cs_id="AR3")
        + "</scis>",
    )
    return m


def subtree(m, criteria):
    return m.get_config("running", filter=("subtree", criteria))


def top_level(reply):
    return [child.tag for child in data(reply)]


def test_no_filter_returns_everything(m):
    """RFC 6241 6.4.1: without a filter the whole configuration is returned."""
    reply = m.get_config("running")
    assert scis(reply) == ALL_SCIS
    assert data(reply).findtext("c:cats-sma/c:agent/c:csma-id", namespaces=NS) == "csma-1"


def test_empty_filter_returns_nothing(m):
    """RFC 6241 6.4.2: an empty subtree filter selects nothing, so <data> is empty."""
    op = (
        f'<get-config xmlns="{NC}"><source><running/></source><filter type="subtree"/></get-config>'
    )
    reply = m.dispatch(etree.fromstring(op))
    assert len(data(reply)) == 0


def test_select_a_whole_subtree(m):
    """RFC 6241 6.4.3: a selection node at the end of containment nodes returns that
    whole subtree and nothing beside it."""
    reply = subtree(m, f"<cats-sma {C}><scis/></cats-sma>")
    assert scis(reply) == ALL_SCIS
    assert [child.tag for child in data(reply).find("c:cats-sma", NS)] == [f"{{{CATS}}}scis"]


def test_select_one_leaf_of_every_entry(m):
    """RFC 6241 6.4.4: a selection node inside a list returns that leaf of every entry
    (here the key, csci-id), nothing else."""
    reply = subtree(m, f"<cats-sma {C}><scis><sci><csci-id/></sci></scis></cats-sma>")
    assert scis(reply) == {SCI_ID: {"csci-id": SCI_ID}, SECOND: {"csci-id": SECOND}}


def test_content_match_on_the_key_selects_one_entry(m):
    """RFC 6241 6.4.5 and 6.2.5: a content match node on the list key selects that one
    entry; with no other sibling selection it is returned whole."""
    reply = subtree(
        m, f"<cats-sma {C}><scis><sci><csci-id>{SECOND}</csci-id></sci></scis></cats-sma>"
    )
    assert scis(reply) == {SECOND: ALL_SCIS[SECOND]}


def test_specific_leaves_of_a_specific_entry(m):
    """RFC 6241 6.4.6: a key content match with selection node siblings returns only the
    selected leaves of that entry (plus the key that identifies it)."""
    reply = subtree(
        m,
        f"<cats-sma {C}><scis><sci><csci-id>{SCI_ID}</csci-id><description/></sci></scis></cats-sma>",
    )
    assert scis(reply) == {SCI_ID: {"csci-id": SCI_ID, "description": "first"}}


def test_multiple_subtrees(m):
    """RFC 6241 6.4.7: several sibling filter subtrees, each picking an entry and its own
    selection of leaves, are all answered."""
    reply = subtree(
        m,
        f"<cats-sma {C}><scis>"
        f"<sci><csci-id>{SCI_ID}</csci-id><expected-interval/></sci>"
        f"<sci><csci-id>{SECOND}</csci-id><cs-id/></sci>"
        "</scis></cats-sma>",
    )
    assert scis(reply) == {
        SCI_ID: {"csci-id": SCI_ID, "expected-interval": "7000"},
        SECOND: {"csci-id": SECOND, "cs-id": ["AR3"]},
    }


def test_content_match_on_a_leaf_list_value(m):
    """RFC 6241 6.2.5: a content match node on a non-key leaf (here a cs-id value of the
    leaf-list) selects the entries having that value."""
    reply = subtree(m, f"<cats-sma {C}><scis><sci><cs-id>AR2</cs-id></sci></scis></cats-sma>")
    assert set(scis(reply)) == {SCI_ID}


def test_content_match_without_a_match_returns_nothing(m):
    """RFC 6241 6.2.5: when a content match node matches no entry, nothing is selected."""
    reply = subtree(
        m, f"<cats-sma {C}><scis><sci><csci-id>192.0.2.1:1</csci-id></sci></scis></cats-sma>"
    )
    assert scis(reply) == {}


def test_filter_element_without_namespace(m):
    """RFC 6241 6.2.1: namespace selection applies only "if namespaces are used"; a
    filter written with no namespace (as hand-written filters often are) matches the
    element by name."""
    reply = subtree(m, '<cats-sma xmlns=""><agent/></cats-sma>')
    assert data(reply).findtext("c:cats-sma/c:agent/c:csma-id", namespaces=NS) == "csma-1"
    assert scis(reply) == {}


def test_filter_in_another_namespace_selects_nothing(m):
    """RFC 6241 6.2.1: with a namespace given, only elements of that namespace match."""
    reply = subtree(m, '<cats-sma xmlns="urn:example:other"><agent/></cats-sma>')
    assert len(data(reply)) == 0


def test_get_with_a_subtree_filter(m):
    """RFC 6241 7.7: <get> takes the same subtree filter."""
    reply = m.get(
        filter=(
            "subtree",
            f"<cats-sma {C}><scis><sci><csci-id>{SCI_ID}</csci-id></sci></scis></cats-sma>",
        )
    )
    assert set(scis(reply)) == {SCI_ID}


def test_xpath_filter_with_prefixes(m):
    """RFC 6241 8.9: an XPath filter whose prefixes are bound on the <filter> element
    returns the selected nodes with their ancestors (and the list keys)."""
    select = f"/c:cats-sma/c:scis/c:sci[c:csci-id='{SCI_ID}']/c:description"
    reply = m.get_config("running", filter=("xpath", ({"c": CATS}, select)))
    assert scis(reply) == {SCI_ID: {"csci-id": SCI_ID, "description": "first"}}


def test_xpath_filter_with_another_prefix_name(m):
    """RFC 6241 8.9: the prefix is whatever the client binds; only the namespace counts."""
    select = "/sma:cats-sma/sma:scis/sma:sci[sma:cs-id='AR3']"
    reply = m.get_config("running", filter=("xpath", ({"sma": CATS}, select)))
    assert scis(reply) == {SECOND: ALL_SCIS[SECOND]}


def test_xpath_filter_on_get(m):
    """RFC 6241 8.9 on <get>: a path into the YANG library's state data."""
    select = "/yl:yang-library/yl:module-set/yl:module[yl:name='cats-sma']/yl:namespace"
    reply = m.get(filter=("xpath", ({"yl": NS["yl"]}, select)))
    assert (
        data(reply).findtext("yl:yang-library/yl:module-set/yl:module/yl:namespace", namespaces=NS)
        == CATS
    )


def test_xpath_filter_selecting_the_root(m):
    """RFC 6241 8.9: the nodes selected by the expression are returned with all their
    descendants; "/" selects the root node, so everything is returned."""
    reply = m.get_config("running", filter=("xpath", "/"))
    assert scis(reply) == ALL_SCIS
