//! The program (foundation issue section 3): unattended start with --state-dir and
//! --netconf-listen, the admin credential from CATS_SMA_ADMIN_PASSWORD, a host key
//! generated once and kept, the ready line, check-config, and a real SSH/NETCONF login.

mod common;

use std::process::Command;

use common::*;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cats-sma"))
}

#[test]
fn help_and_check_config() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in ["run", "check-config", "hash-password"] {
        assert!(help.contains(cmd), "{help}");
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "state_dir = \"/tmp/x\"\n[netconf]\nlisten = [\"127.0.0.1:8830\", \"[::1]:8830\"]\nmax_sessions = 10\n",
    )
    .unwrap();
    assert!(bin().arg("check-config").arg(&good).status().unwrap().success());
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[netconf]\nlisten = [\"nonsense\"]\n").unwrap();
    let out = bin().arg("check-config").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml"));
}

#[tokio::test(flavor = "multi_thread")]
async fn unattended_start_login_and_host_key_kept_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let key1 = {
        let agent = start_agent(&state, &[]);
        assert!(state.join("ssh_host_ed25519_key").exists());
        assert!(state.join("credentials.toml").exists());
        let creds = std::fs::read_to_string(state.join("credentials.toml")).unwrap();
        assert!(!creds.contains(PASSWORD), "the password is stored hashed only");
        assert!(connect(agent.addr, "admin", "wrong").await.is_err(), "a wrong password is refused");
        // RFC 4252 5.1/8: after a failure, password stays a method that can continue.
        let retried = connect_after_attempts(agent.addr, "admin", &["mistyped", PASSWORD]).await;
        assert!(retried.is_ok(), "a mistyped password can be retried on the same connection");
        let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
        let hello = s.hello(true).await;
        assert!(hello.contains("urn:ietf:params:netconf:base:1.1"));
        assert!(hello.contains("<session-id>"));
        let reply = s.rpc11(&rpc(1, "<get-config><source><running/></source></get-config>")).await;
        assert!(reply.contains("message-id=\"1\"") && reply.contains("<data"), "{reply}");
        s.host_key.clone().unwrap()
    };
    // A restart keeps the host key and the admin credential (the env password is only the
    // initial one).
    let agent = start_agent(&state, &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    assert_eq!(s.host_key.clone().unwrap(), key1);
    s.hello(false).await;
    let reply = s.rpc10(&rpc(2, "<close-session/>")).await;
    assert!(reply.contains("<ok/>"), "{reply}");
}
