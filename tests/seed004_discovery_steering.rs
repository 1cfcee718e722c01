//! Seed 004 end to end through the real agent, for the parts of issue 13 on SCI discovery,
//! local steering and metric consistency:
//! - SCI State Machine ("ACTIVE: The SCI has been discovered") and SCI Collection Interface:
//!   opt-in discovery of SCIs that prove themselves with a trust domain (JWT), bounded,
//!   aged out, audited, shown in the operational state; a configured SCI always wins.
//! - Network Partition: "If the C-SMA is co-located with an Egress CATS-Forwarder, it MAY
//!   provide local steering decisions using cached metrics": the local-steering RPC over
//!   NETCONF and RESTCONF, NACM-checked, while the C-PS cannot be reached.
//! - Validator & Sanitizer consistency checks with the seed's Metric Cache table (LLM1 is
//!   served by one DEGRADED SCI with GAS 300), all the way to the reference C-PS.
//! - Policy Engine, cost and reputation policies: a reputation rule changes what is
//!   advertised; the services state shows cost, reputation and security label.

mod common;
mod cps_support;

use std::time::Duration;

use base64ct::{Base64, Encoding};
use cats_sma::cps::auth::hex;
use cats_sma::engine::auth::{jwt, JwtSigner};
use common::*;
use cps_support::*;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const CPS: &str = "urn:cats-sma:yang:cats-sma-cps";
const POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";
const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const JSON: &str = "application/json";
const HS_KEY: &[u8] = b"sci-hs256-secret-of-at-least-32-bytes";
const ISS: &str = "k8s-site";
const AUD: &str = "csma-1";

fn report(csci: &str, cs: &str, seq: u64, gas: u32, ct: u32, health: &str, extra: &str) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":{ct},"health":"{health}"{extra}}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

fn edit(inner: &str) -> String {
    format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">{inner}</cats-sma></config></edit-config>"
    )
}

async fn ok(nc: &mut RawSession, id: u32, body: &str) {
    let r = nc.rpc11(&rpc(id, body)).await;
    assert!(r.contains("<ok/>"), "{body}\n→ {r}");
}

fn sci(csci: &str, cs: &str) -> String {
    format!("<sci><csci-id>{csci}</csci-id><cs-id>{cs}</cs-id><authentication>none</authentication></sci>")
}

/// A C-PS peer (the reference C-PS at `addr`, or nobody) for these CS-IDs.
fn peer(addr: std::net::SocketAddr, cs_ids: &[&str]) -> String {
    let allowed: String = cs_ids.iter().map(|c| format!("<allowed-cs-id>{c}</allowed-cs-id>")).collect();
    format!(
        r#"<agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
        <policy xmlns="{POLICY}"><update-control><min-interval>0</min-interval></update-control></policy>
        <c-ps xmlns="{CPS}"><peer><name>ref</name><url>http://{addr}</url>{allowed}
          <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
          <backoff-initial>50</backoff-initial><backoff-max>500</backoff-max></peer></c-ps>"#,
        hex(SECRET)
    )
}

