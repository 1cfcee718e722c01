//! Seed 004, Metric Integrity and C-PS Authentication, with the real binary and the real
//! reference C-PS over HTTP: every report is signed with the C-SMA's private key (a detached
//! Ed25519 JWS the C-PS verifies against the public key the agent shows in its operational
//! state), a tampered or replayed one is refused, and in PSK mode a reply the C-PS did not
//! sign changes nothing in the agent (a spoofed acknowledgement cannot make it drop its
//! buffered updates).

mod common;
mod cps_support;

use std::time::Duration;

use cats_sma::cps::auth::hex;
use cats_sma::cps::reference::{CpsConfig, CpsState};
use cats_sma::cps::signing::{RequestBinding, SigningKey, H_JWS};
use cats_sma::cps::transport::{Request, Transport};
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use cps_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn peer_config(url: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis><sci><csci-id>188.3.67.3:67</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
            <min-interval>0</min-interval></update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer>
            <name>ref</name><url>{url}</url><allowed-cs-id>AR1</allowed-cs-id>
            <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
            <backoff-initial>50</backoff-initial><backoff-max>200</backoff-max>
          </peer></c-ps>
        </cats-sma></config></edit-config>"#,
        hex(SECRET)
    )
}

fn report(seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"188.3.67.3:67","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

async fn cps_state(s: &mut RawSession, id: u32) -> String {
    s.rpc11(&rpc(
        id,
        r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
           <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"/></cats-sma></filter></get>"#,
    ))
    .await
}

fn between<'a>(s: &'a str, open: &str, close: &str) -> &'a str {
    s.split(open).nth(1).and_then(|r| r.split(close).next()).unwrap_or_else(|| panic!("no {open} in {s}"))
}

/// An empty report from the agent's C-SMA id with a valid PSK MAC (as with a leaked PSK)
/// and, when `jws_key` is given, a detached JWS made with that key. Its nonce is far above
/// the agent's: had the C-PS recorded it on the good PSK MAC alone, every later report of
/// the agent would be refused as replayed.
fn psk_signed_request(jws_key: Option<&SigningKey>) -> Request {
    let body = br#"{"csma-id":"csma-a","site-id":"site-a","reports":[]}"#.to_vec();
    let now = chrono::Utc::now().timestamp_millis();
    let nonce = chrono::Utc::now().timestamp_micros() as u64 + 1_000_000_000_000;
    let b = RequestBinding {
        method: "POST".into(),
        path: "/cats/metrics".into(),
        csma_id: CSMA.into(),
        timestamp: now,
        nonce,
    };
    let mac = cats_sma::cps::auth::sign(
        SECRET,
        &cats_sma::cps::auth::Signed { method: "POST", path: "/cats/metrics", csma_id: CSMA, timestamp_ms: now, nonce },
        &body,
    );
    let mut headers = vec![
        ("x-cats-csma-id", CSMA.into()),
        ("content-type", "application/json".into()),
        ("x-cats-key-id", KEY_ID.into()),
        ("x-cats-timestamp", now.to_string()),
        ("x-cats-nonce", nonce.to_string()),
        ("x-cats-signature", mac),
    ];
    if let Some(k) = jws_key {
        headers.push((H_JWS, k.sign(&b, &body)));
    }
    Request { method: "POST", path: "/cats/metrics".into(), headers, body }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_metric_integrity_reports_are_signed_with_the_csma_private_key() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;

    // The public key, as an operator exports it from the operational state.
    let r = cps_state(&mut s, 1).await;
    assert!(r.contains("<algorithm>EdDSA</algorithm>"), "{r}");
    let jwk: serde_json::Value =
        serde_json::from_str(&between(&r, "<jwk>", "</jwk>").replace("&quot;", "\"")).expect("the JWK is JSON");
    assert_eq!(jwk["kid"].as_str(), Some(between(&r, "<key-id>", "</key-id>")));
    let x = jwk["x"].as_str().unwrap().to_owned();
    // The private key stays in the state directory, private.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join(cats_sma::cps::signing::KEY_FILE)).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // A C-PS that trusts that key and requires signatures.
    let cfg = CpsConfig { trusted_csma_keys: vec![x], ..cps_config() };
    let cps = start_cps(free_addr(), Some(CpsState::new(cfg).unwrap())).await;
    let r = s.rpc11(&rpc(2, &peer_config(&format!("http://{}", cps.addr)))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, body) = http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    wait_for("AR1 in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 400)]).await;
    for reason in ["bad-signature", "malformed-auth", "unknown-key", "replayed-nonce", "stale-timestamp"] {
        assert_eq!(cps.state.refused(reason), 0, "{reason}");
    }

    // Someone else's key, with a valid PSK MAC (a leaked PSK): refused.
    let t = transport(cps.addr);
    let other = SigningKey::ephemeral();
    let r = t.send(psk_signed_request(Some(&other))).await.unwrap();
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("unknown-key"));
    // No JWS at all: refused.
    let bare = psk_signed_request(None);
    let r = t.send(bare).await.unwrap();
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));

    // The agent still gets through afterwards.
    let (status, _) = http_post(sci, "/reports", "application/json", report(2, 300).as_bytes()).await;
    assert_eq!(status, 200);
    wait_for("the change in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 300)]).await;
}

