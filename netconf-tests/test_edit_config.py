"""<edit-config> (RFC 6241 7.2): the operation attribute (merge, replace, create, delete,
remove), default-operation, test-option (8.6) and error-option (7.2, 8.5), and the
rpc-errors of Appendix A that edits produce. Every test starts from the same running
configuration: one SCI with a description, and the agent's csma-id."""

import pytest

from conftest import (
    CATS,
    NC,
    SCI_ID,
    assert_ok,
    config,
    data,
    errors,
    one_error,
    reset,
    sci,
    scis,
    scis_config,
)

OTHER = "10.0.0.1:80"
BASE = (
    "<agent><csma-id>csma-1</csma-id></agent>"
    "<scis>" + sci(SCI_ID, "<description>first</description>") + "</scis>"
)
BASE_SCIS = {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"], "description": "first"}}


@pytest.fixture
def m(nc):
    m = nc()
    reset(m, BASE)
    return m


def running(m):
    return scis(m.get_config("running"))


def csma_id(m):
    return data(m.get_config("running")).findtext(
        "c:cats-sma/c:agent/c:csma-id", namespaces={"c": CATS}
    )


# ----- operations -------------------------------------------------------------------------


def test_merge_creates_and_updates(m):
    """RFC 6241 7.2 merge (the default operation): new entries are created, existing ones
    get the given leaves and keep the others."""
    assert_ok(
        m.edit_config(
            target="running",
            config=scis_config(
                sci(SCI_ID, "<expected-interval>7000</expected-interval>"),
                sci(OTHER, cs_id="AR2"),
            ),
        )
    )
    now = running(m)
    assert now[SCI_ID] == dict(BASE_SCIS[SCI_ID], **{"expected-interval": "7000"})
    assert now[OTHER] == {"csci-id": OTHER, "cs-id": ["AR2"]}
    assert csma_id(m) == "csma-1"


def test_replace_operation_replaces_the_entry(m):
    """RFC 6241 7.2 replace: the element carrying operation="replace" replaces the
    related configuration; leaves it does not mention are gone."""
    assert_ok(
        m.edit_config(target="running", config=scis_config(sci(SCI_ID, cs_id="AR9", op="replace")))
    )
    assert running(m) == {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR9"]}}
    assert csma_id(m) == "csma-1"


def test_create_adds_a_new_entry(m):
    """RFC 6241 7.2 create: the data is added when it does not exist yet."""
    assert_ok(m.edit_config(target="running", config=scis_config(sci(OTHER, op="create"))))
    assert set(running(m)) == {SCI_ID, OTHER}


def test_create_of_existing_data_is_data_exists(m):
    """RFC 6241 7.2 create and Appendix A data-exists (error-type application): creating
    an entry that exists fails and changes nothing; error-path names the entry with
    namespace prefixes declared on the error-path element (4.3)."""
    e = one_error(m.edit_config(target="running", config=scis_config(sci(SCI_ID, op="create"))))
    assert (e["tag"], e["type"], e["severity"]) == ("data-exists", "application", "error")
    path_prefixes = {p.split(":")[0] for p in e["path"].strip("/").split("/")}
    for prefix in path_prefixes:
        assert e["path-element"].nsmap.get(prefix) == CATS, e["path"]
    assert SCI_ID in e["path"]
    assert running(m) == BASE_SCIS


def test_delete_removes_existing_data(m):
    """RFC 6241 7.2 delete: the entry is deleted."""
    assert_ok(m.edit_config(target="running", config=scis_config(sci(SCI_ID, op="delete"))))
    assert running(m) == {}


def test_delete_of_missing_data_is_data_missing(m):
    """RFC 6241 7.2 delete and Appendix A data-missing (error-type application): deleting
    what does not exist fails and changes nothing."""
    e = one_error(m.edit_config(target="running", config=scis_config(sci(OTHER, op="delete"))))
    assert (e["tag"], e["type"]) == ("data-missing", "application")
    assert running(m) == BASE_SCIS


def test_remove_deletes_and_ignores_missing_data(m):
    """RFC 6241 7.2 remove: like delete, but data that does not exist is silently
    ignored."""
    leaf = config(
        f'<scis><sci><csci-id>{SCI_ID}</csci-id><description nc:operation="remove"/></sci></scis>'
    )
    assert_ok(m.edit_config(target="running", config=leaf))
    assert running(m) == {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]}}
    assert_ok(m.edit_config(target="running", config=scis_config(sci(OTHER, op="remove"))))
    assert running(m) == {SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]}}


def test_default_operation_replace_replaces_the_whole_configuration(m):
    """RFC 6241 7.2 default-operation replace: the <config> parameter replaces the entire
    target configuration."""
    assert_ok(
        m.edit_config(target="running", config=scis_config(sci(OTHER)), default_operation="replace")
    )
    assert running(m) == {OTHER: {"csci-id": OTHER, "cs-id": ["AR1"]}}
    assert csma_id(m) is None


def test_default_operation_none_applies_only_explicit_operations(m):
    """RFC 6241 7.2 default-operation none: data without an operation attribute leaves
    the target unaffected, while data with one is applied (here a create)."""
    edit = config(
        f"<scis><sci><csci-id>{SCI_ID}</csci-id><description>changed</description>"
        '<expected-interval nc:operation="create">9000</expected-interval></sci></scis>'
    )
    assert_ok(m.edit_config(target="running", config=edit, default_operation="none"))
    assert running(m) == {SCI_ID: dict(BASE_SCIS[SCI_ID], **{"expected-interval": "9000"})}


