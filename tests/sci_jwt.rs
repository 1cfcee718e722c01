//! SCI bearer tokens end to end against the real agent (seed 004, SCI Authentication: "The
//! SCI includes a signed token (e.g., JWT) in each report. The C-SMA validates the token
//! signature, expiration, and issuer"; Metric Integrity: a token is bound to its body;
//! Security Considerations: replay, "log all authentication failures").
//!
//! Keys are made at test time (aws-lc-rs, openssl); tokens travel over HTTP (our client,
//! curl, the openssl and Python recipes of docs/sci-protocol.md) and MQTT through a real
//! mosquitto. Each refusal answers 401 with its reason and counts as `unauthenticated`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64ct::{Base64, Base64UrlUnpadded, Encoding};
use cats_sma::engine::auth::{jwt, sign_jwt, JwtAlg, JwtSigner};
use common::mosquitto::{free_port, publish_with as publish, Broker};
use common::*;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const JSON: &str = "application/json";
const HS_KEY: &[u8] = b"sci-hs256-secret-of-at-least-32-bytes";
const ISS: &str = "site-1";
const AUD: &str = "csma-1";

fn report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

/// A `jwt` credential element.
fn credential(name: &str, algs: &[&str], key: Option<&[u8]>, jwks: Option<&Path>, extra: &str) -> String {
    let mut x = format!("<credential><name>{name}</name><type>jwt</type>");
    if let Some(k) = key {
        x += &format!("<key>{}</key>", Base64::encode_string(k));
    }
    for a in algs {
        x += &format!("<algorithm>{a}</algorithm>");
    }
    if let Some(p) = jwks {
        x += &format!("<jwks-file>{}</jwks-file>", p.display());
    }
    x + &format!("<issuer>{ISS}</issuer><audience>{AUD}</audience>{extra}</credential>")
}

fn edit(inner: &str) -> String {
    format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">{inner}</cats-sma></config></edit-config>"
    )
}

/// Writes a JWK Set with the public keys of `signers`, renamed into place (as an operator's
/// tooling would, so the agent never reads half a file).
fn write_jwks(path: &Path, signers: &[&JwtSigner]) {
    let keys: Vec<_> = signers.iter().map(|s| s.public_jwk().expect("an asymmetric key")).collect();
    write_atomic(path, serde_json::json!({ "keys": keys }).to_string().as_bytes());
}

