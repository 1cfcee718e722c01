//! SCI ingress security against the real agent (seed 004, Security Considerations and SCI
//! Collection Interface): HTTPS pull from an SCI served here over TLS (server verified
//! against the configured anchor and name, client certificate presented; a wrong anchor,
//! a wrong name and a missing client certificate refused and visible in the target's
//! state), MQTT over TLS through a real mosquitto that requires client certificates, the
//! ingress rate limits (HTTP 429 with Retry-After, per source and per SCI, the per-SCI
//! bucket out of reach of a mere claimant) and an MQTT flood that leaves the agent's memory
//! bounded while it keeps serving other SCIs. Certificates are made here with rcgen.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cats_sma::engine::auth::sign_hmac;
use common::mosquitto::{broker_with, free_port, publish, Broker};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const JSON: &str = "application/json";

// ----- test PKI --------------------------------------------------------------------------

/// Files of a test PKI: a CA, a server certificate for 127.0.0.1, one for `localhost` only,
/// a client certificate, and an unrelated CA.
struct Pki {
    ca: String,
    srv: String,
    srv_key: String,
    localhost: String,
    localhost_key: String,
    cli: String,
    cli_key: String,
    other_ca: String,
}

fn pki(dir: &Path) -> Pki {
    let pki = TestPki::new(dir, "sci-ingress test CA");
    let (srv, srv_key, _) = pki.leaf("srv", &["127.0.0.1"]);
    let (localhost, localhost_key, _) = pki.leaf("localhost", &["localhost"]);
    let (cli, cli_key, _) = pki.leaf("cli", &["cats-sma-agent"]);
    Pki {
        ca: pki.path("ca.pem"),
        srv,
        srv_key,
        localhost,
        localhost_key,
        cli,
        cli_key,
        other_ca: pki.other_ca("other-ca.pem"),
    }
}

fn report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":7,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

// ----- NETCONF helpers -------------------------------------------------------------------

async fn agent_session(agent: &AgentProcess) -> RawSession {
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    nc
}

async fn edit(nc: &mut RawSession, id: u32, body: &str) -> String {
    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">{body}</cats-sma></config></edit-config>"
    );
    nc.rpc11(&rpc(id, &cfg)).await
}

async fn get(nc: &mut RawSession, id: u32, filter: &str) -> String {
    nc.rpc11(&rpc(
        id,
        &format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\">{filter}</cats-sma></filter></get>"),
    ))
    .await
}

/// The text of the first `<tag>` in `xml`.
fn leaf(xml: &str, tag: &str) -> Option<String> {
    let rest = xml.split(&format!("<{tag}>")).nth(1)?;
    Some(rest.split(&format!("</{tag}>")).next()?.to_owned())
}

