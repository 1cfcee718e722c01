//! Seed 003 (draft-ietf-dime-agent-overload-11, RFC 8581 on RFC 7683 DOIC) on the C-SMA →
//! C-PS hop, through the running agent: the agent is the reacting node, the reference C-PS
//! (in this process, on loopback) the reporting node. Peers are configured over NETCONF,
//! SCI reports arrive over HTTP; what the agent did is read from `overload-control/state`,
//! the `overload-state-change` notifications and what the C-PS received.

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::sync::Arc;

use cats_sma::cps::auth::hex;
use cats_sma::cps::reference::CpsState;
use common::{connect, http_post, leaf_after, rpc, start_agent, AgentProcess, RawSession, PASSWORD};
use cps_support::*;

const SCI: &str = "188.3.67.3:67";

fn config(peers: &str, overload: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis><sci><csci-id>{SCI}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
            <min-interval>0</min-interval></update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps">{peers}</c-ps>
          <overload-control xmlns="urn:cats-sma:yang:cats-sma-overload">{overload}</overload-control>
        </cats-sma></config></edit-config>"#
    )
}

fn peer(name: &str, url: &str, extra: &str) -> String {
    format!(
        r#"<peer><name>{name}</name><url>{url}</url><allowed-cs-id>AR1</allowed-cs-id>
           <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
           <backoff-initial>50</backoff-initial><backoff-max>200</backoff-max>{extra}</peer>"#,
        hex(SECRET)
    )
}

