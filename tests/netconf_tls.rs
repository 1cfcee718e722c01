//! NETCONF over TLS (RFC 7589) against the real agent, with ncclient's TLS transport as the
//! client: mutual TLS, the username from cert-to-name (RFC 7589 section 7, the mapping
//! RESTCONF and the SCI listener use), the session as over SSH; refused certificates
//! (another CA, one cert-to-name does not map, none at all) counted by reason; the
//! configuration checks of cats-sma-netconf-server.

mod common;
#[path = "common/netconf_tls.rs"]
mod netconf_tls;

use std::path::Path;

use common::*;
use netconf_tls::*;

/// The agent with `netconf-server/tls` trusting `ca` with these cert-to-name entries, and
/// the listener on an ephemeral port; returns the agent and the listener's address.
async fn agent_with(dir: &Path, ca_file: &Path, entries: &str) -> (AgentProcess, std::net::SocketAddr) {
    let state = dir.join("state");
    startup(
        &state,
        &netconf_server(&format!(
            "<tls><client-ca-file>{}</client-ca-file>{entries}</tls>\
             <listen><tls><enabled>true</enabled><local-port>0</local-port></tls></listen>",
            ca_file.display()
        )),
    );
    let agent = start_agent(&state, &[]);
    let addr = tls_listen_addr(&agent).await;
    (agent, addr)
}

fn connect_tls(agent: &AgentProcess, addr: std::net::SocketAddr, c: &ClientCert) -> serde_json::Value {
    let server_cert = agent.state_dir.join("netconf-tls-cert.pem");
    run_client(&[
        "connect-tls",
        &addr.ip().to_string(),
        &addr.port().to_string(),
        c.cert_file.to_str().unwrap(),
        c.key_file.to_str().unwrap(),
        server_cert.to_str().unwrap(),
    ])
}

/// The session of `seen` (its own session-id) in its monitoring list.
fn own_session(seen: &serde_json::Value) -> serde_json::Value {
    let id = seen["session-id"].as_str().unwrap_or_default().to_owned();
    seen["sessions"].as_array().unwrap().iter().find(|s| s["session-id"] == id.as_str()).cloned().unwrap_or_default()
}

fn tls_state(agent: &AgentProcess) -> serde_json::Value {
    let r = Curl::new(agent).get("/data/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server/tls-state");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["cats-sma-netconf-server:tls-state"].clone()
}

