"""The with-defaults retrieval modes of RFC 6243 on /cats-sma/scis/sci/expected-interval
(schema default 5000), over three SCIs: one set explicitly to the default, one set to
another value, one not set at all."""

import pytest

from conftest import DEFAULT_ATTR_NS, NS, data, reset, sci

AT_DEFAULT = "10.0.1.1:1"  # expected-interval set to 5000 by the client
OTHER_VALUE = "10.0.1.2:2"  # expected-interval set to 7000
UNSET = "10.0.1.3:3"  # expected-interval not set


@pytest.fixture(scope="module")
def m(agent):
    m = agent.connect()
    reset(
        m,
        "<scis>"
        + sci(AT_DEFAULT, "<expected-interval>5000</expected-interval>")
        + sci(OTHER_VALUE, "<expected-interval>7000</expected-interval>")
        + sci(UNSET)
        + "</scis>",
    )
    return m


def intervals(reply):
    """csci-id -> the expected-interval element (or None) of each SCI in the reply."""
    return {
        s.findtext("c:csci-id", namespaces=NS): s.find("c:expected-interval", NS)
        for s in data(reply).iterfind("c:cats-sma/c:scis/c:sci", NS)
    }


def values(reply):
    return {k: (None if v is None else v.text) for k, v in intervals(reply).items()}


def get(m, mode):
    criteria = '<cats-sma xmlns="urn:cats-sma:yang:cats-sma"><scis/></cats-sma>'
    return m.get_config("running", filter=("subtree", criteria), with_defaults=mode)


def test_report_all(m):
    """RFC 6243 3.1 report-all: every leaf is reported, defaults included."""
    assert values(get(m, "report-all")) == {AT_DEFAULT: "5000", OTHER_VALUE: "7000", UNSET: "5000"}


def test_explicit(m):
    """RFC 6243 3.3 explicit: what the client set is reported, even when it equals the
    default; defaults nobody set are not."""
    assert values(get(m, "explicit")) == {AT_DEFAULT: "5000", OTHER_VALUE: "7000", UNSET: None}


def test_no_with_defaults_is_the_basic_mode(m):
    """RFC 6243 4.4 and 4.5.1: without a <with-defaults> parameter the server uses its
    basic mode, explicit."""
    assert values(get(m, None)) == values(get(m, "explicit"))


def test_trim(m):
    """RFC 6243 3.2 trim: a leaf whose value equals the schema default is not reported,
    whether the client set it or not."""
    assert values(get(m, "trim")) == {AT_DEFAULT: None, OTHER_VALUE: "7000", UNSET: None}


def test_report_all_tagged_marks_the_default_values(m):
    """RFC 6243 3.4 report-all-tagged: everything is reported, and every leaf that trim
    would omit (value equal to the default) carries default="true"; the others do not."""
    found = intervals(get(m, "report-all-tagged"))
    assert {k: v.text for k, v in found.items()} == {
        AT_DEFAULT: "5000",
        OTHER_VALUE: "7000",
        UNSET: "5000",
    }

    def tagged(el):
        return any(
            name.endswith("}default") and value == "true" for name, value in el.attrib.items()
        )

    assert tagged(found[AT_DEFAULT]) and tagged(found[UNSET])
    assert not tagged(found[OTHER_VALUE])


def test_report_all_tagged_attribute_namespace(m):
    """RFC 6243 6 (and the example of A.3.4): the default attribute is in the namespace
    urn:ietf:params:xml:ns:netconf:default:1.0."""
    found = intervals(get(m, "report-all-tagged"))
    assert found[UNSET].get(f"{{{DEFAULT_ATTR_NS}}}default") == "true"
    assert found[AT_DEFAULT].get(f"{{{DEFAULT_ATTR_NS}}}default") == "true"


def test_get_with_report_all(m):
    """RFC 6243 4.5.1: <get> takes the with-defaults parameter too."""
    criteria = '<cats-sma xmlns="urn:cats-sma:yang:cats-sma"><scis/></cats-sma>'
    reply = m.get(filter=("subtree", criteria), with_defaults="report-all")
    assert values(reply) == {AT_DEFAULT: "5000", OTHER_VALUE: "7000", UNSET: "5000"}