fn write_atomic(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn statistic(nc: &mut RawSession, id: u32, reason: &str) -> u64 {
    let get =
        format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><statistics/></cats-sma></filter></get>");
    let r = nc.rpc11(&rpc(id, &get)).await;
    r.split(&format!(":{reason}</reason><count>"))
        .nth(1)
        .and_then(|t| t.split('<').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The counter once it reaches `want` (the engine counts asynchronously for MQTT), or its
/// value after 10 s.
async fn wait_statistic(nc: &mut RawSession, id: u32, reason: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = statistic(nc, id, reason).await;
        if got >= want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// POSTs a report with an authorization value; status and the JSON reply.
async fn post(sci: std::net::SocketAddr, proof: &str, body: &str) -> (u16, serde_json::Value) {
    let (st, b) = http_post_with(sci, "/reports", JSON, &[("authorization", proof)], body.as_bytes()).await;
    (st, serde_json::from_str(&b).unwrap_or(serde_json::Value::String(b)))
}

fn bearer(s: &JwtSigner, claims: &serde_json::Value) -> String {
    format!("Bearer {}", s.sign(claims))
}

/// A fenced code block of docs/sci-protocol.md, found by the marker comment before it.
fn doc_block(marker: &str) -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sci-protocol.md")).unwrap();
    let at = doc.find(&format!("<!-- {marker}")).unwrap_or_else(|| panic!("marker {marker} in docs/sci-protocol.md"));
    let rest = &doc[at..];
    let start = rest.find("```").unwrap();
    let body = &rest[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the command runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_jwt_over_http_accepted_and_each_refusal_has_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let hs = JwtSigner::hs256(HS_KEY);
    let rs = JwtSigner::generate(JwtAlg::RS256, "rs-1");
    let es = JwtSigner::generate(JwtAlg::ES256, "es-1");
    let ed = JwtSigner::generate(JwtAlg::EdDSA, "ed-1");
    // An SCI whose key openssl made, for the docs' shell recipe.
    let pem = dir.path().join("sci-ossl.pem");
    run(Command::new("openssl").args(["genpkey", "-algorithm", "ed25519", "-out"]).arg(&pem));
    let ossl = JwtSigner::from_pem(JwtAlg::EdDSA, &std::fs::read(&pem).unwrap(), "ossl-1").unwrap();
    write_jwks(&jwks, &[&rs, &es, &ed, &ossl]);

    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;

    // What the schema and the commit refuse.
    let bad = [
        (credential("x", &["RS256"], None, None, ""), "need a jwks-file"),
        (credential("x", &["HS256"], Some(b"sixteen-byte-key"), None, ""), "at least 32 bytes"),
        (credential("x", &["HS256"], None, None, ""), "allows HS256 needs a key"),
        (credential("x", &[], Some(HS_KEY), None, ""), "at least one algorithm"),
        (credential("x", &["HS256"], Some(HS_KEY), None, "").replace("<audience>csma-1</audience>", ""), "audience"),
        (credential("x", &["none"], Some(HS_KEY), None, ""), "none"),
        (
            format!(
                "<credential><name>x</name><type>jwt-hs256</type><key>{}</key></credential>",
                Base64::encode_string(HS_KEY)
            ),
            "jwt-hs256",
        ),
    ];
    for (i, (c, want)) in bad.iter().enumerate() {
        let r = nc
            .rpc11(&rpc(
                10 + i as u32,
                &edit(&format!("<collection><authentication>{c}</authentication></collection>")),
            ))
            .await;
        assert!(r.contains("<rpc-error>") && r.contains(want), "{want}: {r}");
    }

    let cfg = edit(&format!(
        "<collection><authentication>{}{}</authentication></collection><scis>\
         <sci><csci-id>sci-j</csci-id><cs-id>AR1</cs-id><credential-ref>j</credential-ref></sci>\
         <sci><csci-id>sci-r</csci-id><cs-id>AR1</cs-id><credential-ref>r</credential-ref></sci></scis>",
        credential("j", &["HS256", "RS256", "ES256", "EdDSA"], Some(HS_KEY), Some(&jwks), ""),
        credential("r", &["RS256"], None, Some(&jwks), ""),
    ));
    let r = nc.rpc11(&rpc(2, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");

    // Valid tokens of every algorithm are accepted.
    let mut seq = 0;
    for s in [&hs, &rs, &es, &ed] {
        seq += 1;
        let body = report("sci-j", seq, 100 + seq as u32);
        let (st, b) = post(sci, &sign_jwt(s, "sci-j", ISS, AUD, body.as_bytes()), &body).await;
        assert_eq!(st, 200, "{:?}: {b}", s.alg());
    }
    let body = report("sci-r", 1, 50);
    let (st, b) = post(sci, &sign_jwt(&rs, "sci-r", ISS, AUD, body.as_bytes()), &body).await;
    assert_eq!(st, 200, "{b}");

    // The docs' openssl + curl recipe (EdDSA), run as written.
    let script = dir.path().join("sci-post.sh");
    std::fs::write(&script, doc_block("sci-post.sh")).unwrap();
    seq += 1;
    let file = dir.path().join("report.json");
    std::fs::write(&file, report("sci-j", seq, 100 + seq as u32)).unwrap();
    let out = run(Command::new("sh")
        .arg(&script)
        .arg(format!("http://{sci}/reports"))
        .arg(&pem)
        .args(["ossl-1", "sci-j", ISS, AUD])
        .arg(&file));
    assert!(out.trim_end().ends_with("200") && out.contains("\"accepted\":1"), "{out}");
    // The docs' Python recipe (HS256), posted with curl.
    let py = dir.path().join("sci-token.py");
    std::fs::write(&py, doc_block("sci-token.py")).unwrap();
    let key_file = dir.path().join("sci-j.key");
    std::fs::write(&key_file, HS_KEY).unwrap();
    seq += 1;
    std::fs::write(&file, report("sci-j", seq, 100 + seq as u32)).unwrap();
    let token = run(Command::new("python3").arg(&py).arg(&key_file).args(["sci-j", ISS, AUD]).arg(&file));
    let out = run(Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}\n", "-H", "content-type: application/json", "-H"])
        .arg(format!("authorization: {}", token.trim()))
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("http://{sci}/reports")));
    assert!(out.trim_end().ends_with("200"), "{out}");

    // Refusals, each with its reason.
    let now = chrono::Utc::now().timestamp();
    seq += 1;
    let gas = 100 + seq as u32;
    let body = report("sci-j", seq, gas);
    let claims = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut c = jwt::claims("sci-j", ISS, AUD, body.as_bytes(), now, 60);
        edit(&mut c);
        c
    };
    let b64 = |v: &serde_json::Value| Base64UrlUnpadded::encode_string(v.to_string().as_bytes());
    let rsa_n = Base64UrlUnpadded::decode_vec(rs.public_jwk().unwrap()["n"].as_str().unwrap()).unwrap();
    let confused = JwtSigner::hs256(&rsa_n).with_kid(Some("rs-1"));
    let refusals: Vec<(&str, String, &str)> = vec![
        (
            "sci-j",
            bearer(&es, &claims(&|c| (c["iat"], c["exp"]) = ((now - 200).into(), (now - 140).into()))),
            "expired",
        ),
        ("sci-j", bearer(&ed, &claims(&|c| c["nbf"] = (now + 120).into())), "not-yet-valid"),
        ("sci-j", bearer(&rs, &claims(&|c| c["aud"] = "csma-2".into())), "wrong-audience"),
        ("sci-j", bearer(&hs, &claims(&|c| c["iss"] = "site-2".into())), "wrong-issuer"),
        ("sci-j", bearer(&es, &claims(&|c| c["exp"] = (now + 3600).into())), "lifetime-too-long"),
        ("sci-j", bearer(&JwtSigner::generate(JwtAlg::ES256, "es-2"), &claims(&|_| {})), "unknown-kid"),
        (
            "sci-j",
            format!("Bearer {}.{}.", b64(&serde_json::json!({"alg": "none"})), b64(&claims(&|_| {}))),
            "alg-not-allowed",
        ),
        // HS256 keyed with the RSA public key: never verified with JWKS material.
        ("sci-r", bearer(&confused, &claims(&|c| c["sub"] = "sci-r".into())), "alg-not-allowed"),
        ("sci-j", bearer(&confused, &claims(&|_| {})), "bad-signature"),
        ("sci-j", bearer(&JwtSigner::generate(JwtAlg::EdDSA, "ed-1"), &claims(&|_| {})), "bad-signature"),
    ];
    let mut refused = 0;
    for (csci, proof, reason) in &refusals {
        let body = if *csci == "sci-r" { report("sci-r", 2, 60) } else { body.clone() };
        let (st, b) = post(sci, proof, &body).await;
        assert_eq!(st, 401, "{reason}: {b}");
        let error = b["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(&format!("JWT refused ({reason})")), "{reason}: {b}");
        assert_eq!(b["reason"], "unauthenticated", "{b}");
        refused += 1;
    }
    // A valid token replayed with another body (other metrics, same SCI and sequence).
    let token = sign_jwt(&ed, "sci-j", ISS, AUD, body.as_bytes());
    let (st, b) = post(sci, &token, &body).await;
    assert_eq!(st, 200, "{b}");
    let swapped = body.replace(&format!("\"gas\":{gas}"), &format!("\"gas\":{}", gas + 1));
    assert_ne!(swapped, body);
    let (st, b) = post(sci, &token, &swapped).await;
    assert_eq!(st, 401, "{b}");
    assert!(b["error"].as_str().unwrap().starts_with("JWT refused (body-hash-mismatch)"), "{b}");
    refused += 1;

    // Counted, and in the audit trail with the reason.
    assert_eq!(wait_statistic(&mut nc, 100, "unauthenticated", refused).await, refused);
    let trail = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(trail.lines().any(|l| l.contains("sci-auth-failure") && l.contains("JWT refused (")), "{trail}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_jwks_file_rewritten_takes_effect_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let a = JwtSigner::generate(JwtAlg::EdDSA, "k-a");
    let b = JwtSigner::generate(JwtAlg::EdDSA, "k-b");
    write_jwks(&jwks, &[&a]);
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = |extra: &str| {
        edit(&format!(
            "<collection><authentication>{}</authentication></collection>\
             <scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><credential-ref>k</credential-ref></sci></scis>",
            credential("k", &["EdDSA"], None, Some(&jwks), extra)
        ))
    };
    assert!(nc.rpc11(&rpc(1, &cfg(""))).await.contains("<ok/>"));
    let try_with = |s: &JwtSigner, seq: u64| {
        let body = report("sci-1", seq, 10 * seq as u32);
        (sign_jwt(s, "sci-1", ISS, AUD, body.as_bytes()), body)
    };
    let (t, body) = try_with(&a, 1);
    assert_eq!(post(sci, &t, &body).await.0, 200);
    let (t, body) = try_with(&b, 2);
    let (st, r) = post(sci, &t, &body).await;
    assert!(st == 401 && r["error"].as_str().unwrap().contains("(unknown-kid)"), "{r}");

    // The operator rotates the key: B replaces A in the file; no commit, no restart.
    write_jwks(&jwks, &[&b]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let accepted = loop {
        let (t, body) = try_with(&b, 2);
        let (st, _) = post(sci, &t, &body).await;
        if st == 200 || Instant::now() > deadline {
            break st == 200;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(accepted, "a key added to the JWKS file is used without a restart");
    let (t, body) = try_with(&a, 3);
    let (st, r) = post(sci, &t, &body).await;
    assert!(st == 401 && r["error"].as_str().unwrap().contains("(unknown-kid)"), "the removed key: {r}");

    // A broken file, then a missing one: the keys read before stay, each logged.
    let logged = |needle: &'static str| {
        let lines = agent.stderr_lines.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if lines.lock().unwrap().iter().any(|l| l.contains(needle)) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        }
    };
    write_atomic(&jwks, b"{\"keys\": [");
    assert!(logged("JWKS file not usable").await);
    let (t, body) = try_with(&b, 3);
    assert_eq!(post(sci, &t, &body).await.0, 200);
    std::fs::remove_file(&jwks).unwrap();
    assert!(logged("JWKS file unreadable").await);
    let (t, body) = try_with(&b, 4);
    assert_eq!(post(sci, &t, &body).await.0, 200);

    // A commit re-reads the file at once.
    write_jwks(&jwks, &[&a]);
    assert!(nc.rpc11(&rpc(2, &cfg("<max-lifetime>120</max-lifetime>"))).await.contains("<ok/>"));
    let (t, body) = try_with(&a, 5);
    let (st, r) = post(sci, &t, &body).await;
    assert_eq!(st, 200, "{r}");
}

// ----- MQTT -----------------------------------------------------------------------------

fn broker(dir: &Path) -> (Broker, u16) {
    let port = free_port();
    (common::mosquitto::broker(dir, port), port)
}

async fn cache_gas(nc: &mut RawSession, id: u32, csci: &str) -> Option<String> {
    let get = format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><metric-cache><entry><csci-id>{csci}</csci-id><gas/></entry></metric-cache></cats-sma></filter></get>");
    let reply = nc.rpc11(&rpc(id, &get)).await;
    reply.split("<gas>").nth(1).and_then(|r| r.split('<').next()).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_jwt_over_mqtt_is_bound_to_the_payload() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, port) = broker(dir.path());
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = edit(&format!(
        "<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port><allow-plaintext>true</allow-plaintext></mqtt>\
         <authentication>{}</authentication></collection>\
         <scis><sci><csci-id>sci-m</csci-id><cs-id>AR1</cs-id><credential-ref>m</credential-ref></sci></scis>",
        credential("m", &["HS256"], Some(HS_KEY), None, "")
    ));
    let r = nc.rpc11(&rpc(1, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");
    let hs = JwtSigner::hs256(HS_KEY);
    let topic = "cats/sci/sci-m/report";
    // The subscription is made asynchronously: publish until a report lands.
    let mut landed = None;
    let mut id = 100;
    for seq in 1..50u64 {
        let body = report("sci-m", seq, 400);
        publish(port, topic, &body, &sign_jwt(&hs, "sci-m", ISS, AUD, body.as_bytes()));
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            id += 1;
            if cache_gas(&mut nc, id, "sci-m").await.as_deref() == Some("400") {
                landed = Some(seq);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if landed.is_some() {
            break;
        }
    }
    let seq = landed.expect("a token-carrying report published to the broker reaches the metric cache");
    let before = statistic(&mut nc, 2, "unauthenticated").await;

    // The same token on another payload: refused and counted, the cache unchanged.
    let body = report("sci-m", seq + 1, 401);
    let token = sign_jwt(&hs, "sci-m", ISS, AUD, body.as_bytes());
    publish(port, topic, &body.replace("\"gas\":401", "\"gas\":999"), &token);
    assert_eq!(wait_statistic(&mut nc, 3, "unauthenticated", before + 1).await, before + 1);
    // A token larger than 8 KiB (the broker would carry up to the packet size).
    publish(port, topic, &body, &format!("Bearer {}", "A".repeat(9000)));
    assert_eq!(wait_statistic(&mut nc, 4, "unauthenticated", before + 2).await, before + 2);
    assert_eq!(cache_gas(&mut nc, 5, "sci-m").await.as_deref(), Some("400"));
    // The right payload with its token still goes through.
    publish(port, topic, &body, &token);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut gas = None;
    while Instant::now() < deadline {
        id += 1;
        gas = cache_gas(&mut nc, id, "sci-m").await;
        if gas.as_deref() == Some("401") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gas.as_deref(), Some("401"));
}
