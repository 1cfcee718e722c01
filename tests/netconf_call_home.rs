//! NETCONF Call Home (RFC 8071) against the real agent, with clients that listen: ncclient
//! over SSH on the socket it accepted (what its `call_home()` does after its own accept),
//! and ncclient's TLS session on a socket Python ssl wrapped as the TLS *client* after
//! accepting it (the roles are reversed at the TCP level only). Persistent and periodic
//! connections, reconnection, the endpoint order and backoff of the reconnect strategy,
//! the state in the operational datastore.

mod common;
#[path = "common/netconf_tls.rs"]
mod netconf_tls;

use common::*;
use netconf_tls::*;

/// Commits `config` to running over NETCONF/SSH as admin.
async fn commit(agent: &AgentProcess, config: &str) {
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let r = nc
        .rpc11(&rpc(1, &format!("<edit-config><target><running/></target><config>{config}</config></edit-config>")))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
}

fn client(name: &str, endpoints: &[(&str, &str, u16)], rest: &str) -> String {
    let eps: String = endpoints
        .iter()
        .map(|(n, t, p)| {
            format!(
                "<endpoint><name>{n}</name><transport>{t}</transport>\
                 <remote-address>127.0.0.1</remote-address><remote-port>{p}</remote-port></endpoint>"
            )
        })
        .collect();
    format!("<call-home><netconf-client><name>{name}</name>{eps}{rest}</netconf-client></call-home>")
}

/// The operational state of one Call Home client (RESTCONF, as admin).
fn state(agent: &AgentProcess, name: &str) -> serde_json::Value {
    let r = Curl::new(agent).get(&format!(
        "/data/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server/call-home/netconf-client={name}/state"
    ));
    if r.status != 200 {
        return serde_json::Value::Null;
    }
    r.json()["cats-sma-netconf-server:state"].clone()
}

fn counter(v: &serde_json::Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_u64()).unwrap_or(0)
}