/// Polls a RESTCONF GET until `cond` holds on its body (a hang guard, not a timing test).
async fn wait_body(c: &Curl, path: &str, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = c.get(path);
        if cond(&r.body) {
            return r.body;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn service(body: &str, cs: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["cats-sma:services"]["service"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["cs-id"] == cs).cloned())
        .unwrap_or_default()
}

/// The seed's Metric Cache Structure table, as four reports.
const SEED_TABLE: [(&str, &str, u32, u32, &str); 4] = [
    ("188.3.67.3:67", "AR1", 400, 5, "HEALTHY"),
    ("188.3.67.3:68", "AR2", 100, 15, "HEALTHY"),
    ("188.3.67.4:69", "AR1", 600, 6, "HEALTHY"),
    ("188.3.67.4:70", "LLM1", 300, 12, "DEGRADED"),
];

async fn post_seed_table(sci_addr: std::net::SocketAddr) {
    for (csci, cs, gas, ct, health) in SEED_TABLE {
        let body = report(csci, cs, 1, gas, ct, health, "");
        let (status, reply) = http_post(sci_addr, "/reports", JSON, body.as_bytes()).await;
        assert_eq!(status, 200, "{csci}: {reply}");
    }
}

fn seed_scis() -> String {
    SEED_TABLE.iter().map(|(csci, cs, ..)| sci(csci, cs)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_validator_consistency_metric_cache_table_degraded_llm1_advertises_300() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let cps = start_cps(free_addr(), None).await;
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    ok(&mut nc, 1, &edit(&format!("{}<scis>{}</scis>", peer(cps.addr, &["AR1", "AR2", "LLM1"]), seed_scis()))).await;
    post_seed_table(agent.sci_addr.unwrap()).await;

    // The site aggregates in the operational state: AR1 = 400 + 600 at the GAS-weighted
    // computing time, AR2 alone, LLM1 served by its one DEGRADED SCI with GAS 300.
    let c = Curl::new(&agent);
    let body = wait_body(&c, "/data/cats-sma:cats-sma/services", "three services", |b| {
        service(b, "LLM1")["site-gas"] == 300 && service(b, "AR1")["site-gas"] == 1000
    })
    .await;
    let (ar1, ar2, llm1) = (service(&body, "AR1"), service(&body, "AR2"), service(&body, "LLM1"));
    assert_eq!(
        (ar1["computing-time"].as_u64(), ar1["health"].as_str()),
        (Some((400 * 5 + 600 * 6) / 1000), Some("healthy"))
    );
    assert_eq!((ar1["sci-count"].as_u64(), ar1["healthy-sci-count"].as_u64()), (Some(2), Some(2)));
    assert_eq!((ar2["site-gas"].as_u64(), ar2["computing-time"].as_u64()), (Some(100), Some(15)));
    assert_eq!((llm1["computing-time"].as_u64(), llm1["health"].as_str()), (Some(12), Some("degraded")));
    assert_eq!((llm1["sci-count"].as_u64(), llm1["healthy-sci-count"].as_u64()), (Some(1), Some(0)));
    assert_eq!(llm1["cats-sma-policy:reported-gas"], 300, "{body}");
    // The four cache rows as the seed's table has them.
    let cache = c.get("/data/cats-sma:cats-sma/metric-cache").json();
    for (csci, cs, gas, ct, health) in SEED_TABLE {
        let e =
            cache["cats-sma:metric-cache"]["entry"].as_array().unwrap().iter().find(|e| e["csci-id"] == csci).cloned();
        let e = e.unwrap_or_else(|| panic!("{csci} in {cache}"));
        assert_eq!(
            (e["cs-id"].as_str(), e["gas"].as_u64(), e["computing-time"].as_u64()),
            (Some(cs), Some(gas.into()), Some(ct.into()))
        );
        assert_eq!(e["health"].as_str(), Some(health.to_ascii_lowercase().as_str()));
    }
    // And what the C-PS receives: LLM1 with 300, degraded.
    wait_for("the three services at the C-PS", || {
        cst_services(&cps.state) == vec![("AR1".into(), 1000), ("AR2".into(), 100), ("LLM1".into(), 300)]
    })
    .await;

    // "If all SCIs are UNHEALTHY, Site_GAS MUST be 0": LLM1's SCI turns UNHEALTHY.
    let body = report("188.3.67.4:70", "LLM1", 2, 300, 12, "UNHEALTHY", "");
    let (status, reply) = http_post(agent.sci_addr.unwrap(), "/reports", JSON, body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    let body =
        wait_body(&c, "/data/cats-sma:cats-sma/services", "LLM1 at 0", |b| service(b, "LLM1")["site-gas"] == 0).await;
    assert_eq!(service(&body, "LLM1")["health"], "unhealthy", "{body}");
    wait_for("LLM1 at 0 at the C-PS", || cst_services(&cps.state).contains(&("LLM1".into(), 0))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_policy_engine_reputation_policy_changes_what_is_advertised() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let cps = start_cps(free_addr(), None).await;
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let scis = format!("<scis>{}{}</scis>", sci("sci-a", "AR1"), sci("sci-b", "AR1"));
    ok(&mut nc, 1, &edit(&format!("{}{scis}", peer(cps.addr, &["AR1"])))).await;
    let sci_addr = agent.sci_addr.unwrap();
    let extra =
        |rep: u8, cost: u32, label: u8| format!(r#","reputation":{rep},"cost":{cost},"security-label":{label}"#);
    for (csci, rep, cost, label) in [("sci-a", 9, 40, 7), ("sci-b", 3, 20, 8)] {
        let body = report(csci, "AR1", 1, 400, 5, "HEALTHY", &extra(rep, cost, label));
        let (status, reply) = http_post(sci_addr, "/reports", JSON, body.as_bytes()).await;
        assert_eq!(status, 200, "{reply}");
    }
    // The services state: the lowest reputation, cost and label of the contributing SCIs.
    let c = Curl::new(&agent);
    let body = wait_body(&c, "/data/cats-sma:cats-sma/services", "AR1", |b| service(b, "AR1")["site-gas"] == 800).await;
    let ar1 = service(&body, "AR1");
    assert_eq!(
        (ar1["reputation"].as_u64(), ar1["cost"].as_u64(), ar1["security-label"].as_u64()),
        (Some(3), Some(20), Some(7)),
        "{body}"
    );
    assert_eq!(ar1["cats-sma-policy:reported-reputation"], 3, "{body}");
    wait_for("AR1 800 with reputation 3 at the C-PS", || {
        let cst = cps.state.cst.lock().unwrap();
        cst.sites.get(SITE).and_then(|e| e.services.get("AR1")).is_some_and(|s| s.gas == 800 && s.reputation == Some(3))
    })
    .await;

    // A site-scope reputation policy: a site whose weakest instance has reputation under 5
    // advertises half its GAS; and a bound caps the reputation advertised at 2.
    let policy = format!(
        r#"<policy xmlns="{POLICY}"><rule><name>distrust</name><priority>1</priority>
           <condition>Reputation &lt; 5</condition><action>REDUCE Site_GAS BY 50%</action></rule>
           <transforms><bounds><metric>reputation</metric><max>2</max></bounds></transforms></policy>"#
    );
    ok(&mut nc, 2, &edit(&policy)).await;
    let body = wait_body(&c, "/data/cats-sma:cats-sma/services", "the policy applied", |b| {
        service(b, "AR1")["cats-sma-policy:reported-gas"] == 400
    })
    .await;
    let ar1 = service(&body, "AR1");
    assert_eq!(
        (ar1["site-gas"].as_u64(), ar1["cats-sma-policy:reported-reputation"].as_u64()),
        (Some(800), Some(2)),
        "{body}"
    );
    wait_for("AR1 400 with reputation 2 at the C-PS", || {
        let cst = cps.state.cst.lock().unwrap();
        cst.sites.get(SITE).and_then(|e| e.services.get("AR1")).is_some_and(|s| s.gas == 400 && s.reputation == Some(2))
    })
    .await;

    // The low-reputation SCI improves: the rule no longer fires, the full GAS is back.
    let body = report("sci-b", "AR1", 2, 400, 5, "HEALTHY", &extra(8, 20, 8));
    let (status, reply) = http_post(sci_addr, "/reports", JSON, body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    wait_for("AR1 back at 800 at the C-PS", || cst_services(&cps.state) == vec![("AR1".into(), 800)]).await;
}

fn nacm(extra_rules: &str) -> String {
    format!(
        r#"<nacm xmlns="{NACM}"><enable-nacm>true</enable-nacm>
        <groups><group><name>fwd</name><user-name>fwd</user-name></group></groups>
        <rule-list><name>fwd</name><group>fwd</group>{extra_rules}</rule-list></nacm>"#
    )
}

fn rpc_error_tag(reply: &str) -> String {
    reply.split("<error-tag>").nth(1).and_then(|r| r.split('<').next()).unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_network_partition_local_steering_rpc_over_netconf_and_restconf() {
    let dir = tempfile::tempdir().unwrap();
    let hash = cats_sma::mgmt::users::hash_password("fwd-pw").unwrap();
    let boot = dir.path().join("boot.toml");
    std::fs::write(&boot, format!("[[users]]\nname = \"fwd\"\npassword_hash = \"{hash}\"\n")).unwrap();
    let agent =
        start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0", "--config", boot.to_str().unwrap()]);
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    // The C-PS is on the other side of a partition: nothing listens at its address.
    let unreachable = free_addr();
    let scis = format!("<scis>{}{}</scis>", seed_scis(), sci("10.0.0.9:80", "IDLE"));
    ok(&mut nc, 1, &edit(&format!("{}{scis}", peer(unreachable, &["AR1", "AR2", "LLM1", "IDLE"])))).await;
    post_seed_table(agent.sci_addr.unwrap()).await;

    // NETCONF: AR1 goes to the SCI with the most GAS, with the metrics behind the choice.
    let steer = |cs: &str| format!("<local-steering xmlns=\"{CATS}\"><cs-id>{cs}</cs-id></local-steering>");
    let c = Curl::new(&agent);
    wait_body(&c, "/data/cats-sma:cats-sma/services", "the table", |b| service(b, "LLM1")["site-gas"] == 300).await;
    let r = nc.rpc11(&rpc(2, &steer("AR1"))).await;
    for want in [
        ">188.3.67.4:69</csci-id>",
        ">600</gas>",
        ">6</computing-time>",
        ">2</candidates>",
        ">1000</site-gas>",
        ">healthy</state>",
    ] {
        assert!(r.contains(want), "{want} in {r}");
    }
    // RESTCONF: LLM1, its one DEGRADED SCI.
    let r = c.send_json("POST", "/operations/cats-sma:local-steering", r#"{"cats-sma:input":{"cs-id":"LLM1"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let out = &r.json()["cats-sma:output"];
    assert_eq!(
        (out["csci-id"].as_str(), out["gas"].as_u64(), out["health"].as_str()),
        (Some("188.3.67.4:70"), Some(300), Some("degraded"))
    );
    // The C-PS was never reached: the decision came from the cache alone.
    let st = nc.rpc11(&rpc(3, &format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"/></cats-sma></filter></get>"))).await;
    assert!(!st.contains("<state>connected</state>"), "{st}");

    // Clear errors: an unknown CS-ID, and a known one with no SCI to offer.
    let r = nc.rpc11(&rpc(4, &steer("NOPE"))).await;
    assert_eq!(rpc_error_tag(&r), "invalid-value", "{r}");
    assert!(r.contains("<error-app-tag>unknown-cs-id</error-app-tag>"), "{r}");
    let r = nc.rpc11(&rpc(5, &steer("IDLE"))).await;
    assert_eq!(rpc_error_tag(&r), "resource-denied", "{r}");
    assert!(r.contains("<error-app-tag>no-sci-available</error-app-tag>"), "{r}");
    let r = c.send_json("POST", "/operations/cats-sma:local-steering", r#"{"cats-sma:input":{"cs-id":"NOPE"}}"#);
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "{}", r.body);
    let r = c.send_json("POST", "/operations/cats-sma:local-steering", r#"{"cats-sma:input":{}}"#);
    assert!(r.status == 400, "cs-id is mandatory: {}", r.body);

    // NACM: default-deny until the forwarder's user is permitted to exec it.
    ok(&mut nc, 6, &edit("").replace(&format!("<cats-sma xmlns=\"{CATS}\"></cats-sma>"), &nacm(""))).await;
    let fwd = Curl::new(&agent).as_user("fwd", "fwd-pw");
    let r = fwd.send_json("POST", "/operations/cats-sma:local-steering", r#"{"cats-sma:input":{"cs-id":"AR1"}}"#);
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    let mut fwd_nc = connect(agent.addr, "fwd", "fwd-pw").await.unwrap();
    fwd_nc.hello(true).await;
    let r = fwd_nc.rpc11(&rpc(1, &steer("AR1"))).await;
    assert_eq!(rpc_error_tag(&r), "access-denied", "{r}");
    let permit = "<rule><name>steer</name><module-name>cats-sma</module-name><rpc-name>local-steering</rpc-name>\
                  <access-operations>exec</access-operations><action>permit</action></rule>";
    ok(&mut nc, 7, &edit("").replace(&format!("<cats-sma xmlns=\"{CATS}\"></cats-sma>"), &nacm(permit))).await;
    let r = fwd.send_json("POST", "/operations/cats-sma:local-steering", r#"{"cats-sma:input":{"cs-id":"AR1"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cats-sma:output"]["csci-id"], "188.3.67.4:69");
    let r = fwd_nc.rpc11(&rpc(2, &steer("AR2"))).await;
    assert!(r.contains(">188.3.67.3:68</csci-id>"), "{r}");
}

/// A bearer token of the `k8s` trust domain for `sub` over `body`, granting `cs_ids`.
fn domain_token(sub: &str, body: &[u8], cs_ids: &[&str]) -> String {
    let mut c = jwt::claims(sub, ISS, AUD, body, chrono::Utc::now().timestamp(), 60);
    c["cs_ids"] = serde_json::json!(cs_ids);
    format!("Bearer {}", JwtSigner::hs256(HS_KEY).sign(&c))
}

fn discovery(enabled: bool, max: u32, retention: u32) -> String {
    format!(
        r#"<collection><authentication><credential><name>site-jwt</name><type>jwt</type>
             <key>{}</key><algorithm>HS256</algorithm><issuer>{ISS}</issuer><audience>{AUD}</audience>
           </credential></authentication></collection>
           <scis><discovery><enabled>{enabled}</enabled><max-discovered>{max}</max-discovered>
             <expected-interval>200</expected-interval><failed-retention>{retention}</failed-retention>
             <trust-domain><name>k8s</name><proof>jwt</proof><credential-ref>site-jwt</credential-ref>
               <cs-id-claim>cs_ids</cs-id-claim><csci-id-pattern>pod-[a-z0-9]+</csci-id-pattern>
               <cs-id>LLM1</cs-id><cs-id>AR1</cs-id></trust-domain></discovery></scis>"#,
        Base64::encode_string(HS_KEY)
    )
}

async fn post_as(addr: std::net::SocketAddr, sub: &str, cs: &str, seq: u64, claim: &[&str]) -> (u16, String) {
    let body = report(sub, cs, seq, 250, 9, "HEALTHY", "");
    let tok = domain_token(sub, body.as_bytes(), claim);
    http_post_with(addr, "/reports", JSON, &[("authorization", &tok)], body.as_bytes()).await
}

fn entry(c: &Curl, csci: &str) -> serde_json::Value {
    let r = c.get(&format!("/data/cats-sma:cats-sma/metric-cache/entry={csci}"));
    if r.status != 200 {
        return serde_json::Value::Null;
    }
    r.json()["cats-sma:entry"][0].clone()
}

fn rejected(c: &Curl, reason: &str) -> u64 {
    let s = c.get("/data/cats-sma:cats-sma/statistics").json();
    s["cats-sma:statistics"]["rejection"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["reason"].as_str().is_some_and(|x| x.ends_with(reason))).cloned())
        .and_then(|r| r["count"].as_str().and_then(|n| n.parse().ok()).or(r["count"].as_u64()))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_state_machine_discovery_by_jwt_trust_domain_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let cps = start_cps(free_addr(), None).await;
    let sci_addr = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    // Off by default: a valid token of the domain does not register anyone.
    ok(&mut nc, 1, &edit(&format!("{}{}", peer(cps.addr, &["LLM1", "AR1"]), discovery(false, 1, 0)))).await;
    // (With no trust domain, nothing verifies a token of an unknown subject.)
    let (status, body) = post_as(sci_addr, "pod-a1", "LLM1", 1, &["LLM1"]).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("no-credential"), "{body}");

    ok(&mut nc, 2, &edit(&discovery(true, 1, 0))).await;
    // No proof: unknown as before (secure by default).
    let plain = report("pod-a1", "LLM1", 1, 250, 9, "HEALTHY", "");
    let (status, body) = http_post(sci_addr, "/reports", JSON, plain.as_bytes()).await;
    assert!(status == 422 && body.contains("unknown-sci"), "{status} {body}");
    // A CS-ID the token's claim does not grant.
    let (status, body) = post_as(sci_addr, "pod-a1", "AR1", 1, &["LLM1"]).await;
    assert!(status == 422 && body.contains("unauthorized-cs-id"), "{status} {body}");
    // Proven, admitted by the pattern, granted LLM1: discovered, ACTIVE then HEALTHY.
    let first = report("pod-a1", "LLM1", 1, 250, 9, "HEALTHY", "");
    let first_tok = domain_token("pod-a1", first.as_bytes(), &["LLM1", "AR2"]);
    let (status, body) =
        http_post_with(sci_addr, "/reports", JSON, &[("authorization", &first_tok)], first.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    let c = Curl::new(&agent);
    let e = entry(&c, "pod-a1");
    assert_eq!(
        (e["discovered-by"].as_str(), e["discovery-proof"].as_str(), e["authentication"].as_str()),
        (Some("k8s"), Some("jwt"), Some("credential")),
        "{e}"
    );
    assert!(e["discovered-at"].is_string() && e["state"] == "healthy", "{e}");
    // Not in running: the registry entry is the engine's own.
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=pod-a1").status, 404);
    // Announced: the C-PS has LLM1 from the discovered pod.
    wait_for("LLM1 at the C-PS", || cst_services(&cps.state) == vec![("LLM1".into(), 250)]).await;
    // The bound: a second pod is refused with its own counted reason.
    let (status, body) = post_as(sci_addr, "pod-b2", "LLM1", 1, &["LLM1"]).await;
    assert!(status == 422 && body.contains("discovery-limit"), "{status} {body}");
    assert_eq!(rejected(&c, "discovery-limit"), 1);
    // The validator applies as for configured SCIs: a replayed message is refused.
    let (status, body) =
        http_post_with(sci_addr, "/reports", JSON, &[("authorization", &first_tok)], first.as_bytes()).await;
    assert!(status == 422 && body.contains("duplicate"), "{status} {body}");
    // Audited.
    let trail = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(
        trail.lines().any(|l| l.contains("\"sci-discovery\"") && l.contains("pod-a1") && l.contains("discovered")),
        "{trail}"
    );

    // A configured SCI of the same CSCI-ID wins: it replaces the discovered entry.
    ok(&mut nc, 3, &edit(&format!("<scis>{}</scis>", sci("pod-a1", "AR1")))).await;
    let e = entry(&c, "pod-a1");
    assert!(e["discovered-by"].is_null() && e["authentication"] == "none", "{e}");
    ok(&mut nc, 4, &format!("<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\" xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><scis><sci nc:operation=\"delete\"><csci-id>pod-a1</csci-id></sci></scis></cats-sma></config></edit-config>")).await;

    // Aging out: a discovered pod that stops reporting goes STALE, FAILED, and (retention
    // 0) leaves the registry; its metrics are withdrawn.
    let (status, body) = post_as(sci_addr, "pod-c3", "AR1", 1, &["AR1"]).await;
    assert_eq!(status, 200, "{body}");
    let cache = "/data/cats-sma:cats-sma/metric-cache";
    wait_body(&c, cache, "pod-c3 aged out", |b| !b.contains("pod-c3")).await;
    let trail = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(
        trail.lines().any(|l| l.contains("\"sci-discovery\"") && l.contains("pod-c3") && l.contains("aged-out")),
        "{trail}"
    );
    // Turning discovery off: an SCI discovered meanwhile is withdrawn.
    let (status, body) = post_as(sci_addr, "pod-d4", "AR1", 1, &["AR1"]).await;
    assert_eq!(status, 200, "{body}");
    ok(&mut nc, 5, &edit("<scis><discovery><enabled>false</enabled></discovery></scis>")).await;
    wait_body(&c, cache, "pod-d4 withdrawn", |b| !b.contains("pod-d4")).await;
    // A commit with an unusable pattern is refused.
    let bad = "<scis><discovery><trust-domain><name>k8s</name><csci-id-pattern>pod-(</csci-id-pattern></trust-domain></discovery></scis>";
    let r = nc.rpc11(&rpc(6, &edit(bad))).await;
    assert!(r.contains("<rpc-error>") && r.contains("csci-id-pattern"), "{r}");
    // So is one whose unbalanced parentheses would escape the anchors and match anything.
    let escape = "<scis><discovery><trust-domain><name>k8s</name><csci-id-pattern>pod-1)|(.*</csci-id-pattern></trust-domain></discovery></scis>";
    let r = nc.rpc11(&rpc(7, &edit(escape))).await;
    assert!(r.contains("<rpc-error>") && r.contains("csci-id-pattern"), "{r}");
}

/// A test CA (rcgen) and client certificates it issues by CommonName.
struct TestCa {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, "pod CA");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).unwrap();
        TestCa { cert, issuer: rcgen::Issuer::new(p, key) }
    }

    /// Writes `CN.pem` and `CN.key` into `dir` for a client certificate named `cn`.
    fn client(&self, dir: &std::path::Path, serial: u64, cn: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.serial_number = Some(rcgen::SerialNumber::from(serial));
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(30);
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (dir.join(format!("{cn}.pem")), dir.join(format!("{cn}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// POSTs `body` over HTTPS with curl and a client certificate; (status, body).
fn curl_post(
    url: &str,
    cacert: &std::path::Path,
    cert: &(std::path::PathBuf, std::path::PathBuf),
    body: &str,
) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(cacert)
        .arg("--cert")
        .arg(&cert.0)
        .arg("--key")
        .arg(&cert.1)
        .args(["-H", "content-type: application/json", "--data-binary", body, "-w", "\n%{http_code}"])
        .arg(url)
        .output()
        .expect("curl is installed (scripts/setup.sh)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_state_machine_discovery_by_client_certificate_pattern_end_to_end() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = TestCa::new();
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    // cert-to-name by the CA's fingerprint: every certificate it issued, by CommonName.
    let fp: String = sha2::Sha256::digest(ca.cert.der()).iter().map(|b| format!(":{b:02X}")).collect();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("startup.xml"),
        format!(
            "<cats-sma xmlns=\"{CATS}\"><collection><http><tls><client-ca-file>{}</client-ca-file>\
             <client-auth>required</client-auth><cert-to-name><id>1</id><fingerprint>04{fp}</fingerprint>\
             <map-type xmlns:x=\"urn:ietf:params:xml:ns:yang:ietf-x509-cert-to-name\">x:common-name</map-type>\
             </cert-to-name></tls></http></collection>\
             <scis><discovery><enabled>true</enabled><trust-domain><name>pods</name><proof>certificate</proof>\
             <csci-id-pattern>pod-[0-9]+</csci-id-pattern><cs-id>AR1</cs-id></trust-domain></discovery></scis></cats-sma>",
            dir.join("ca.pem").display()
        ),
    )
    .unwrap();
    let agent = start_agent_tls(&state, &["--sci-listen", "127.0.0.1:0"]);
    let url = format!("https://{}/reports", agent.sci_addr.unwrap());
    let cacert = state.join("sci-cert.pem");
    let pod = ca.client(dir, 1, "pod-1");
    let db = ca.client(dir, 2, "db-1");

    // A verified certificate whose name the domain's pattern refuses: not discovered.
    let (status, body) = curl_post(&url, &cacert, &db, &report("db-1", "AR1", 1, 400, 5, "HEALTHY", ""));
    assert!(status == 422 && body.contains("unknown-sci"), "{status} {body}");
    // The pattern fits, but the domain does not allow LLM1.
    let (status, body) = curl_post(&url, &cacert, &pod, &report("pod-1", "LLM1", 1, 400, 5, "HEALTHY", ""));
    assert!(status == 422 && body.contains("unauthorized-cs-id"), "{status} {body}");
    // The certificate cannot discover another name than its own.
    let (status, body) = curl_post(&url, &cacert, &pod, &report("pod-2", "AR1", 1, 400, 5, "HEALTHY", ""));
    assert!(status == 422 && body.contains("unauthenticated"), "{status} {body}");
    // Discovered.
    let (status, body) = curl_post(&url, &cacert, &pod, &report("pod-1", "AR1", 1, 400, 5, "HEALTHY", ""));
    assert_eq!(status, 200, "{body}");
    let c = Curl::new(&agent);
    let e = entry(&c, "pod-1");
    assert_eq!(
        (e["discovered-by"].as_str(), e["discovery-proof"].as_str(), e["authentication"].as_str()),
        (Some("pods"), Some("certificate"), Some("certificate")),
        "{e}"
    );
    let body = c.get("/data/cats-sma:cats-sma/services").body;
    assert_eq!(service(&body, "AR1")["site-gas"], 400, "{body}");
}
