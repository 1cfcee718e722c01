//! Seed 004 on the C-PS adapter through the real running agent (issue 13): peers
//! configured over NETCONF, SCI reports over HTTP, the reference C-PS on loopback.

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::sync::Arc;

use cats_sma::cps::auth::hex;
use cats_sma::cps::reference::CpsState;
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use cps_support::*;

const SCI: &str = "188.3.67.3:67";

fn config(policy: &str, peers: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis><sci><csci-id>{SCI}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
            <min-interval>0</min-interval>{policy}</update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps">{peers}</c-ps>
        </cats-sma></config></edit-config>"#
    )
}

fn peer(name: &str, addr: SocketAddr, extra: &str) -> String {
    format!(
        r#"<peer><name>{name}</name><url>http://{addr}</url><allowed-cs-id>AR1</allowed-cs-id>
           <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>{extra}</peer>"#,
        hex(SECRET)
    )
}

fn report(seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{SCI}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY","cost":42,"reputation":9}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

const GET_CPS: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"/></cats-sma></filter></get>"#;

/// Polls the C-PS state until `cond` holds (20 s guard against a hang).
async fn wait_state(s: &mut RawSession, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = s.rpc11(&rpc(50, GET_CPS)).await;
        if cond(&r) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn session(agent: &common::AgentProcess) -> RawSession {
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_keepalive_and_refresh_hint_through_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut c = cps_config();
    c.entry_ttl = 8;
    let cps = start_cps(free_addr(), Some(CpsState::new(c).unwrap())).await;
    let mut s = session(&agent).await;
    // Adaptive heartbeat (the update controller acting on the refresh hint), from 1 s up.
    let policy = "<heartbeat-interval>1</heartbeat-interval>\
                  <adaptive-heartbeat><min-interval>1</min-interval></adaptive-heartbeat>";
    let r = s.rpc11(&rpc(1, &config(policy, &peer("ref", cps.addr, "")))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, body) = http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    // The heartbeat (every second) carries what the C-PS holds: keepalives, and the C-PS
    // keeps the site although its entries live only 8 s.
    wait_for("keepalives at the C-PS", || keepalives(&cps.state) >= 2).await;
    let r = wait_state(&mut s, "keepalives-sent", |r| !r.contains("<keepalives-sent>0<")).await;
    assert!(r.contains("<keepalive-supported>true</keepalive-supported>"), "{r}");
    assert!(r.contains("<entry-ttl>8</entry-ttl>"), "{r}");
    // 8 s TTL, idle C-PS: floor(8 * (1 + load) / 4) = 2 s.
    assert!(r.contains("<refresh-interval>2</refresh-interval>"), "{r}");
    // The hint reached the update controller (RefreshHint): its heartbeat follows it.
    let status = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
        <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><status/></update-control></policy>
        </cats-sma></filter></get>"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = s.rpc11(&rpc(7, status)).await;
        if r.contains("<effective-heartbeat-interval>2000</effective-heartbeat-interval>") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "heartbeat never followed the hint: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(cps.state.cst.lock().unwrap().sites.contains_key(SITE));
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_network_partition_upon_reconnection_full_sync_through_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let state = cps.state.clone();
    let mut s = session(&agent).await;
    let extra = "<backoff-initial>50</backoff-initial><backoff-max>200</backoff-max>";
    let r = s.rpc11(&rpc(1, &config("", &peer("ref", addr, extra)))).await;
    assert!(r.contains("<ok/>"), "{r}");
    http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    wait_for("AR1", || cst_services(&state) == vec![("AR1".into(), 400)]).await;
    // A metric change after the discovery: once it is in the table, nothing older (the
    // discovery's full update) is still on its way.
    http_post(sci, "/reports", "application/json", report(2, 350).as_bytes()).await;
    wait_for("AR1 changed", || cst_services(&state) == vec![("AR1".into(), 350)]).await;
    // A partition: the C-PS keeps its table; the next change is buffered meanwhile.
    cps.stop().await;
    let (snaps, deltas) = (full_snapshots(&state), applied(&state).len());
    http_post(sci, "/reports", "application/json", report(3, 300).as_bytes()).await;
    wait_state(&mut s, "backoff with the change buffered", |r| {
        r.contains("<state>backoff</state>") && r.contains("<buffered-updates>1</buffered-updates>")
    })
    .await;
    let cps = start_cps(addr, Some(state.clone())).await;
    // Upon reconnection: a full sync, and the buffered delta is not sent before it (the
    // snapshot supersedes it).
    wait_for("full sync", || full_snapshots(&state) == snaps + 1).await;
    assert_eq!(cst_services(&state), vec![("AR1".into(), 300)]);
    let applied = applied(&state);
    assert_eq!(applied.len(), deltas + 1, "only the reconnection's snapshot, no delta: {applied:?}");
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_xml_and_cbor_peers_with_per_sci_granularity_carry_reputation_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let xml = start_cps(free_addr(), None).await;
    let cbor = start_cps(free_addr(), None).await;
    let mut s = session(&agent).await;
    let peers = peer("x", xml.addr, "<encoding>xml</encoding><granularity>both</granularity>")
        + &peer("c", cbor.addr, "<encoding>cbor</encoding><compression>gzip</compression>");
    let r = s.rpc11(&rpc(1, &config("", &peers))).await;
    assert!(r.contains("<ok/>"), "{r}");
    http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    for (name, cps) in [("xml", &xml), ("cbor", &cbor)] {
        let st: &Arc<CpsState> = &cps.state;
        wait_for(name, || cst_services(st) == vec![("AR1".into(), 400)]).await;
        let row = st.cst.lock().unwrap().sites[SITE].services["AR1"].clone();
        assert_eq!((row.cost, row.reputation), (Some(42), Some(9)), "{name}");
        assert_eq!(st.refused("malformed") + st.refused("unsupported-media-type"), 0, "{name}");
    }
    // Granularity both: the SCI's own row went to PUT /cats/metrics/{csci-id} (the update
    // controller fills the rows while a peer asks for them: SciDetail).
    let row = |st: &CpsState| st.cst.lock().unwrap().sites.get(SITE).and_then(|e| e.scis.get(SCI).cloned());
    wait_for("the SCI row", || row(&xml.state).is_some()).await;
    let r0 = row(&xml.state).unwrap().row;
    assert_eq!((r0.cs_id.as_str(), r0.gas, r0.cost, r0.reputation), ("AR1", 400, Some(42), Some(9)));
    assert!(row(&cbor.state).is_none(), "granularity site (default): no rows");
    let r = wait_state(&mut s, "both connected", |r| r.matches("<state>connected</state>").count() == 2).await;
    assert!(!r.contains("<last-error>"), "{r}");
    xml.stop().await;
    cbor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_update_control_backoff_and_buffer_size_are_every_peers_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut s = session(&agent).await;
    let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let policy = "<backoff><initial>2</initial><max>30</max></backoff><buffer-size>77</buffer-size>";
    let peers =
        peer("inherits", a, "") + &peer("own", a, "<buffer-size>5</buffer-size><backoff-initial>100</backoff-initial>");
    let r = s.rpc11(&rpc(1, &config(policy, &peers))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let r = wait_state(&mut s, "both peers", |r| r.matches("<effective-buffer-size>").count() == 2).await;
    let at = r.find("<name>own</name>").unwrap();
    let (inherits, own) = if r.find("<name>inherits</name>").unwrap() < at { r.split_at(at) } else { panic!("{r}") };
    assert!(inherits.contains("<effective-buffer-size>77</effective-buffer-size>"), "{r}");
    assert!(inherits.contains("<effective-backoff-initial>2000</effective-backoff-initial>"), "{r}");
    assert!(inherits.contains("<effective-backoff-max>30000</effective-backoff-max>"), "{r}");
    assert!(own.contains("<effective-buffer-size>5</effective-buffer-size>"), "{r}");
    assert!(own.contains("<effective-backoff-initial>100</effective-backoff-initial>"), "{r}");
    assert!(own.contains("<effective-backoff-max>30000</effective-backoff-max>"), "{r}");
    // A peer's own maximum below the inherited initial delay: refused, with the reason.
    let bad = peer("inherits", a, "<backoff-max>500</backoff-max>");
    let r = s.rpc11(&rpc(2, &config(policy, &bad))).await;
    assert!(r.contains("<rpc-error>") && r.contains("effective backoff-max"), "{r}");
}
