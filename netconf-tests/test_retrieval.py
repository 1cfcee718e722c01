"""Retrieval: <get-config> of each datastore (RFC 6241 7.1, 8.3, 8.7), <get> with the YANG
library (RFC 6241 7.7, RFC 8525), the monitoring data and <get-schema> (RFC 6022)."""


from conftest import (
    CATS,
    MONITORING,
    NS,
    SCI_ID,
    YANG_LIBRARY,
    data,
    errors,
    one_error,
    scis,
    xml,
)


def test_get_config_running(m):
    """RFC 6241 7.1: <get-config> of running returns its configuration."""
    assert scis(m.get_config("running")) == {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]}}


def test_get_config_candidate_starts_as_running(m):
    """RFC 6241 8.3.1: a candidate nobody has modified holds the running configuration."""
    assert scis(m.get_config("candidate")) == scis(m.get_config("running"))


def test_get_config_startup(m):
    """RFC 6241 8.7: the startup datastore can be read with <get-config>."""
    reply = m.get_config("startup")
    assert not errors(reply)
    data(reply)


def test_get_includes_yang_library(m):
    """RFC 6241 7.7 and RFC 8525 3: <get> (running plus state) includes
    /ietf-yang-library:yang-library, whose module set lists cats-sma with its namespace
    and revision."""
    d = data(m.get())
    lib = d.find("yl:yang-library", NS)
    assert lib is not None, "no /yang-library in <get>"
    modules = {
        mod.findtext("yl:name", namespaces=NS): mod
        for mod in lib.iterfind("yl:module-set/yl:module", NS)
    }
    assert "cats-sma" in modules
    assert modules["cats-sma"].findtext("yl:namespace", namespaces=NS) == CATS
    assert modules["cats-sma"].findtext("yl:revision", namespaces=NS)
    assert "ietf-yang-library" in modules
    # <get> also returns the running configuration.
    assert SCI_ID in scis(d.getparent())


def test_yang_library_lists_the_datastores(m):
    """RFC 8525 3 (ietf-yang-library, list datastore, min-elements 1): the server
    instantiates one datastore entry per datastore it supports, each naming its schema."""
    reply = m.get(filter=("subtree", f'<yang-library xmlns="{YANG_LIBRARY}"/>'))
    lib = data(reply).find("yl:yang-library", NS)
    names = {
        d.findtext("yl:name", namespaces=NS).split(":")[-1]
        for d in lib.iterfind("yl:datastore", NS)
    }
    assert {"running", "candidate", "startup", "operational"} <= names
    for d in lib.iterfind("yl:datastore", NS):
        assert d.findtext("yl:schema", namespaces=NS) == "complete"


def test_get_includes_netconf_monitoring_state(m):
    """RFC 6022 2 and 4: a server implementing ietf-netconf-monitoring reports
    /netconf-state, including its capabilities, its sessions and the schemas that
    <get-schema> can retrieve (cats-sma among them)."""
    reply = m.get(filter=("subtree", f'<netconf-state xmlns="{MONITORING}"/>'))
    state = data(reply).find("ncm:netconf-state", NS)
    assert state is not None, "no /netconf-state in <get>"
    assert state.find("ncm:capabilities/ncm:capability", NS) is not None
    assert state.find("ncm:sessions/ncm:session", NS) is not None
    schemas = {
        s.findtext("ncm:identifier", namespaces=NS)
        for s in state.iterfind("ncm:schemas/ncm:schema", NS)
    }
    assert "cats-sma" in schemas


def test_get_schema_returns_yang_text(m):
    """RFC 6022 3.1: <get-schema> of cats-sma returns the module's YANG text in a <data>
    element of the monitoring namespace; the revision listed in the YANG library is
    accepted as version."""
    reply = m.get_schema("cats-sma")
    d = xml(reply).find("ncm:data", NS)
    assert d is not None, reply.xml
    text = d.text.strip()
    assert text.startswith("module cats-sma {"), text[:200]
    assert f'namespace "{CATS}";' in text

    lib = data(m.get(filter=("subtree", f'<yang-library xmlns="{YANG_LIBRARY}"/>')))
    revision = lib.findtext(
        "yl:yang-library/yl:module-set/yl:module[yl:name='cats-sma']/yl:revision", namespaces=NS
    )
    versioned = xml(m.get_schema("cats-sma", version=revision, format="yang")).find("ncm:data", NS)
    assert versioned is not None and versioned.text.strip() == text


def test_get_schema_of_unknown_module(m):
    """RFC 6022 3.1: a schema the server does not have is answered with invalid-value."""
    e = one_error(m.get_schema("no-such-module"))
    assert e["tag"] == "invalid-value"
    assert e["type"] in ("protocol", "application")
