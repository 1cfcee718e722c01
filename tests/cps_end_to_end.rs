//! The whole loop with the real binary: a C-PS peer configured over NETCONF, an SCI report
//! over HTTP, the reference C-PS's table and site selection, the session state in the
//! operational datastore, a commit refused for an unreadable trust anchor.

mod common;
mod cps_support;

use cats_sma::cps::auth::hex;
use common::{connect, http_post, rpc, start_agent, PASSWORD};
use cps_support::*;

fn peer_config(addr: std::net::SocketAddr, extra: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis><sci><csci-id>188.3.67.3:67</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
            <min-interval>0</min-interval></update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer>
            <name>ref</name><url>http://{addr}</url><allowed-cs-id>AR1</allowed-cs-id>
            <compression>gzip</compression>
            <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
            <backoff-initial>50</backoff-initial><backoff-max>500</backoff-max>{extra}
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_reach_the_reference_cps_and_session_state_is_operational() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let cps = start_cps(free_addr(), None).await;
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let r = s.rpc11(&rpc(1, &peer_config(cps.addr, ""))).await;
    assert!(r.contains("<ok/>"), "{r}");

    let (status, body) = http_post(sci, "/reports", "application/json", report(1, 400).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    wait_for("AR1 in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 400)]).await;
    let sel = cps.state.cst.lock().unwrap().select(&cps.state.config, "AR1", "r1");
    assert_eq!(sel.site, None, "no delay configured from r1: not a candidate");
    assert_eq!(sel.excluded.len(), 1);

    // A GAS change under 50 % (no anomaly) and over 10 % (advertised).
    let (status, body) = http_post(sci, "/reports", "application/json", report(2, 300).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    wait_for("the change in the C-PS table", || cst_services(&cps.state) == vec![("AR1".into(), 300)]).await;

    let get = rpc(
        2,
        r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
           <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"/></cats-sma></filter></get>"#,
    );
    let r = s.rpc11(&get).await;
    assert!(r.contains("<state>connected</state>"), "{r}");
    let acked = acked(&cps.state);
    assert!(r.contains(&format!("<last-acked-sequence>{acked}</last-acked-sequence>")), "{r}");
    assert!(r.contains("<dropped-updates>0</dropped-updates>"), "{r}");
    assert_eq!(cps.state.refused("bad-signature"), 0);

    // The resync RPC sends this peer a full snapshot (seed 004: reconciliation on demand).
    let snaps = || cps.state.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.full_snapshots);
    let before = snaps();
    let r = s.rpc11(&rpc(3, r#"<resync xmlns="urn:cats-sma:yang:cats-sma"><c-ps>ref</c-ps></resync>"#)).await;
    assert!(r.contains("<ok/>"), "{r}");
    wait_for("a full snapshot", || snaps() == before + 1).await;
    assert_eq!(cst_services(&cps.state), vec![("AR1".into(), 300)]);

    // The C-PS goes away: backoff, c-ps-unreachable is notified and logged, state says so.
    let mut events = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    events.hello(true).await;
    let r = events
        .rpc11(&rpc(9, r#"<create-subscription xmlns="urn:ietf:params:xml:ns:netconf:notification:1.0"/>"#))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    cps.stop().await;
    let (status, _) = http_post(sci, "/reports", "application/json", report(3, 250).as_bytes()).await;
    assert_eq!(status, 200);
    let mut tries = 0;
    loop {
        let r = s.rpc11(&get).await;
        if r.contains("<state>backoff</state>") {
            assert!(r.contains("<buffered-updates>1</buffered-updates>"), "{r}");
            assert!(r.contains("<last-error>"), "{r}");
            break;
        }
        tries += 1;
        assert!(tries < 200, "never in backoff: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let n = String::from_utf8_lossy(&events.read_until(b"</c-ps-unreachable>").await).into_owned();
    assert!(n.contains("<c-ps>ref</c-ps>") && n.contains("<backoff>"), "{n}");
    wait_for("the log line", || agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("C-PS unreachable")))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_with_an_unreadable_trust_anchor_or_mismatched_scheme_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let tls = "<tls><trusted-ca-file>/nonexistent/ca.pem</trusted-ca-file></tls>";
    let r = s.rpc11(&rpc(1, &peer_config("127.0.0.1:9".parse().unwrap(), tls))).await;
    assert!(r.contains("<rpc-error>") && r.contains("/nonexistent/ca.pem"), "{r}");
    // Nothing was kept.
    let r = s
        .rpc11(&rpc(
            2,
            r#"<get-config><source><running/></source><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma"><c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"/></cats-sma></filter></get-config>"#,
        ))
        .await;
    assert!(!r.contains("<peer>"), "{r}");
    // A peer needs psk or tls (YANG must).
    let bare = peer_config("127.0.0.1:9".parse().unwrap(), "")
        .replace(&format!("<psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>", hex(SECRET)), "");
    let r = s.rpc11(&rpc(3, &bare)).await;
    assert!(r.contains("<rpc-error>") && r.contains("psk"), "{r}");
}