def test_default_operation_none_with_a_missing_level_is_data_missing(m):
    """RFC 6241 7.2 default-operation none: configuration data for which there is no
    corresponding level in the datastore is answered with data-missing."""
    edit = config(f"<scis><sci><csci-id>{OTHER}</csci-id><description>x</description></sci></scis>")
    e = one_error(m.edit_config(target="running", config=edit, default_operation="none"))
    assert e["tag"] == "data-missing"
    assert running(m) == BASE_SCIS


# ----- test-option and error-option -------------------------------------------------------


def test_test_only_validates_without_applying(m):
    """RFC 6241 8.6.4 test-option test-only: the edit is validated, the target is not
    changed; an invalid edit gets its error just the same."""
    assert_ok(
        m.edit_config(target="running", config=scis_config(sci(OTHER)), test_option="test-only")
    )
    assert running(m) == BASE_SCIS
    e = one_error(
        m.edit_config(
            target="running", config=scis_config(sci(SCI_ID, op="create")), test_option="test-only"
        )
    )
    assert e["tag"] == "data-exists"
    assert running(m) == BASE_SCIS


def test_test_only_reports_a_broken_reference(m):
    """RFC 6241 8.6.4 test-only validates the resulting configuration: a pull target
    naming an SCI that does not exist breaks its leafref (RFC 7950 15.5: data-missing
    with error-app-tag instance-required), and nothing is applied."""
    edit = config(
        "<collection><pull><target><csci-id>9.9.9.9:9</csci-id><url>http://sci.example/m</url>"
        "</target></pull></collection>"
    )
    e = one_error(m.edit_config(target="running", config=edit, test_option="test-only"))
    assert (e["tag"], e["app-tag"]) == ("data-missing", "instance-required")
    assert data(m.get_config("running")).find("c:cats-sma/c:collection", {"c": CATS}) is None


def test_continue_on_error_applies_the_rest(m):
    """RFC 6241 7.2 error-option continue-on-error: processing continues after an error,
    the error is reported, and the parts that succeeded stay applied."""
    edit = scis_config(sci(SCI_ID, op="create"), sci(OTHER))
    errs = errors(m.edit_config(target="running", config=edit, error_option="continue-on-error"))
    assert [e["tag"] for e in errs] == ["data-exists"]
    assert set(running(m)) == {SCI_ID, OTHER}


def test_rollback_on_error_restores_the_configuration(m):
    """RFC 6241 8.5 and 7.2 error-option rollback-on-error: when an error occurs, the parts
    already applied are rolled back and the target is as it was."""
    edit = scis_config(sci(OTHER), sci(SCI_ID, op="create"))
    e = one_error(m.edit_config(target="running", config=edit, error_option="rollback-on-error"))
    assert e["tag"] == "data-exists"
    assert running(m) == BASE_SCIS


# ----- errors of bad content (Appendix A) -------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "4294967296", "-1"])
def test_bad_uint32_is_invalid_value(m, value):
    """RFC 6241 Appendix A invalid-value: expected-interval is a uint32, so a value that
    is not one is refused; error-path points at the leaf."""
    edit = scis_config(sci(SCI_ID, f"<expected-interval>{value}</expected-interval>"))
    e = one_error(m.edit_config(target="running", config=edit))
    assert e["tag"] == "invalid-value"
    assert e["type"] in ("protocol", "application")
    assert e["path"].endswith(":expected-interval"), e["path"]
    assert running(m) == BASE_SCIS


def test_unknown_element_names_the_bad_element(m):
    """RFC 6241 Appendix A unknown-element: an element the schema does not have is
    refused, with <bad-element> naming it in error-info."""
    e = one_error(
        m.edit_config(target="running", config=scis_config(sci(SCI_ID, "<bogus>1</bogus>")))
    )
    assert e["tag"] == "unknown-element"
    assert e["type"] in ("rpc", "protocol", "application")
    assert e["info"].get("bad-element") == "bogus"
    assert running(m) == BASE_SCIS


UNKNOWN_NS = "urn:example:no-such-module"
UNKNOWN_NS_CONFIG = (
    f'<config xmlns="{NC}"><widget xmlns="{UNKNOWN_NS}"><size>1</size></widget></config>'
)


def test_unknown_namespace_names_the_namespace(m):
    """RFC 6241 Appendix A unknown-namespace: an element in a namespace no module has is
    refused, with <bad-namespace> naming the namespace."""
    e = one_error(m.edit_config(target="running", config=UNKNOWN_NS_CONFIG))
    assert e["tag"] == "unknown-namespace"
    assert e["type"] in ("protocol", "application")
    assert e["info"].get("bad-namespace") == UNKNOWN_NS
    assert running(m) == BASE_SCIS


def test_unknown_namespace_names_the_element(m):
    """RFC 6241 Appendix A unknown-namespace: error-info has both <bad-element> (the
    element in the unexpected namespace) and <bad-namespace>."""
    e = one_error(m.edit_config(target="running", config=UNKNOWN_NS_CONFIG))
    assert e["info"].get("bad-element") == "widget"
    assert e["info"].get("bad-namespace") == UNKNOWN_NS