/// A C-PS impostor on the C-PS's address: it answers every request with an acknowledgement
/// of everything (acked-sequence 2^64-1) and a reply signature it cannot compute.
async fn impostor() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let body = if head.starts_with("GET") {
                        format!(
                            r#"{{"site-id":"{SITE}","csma-id":"{CSMA}","acked-sequence":18446744073709551615,"full-sync-requested":false,"services":[]}}"#
                        )
                    } else {
                        r#"{"acked-sequence":18446744073709551615,"full-sync-requested":false}"#.to_owned()
                    };
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-cats-reply-signature: {}\r\ncontent-length: {}\r\n\r\n{body}",
                        "00".repeat(32),
                        body.len()
                    );
                    if c.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_cps_authentication_a_spoofed_psk_reply_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let (addr, fake) = impostor().await;
    let r = s.rpc11(&rpc(1, &peer_config(&format!("http://{addr}")))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, body) = http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    assert_eq!(status, 200, "{body}");

    // The impostor's "everything acknowledged" is not believed: the session backs off with
    // the reason, nothing is acknowledged and the update stays buffered.
    let mut tries = 0;
    let r = loop {
        let r = cps_state(&mut s, 2 + tries).await;
        let buffered = r.contains("<buffered-updates>")
            && between(&r, "<buffered-updates>", "</buffered-updates>").parse::<u64>().unwrap() >= 1;
        if r.contains("not authenticated") && buffered {
            break r;
        }
        tries += 1;
        assert!(tries < 200, "the spoofed reply was not refused: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!r.contains("<last-acked-sequence>"), "a spoofed acknowledgement was believed: {r}");
    assert!(!r.contains("<state>connected</state>"), "{r}");
    let buffered: u64 = between(&r, "<buffered-updates>", "</buffered-updates>").parse().unwrap();
    assert!(buffered >= 1, "{r}");
    assert!(r.contains("<dropped-updates>0</dropped-updates>"), "{r}");
    fake.abort();

    // The real C-PS comes up on another address: the buffered update reaches it.
    let cps = start_cps(free_addr(), None).await;
    let r = s.rpc11(&rpc(900, &peer_config(&format!("http://{}", cps.addr)))).await;
    assert!(r.contains("<ok/>"), "{r}");
    wait_for("AR1 at the real C-PS", || cst_services(&cps.state) == vec![("AR1".into(), 400)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_metric_integrity_reports_can_be_signed_with_ecdsa_p256() {
    // Seed 004, Metric Integrity: "signed using the C-SMA's private key" — here a P-256 key
    // ([cps] signing_algorithm = "ecdsa-p256"), JWS ES256, verified by the reference C-PS
    // configured with the JWK the agent shows.
    let dir = tempfile::tempdir().unwrap();
    let boot = dir.path().join("boot.toml");
    std::fs::write(&boot, "[cps]\nsigning_algorithm = \"ecdsa-p256\"\n").unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0", "-c", boot.to_str().unwrap()]);
    let sci = agent.sci_addr.unwrap();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let r = cps_state(&mut s, 1).await;
    assert!(r.contains("<algorithm>ES256</algorithm>"), "{r}");
    let jwk = between(&r, "<jwk>", "</jwk>").replace("&quot;", "\"");
    assert!(dir.path().join(cats_sma::cps::signing::KEY_FILE_P256).exists());
    let cfg = CpsConfig { trusted_csma_keys: vec![jwk], ..cps_config() };
    let cps = start_cps(free_addr(), Some(CpsState::new(cfg).unwrap())).await;
    let r = s.rpc11(&rpc(2, &peer_config(&format!("http://{}", cps.addr)))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, body) = http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    wait_for("AR1 in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 400)]).await;
    // A report signed by another key (an Ed25519 one) is refused.
    let t = transport(cps.addr);
    let r = t.send(psk_signed_request(Some(&SigningKey::ephemeral()))).await.unwrap();
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    let (status, _) = http_post(sci, "/reports", "application/json", report(2, 300).as_bytes()).await;
    assert_eq!(status, 200);
    wait_for("the change in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 300)]).await;
}