fn count(xml: &str, tag: &str) -> u64 {
    leaf(xml, tag).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Polls `filter` until `ok` holds (the bound only guards against a hang) and returns the
/// last reply.
async fn wait_for(nc: &mut RawSession, base: u32, filter: &str, ok: impl Fn(&str) -> bool) -> (bool, String) {
    let mut last = String::new();
    for i in 0..300 {
        last = get(nc, base + i, filter).await;
        if ok(&last) {
            return (true, last);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (false, last)
}

fn target_state(csci: &str) -> String {
    format!("<collection><pull><target><csci-id>{csci}</csci-id><state/></target></pull></collection>")
}

const MQTT_STATE: &str = "<collection><mqtt><state/></mqtt></collection>";
const STATISTICS: &str = "<statistics/>";
const RATE_STATE: &str = "<collection><rate-limit><state/></rate-limit></collection>";

fn cache_entry(csci: &str) -> String {
    format!("<metric-cache><entry><csci-id>{csci}</csci-id><gas/></entry></metric-cache>")
}

/// The rejection count of `reason` in a statistics reply.
fn rejected(stats: &str, reason: &str) -> u64 {
    stats
        .split(&format!(":{reason}</reason><count>"))
        .nth(1)
        .and_then(|t| t.split('<').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The refusal count of one rate-limit `refused` entry.
fn refused(state: &str, limit: &str, transport: &str) -> u64 {
    state
        .split("<refused>")
        .skip(1)
        .find(|e| {
            e.contains(&format!("<limit>{limit}</limit>")) && e.contains(&format!("<transport>{transport}</transport>"))
        })
        .map(|e| count(e, "count"))
        .unwrap_or(0)
}

// ----- an SCI served over TLS --------------------------------------------------------------

/// An SCI answering every GET with a fresh report for `csci`, over TLS with `cert`/`key`;
/// with `client_ca` it requires a client certificate chained to it. Counts the answers and
/// whether a client certificate was presented.
async fn https_sci(
    csci: &'static str,
    cert: &str,
    key: &str,
    client_ca: Option<&str>,
) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicBool>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let v =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (hits, saw_cert) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let (h, s) = (hits.clone(), saw_cert.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else { return };
            let (acceptor, h, s) = (acceptor.clone(), h.clone(), s.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                if tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()) {
                    s.store(true, Ordering::SeqCst);
                }
                let mut buf = [0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let seq = h.fetch_add(1, Ordering::SeqCst) + 1;
                let body = report(csci, seq, 250);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, hits, saw_cert)
}

fn tls_leaves(ca: &str, client: Option<(&str, &str)>) -> String {
    let mut s = format!("<tls><trusted-ca-file>{ca}</trusted-ca-file>");
    if let Some((c, k)) = client {
        s.push_str(&format!(
            "<client-certificate-file>{c}</client-certificate-file><client-key-file>{k}</client-key-file>"
        ));
    }
    s.push_str("</tls>");
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_pull_over_https_verifies_the_server_and_presents_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (sci, hits, saw_cert) = https_sci("sci-p", &pki.srv, &pki.srv_key, Some(&pki.ca)).await;
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = agent_session(&agent).await;
    let r = edit(
        &mut nc,
        1,
        &format!(
            "<scis><sci><csci-id>sci-p</csci-id><cs-id>AR1</cs-id></sci></scis>\
             <collection><pull><target><csci-id>sci-p</csci-id><url>https://{sci}/metrics</url><interval>1</interval>{}</target></pull></collection>",
            tls_leaves(&pki.ca, Some((&pki.cli, &pki.cli_key)))
        ),
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    // sci-p has no credential: the verified server certificate is its proof.
    let (landed, reply) = wait_for(&mut nc, 10, &cache_entry("sci-p"), |r| r.contains("<gas>250</gas>")).await;
    assert!(landed, "the report pulled over HTTPS reached the cache: {reply}");
    assert!(hits.load(Ordering::SeqCst) >= 1);
    assert!(saw_cert.load(Ordering::SeqCst), "the agent presented its client certificate");
    let (ok, state) = wait_for(&mut nc, 400, &target_state("sci-p"), |r| count(r, "pulls") >= 1).await;
    assert!(ok && state.contains("<transport>https</transport>"), "{state}");
    // probe-sci uses the same verified channel.
    let probe = nc.rpc11(&rpc(900, &format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-p</csci-id></probe-sci>"))).await;
    assert!(probe.contains(">true</reachable>"), "{probe}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_pull_over_https_refuses_wrong_anchor_name_and_missing_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (wrong_ca, hits_a, _) = https_sci("sci-a", &pki.srv, &pki.srv_key, None).await;
    let (wrong_name, hits_b, _) = https_sci("sci-b", &pki.localhost, &pki.localhost_key, None).await;
    let (needs_cert, _, _) = https_sci("sci-c", &pki.srv, &pki.srv_key, Some(&pki.ca)).await;
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = agent_session(&agent).await;
    let scis = "<scis><sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci><sci><csci-id>sci-b</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>\
                <sci><csci-id>sci-c</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>";
    let target = |id: &str, addr: SocketAddr, tls: &str| {
        format!("<target><csci-id>{id}</csci-id><url>https://{addr}/metrics</url><interval>1</interval>{tls}</target>")
    };

    // Commit checks first: plaintext only by choice, https only with trust anchors.
    let plain = edit(
        &mut nc,
        1,
        &format!("{scis}<collection><pull><target><csci-id>sci-a</csci-id><url>http://{wrong_ca}/m</url></target></pull></collection>"),
    )
    .await;
    assert!(plain.contains("<rpc-error>") && plain.contains("allow-plaintext"), "{plain}");
    let no_ca =
        edit(&mut nc, 2, &format!("{scis}<collection><pull>{}</pull></collection>", target("sci-a", wrong_ca, "")))
            .await;
    assert!(no_ca.contains("<rpc-error>") && no_ca.contains("trusted-ca-file"), "{no_ca}");
    let missing = dir.path().join("no-such-ca.pem").to_string_lossy().into_owned();
    let unreadable = edit(
        &mut nc,
        3,
        &format!(
            "{scis}<collection><pull>{}</pull></collection>",
            target("sci-a", wrong_ca, &tls_leaves(&missing, None))
        ),
    )
    .await;
    assert!(unreadable.contains("<rpc-error>") && unreadable.contains("no-such-ca.pem"), "{unreadable}");

    // The collection-wide anchor is another CA for sci-a; sci-b's server certificate names
    // localhost, not the URL's 127.0.0.1; sci-c wants a client certificate the agent lacks.
    let r = edit(
        &mut nc,
        4,
        &format!(
            "{scis}<collection><pull>{}{}{}{}</pull></collection>",
            tls_leaves(&pki.ca, None),
            target("sci-a", wrong_ca, &tls_leaves(&pki.other_ca, None)),
            target("sci-b", wrong_name, ""),
            target("sci-c", needs_cert, "")
        ),
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    for (i, id) in ["sci-a", "sci-b", "sci-c"].into_iter().enumerate() {
        let (failed, state) =
            wait_for(&mut nc, 100 + 400 * i as u32, &target_state(id), |r| count(r, "failures") >= 1).await;
        assert!(failed, "{id}: the failure is visible in its state: {state}");
        let err = leaf(&state, "last-error").unwrap_or_default();
        assert!(err.starts_with("TLS:"), "{id}: {state}");
        match id {
            "sci-a" => assert!(err.contains("UnknownIssuer"), "{err}"),
            "sci-b" => assert!(err.contains("NotValidForName") || err.contains("not valid for name"), "{err}"),
            _ => assert!(err.contains("CertificateRequired"), "the server's alert is named: {err}"),
        }
        assert_eq!(count(&state, "pulls"), 0, "{id}: nothing was ingested: {state}");
    }
    let entries = get(&mut nc, 3000, "<metric-cache/>").await;
    assert!(!entries.contains("<gas>250</gas>"), "no unverified report reached the cache: {entries}");
    // The servers refused answers were never read by the agent: sci-a and sci-b answered
    // nothing because the agent aborted the handshake.
    assert_eq!(hits_a.load(Ordering::SeqCst) + hits_b.load(Ordering::SeqCst), 0);
}

// ----- MQTT over TLS ---------------------------------------------------------------------

/// mosquitto with a plaintext listener on `plain` and, with `tls`, a TLS listener on
/// `tls.0` that requires client certificates chained to the test CA.
fn broker(dir: &Path, plain: u16, tls: Option<(u16, &Pki)>) -> Broker {
    let mut conf = format!(
        "per_listener_settings false\nallow_anonymous true\npersistence false\n\
         max_queued_messages 1000000\nmax_queued_bytes 0\nlistener {plain} 127.0.0.1\n"
    );
    if let Some((port, pki)) = tls {
        conf.push_str(&format!(
            "listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
            pki.ca, pki.srv, pki.srv_key
        ));
    }
    broker_with(dir, conf, &[Some(plain), tls.map(|t| t.0)].into_iter().flatten().collect::<Vec<_>>())
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_mqtt_over_tls_requires_the_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    // The broker's files in a directory of their own, readable by the broker's user.
    let certs = tempfile::tempdir().unwrap();
    let pki = pki(certs.path());
    let (plain, tls) = (free_port(), free_port());
    let _b = broker(certs.path(), plain, Some((tls, &pki)));
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = agent_session(&agent).await;
    // Neither tls nor allow-plaintext: refused by the schema.
    let r = edit(
        &mut nc,
        1,
        &format!("<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{tls}</broker-port></mqtt></collection>"),
    )
    .await;
    assert!(r.contains("<rpc-error>") && r.contains("allow-plaintext"), "{r}");
    let mqtt = |client: Option<(&str, &str)>| {
        format!(
            "<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{tls}</broker-port>{}</mqtt></collection>\
             <scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>",
            tls_leaves(&pki.ca, client)
        )
    };
    let r = edit(&mut nc, 2, &mqtt(Some((&pki.cli, &pki.cli_key)))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (up, state) = wait_for(&mut nc, 10, MQTT_STATE, |r| r.contains("<status>connected</status>")).await;
    assert!(up && state.contains("<transport>tls</transport>"), "{state}");
    // Reports published to the broker reach the agent over its TLS subscription.
    let mut landed = false;
    for seq in 1..50u64 {
        publish(plain, "cats/sci/sci-1/report", &report("sci-1", seq, 300));
        let (ok, _) =
            wait_for(&mut nc, 1000 + 400 * seq as u32, &cache_entry("sci-1"), |r| r.contains("<gas>300</gas>")).await;
        if ok {
            landed = true;
            break;
        }
    }
    assert!(landed, "a report reached the agent through the TLS connection");

    // Without its client certificate the broker refuses the agent, and the state says so.
    let before = count(&get(&mut nc, 30_000, MQTT_STATE).await, "failures");
    let r = nc
        .rpc11(&rpc(
            30_001,
            &format!(
                "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\" xmlns:nc=\"{NC}\"><collection><mqtt>\
                 <tls nc:operation=\"replace\"><trusted-ca-file>{}</trusted-ca-file></tls>\
                 </mqtt></collection></cats-sma></config></edit-config>",
                pki.ca
            ),
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let (refused, state) = wait_for(&mut nc, 31_000, MQTT_STATE, |r| {
        count(r, "failures") > before && !r.contains("<status>connected</status>")
    })
    .await;
    assert!(refused, "the refusal is visible: {state}");
    let err = leaf(&state, "last-error").unwrap_or_default();
    assert!(err.contains("CertificateRequired") || err.contains("alert") || err.contains("reset"), "{state}");
    eprintln!("MQTT without the client certificate: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_mqtt_over_tls_with_username_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let pki = pki(certs.path());
    let passwd = certs.path().join("passwd");
    let st = Command::new("mosquitto_passwd")
        .args(["-c", "-b"])
        .arg(&passwd)
        .args(["cats-sma", "broker-secret-1"])
        .stdout(Stdio::null())
        .status()
        .expect("mosquitto_passwd (mosquitto) is installed by scripts/setup.sh");
    assert!(st.success());
    let port = free_port();
    let conf = format!(
        "per_listener_settings false\nallow_anonymous false\npassword_file {}\npersistence false\n\
         listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n",
        passwd.display(),
        pki.ca,
        pki.srv,
        pki.srv_key
    );
    let _b = broker_with(certs.path(), conf, &[port]);
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = agent_session(&agent).await;
    let mqtt = |password: &str| {
        format!(
            "<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port>\
             {}<username>cats-sma</username><password>{password}</password></mqtt></collection>",
            tls_leaves(&pki.ca, None)
        )
    };
    let r = edit(&mut nc, 1, &mqtt("broker-secret-1")).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (up, state) = wait_for(&mut nc, 10, MQTT_STATE, |r| r.contains("<status>connected</status>")).await;
    assert!(up && state.contains("<transport>tls</transport>"), "{state}");
    // A wrong password: the broker refuses the CONNECT, and the state says so.
    let r = edit(&mut nc, 500, &mqtt("not-the-password")).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (refused, state) =
        wait_for(&mut nc, 600, MQTT_STATE, |r| count(r, "failures") >= 1 && !r.contains("<status>connected</status>"))
            .await;
    assert!(refused, "{state}");
    let err = leaf(&state, "last-error").unwrap_or_default();
    assert!(err.contains("NotAuthorized") || err.contains("BadUserNamePassword"), "{err}");
    // The password is never in the agent's log.
    let lines = agent.stderr_lines.lock().unwrap();
    assert!(
        !lines.iter().any(|l| l.contains("broker-secret-1") || l.contains("not-the-password")),
        "a password was logged"
    );
}

// ----- rate limits -----------------------------------------------------------------------

/// POSTs over HTTP with curl: (status, headers in lower case, body).
fn curl_post(addr: SocketAddr, body: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", "--max-time", "30", "-H", "content-type: application/json"]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    cmd.args(["--data-binary", body]).arg(format!("http://{addr}/reports"));
    let out = cmd.output().expect("curl is installed (scripts/setup.sh)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_security_considerations_rate_limit_per_source_answers_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = agent_session(&agent).await;
    let r = edit(
        &mut nc,
        1,
        "<scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
         <collection><rate-limit><per-source><rate>1</rate><burst>3</burst></per-source></rate-limit></collection>",
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    let mut statuses = Vec::new();
    let mut limited = None;
    for seq in 1..=10u64 {
        let (st, h, b) = curl_post(sci, &report("sci-1", seq, 100 + seq as u32), &[]);
        statuses.push(st);
        if st == 429 {
            limited = Some((h, b));
            break;
        }
    }
    let (h, b) = limited.unwrap_or_else(|| panic!("no 429 after a burst of 3 at 1/s: {statuses:?}"));
    assert!(statuses[..3].iter().all(|s| *s == 200), "the burst is admitted: {statuses:?}");
    let retry: u64 = header(&h, "retry-after").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(retry >= 1, "Retry-After in whole seconds: {h:?}");
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["reason"], "rate-limited", "{b}");
    assert_eq!(v["retry-after"], retry, "{b}");
    let stats = get(&mut nc, 10, STATISTICS).await;
    assert!(rejected(&stats, "rate-limited") >= 1, "{stats}");
    let state = get(&mut nc, 11, RATE_STATE).await;
    assert!(refused(&state, "per-source", "http") >= 1, "{state}");
    assert!(count(&state, "sources-tracked") >= 1, "{state}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_security_considerations_per_sci_bucket_is_not_drainable_by_a_claimant() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = agent_session(&agent).await;
    let key = b"sci-1-shared-secret-0123";
    let b64 = {
        use base64ct::Encoding;
        base64ct::Base64::encode_string(key)
    };
    // sci-1 proves its reports; its bucket holds 2 reports and refills once in 1000 s.
    let r = edit(
        &mut nc,
        1,
        &format!(
            "<collection><authentication><credential><name>k1</name><type>hmac-sha256</type><key>{b64}</key></credential></authentication>\
             <rate-limit><per-sci><rate>0.001</rate><burst>2</burst></per-sci></rate-limit></collection>\
             <scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><credential-ref>k1</credential-ref></sci></scis>"
        ),
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    // An attacker claims sci-1 without its key, unsigned and with a forged proof, many
    // times: refused as unauthenticated, never as rate-limited.
    for seq in 1..=20u64 {
        let body = report("sci-1", seq, 1);
        let (st, b) = http_post(sci, "/reports", JSON, body.as_bytes()).await;
        assert!(st == 422 && b.contains("unauthenticated"), "{st} {b}");
        let forged = sign_hmac(b"not-the-key-of-sci-1!!!!", chrono::Utc::now().timestamp(), body.as_bytes());
        let (st, _) = http_post_with(sci, "/reports", JSON, &[("authorization", &forged)], body.as_bytes()).await;
        assert_eq!(st, 401);
    }
    // The real sci-1 still has its whole burst; then it is over its limit.
    let signed = |seq: u64| {
        let body = report("sci-1", 100 + seq, 500 + seq as u32);
        let proof = sign_hmac(key, chrono::Utc::now().timestamp(), body.as_bytes());
        (body, proof)
    };
    for seq in 1..=2 {
        let (body, proof) = signed(seq);
        let (st, _, b) = curl_post(sci, &body, &[("authorization", &proof)]);
        assert_eq!(st, 200, "report {seq} of the burst: {b}");
    }
    let (body, proof) = signed(3);
    let (st, h, b) = curl_post(sci, &body, &[("authorization", &proof)]);
    assert_eq!(st, 429, "{b}");
    assert!(header(&h, "retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| s >= 1), "{h:?}");
    assert!(b.contains("rate-limited") && b.contains("sci-1"), "{b}");
    let state = get(&mut nc, 10, RATE_STATE).await;
    assert_eq!(refused(&state, "per-sci", "http"), 1, "{state}");
    let stats = get(&mut nc, 11, STATISTICS).await;
    assert_eq!(rejected(&stats, "rate-limited"), 1, "{stats}");
    assert_eq!(rejected(&stats, "unauthenticated"), 40, "{stats}");
}

// ----- an MQTT flood ---------------------------------------------------------------------

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_security_considerations_mqtt_flood_leaves_memory_bounded_and_other_scis_served() {
    const MESSAGES: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _b = broker(dir.path(), port, None);
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = agent_session(&agent).await;
    let r = edit(
        &mut nc,
        1,
        &format!(
            "<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port>\
             <allow-plaintext>true</allow-plaintext></mqtt></collection>\
             <scis><sci><csci-id>flood</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci><sci><csci-id>sci-ok</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>"
        ),
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    let (up, state) = wait_for(&mut nc, 10, MQTT_STATE, |r| r.contains("<status>connected</status>")).await;
    assert!(up, "{state}");
    // Subscribed once a probe lands.
    let mut probes = 0;
    loop {
        probes += 1;
        publish(port, "cats/sci/flood/report", &report("flood", probes, 1));
        tokio::time::sleep(Duration::from_millis(200)).await;
        if count(&get(&mut nc, 500 + probes as u32, MQTT_STATE).await, "messages-received") > 0 {
            break;
        }
        assert!(probes < 100, "the agent never received a probe");
    }
    let base = count(&get(&mut nc, 1000, MQTT_STATE).await, "messages-received");
    let rss_before = rss_kib(agent.child.id());

    // The flood: batches of 20 reports (≈ 4 KiB) per message, QoS 1, one message per line
    // into `mosquitto_pub -l`, as fast as the broker takes them.
    let mut flooder = Command::new("mosquitto_pub")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-V",
            "mqttv5",
            "-q",
            "1",
            "-t",
            "cats/sci/flood/report",
            "-l",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("mosquitto_pub (mosquitto-clients) is installed by scripts/setup.sh");
    let mut stdin = flooder.stdin.take().unwrap();
    let flood = std::thread::spawn(move || {
        use std::io::Write;
        for m in 0..MESSAGES {
            let batch: Vec<String> = (0..20).map(|i| report("flood", 1000 + m * 20 + i, 7)).collect();
            writeln!(stdin, "[{}]", batch.join(",")).unwrap();
        }
        drop(stdin);
        flooder.wait().unwrap()
    });
    // Meanwhile another SCI reports over HTTP and is served.
    let mut served = 0;
    for seq in 1..=20u64 {
        let (st, b) = http_post(sci, "/reports", JSON, report("sci-ok", seq, 600 + seq as u32).as_bytes()).await;
        assert_eq!(st, 200, "sci-ok is served during the flood: {b}");
        served += 1;
    }
    let published = tokio::task::spawn_blocking(move || flood.join().unwrap()).await.unwrap();
    assert!(published.success(), "mosquitto_pub published the whole flood");
    // Every flood message reaches the agent, in its own time (the bound guards a hang).
    let want = base + MESSAGES;
    let mut got = 0;
    let mut peak = rss_before;
    for i in 0..1200 {
        got = count(&get(&mut nc, 2000 + i, MQTT_STATE).await, "messages-received");
        peak = peak.max(rss_kib(agent.child.id()));
        if got >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if got != want {
        let state = get(&mut nc, 8999, MQTT_STATE).await;
        let lines = agent.stderr_lines.lock().unwrap();
        let mqtt: Vec<&String> = lines.iter().filter(|l| l.contains("MQTT")).collect();
        panic!("{got} of {want} messages taken from the broker; state {state}; agent: {mqtt:#?}");
    }
    assert_eq!(served, 20);
    // The per-SCI limit refused most of the flood's reports, counted for MQTT.
    let state = get(&mut nc, 9000, RATE_STATE).await;
    assert!(refused(&state, "per-sci", "mqtt") > MESSAGES, "{state}");
    let stats = get(&mut nc, 9001, STATISTICS).await;
    assert!(rejected(&stats, "rate-limited") > MESSAGES, "{stats}");
    let cache = get(&mut nc, 9002, &cache_entry("sci-ok")).await;
    assert!(cache.contains("<gas>620</gas>"), "sci-ok's last report is in the cache: {cache}");
    // ≈ 80 MiB of payload went through; the agent held a bounded part of it at any time.
    let growth_mib = peak.saturating_sub(rss_before) / 1024;
    eprintln!("MQTT flood: {MESSAGES} messages, RSS {rss_before} KiB before, peak {peak} KiB");
    assert!(growth_mib < 48, "RSS grew by {growth_mib} MiB ({rss_before} KiB before, {peak} KiB at peak)");
}
