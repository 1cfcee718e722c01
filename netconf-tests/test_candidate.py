"""The candidate datastore (RFC 6241 8.3: commit, discard-changes), <validate> (8.6),
<copy-config> (7.3) and <delete-config> (7.4, 8.7)."""

from lxml import etree

from conftest import (
    CATS,
    NC,
    SCI_ID,
    assert_ok,
    config,
    data,
    one_error,
    sci,
    scis,
    scis_config,
)

OTHER = "10.0.0.3:80"
BASE_SCIS = {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]}}
# A pull target whose csci-id leafref names no SCI: valid XML and types, invalid data.
DANGLING = (
    "<collection><pull><target><csci-id>9.9.9.9:9</csci-id>"
    "<url>http://sci.example/metrics</url></target></pull></collection>"
)


def test_candidate_changes_are_invisible_until_commit(m, nc):
    """RFC 6241 8.3 and 8.3.4.1: edits of the candidate do not touch running; <commit>
    makes them the running configuration."""
    other = nc()
    assert_ok(m.edit_config(target="candidate", config=scis_config(sci(OTHER))))
    assert set(scis(m.get_config("candidate"))) == {SCI_ID, OTHER}
    assert scis(other.get_config("running")) == BASE_SCIS
    assert_ok(m.commit())
    assert set(scis(other.get_config("running"))) == {SCI_ID, OTHER}
    assert scis(m.get_config("candidate")) == scis(m.get_config("running"))


def test_discard_changes_reverts_the_candidate(m):
    """RFC 6241 8.3.4.2: <discard-changes> makes the candidate the running configuration
    again."""
    assert_ok(
        m.edit_config(target="candidate", config=scis_config(sci(SCI_ID, op="delete"), sci(OTHER)))
    )
    assert set(scis(m.get_config("candidate"))) == {OTHER}
    assert_ok(m.discard_changes())
    assert scis(m.get_config("candidate")) == BASE_SCIS
    assert scis(m.get_config("running")) == BASE_SCIS


def test_commit_of_an_invalid_candidate_changes_nothing(m):
    """RFC 6241 8.3.4.1: when the candidate cannot be committed, running stays
    unchanged; the dangling leafref is reported as data-missing / instance-required
    (RFC 7950 15.5)."""
    assert_ok(m.edit_config(target="candidate", config=config(DANGLING)))
    e = one_error(m.commit())
    assert (e["tag"], e["app-tag"]) == ("data-missing", "instance-required")
    assert scis(m.get_config("running")) == BASE_SCIS
    assert data(m.get_config("running")).find("c:cats-sma/c:collection", {"c": CATS}) is None


def test_validate_the_candidate(m):
    """RFC 6241 8.6.4.1 <validate> with source candidate: <ok/> when valid, the
    validation error when not."""
    assert_ok(m.validate(source="candidate"))
    assert_ok(m.edit_config(target="candidate", config=config(DANGLING)))
    e = one_error(m.validate(source="candidate"))
    assert (e["tag"], e["app-tag"]) == ("data-missing", "instance-required")


def test_validate_inline_config(m):
    """RFC 6241 8.6.4.1 (:validate:1.1) <validate> with an inline <config>: validated as a
    complete configuration, nothing is stored."""
    assert_ok(m.validate(source=etree.fromstring(scis_config(sci(OTHER)))))
    e = one_error(m.validate(source=etree.fromstring(config(DANGLING))))
    assert (e["tag"], e["app-tag"]) == ("data-missing", "instance-required")
    assert scis(m.get_config("running")) == BASE_SCIS
    assert scis(m.get_config("candidate")) == BASE_SCIS


def test_copy_config_with_inline_config_replaces_running(m):
    """RFC 6241 7.3 <copy-config> with an inline <config> source: the target's whole
    configuration becomes that configuration."""
    source = f'<source xmlns="{NC}">{scis_config(sci(OTHER, cs_id="AR7"))}</source>'
    assert_ok(m.copy_config(source=source, target="running"))
    assert scis(m.get_config("running")) == {OTHER: {"csci-id": OTHER, "cs-id": ["AR7"]}}


def test_copy_config_running_to_startup(m):
    """RFC 6241 7.3 and 8.7.1: copy-config from running to startup saves the running
    configuration."""
    assert_ok(m.copy_config(source="running", target="startup"))
    assert scis(m.get_config("startup")) == BASE_SCIS


def test_delete_config_of_startup(m):
    """RFC 6241 7.4 and 8.7: <delete-config> of startup leaves it empty."""
    assert_ok(m.copy_config(source="running", target="startup"))
    assert_ok(m.delete_config("startup"))
    assert scis(m.get_config("startup")) == {}
    assert scis(m.get_config("running")) == BASE_SCIS


def test_delete_config_of_running_is_refused(m):
    """RFC 6241 7.4: the running configuration datastore cannot be deleted."""
    e = one_error(m.delete_config("running"))
    assert e["severity"] == "error"
    assert scis(m.get_config("running")) == BASE_SCIS
