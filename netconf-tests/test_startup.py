"""The startup datastore across restarts (RFC 6241 8.7): what was copied to startup is the
running configuration after the agent restarts; what was not saved is gone."""

from conftest import NC, SCI_ID, assert_ok, reset, sci, scis, scis_config

SAVED = "10.0.0.4:80"
UNSAVED = "10.0.0.5:80"


def test_startup_configuration_survives_a_restart(agent):
    """RFC 6241 8.7 and 8.7.1: copy-config running to startup, then a restart: running
    starts from startup, so the saved SCI is back and a later unsaved one is not."""
    m = agent.connect()
    reset(
        m,
        "<scis>"
        + sci(SCI_ID)
        + sci(SAVED, "<expected-interval>1234</expected-interval>")
        + "</scis>",
    )
    assert_ok(m.copy_config(source="running", target="startup"))
    assert_ok(m.edit_config(target="running", config=scis_config(sci(UNSAVED))))

    agent.restart()
    m = agent.connect()
    expected = {
        SCI_ID: {"csci-id": SCI_ID, "cs-id": ["AR1"]},
        SAVED: {"csci-id": SAVED, "cs-id": ["AR1"], "expected-interval": "1234"},
    }
    assert scis(m.get_config("running")) == expected
    assert scis(m.get_config("startup")) == expected
    assert scis(m.get_config("candidate")) == expected


def test_deleted_startup_starts_empty(agent):
    """RFC 6241 7.4 and 8.7: after <delete-config> of startup, a restart starts with an
    empty running configuration."""
    m = agent.connect()
    inline = f'<source xmlns="{NC}">{scis_config(sci(SAVED))}</source>'
    assert_ok(m.copy_config(source=inline, target="startup"))
    assert_ok(m.delete_config("startup"))

    agent.restart()
    m = agent.connect()
    assert scis(m.get_config("running")) == {}