fn report(seq: u64, gas: u32, health: &str) -> String {
    format!(
        r#"{{"csci-id":"{SCI}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"{health}"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

const GET_OVERLOAD: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <overload-control xmlns="urn:cats-sma:yang:cats-sma-overload"/>
    <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"/></cats-sma></filter></get>"#;

/// Polls the overload and C-PS state until `cond` holds (30 s guard against a hang).
async fn wait_state(s: &mut RawSession, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = s.rpc11(&rpc(50, GET_OVERLOAD)).await;
        if cond(&r) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Polls like [`wait_state`] until `cond` holds on two reads 300 ms apart that agree on
/// `peer`'s counters (nothing is still on its way).
async fn wait_settled(s: &mut RawSession, what: &str, peer: &str, cond: impl Fn(&str) -> bool) -> String {
    let counters = |r: &str| {
        leaf_after(peer_state(r, peer), "<counters>", "throttled").unwrap_or_default()
            + "/"
            + &leaf_after(peer_state(r, peer), "<counters>", "abatable-updates").unwrap_or_default()
            + "/"
            + &leaf_after(peer_state(r, peer), "<counters>", "diverted").unwrap_or_default()
    };
    loop {
        let a = wait_state(s, what, &cond).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let b = s.rpc11(&rpc(53, GET_OVERLOAD)).await;
        if cond(&b) && counters(&a) == counters(&b) {
            return b;
        }
    }
}

/// The state of one peer (`overload-control/state/peer`), as text.
fn peer_state<'a>(r: &'a str, name: &str) -> &'a str {
    let start = r.find("<overload-control").unwrap_or_else(|| panic!("no overload state: {r}"));
    let r = &r[start..];
    let at = r.find(&format!("<name>{name}</name>")).unwrap_or_else(|| panic!("no overload state of {name}: {r}"));
    let from = r[..at].rfind("<peer>").unwrap();
    let to = at + r[at..].find("</peer>").unwrap();
    &r[from..to]
}

fn counter(r: &str, name: &str, leaf: &str) -> u64 {
    leaf_after(peer_state(r, name), "<counters>", leaf).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn session(agent: &AgentProcess) -> RawSession {
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    s
}

async fn notifications(agent: &AgentProcess) -> RawSession {
    let mut n = session(agent).await;
    let r = n.rpc11(&rpc(9, r#"<create-subscription xmlns="urn:ietf:params:xml:ns:netconf:notification:1.0"/>"#)).await;
    assert!(r.contains("<ok/>"), "{r}");
    n
}

async fn next_transition(n: &mut RawSession) -> String {
    String::from_utf8_lossy(&n.read_until(b"</overload-state-change>").await).into_owned()
}

async fn post(sci: SocketAddr, seq: u64, gas: u32, health: &str) {
    let (status, body) = http_post(sci, "/reports", "application/json", report(seq, gas, health).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
}

fn cps(state_config: impl FnOnce(&mut cats_sma::cps::reference::config::CpsConfig)) -> Arc<CpsState> {
    let mut c = cps_config();
    state_config(&mut c);
    CpsState::new(c).unwrap()
}

/// 5.1 (capability announcement), 5.2.1–5.2.3 (the OCS: a report starts it, the same
/// sequence number is ignored, a newer one replaces it, an end removes it) and 5.2.5 with
/// the single agent of 3.1.1: the loss algorithm drops exactly the requested share of
/// routine updates and never a health change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc8581_5_1_5_2_single_agent_3_1_1_loss_throttles_routine_updates_never_health_changes() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let state = cps(|_| {});
    let cps = start_cps(free_addr(), Some(state.clone())).await;
    let mut s = session(&agent).await;
    let mut events = notifications(&agent).await;
    let url = format!("http://{}", cps.addr);
    let r = s.rpc11(&rpc(1, &config(&peer("ref", &url, ""), ""))).await;
    assert!(r.contains("<ok/>"), "{r}");
    post(sci, 1, 100, "HEALTHY").await;
    wait_for("AR1 at the C-PS", || cst_services(&state) == vec![("AR1".into(), 100)]).await;

    // 5.1: the C-PS answered the announcement with the peer report and the loss algorithm,
    // under its own SourceID, which is the identity the session knows it by.
    let r = wait_state(&mut s, "capability", |r| r.contains("<peer-report>true</peer-report>")).await;
    let p = peer_state(&r, "ref");
    assert!(p.contains("<direction>from-c-ps</direction>") && p.contains("<source-id>127.0.0.1</source-id>"), "{p}");
    assert!(p.contains("loss</algorithm>"), "{p}");
    assert!(!p.contains("<report>"), "no report before overload: {p}");

    // 5.2.3: the report in the next answer starts the overload condition.
    state.force_overload(50, Some(600), None);
    post(sci, 2, 130, "HEALTHY").await;
    let r =
        wait_state(&mut s, "report in force", |r| r.contains("<reduction-percentage>50</reduction-percentage>")).await;
    let p = peer_state(&r, "ref");
    let seq = state.overload_sequence();
    assert!(p.contains(&format!("<sequence-number>{seq}</sequence-number>")), "{p}");
    assert!(
        p.contains("<validity-duration>600</validity-duration>") && p.contains("<abatement>throttle</abatement>"),
        "{p}"
    );
    let n = next_transition(&mut events).await;
    assert!(n.contains("<peer>ref</peer>") && n.contains("<overloaded>true</overloaded>"), "{n}");
    assert!(
        n.contains("<cause>started</cause>") && n.contains("<reduction-percentage>50</reduction-percentage>"),
        "{n}"
    );

    // 5.2.5 and the loss algorithm: of the routine changes, exactly half are dropped, evenly.
    let sent_before = state.cst.lock().unwrap().sites[SITE].applied.len();
    for i in 0..12u64 {
        post(sci, 3 + i, gas_step(i), "HEALTHY").await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let r = wait_settled(&mut s, "abatement counted", "ref", |r| counter(r, "ref", "abatable-updates") >= 8).await;
    let (offered, throttled) = (counter(&r, "ref", "abatable-updates"), counter(&r, "ref", "throttled"));
    assert_eq!(throttled, offered / 2, "the loss algorithm at 50 %: {r}");
    assert_eq!(counter(&r, "ref", "diverted"), 0, "no fallback to divert to: {r}");
    // The same report in every answer: not newer, ignored (RFC 7683 section 5.5.2).
    assert!(counter(&r, "ref", "ignored-stale-sequence") > 0, "{r}");
    let delivered = wait_for_applied(&state, sent_before + (offered - throttled) as usize).await;
    assert_eq!(delivered, sent_before + (offered - throttled) as usize, "what was not dropped arrived");

    // A health change is never abated.
    let before = state.cst.lock().unwrap().sites[SITE].applied.len();
    post(sci, 20, 130, "UNHEALTHY").await;
    wait_for_applied(&state, before + 1).await;
    let r = s.rpc11(&rpc(51, GET_OVERLOAD)).await;
    assert_eq!(counter(&r, "ref", "abatable-updates"), offered, "a health change is not abatable: {r}");

    // A newer report replaces the one in force.
    state.force_overload(80, Some(600), None);
    post(sci, 21, 130, "HEALTHY").await;
    let r = wait_state(&mut s, "replaced", |r| r.contains("<reduction-percentage>80</reduction-percentage>")).await;
    assert!(
        peer_state(&r, "ref").contains(&format!("<sequence-number>{}</sequence-number>", state.overload_sequence()))
    );

    // The C-PS's load falls: its end of overload (validity 0) removes the report.
    state.follow_load();
    post(sci, 22, 130, "DEGRADED").await;
    let r = wait_state(&mut s, "ended", |r| !peer_state(r, "ref").contains("<report>")).await;
    assert_eq!(counter(&r, "ref", "expired"), 0, "{r}");
    let n = next_transition(&mut events).await;
    assert!(n.contains("<overloaded>false</overloaded>") && n.contains("<cause>ended</cause>"), "{n}");
    cps.stop().await;
}

/// GAS values that each change by 20 % (a routine metric change, seed 004's default delta
/// is 10 %; not a jump for the validator, which holds back 50 %), rising so reports the
/// engine takes together still change the advertised value.
fn gas_step(i: u64) -> u32 {
    (160.0 * 1.2f64.powi(i as i32)).round() as u32
}

async fn wait_for_applied(state: &CpsState, n: usize) -> usize {
    let applied = || state.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.applied.len());
    wait_for("updates at the C-PS", || applied() >= n).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    applied()
}

/// 3.1.2, redundant agents: the share abated towards the overloaded primary goes to the
/// fallback C-PS, which is brought up for it (divert before throttle); when the fallback is
/// overloaded too, the agent throttles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed003_3_1_2_redundant_agents_divert_before_throttle() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let (primary, fallback) = (cps(|_| {}), cps(|_| {}));
    let p = start_cps(free_addr(), Some(primary.clone())).await;
    let f = start_cps(free_addr(), Some(fallback.clone())).await;
    let mut s = session(&agent).await;
    let peers = format!(
        "{}{}",
        peer("primary", &format!("http://{}", p.addr), ""),
        peer("alt", &format!("http://{}", f.addr), "<role>fallback</role>")
    );
    let r = s.rpc11(&rpc(1, &config(&peers, ""))).await;
    assert!(r.contains("<ok/>"), "{r}");
    post(sci, 1, 100, "HEALTHY").await;
    wait_for("AR1 at the primary", || cst_services(&primary) == vec![("AR1".into(), 100)]).await;
    assert!(cst_services(&fallback).is_empty(), "the fallback is on standby");

    primary.force_overload(50, Some(600), None);
    post(sci, 2, 130, "HEALTHY").await;
    // The fallback comes up (full sync) to take the diverted share.
    wait_for("the fallback synchronised", || !cst_services(&fallback).is_empty()).await;
    let r = wait_settled(&mut s, "divert", "primary", |r| r.contains("<abatement>divert</abatement>")).await;
    assert!(r.contains("<state>connected</state>"), "{r}");
    let (offered0, diverted0) = (counter(&r, "primary", "abatable-updates"), counter(&r, "primary", "diverted"));
    let applied = |c: &CpsState| c.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.applied.len() as u64);
    let (at_primary0, at_fallback0) = (applied(&primary), applied(&fallback));
    for i in 0..10u64 {
        post(sci, 3 + i, gas_step(i), "HEALTHY").await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let r = wait_settled(&mut s, "diverted", "primary", |r| counter(r, "primary", "abatable-updates") >= offered0 + 8)
        .await;
    let offered = counter(&r, "primary", "abatable-updates") - offered0;
    let diverted = counter(&r, "primary", "diverted") - diverted0;
    assert_eq!(diverted, offered / 2, "{r}");
    assert_eq!(counter(&r, "primary", "throttled"), 0, "nothing dropped while the fallback takes it: {r}");
    // The primary got what was not diverted, the fallback what was (and nothing else: it
    // does not take the routine updates the primary gets).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(applied(&primary) - at_primary0, offered - diverted, "the primary's share");
    assert_eq!(applied(&fallback) - at_fallback0, diverted, "the diverted share reached the fallback, only it");

    // Both overloaded: the fallback's answer carries its report; nothing is left to divert
    // to, the agent throttles each by its own reduction.
    fallback.force_overload(50, Some(600), None);
    for i in 0..6u64 {
        post(sci, 20 + i, gas_step(10 + i), "HEALTHY").await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let r = wait_state(&mut s, "throttle", |r| counter(r, "primary", "throttled") > 0).await;
    assert!(peer_state(&r, "alt").contains("<reduction-percentage>50</reduction-percentage>"), "{r}");
    assert!(peer_state(&r, "primary").contains("<abatement>throttle</abatement>"), "{r}");
    p.stop().await;
    f.stop().await;
}

/// 3.1.3, agent chains, and the SourceID check of 5.2.3: a report whose SourceID is not the
/// adjacent C-PS (one relayed from a node behind it) is ignored and counted; a C-PS that
/// answers the announcement under another identity negotiates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed003_3_1_3_agent_chain_report_from_another_source_id_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let relay = cps(|_| {});
    let impostor = cps(|c| c.source_id = Some("cps.elsewhere.example".into()));
    let a = start_cps(free_addr(), Some(relay.clone())).await;
    let b = start_cps(free_addr(), Some(impostor.clone())).await;
    let mut s = session(&agent).await;
    let peers = format!(
        "{}{}",
        peer("relay", &format!("http://{}", a.addr), ""),
        peer("other", &format!("http://{}", b.addr), "")
    );
    let r = s.rpc11(&rpc(1, &config(&peers, ""))).await;
    assert!(r.contains("<ok/>"), "{r}");
    relay.force_overload(60, None, Some("server-behind-the-c-ps"));
    impostor.force_overload(60, None, None);
    post(sci, 1, 130, "HEALTHY").await;
    // The discovery snapshot first: reports posted within its batch window would share it,
    // and the relay must answer (with its foreign report) at least twice.
    wait_for("the discovery snapshot at the relay", || cst_services(&relay) == vec![("AR1".into(), 130)]).await;
    for i in 0..4u64 {
        post(sci, 2 + i, gas_step(i), "HEALTHY").await;
    }
    let r = wait_state(&mut s, "mismatches counted", |r| {
        counter(r, "relay", "ignored-source-id-mismatch") >= 2 && counter(r, "other", "ignored-source-id-mismatch") >= 2
    })
    .await;
    for name in ["relay", "other"] {
        let p = peer_state(&r, name);
        assert!(!p.contains("<report>"), "{name}: {p}");
        assert_eq!(counter(&r, name, "throttled"), 0, "{r}");
    }
    assert!(peer_state(&r, "relay").contains("<peer-report>true</peer-report>"), "{r}");
    assert!(!peer_state(&r, "other").contains("<capability>"), "an answer under another identity is not taken: {r}");
    wait_for("every update at the relay", || cst_services(&relay) == vec![("AR1".into(), gas_step(3))]).await;
    a.stop().await;
    b.stop().await;
}

/// RFC 7683 section 5.5.2 (validity): a report that is not renewed expires on its own, with
/// its notification, and the default validity applies to one that carries none. Over the
/// gRPC stream: the Welcome answers the Hello's announcement, the report comes as a control
/// message (CpsBody.overload) while the agent has nothing to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc7683_validity_expiry_and_default_validity_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let state = cps(|_| {});
    let g = cats_sma::cps::reference::grpc::RefGrpc::start(free_addr(), state.clone()).await.unwrap();
    let grpc = g.addr;
    let mut s = session(&agent).await;
    let mut events = notifications(&agent).await;
    let r = s
        .rpc11(&rpc(
            1,
            &config(
                &peer("ref", &format!("grpc://{grpc}"), ""),
                "<default-validity-duration>2</default-validity-duration>",
            ),
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    post(sci, 1, 100, "HEALTHY").await;
    let r = wait_state(&mut s, "negotiated over gRPC", |r| r.contains("<peer-report>true</peer-report>")).await;
    assert!(!peer_state(&r, "ref").contains("<report>"), "{r}");
    // With nothing more to send, the report comes as a control message on the stream.
    state.force_overload(40, None, None);
    let r =
        wait_state(&mut s, "report over gRPC", |r| r.contains("<reduction-percentage>40</reduction-percentage>")).await;
    let p = peer_state(&r, "ref");
    assert!(
        p.contains("<peer-report>true</peer-report>") && p.contains("<validity-duration>2</validity-duration>"),
        "{p}"
    );
    let n = next_transition(&mut events).await;
    assert!(n.contains("<cause>started</cause>"), "{n}");
    // Nothing renews it: it expires.
    let n = next_transition(&mut events).await;
    assert!(n.contains("<cause>expired</cause>") && n.contains("<overloaded>false</overloaded>"), "{n}");
    let r = s.rpc11(&rpc(52, GET_OVERLOAD)).await;
    assert!(!peer_state(&r, "ref").contains("<report>"), "{r}");
    assert_eq!(counter(&r, "ref", "expired"), 1, "{r}");
    g.stop().await;
}
