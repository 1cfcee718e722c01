//! Seed 004's update control end to end, through the real agent and the reference C-PS:
//! the Policy Change Trigger, the SCI Discovery Trigger (full update), the heartbeat during
//! a maintenance window, the adaptive heartbeat's configuration and state, and the
//! shedding of optional metrics under high load. The agent talks to the C-PS through a
//! recording TCP relay, so a test can read the kind and trigger of every report the C-PS
//! received (the C-PS's table keeps only their effect).

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use cats_sma::cps::auth::hex;
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use cps_support::*;
use tokio::io::AsyncWriteExt;

const NC: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";

/// A TCP relay in front of the C-PS that keeps every byte the agent sent.
struct Relay {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
}

async fn relay(upstream: SocketAddr) -> Relay {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else { continue };
            let log = log.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match tokio::io::AsyncReadExt::read(&mut cr, &mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    Relay { addr, sent }
}

impl Relay {
    /// (kind, trigger) of every report sent so far, in order.
    fn reports(&self) -> Vec<(String, String)> {
        let text = String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned();
        let value = |s: &str, key: &str| -> Option<String> {
            let at = s.find(key)? + key.len();
            Some(s[at..].split('"').next()?.to_owned())
        };
        text.match_indices("\"kind\":\"")
            .filter_map(|(i, _)| {
                let rest = &text[i..];
                Some((value(rest, "\"kind\":\"")?, value(rest, "\"trigger\":\"")?))
            })
            .collect()
    }

    fn saw(&self, kind: &str, trigger: &str) -> usize {
        self.reports().iter().filter(|(k, t)| k == kind && t == trigger).count()
    }
}

fn config(cps: SocketAddr, scis: &[&str], update_control: &str, extra: &str) -> String {
    let scis: String = scis
        .iter()
        .map(|s| format!("<sci><csci-id>{s}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>"))
        .collect();
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis>{scis}</scis>{extra}
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>{update_control}</update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer>
            <name>ref</name><url>http://{cps}</url><allowed-cs-id>AR1</allowed-cs-id>
            <compression>none</compression>
            <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
            <backoff-initial>50</backoff-initial><backoff-max>500</backoff-max>
          </peer></c-ps>
        </cats-sma></config></edit-config>"#,
        hex(SECRET)
    )
}