fn own_session(seen: &serde_json::Value) -> serde_json::Value {
    let id = seen["session-id"].as_str().unwrap_or_default().to_owned();
    seen["sessions"].as_array().unwrap().iter().find(|s| s["session-id"] == id.as_str()).cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8071_call_home_ssh_persistent_reconnects_after_the_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    // Takes two sessions, one after the other, then stops listening.
    let mut nms = Listening::start(&["callhome-ssh", "admin", PASSWORD, "2"]);
    let backoff =
        "<reconnect-strategy><initial-backoff>1</initial-backoff><max-backoff>2</max-backoff></reconnect-strategy>";
    commit(&agent, &netconf_server(&client("nms", &[("nms-ssh", "ssh", nms.port)], backoff))).await;
    let first = nms.next_session();
    let me = own_session(&first);
    assert_eq!(me["username"], "admin", "{first}");
    assert!(me["transport"].as_str().unwrap_or_default().ends_with("netconf-ssh"), "{first}");
    // Persistent: the session was closed by the client, and the agent called again.
    let second = nms.next_session();
    assert_ne!(first["session-id"], second["session-id"]);
    nms.wait();
    // The client is gone: attempts fail, counted, with the reason, and a next attempt.
    eventually("failed attempts after the client left", || {
        let st = state(&agent, "nms");
        counter(&st["failed-attempts"]) >= 1 && st["last-error"].is_string()
    })
    .await;
    let st = state(&agent, "nms");
    assert_eq!(st["connected"], false, "{st}");
    assert_eq!(counter(&st["sessions"]), 2, "{st}");
    assert_eq!(st["endpoint"], "nms-ssh");
    assert!(counter(&st["connection-attempts"]) >= 3, "{st}");
    assert!(st["last-connected"].is_string() && st["next-attempt"].is_string(), "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8071_call_home_tls_mutual_auth_cert_to_name() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let nms_cert = ca.client(dir.path(), "nms", Some("nms-operator"), vec![]);
    let state_dir = dir.path().join("state");
    let agent = start_agent(&state_dir, &[]);
    let server_cert = state_dir.join("netconf-tls-cert.pem");
    let mut nms = Listening::start(&[
        "callhome-tls",
        nms_cert.cert_file.to_str().unwrap(),
        nms_cert.key_file.to_str().unwrap(),
        server_cert.to_str().unwrap(),
    ]);
    let tls = format!(
        "<tls><client-ca-file>{}</client-ca-file>{}</tls>",
        ca_file.display(),
        c2n(1, &fingerprint(ca.cert.der()), "common-name", None)
    );
    commit(&agent, &netconf_server(&format!("{tls}{}", client("nms", &[("nms-tls", "tls", nms.port)], "")))).await;
    let seen = nms.next_session();
    let me = own_session(&seen);
    assert_eq!(me["username"], "nms-operator", "{seen}");
    assert!(me["transport"].as_str().unwrap_or_default().ends_with("netconf-tls"), "{seen}");
    nms.wait();
    eventually("the session counted", || counter(&state(&agent, "nms")["sessions"]) == 1).await;
    // No listener was configured: Call Home alone uses the TLS identity.
    assert!(!agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("NETCONF over TLS listening")));
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8071_call_home_tls_refused_certificate_is_a_failed_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let other = Ca::new("Another CA");
    let stranger = other.client(dir.path(), "stranger", Some("nms"), vec![]);
    let state_dir = dir.path().join("state");
    let agent = start_agent(&state_dir, &[]);
    let server_cert = state_dir.join("netconf-tls-cert.pem");
    let _nms = Listening::start(&[
        "callhome-tls",
        stranger.cert_file.to_str().unwrap(),
        stranger.key_file.to_str().unwrap(),
        server_cert.to_str().unwrap(),
    ]);
    let tls = format!(
        "<tls><client-ca-file>{}</client-ca-file>{}</tls>",
        ca_file.display(),
        c2n(1, &fingerprint(ca.cert.der()), "common-name", None)
    );
    commit(&agent, &netconf_server(&format!("{tls}{}", client("nms", &[("nms-tls", "tls", _nms.port)], "")))).await;
    eventually("a refused TLS call", || {
        let st = state(&agent, "nms");
        counter(&st["failed-attempts"]) >= 1
            && st["last-error"].as_str().is_some_and(|e| e.contains("TLS"))
            && counter(&st["sessions"]) == 0
    })
    .await;
    let r = Curl::new(&agent).get("/data/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server/tls-state");
    let st = &r.json()["cats-sma-netconf-server:tls-state"];
    let unknown = st["handshake-failures"].as_array().unwrap().iter().find(|f| f["reason"] == "unknown-ca").unwrap();
    assert!(counter(&unknown["count"]) >= 1, "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8071_call_home_reconnect_strategy_tries_the_next_endpoint_after_max_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    // A port nobody listens on (bound, then closed), then the real client.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut nms = Listening::start(&["--keep", "callhome-ssh", "admin", PASSWORD]);
    let strategy = "<reconnect-strategy><max-attempts>2</max-attempts>\
                    <initial-backoff>1</initial-backoff><max-backoff>1</max-backoff></reconnect-strategy>";
    commit(&agent, &netconf_server(&client("nms", &[("gone", "ssh", dead), ("alive", "ssh", nms.port)], strategy)))
        .await;
    let seen = nms.next_session();
    assert_eq!(own_session(&seen)["username"], "admin", "{seen}");
    let st = state(&agent, "nms");
    // Two failures on the first endpoint, then the second one, where the session is up.
    assert_eq!(counter(&st["failed-attempts"]), 2, "{st}");
    assert_eq!(counter(&st["connection-attempts"]), 3, "{st}");
    assert!(st["last-error"].as_str().is_some_and(|e| e.contains(&dead.to_string())), "{st}");
    assert_eq!((st["connected"].clone(), st["endpoint"].clone()), (true.into(), "alive".into()), "{st}");
    assert_eq!(counter(&st["sessions"]), 1, "{st}");
    assert!(st["session-id"].is_number(), "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8071_call_home_periodic_idle_timeout_closes_and_the_next_period_calls_again() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    // The client says nothing after its first get: the idle timeout ends each session.
    let mut nms = Listening::start(&["--hold", "20", "callhome-ssh", "admin", PASSWORD, "2"]);
    let periodic = "<periodic><period>2</period><idle-timeout>1</idle-timeout></periodic>";
    commit(&agent, &netconf_server(&client("nms", &[("nms-ssh", "ssh", nms.port)], periodic))).await;
    let first = nms.next_session();
    assert_eq!(first["ended"], "by-server", "idle-timeout: {first}");
    let second = nms.next_session();
    assert_eq!(second["ended"], "by-server", "{second}");
    assert_ne!(first["session-id"], second["session-id"]);
    nms.wait();
    // Between periods the state says when the next call is due.
    eventually("a next attempt", || state(&agent, "nms")["next-attempt"].is_string()).await;
    // Removing the client stops the calls and its state.
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let del = netconf_server(
        "<call-home><netconf-client xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\" nc:operation=\"delete\">\
         <name>nms</name></netconf-client></call-home>",
    );
    let r = nc
        .rpc11(&rpc(2, &format!("<edit-config><target><running/></target><config>{del}</config></edit-config>")))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    eventually("the client's state is gone", || state(&agent, "nms").is_null()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue11_class5_a_client_that_accepts_and_stalls_is_cut_off_at_the_handshake_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[limits.ssh]\nhandshake_timeout_secs = 1\n").unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    // Accepts the agent's call and never says anything.
    let staller = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = staller.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((s, _)) = staller.accept().await {
            kept.push(s);
        }
    });
    commit(&agent, &netconf_server(&client("staller", &[("only", "ssh", port)], ""))).await;
    eventually("a failed attempt after the handshake deadline", || {
        let st = state(&agent, "staller");
        counter(&st["failed-attempts"]) >= 1 && counter(&st["sessions"]) == 0
    })
    .await;
    let r = Curl::new(&agent).get("/data/cats-sma:cats-sma/listener-limits/listener=ssh");
    let n = counter(&r.json()["cats-sma:listener"][0]["handshake-timeouts"]);
    assert!(n >= 1, "{}", r.body);
    held.abort();
}
