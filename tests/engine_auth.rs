//! SCI authentication end to end (seed 004, SCI Authentication and Security
//! Considerations): credentials configured over NETCONF, HMAC-signed and JWT-carrying HTTP
//! reports accepted, unsigned / forged / stale / expired ones refused with a reason, counted
//! in the operational state and notified as auth-failure; an authenticated SCI may report
//! only for itself; the secrets are hidden from users without an explicit NACM permit.

mod common;

use cats_sma::engine::auth::{jwt, sign_hmac, sign_jwt, JwtSigner};
use common::*;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const JSON: &str = "application/json";
const KEY_A: &[u8] = b"sci-a-shared-secret-0123";
const KEY_B: &[u8] = b"sci-b-token-signing-key-32-bytes!";

fn report(csci: &str, cs: &str, seq: u64, gas: i64) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{now}","gas":{gas},"computing-time":7,"health":"HEALTHY"}}"#
    )
}

fn b64(k: &[u8]) -> String {
    use base64ct::Encoding;
    base64ct::Base64::encode_string(k)
}

#[tokio::test(flavor = "multi_thread")]
async fn sci_reports_are_authenticated_per_credential() {
    let dir = tempfile::tempdir().unwrap();
    // Auth failures are aggregated per source (issue 11): a one-second window keeps the
    // wait for the summary short.
    let boot = dir.path().join("boot.toml");
    std::fs::write(&boot, "[peer_limits]\nauth_failure_window_secs = 1\n").unwrap();
    let agent =
        start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0", "--config", boot.to_str().unwrap()]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    // A second session listens for auth-failure notifications.
    let mut events = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    events.hello(true).await;
    let sub =
        events.rpc11(&rpc(1, "<create-subscription xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\"/>")).await;
    assert!(sub.contains("<ok/>"), "{sub}");

    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
         <collection><authentication>\
           <credential><name>a-psk</name><type>hmac-sha256</type><key>{}</key></credential>\
           <credential><name>b-jwt</name><type>jwt</type><key>{}</key><algorithm>HS256</algorithm>\
           <issuer>site-1</issuer><audience>csma-1</audience></credential>\
         </authentication></collection><scis>\
         <sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id><credential-ref>a-psk</credential-ref></sci>\
         <sci><csci-id>sci-b</csci-id><cs-id>AR1</cs-id><credential-ref>b-jwt</credential-ref></sci>\
         <sci><csci-id>sci-c</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma></config></edit-config>",
        b64(KEY_A),
        b64(KEY_B)
    );
    let r = nc.rpc11(&rpc(1, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");

    // A credential-ref naming no credential is refused by the schema (leafref).
    let dangling = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\"><scis>\
         <sci><csci-id>sci-d</csci-id><cs-id>AR1</cs-id><credential-ref>nope</credential-ref></sci>\
         </scis></cats-sma></config></edit-config>"
    );
    let r = nc.rpc11(&rpc(2, &dangling)).await;
    assert!(r.contains("<rpc-error>") && r.contains("data-missing"), "{r}");

    let now = chrono::Utc::now().timestamp();
    // HMAC: signed over timestamp and body, accepted.
    let body = report("sci-a", "AR1", 1, 400);
    let proof = sign_hmac(KEY_A, now, body.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &proof)], body.as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    // Unsigned: the SCI has a credential, so the report is refused as unauthenticated.
    let body = report("sci-a", "AR1", 2, 410);
    let (st, b) = http_post(sci, "/reports", JSON, body.as_bytes()).await;
    assert_eq!(st, 422, "{b}");
    assert!(b.contains("unauthenticated") && b.contains("a-psk"), "{b}");
    // Signed with another key, or tampered after signing: 401 with a reason.
    let forged = sign_hmac(b"not-the-key-of-sci-a!!!", now, body.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &forged)], body.as_bytes()).await;
    assert_eq!(st, 401, "{b}");
    assert!(b.contains("does not verify"), "{b}");
    let signed = sign_hmac(KEY_A, now, body.as_bytes());
    let tampered = report("sci-a", "AR1", 2, 99999);
    let (st, _) = http_post_with(sci, "/reports", JSON, &[("authorization", &signed)], tampered.as_bytes()).await;
    assert_eq!(st, 401);
    // A message signed 31 s ago is outside the ±30 s window.
    let stale = sign_hmac(KEY_A, now - 31, body.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &stale)], body.as_bytes()).await;
    assert_eq!(st, 401, "{b}");
    assert!(b.contains("window"), "{b}");
    // An authenticated SCI reporting for another SCI: that report is refused.
    let batch = format!("[{},{}]", report("sci-a", "AR1", 3, 420), report("sci-c", "AR1", 1, 10));
    let proof = sign_hmac(KEY_A, now, batch.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &proof)], batch.as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    assert!(b.contains("\"accepted\":1") && b.contains("message is from sci-a but reports for sci-c"), "{b}");

    // JWT: a valid token for sci-b is accepted; expired, wrong issuer or for another SCI not.
    let body = report("sci-b", "AR1", 1, 300);
    let b_key = JwtSigner::hs256(KEY_B);
    let token = sign_jwt(&b_key, "sci-b", "site-1", "csma-1", body.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &token)], body.as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    let body = report("sci-b", "AR1", 2, 310);
    let bearer = |s: &JwtSigner, iss: &str, iat: i64| {
        format!("Bearer {}", s.sign(&jwt::claims("sci-b", iss, "csma-1", body.as_bytes(), iat, 60)))
    };
    for bad in [
        bearer(&b_key, "site-1", now - 200),
        bearer(&b_key, "site-2", now),
        bearer(&JwtSigner::hs256(b"not-the-key-of-sci-b-at-all-32-bytes"), "site-1", now),
    ] {
        let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &bad)], body.as_bytes()).await;
        assert_eq!(st, 401, "{b}");
    }
    // A token for sci-b carrying sci-a's report: refused (reports only for itself).
    let other = report("sci-a", "AR1", 9, 1);
    let token = sign_jwt(&b_key, "sci-b", "site-1", "csma-1", other.as_bytes());
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", &token)], other.as_bytes()).await;
    assert_eq!(st, 422, "{b}");

    // Secure by default: an SCI without a credential-ref (and without a client
    // certificate) has its unproven reports refused...
    let (st, b) = http_post(sci, "/reports", JSON, report("sci-c", "AR1", 2, 20).as_bytes()).await;
    assert_eq!(st, 422, "{b}");
    assert!(b.contains("has no credential-ref") && b.contains("authentication none"), "{b}");
    // ...until the operator marks it 'authentication none' (lab use), which shows in the
    // metric cache.
    let edit = |body: &str| {
        format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\"><scis>{body}</scis>\
             </cats-sma></config></edit-config>"
        )
    };
    let r = nc.rpc11(&rpc(3, &edit("<sci><csci-id>sci-c</csci-id><authentication>none</authentication></sci>"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (st, b) = http_post(sci, "/reports", JSON, report("sci-c", "AR1", 3, 30).as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    // A credential is never silently ignored: 'none' beside a credential-ref is refused.
    let r = nc.rpc11(&rpc(5, &edit("<sci><csci-id>sci-a</csci-id><authentication>none</authentication></sci>"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("cannot be 'authentication none'"), "{r}");
    let cache = "<get-data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-nmda\" \
                 xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><datastore>ds:operational</datastore>\
                 <xpath-filter xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:metric-cache</xpath-filter></get-data>";
    let r = nc.rpc11(&rpc(6, cache)).await;
    for (id, how) in [("sci-a", "credential"), ("sci-b", "credential"), ("sci-c", "none")] {
        let entry = r.split("<entry>").find(|e| e.contains(&format!("<csci-id>{id}</csci-id>"))).unwrap_or_default();
        assert!(entry.contains(&format!("<authentication>{how}</authentication>")), "{id}: {r}");
    }

    // Every failure is notified (seed 004: all authentication failures logged): the first
    // from this source at once, the others summed into one summary per window (issue 11).
    let got = String::from_utf8_lossy(&events.read_until(b"</auth-failure>").await).to_string();
    assert!(got.contains("<auth-failure") && got.contains("<source-address>127.0.0.1</source-address>"), "{got}");
    assert!(got.contains("<claimed-csci-id>sci-a</claimed-csci-id>") && got.contains("<transport>http</transport>"));
    assert!(got.contains("a-psk") && !got.contains("aggregated-count"), "{got}");
    let got = String::from_utf8_lossy(&events.read_until(b"</aggregated-count>").await).to_string();
    assert!(got.contains("<aggregated-count>9</aggregated-count>"), "{got}");

    // Counted by reason in the operational state: 1 unsigned + 3 bad HMAC + 1 foreign
    // report + 3 bad tokens + 1 token for another SCI + 1 unproven sci-c = 10.
    let get = "<get-data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-nmda\" \
               xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><datastore>ds:operational</datastore>\
               <xpath-filter xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:statistics</xpath-filter></get-data>";
    let r = nc.rpc11(&rpc(4, get)).await;
    assert!(r.contains(":unauthenticated</reason><count>10</count>"), "{r}");
}

fn report_at(csci: &str, seq: u64, at: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":50,"computing-time":7,"health":"HEALTHY"}}"#,
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_004_metric_integrity_sequence_poisoning_is_harmless() {
    // Issue 12: "an unauthenticated sender can post seq 2^64-1 for such an SCI and lock
    // the real SCI out for good". Against the real agent over HTTP.
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("sci listener");
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
         <collection><authentication>\
           <credential><name>a-psk</name><type>hmac-sha256</type><key>{}</key></credential>\
         </authentication></collection><scis>\
         <sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id><credential-ref>a-psk</credential-ref></sci>\
         <sci><csci-id>sci-lab</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>\
         </scis></cats-sma></config></edit-config>",
        b64(KEY_A)
    );
    assert!(nc.rpc11(&rpc(1, &cfg)).await.contains("<ok/>"));
    let t0 = chrono::Utc::now();
    let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
    let signed = |body: &str| sign_hmac(KEY_A, chrono::Utc::now().timestamp(), body.as_bytes());

    // An authenticated SCI: an unproven seq 2^64-1 claiming to be sci-a is refused, so it
    // changes nothing; sci-a goes on at seq 1, 2.
    let poison = report_at("sci-a", u64::MAX, at(0));
    let (st, b) = http_post(sci, "/reports", JSON, poison.as_bytes()).await;
    assert_eq!(st, 422, "{b}");
    for (seq, ms) in [(1, 10), (2, 20)] {
        let body = report_at("sci-a", seq, at(ms));
        let (st, b) =
            http_post_with(sci, "/reports", JSON, &[("authorization", &signed(&body))], body.as_bytes()).await;
        assert_eq!(st, 200, "seq {seq}: {b}");
    }

    // An 'authentication none' SCI, where anyone can get a report accepted: seq 2^64-1 is
    // accepted once, and the real SCI's next report (newer timestamp, seq 3) still is.
    let (st, b) = http_post(sci, "/reports", JSON, report_at("sci-lab", 2, at(0)).as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = http_post(sci, "/reports", JSON, report_at("sci-lab", u64::MAX, at(10)).as_bytes()).await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = http_post(sci, "/reports", JSON, report_at("sci-lab", 3, at(20)).as_bytes()).await;
    assert_eq!(st, 200, "the poisoned sequence must not lock the SCI out: {b}");
    // Replays stay refused: the same report again, and the poisoned one (older time).
    let (st, b) = http_post(sci, "/reports", JSON, report_at("sci-lab", 3, at(20)).as_bytes()).await;
    assert!(st == 422 && b.contains("duplicate"), "{b}");
    let (st, b) = http_post(sci, "/reports", JSON, report_at("sci-lab", u64::MAX, at(10)).as_bytes()).await;
    assert!(st == 422 && b.contains("out-of-order"), "{b}");

    let get = "<get-data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-nmda\" \
               xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><datastore>ds:operational</datastore>\
               <xpath-filter xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:statistics</xpath-filter></get-data>";
    let r = nc.rpc11(&rpc(2, get)).await;
    assert!(r.contains("<sequence-restarts>1</sequence-restarts>"), "{r}");
}