fn report(csci: &str, seq: u64, gas: u32, cost: Option<u32>) -> String {
    let cost = cost.map(|c| format!(r#","cost":{c}"#)).unwrap_or_default();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"{cost}}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

async fn post(sci: SocketAddr, body: &str) {
    let (status, reply) = http_post(sci, "/reports", "application/json", body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
}

async fn edit(s: &mut RawSession, id: u32, body: &str) {
    let r = s.rpc11(&rpc(id, body)).await;
    assert!(r.contains("<ok/>"), "{r}");
}

fn policy_edit(inner: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
        <policy xmlns="urn:cats-sma:yang:cats-sma-policy">{inner}</policy></cats-sma></config></edit-config>"#
    )
}

const STATUS: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><status/></update-control></policy>
    </cats-sma></filter></get>"#;

struct Setup {
    _dir: tempfile::TempDir,
    agent: common::AgentProcess,
    s: RawSession,
    cps: cats_sma::cps::reference::RefCps,
    relay: Relay,
    sci: SocketAddr,
}

async fn setup(scis: &[&str], update_control: &str, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let cps = start_cps(free_addr(), None).await;
    let relay = relay(cps.addr).await;
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    edit(&mut s, 1, &config(relay.addr, scis, update_control, extra)).await;
    Setup { _dir: dir, agent, s, cps, relay, sci }
}

/// The first report of an SCI (GAS 400), once its discovery's full update reached
/// the C-PS (the C-PS may have had it from its first-contact snapshot already).
async fn first_report(t: &Setup, csci: &str) {
    post(t.sci, &report(csci, 1, 400, None)).await;
    wait_for("the discovery's full update", || t.relay.saw("full", "discovery") == 1).await;
    assert_eq!(cst_services(&t.cps.state), vec![("AR1".into(), 400)]);
}

fn cst_row(state: &cats_sma::cps::reference::CpsState) -> Option<cats_sma::cps::wire::ServiceMetrics> {
    state.cst.lock().unwrap().sites.get(SITE).and_then(|e| e.services.get("AR1").cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_update_controller_policy_change_trigger_reaches_the_cps() {
    // Seed 004, Update Controller, Policy Change Trigger: "When a local policy is updated
    // (e.g., new safety margin), the UC re-evaluates all metrics and sends updates as
    // needed". A safety margin of 5 % moves GAS 400 to 380: below the 10 % and 50-slot
    // thresholds, and within the 5 s minimum interval, yet the C-PS gets it at once.
    let mut t = setup(&["188.3.67.3:67"], "", "").await;
    first_report(&t, "188.3.67.3:67").await;

    edit(&mut t.s, 2, &policy_edit("<transforms><gas-safety-factor>0.95</gas-safety-factor></transforms>")).await;
    wait_for("the policy's effect in the C-PS table", || cst_services(&t.cps.state) == vec![("AR1".into(), 380)]).await;
    assert_eq!(t.relay.saw("delta", "policy-change"), 1, "{:?}", t.relay.reports());
    drop(t.agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_update_controller_sci_discovery_trigger_sends_full_update() {
    // Seed 004, Update Controller, SCI Discovery Trigger: "When a new SCI is discovered or an
    // existing SCI is withdrawn, the UC sends a full update".
    let mut t = setup(&["sci-1", "sci-2"], "", "").await;
    first_report(&t, "sci-1").await;
    let discoveries = 1;
    // sci-2 adds 10 slots (below every threshold), within the minimum interval.
    post(t.sci, &report("sci-2", 1, 10, None)).await;
    wait_for("sci-2 in the C-PS table", || cst_row(&t.cps.state).is_some_and(|r| r.sci_count == 2 && r.gas == 410))
        .await;
    assert_eq!(t.relay.saw("full", "discovery"), discoveries + 1, "{:?}", t.relay.reports());

    // Deregistered: a full update, and the SCI's DELETE.
    let delete = format!(
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
        <scis><sci xmlns:nc="{NC}" nc:operation="delete"><csci-id>sci-2</csci-id></sci></scis>
        </cats-sma></config></edit-config>"#
    );
    edit(&mut t.s, 3, &delete).await;
    wait_for("sci-2 gone from the C-PS table", || cst_row(&t.cps.state).is_some_and(|r| r.sci_count == 1)).await;
    assert_eq!(t.relay.saw("full", "withdrawal"), 1, "{:?}", t.relay.reports());
    let withdrawn = t.cps.state.cst.lock().unwrap().sites.get(SITE).map(|e| e.withdrawn_scis.clone()).unwrap();
    assert!(withdrawn.iter().any(|c| c == "sci-2"), "{withdrawn:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_policy_engine_maintenance_window_keeps_the_heartbeat_going() {
    // Seed 004, Policy Engine: "Maintenance window: suppress all non-critical updates during
    // scheduled maintenance"; Update Controller: the periodic snapshot "ensures the C-PS does
    // not age out the C-SMA's entries". During the window the heartbeat keeps reaching the
    // C-PS with what it was last told; the suppressed change goes out when the window ends.
    let mut t =
        setup(&["188.3.67.3:67"], "<heartbeat-interval>1</heartbeat-interval><min-interval>0</min-interval>", "").await;
    first_report(&t, "188.3.67.3:67").await;

    let start = (chrono::Utc::now() - chrono::Duration::minutes(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let end = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let window = format!(
        "<update-control><maintenance-window><name>upgrade</name><start>{start}</start><end>{end}</end></maintenance-window></update-control>"
    );
    edit(&mut t.s, 2, &policy_edit(&window)).await;
    post(t.sci, &report("188.3.67.3:67", 2, 300, None)).await;
    // Counted as requests the C-PS served: a heartbeat may also be a lighter refresh (a
    // keepalive) for a C-PS that holds the content already.
    let requests = || t.cps.state.requests.load(std::sync::atomic::Ordering::SeqCst);
    let before = requests();
    wait_for("heartbeats during the window", || requests() >= before + 3).await;
    assert_eq!(cst_services(&t.cps.state), vec![("AR1".into(), 400)], "the suppressed change is not revealed");

    let close = format!(
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
        <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
        <maintenance-window xmlns:nc="{NC}" nc:operation="delete"><name>upgrade</name></maintenance-window>
        </update-control></policy></cats-sma></config></edit-config>"#
    );
    edit(&mut t.s, 3, &close).await;
    wait_for("the change after the window", || cst_services(&t.cps.state) == vec![("AR1".into(), 300)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_update_controller_adaptive_heartbeat_configuration_and_state() {
    // Seed 004, Update Controller: "The heartbeat interval SHOULD be configurable and MAY be
    // adjusted dynamically based on network conditions or C-PS load". The reference C-PS
    // asks for a refresh every entry-ttl / 4 at light load (180 s / 4 = 45 s): the effective
    // interval follows its hint rather than the configured 30 s (the case without any hint
    // is the controller's unit test); the bounds are checked at commit.
    let mut t = setup(
        &["188.3.67.3:67"],
        "<heartbeat-interval>30</heartbeat-interval><adaptive-heartbeat><min-interval>5</min-interval></adaptive-heartbeat>",
        "",
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut id = 100;
    loop {
        id += 1;
        let r = t.s.rpc11(&rpc(id, STATUS)).await;
        if r.contains("<effective-heartbeat-interval>45000</effective-heartbeat-interval>") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the C-PS hint never reached the controller: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let bad = policy_edit(
        "<update-control><adaptive-heartbeat><min-interval>700</min-interval></adaptive-heartbeat></update-control>",
    );
    let r = t.s.rpc11(&rpc(3, &bad)).await;
    assert!(r.contains("<rpc-error>") && r.contains("must not exceed"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_scalability_high_load_sheds_optional_metrics() {
    // Seed 004, Scalability: "The PE MAY suppress non-critical metrics (e.g., optional
    // extension metrics) during high-load conditions". Above 5 accepted reports per second
    // the C-PS gets AR1 without its cost; the state shows it; afterwards the cost is back.
    let load: Vec<String> = (1..=5).map(|i| format!("load-{i}")).collect();
    let mut scis = vec!["188.3.67.3:67"];
    scis.extend(load.iter().map(String::as_str));
    let rate_limit = "<collection><rate-limit><enabled>false</enabled></rate-limit></collection>";
    let t = setup(
        &scis,
        "<min-interval>0</min-interval><load-shedding><report-rate-threshold>5</report-rate-threshold></load-shedding>",
        rate_limit,
    )
    .await;
    let mut s = t.s;
    post(t.sci, &report("188.3.67.3:67", 1, 400, Some(7))).await;
    wait_for("AR1 with its cost", || cst_row(&t.cps.state).is_some_and(|r| r.cost == Some(7))).await;

    // Sustained load from the other SCIs (same GAS each time: no anomaly, no update).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr, flag, ids) = (t.sci, stop.clone(), load.clone());
    let loader = tokio::spawn(async move {
        let mut seq = 0;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            seq += 1;
            let batch: Vec<String> = ids.iter().map(|id| report(id, seq, 10, None)).collect();
            post(addr, &format!("[{}]", batch.join(","))).await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let mut id = 10;
    let active = status_until(&mut s, &mut id, "<active>true</active>").await;
    assert!(active.contains("<since>"), "{active}");
    post(t.sci, &report("188.3.67.3:67", 2, 300, Some(7))).await;
    // The load SCIs serve AR1 too: 300 + 5 × 10 slots.
    wait_for("AR1 without its cost", || cst_row(&t.cps.state).is_some_and(|r| r.gas == 350 && r.cost.is_none())).await;
    wait_for("the log line", || t.agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("high load"))).await;

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    loader.await.unwrap();
    let active = status_until(&mut s, &mut id, "<active>false</active>").await;
    assert!(!active.contains("<shed-advertisements>0<"), "{active}");
    post(t.sci, &report("188.3.67.3:67", 3, 200, Some(7))).await;
    wait_for("AR1 with its cost again", || cst_row(&t.cps.state).is_some_and(|r| r.gas == 250 && r.cost == Some(7)))
        .await;
}

/// Reads the update-control status until it contains `what` (20 s guard against a hang).
async fn status_until(s: &mut RawSession, id: &mut u32, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        *id += 1;
        let r = s.rpc11(&rpc(*id, STATUS)).await;
        if r.contains(what) {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