fn failures(state: &serde_json::Value, reason: &str) -> u64 {
    state["handshake-failures"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["reason"] == reason))
        .and_then(|f| f["count"].as_str().and_then(|c| c.parse().ok()).or_else(|| f["count"].as_u64()))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_netconf_over_tls_mutual_auth_cert_to_name_san_dns() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    // Mapped through the CA's fingerprint: any certificate it issued names its dNSName.
    let entries = c2n(1, &fingerprint(ca.cert.der()), "san-dns-name", None);
    let (agent, addr) = agent_with(dir.path(), &ca_file, &entries).await;
    let ops = ca.client(dir.path(), "ops", Some("ignored-cn"), vec![dns("Ops.Example.NET")]);

    let seen = connect_tls(&agent, addr, &ops);
    assert!(seen.get("refused").is_none(), "{seen}");
    let me = own_session(&seen);
    assert_eq!(me["username"], "ops.example.net", "{seen}");
    assert!(me["transport"].as_str().unwrap_or_default().ends_with("netconf-tls"), "RFC 6022 transport: {seen}");
    assert_eq!(me["source-host"], "127.0.0.1");

    let st = tls_state(&agent);
    assert_eq!(st["enabled"], true);
    assert_eq!(st["local-port"], addr.port());
    assert_eq!(st["generated-certificate"], true);
    assert!(st["mapped-connections"].as_str().unwrap_or("0") != "0", "{st}");
    // The connection went through the listener's pre-authentication gate.
    let r = Curl::new(&agent).get("/data/cats-sma:cats-sma/listener-limits/listener=netconf-tls");
    assert_eq!(r.status, 200, "{}", r.body);
    let gate = &r.json()["cats-sma:listener"][0];
    assert_eq!(gate["established"], "1", "{gate}");
    // A certificate login in the audit trail.
    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(audit.lines().any(|l| l.contains("netconf-tls") && l.contains("ops.example.net")), "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_cert_to_name_specified_common_name_and_ordered_fallthrough() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let alice = ca.client(dir.path(), "alice", Some("alice-cn"), vec![]);
    let bob = ca.client(dir.path(), "bob", Some("bob"), vec![]);
    // 1: alice's own certificate → "admin" (specified); 2: by the CA, san-dns-name (bob has
    // none: the search goes on, RFC 7407); 3: by the CA, common-name.
    let entries = format!(
        "{}{}{}",
        c2n(1, &fingerprint(alice.cert.der()), "specified", Some("admin")),
        c2n(2, &fingerprint(ca.cert.der()), "san-dns-name", None),
        c2n(3, &fingerprint(ca.cert.der()), "common-name", None),
    );
    let (agent, addr) = agent_with(dir.path(), &ca_file, &entries).await;
    assert_eq!(own_session(&connect_tls(&agent, addr, &alice))["username"], "admin");
    assert_eq!(own_session(&connect_tls(&agent, addr, &bob))["username"], "bob");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_wrong_ca_unmapped_and_missing_certificates_are_refused_with_counters() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let mapped = ca.client(dir.path(), "mapped", Some("mapped"), vec![]);
    let unmapped = ca.client(dir.path(), "unmapped", Some("unmapped"), vec![]);
    let other = Ca::new("Another CA");
    let stranger = other.client(dir.path(), "stranger", Some("mapped"), vec![]);
    // Only `mapped`'s own certificate has an entry.
    let entries = c2n(1, &fingerprint(mapped.cert.der()), "common-name", None);
    let (agent, addr) = agent_with(dir.path(), &ca_file, &entries).await;

    assert!(connect_tls(&agent, addr, &stranger).get("refused").is_some(), "another CA");
    assert!(connect_tls(&agent, addr, &unmapped).get("refused").is_some(), "no cert-to-name entry");
    // No certificate at all (rustls client without one).
    let connector = tls_connector(&agent.state_dir.join("netconf-tls-cert.pem"));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    if let Ok(mut tls) = connector.connect(name, tcp).await {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        let n = tls.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0, "no hello for a client without a certificate");
    }
    let st = tls_state(&agent);
    assert_eq!(failures(&st, "unknown-ca"), 1, "{st}");
    assert_eq!(failures(&st, "unmapped-certificate"), 1, "{st}");
    assert_eq!(failures(&st, "no-certificate"), 1, "{st}");
    // The mapped one still works, and nothing of the refused ones became a session.
    let seen = connect_tls(&agent, addr, &mapped);
    assert_eq!(own_session(&seen)["username"], "mapped", "{seen}");
    assert_eq!(seen["sessions"].as_array().unwrap().len(), 1, "{seen}");
    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    // The first refusal is recorded; those after it from the same source within the
    // window are aggregated into one record (docs/security.md, audit trail).
    assert!(audit.lines().any(|l| l.contains("\"transport\":\"netconf-tls\"") && l.contains("unknown-ca")), "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_off_unless_configured_and_mutual_auth_cannot_be_configured_away() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    // Nothing configured: no listener, no state, no generated certificate.
    assert!(!agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("NETCONF over TLS listening")));
    assert!(!agent.state_dir.join("netconf-tls-cert.pem").exists());
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    // The listener without trust anchors is refused (RFC 7589 section 5: mutual auth).
    let edit =
        |cfg: &str| rpc(1, &format!("<edit-config><target><running/></target><config>{cfg}</config></edit-config>"));
    let r = nc.rpc11(&edit(&netconf_server("<listen><tls><enabled>true</enabled></tls></listen>"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("client-ca-file"), "{r}");
    // A client CA file that cannot be read refuses the commit too (fail closed).
    let r = nc
        .rpc11(&edit(&netconf_server(
            "<tls><client-ca-file>/nonexistent/ca.pem</client-ca-file></tls>\
             <listen><tls><enabled>true</enabled><local-port>0</local-port></tls></listen>",
        )))
        .await;
    assert!(r.contains("<rpc-error>") && r.contains("/nonexistent/ca.pem"), "{r}");
    // Configured at run time: the listener starts.
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let r = nc
        .rpc11(&edit(&netconf_server(&format!(
            "<tls><client-ca-file>{}</client-ca-file>{}</tls>\
             <listen><tls><enabled>true</enabled><local-port>0</local-port></tls></listen>",
            ca_file.display(),
            c2n(1, &fingerprint(ca.cert.der()), "common-name", None)
        ))))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let addr = tls_listen_addr(&agent).await;
    let c = ca.client(dir.path(), "carol", Some("carol"), vec![]);
    assert_eq!(own_session(&connect_tls(&agent, addr, &c))["username"], "carol");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue11_class5_an_idle_tcp_connection_to_the_tls_listener_is_closed_at_the_handshake_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let state = dir.path().join("state");
    startup(
        &state,
        &netconf_server(&format!(
            "<tls><client-ca-file>{}</client-ca-file></tls>\
             <listen><tls><enabled>true</enabled><local-port>0</local-port></tls></listen>",
            ca_file.display()
        )),
    );
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[limits.netconf_tls]\nhandshake_timeout_secs = 1\n").unwrap();
    let agent = start_agent(&state, &["--config", cfg.to_str().unwrap()]);
    let addr = tls_listen_addr(&agent).await;
    // Never a byte from us: the handshake deadline closes the connection.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(std::time::Duration::from_secs(30), s.read(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "still open after 30 s: {n:?}");
    eventually("the timeout counted", || failures(&tls_state(&agent), "timeout") == 1).await;
    let r = Curl::new(&agent).get("/data/cats-sma:cats-sma/listener-limits/listener=netconf-tls");
    assert_eq!(r.json()["cats-sma:listener"][0]["handshake-timeouts"], "1", "{}", r.body);
}

/// RFC 7589 section 7 with a live session: a change of `netconf-server/tls` that leaves a
/// session's certificate mapped to the same user keeps the session; one that maps it to
/// another user (here: its `specified` entry removed, the CA's common-name entry then
/// applies) ends it at once, as killed by the agent, and the refusal is counted.
#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_live_sessions_are_rechecked_when_the_tls_configuration_changes() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("NETCONF CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let alice = ca.client(dir.path(), "alice", Some("alice-cn"), vec![]);
    let entries = format!(
        "{}{}",
        c2n(1, &fingerprint(alice.cert.der()), "specified", Some("admin")),
        c2n(5, &fingerprint(ca.cert.der()), "common-name", None),
    );
    let (agent, addr) = agent_with(dir.path(), &ca_file, &entries).await;
    let server_cert = agent.state_dir.join("netconf-tls-cert.pem");
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let mut kept = Listening::start_kept(&[
        "connect-tls",
        &ip,
        &port,
        alice.cert_file.to_str().unwrap(),
        alice.key_file.to_str().unwrap(),
        server_cert.to_str().unwrap(),
        "--keep",
    ]);
    let seen = kept.next_session();
    let sid = seen["session-id"].as_str().unwrap().to_owned();
    assert_eq!(own_session(&seen)["username"], "admin");
    let c = Curl::new(&agent);
    let live = |c: &Curl| {
        let r = c.get("/data/ietf-netconf-monitoring:netconf-state/sessions");
        r.json()["ietf-netconf-monitoring:sessions"]["session"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["session-id"].to_string().trim_matches('"') == sid))
    };
    assert!(live(&c));
    let base = "/data/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server/tls";
    // An entry that does not concern alice: her session stays.
    let other = ca.client(dir.path(), "other", Some("other"), vec![]);
    let r = c.send_xml(
        "POST",
        base,
        &c2n(9, &fingerprint(other.cert.der()), "specified", Some("other"))
            .replace("<cert-to-name>", &format!("<cert-to-name xmlns=\"{NS_NCS}\">")),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(live(&c), "an unrelated cert-to-name change ended the session");
    // Her own entry goes: the certificate now maps to alice-cn, not admin.
    let r = c.call("DELETE", &format!("{base}/cert-to-name=1"), &[], None);
    assert_eq!(r.status, 204, "{}", r.body);
    eventually("the session to end", || !live(&c)).await;
    assert!(failures(&tls_state(&agent), "unmapped-certificate") >= 1, "{}", tls_state(&agent));
}
