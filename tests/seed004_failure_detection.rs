//! Seed 004, "SCI Failure Detection", "Metric Cache" (soft-state aging, LRU eviction) and
//! "SCI Collection Interface" (hybrid mode), through the real running agent: the external
//! health monitor's RPC over NETCONF and RESTCONF (NACM-checked, audited, the C-PS told at
//! once), active probes that tell an SCI failure from a network partition, a pull on an
//! anomalous report and on STALE, the `evicted` / `deregistered` state changes, and the
//! validator's history surviving both.

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cats_sma::cps::auth::hex;
use common::*;
use cps_support::{cst_services, free_addr, start_cps, wait_for, CSMA, KEY_ID, SECRET, SITE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const BOB_PW: &str = "bob-password-1";

struct Nc {
    s: RawSession,
    id: u32,
}

impl Nc {
    async fn open(agent: &AgentProcess, user: &str, pw: &str) -> Nc {
        let mut s = connect(agent.addr, user, pw).await.unwrap();
        s.hello(true).await;
        Nc { s, id: 0 }
    }

    async fn call(&mut self, op: &str) -> String {
        self.id += 1;
        self.s.rpc11(&rpc(self.id, op)).await
    }

    async fn edit(&mut self, inner: &str) {
        let r = self
            .call(&format!(
                "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\" \
                 xmlns:nc=\"{NC}\">{inner}</cats-sma></config></edit-config>"
            ))
            .await;
        assert!(r.contains("<ok/>"), "{r}");
    }

    async fn get(&mut self, inner: &str) -> String {
        self.call(&format!(
            "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\">{inner}</cats-sma></filter></get>"
        ))
        .await
    }

    /// Polls a state read until `pred` holds (the deadline only guards against a hang).
    async fn wait(&mut self, what: &str, inner: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.get(inner).await;
            if pred(&r) {
                return r;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}: {r}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A NETCONF session subscribed to the NETCONF stream.
struct Events {
    nc: Nc,
    seen: String,
}

impl Events {
    async fn open(agent: &AgentProcess) -> Events {
        let mut nc = Nc::open(agent, "admin", PASSWORD).await;
        let r = nc.call("<create-subscription xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\"/>").await;
        assert!(r.contains("<ok/>"), "{r}");
        Events { nc, seen: String::new() }
    }

    /// Waits for the next sci-state-change of `csci` with `reason` (after the last one
    /// returned); returns it.
    async fn state_change(&mut self, csci: &str, reason: &str) -> String {
        let (id, why) = (format!("<csci-id>{csci}</csci-id>"), format!("<reason>{reason}</reason>"));
        const END: &str = "</sci-state-change>";
        loop {
            let mut at = 0;
            while let Some(end) = self.seen[at..].find(END).map(|e| at + e + END.len()) {
                let n = &self.seen[at..end];
                if n.contains("<sci-state-change") && n.contains(&id) && n.contains(&why) {
                    let n = n.to_owned();
                    self.seen.drain(..end);
                    return n;
                }
                at = end;
            }
            let got = self.nc.s.read_until(b"</sci-state-change>").await;
            self.seen.push_str(&String::from_utf8_lossy(&got));
        }
    }
}

fn sci(id: &str, interval_ms: u32) -> String {
    format!(
        "<scis><sci><csci-id>{id}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication>\
         <expected-interval>{interval_ms}</expected-interval></sci></scis>"
    )
}

fn report(id: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{id}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

async fn push(agent: &AgentProcess, body: &str) -> (u16, String) {
    http_post(agent.sci_addr.expect("SCI collector"), "/reports", "application/json", body.as_bytes()).await
}

/// A port on which nothing listens (connections are refused).
fn closed_port() -> u16 {
    free_addr().port()
}

/// A TCP listener that accepts and drops connections (a reference target or a live SCI).
async fn listening() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    a
}

/// An SCI serving its report on GET (a pull target over plain HTTP): `gas`, a fresh
/// timestamp and sequence 1000 + the number of GETs so far.
async fn pull_target(csci: &'static str, gas: u32) -> (SocketAddr, Arc<AtomicU64>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seq = 1000 + h.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = report(csci, seq, gas);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (addr, hits)
}

fn pull_config(csci: &str, addr: SocketAddr) -> String {
    format!(
        "<collection><pull><target><csci-id>{csci}</csci-id><url>http://{addr}/metrics</url>\
         <interval>86400</interval><allow-plaintext>true</allow-plaintext></target></pull></collection>"
    )
}

fn entry(csci: &str) -> String {
    format!("<metric-cache><entry><csci-id>{csci}</csci-id></entry></metric-cache>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_failure_detection_health_monitor_rpc_fails_the_sci_at_once_and_tells_the_cps() {
    let dir = tempfile::tempdir().unwrap();
    let boot = boot_with_users(dir.path(), &[("bob", BOB_PW)]);
    let agent =
        start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0", "--config", boot.to_str().unwrap()]);
    let cps = start_cps(free_addr(), None).await;
    let mut nc = Nc::open(&agent, "admin", PASSWORD).await;
    // TTL 120 s: whatever happens below is the monitor's doing, not the TTL's.
    nc.edit(&format!(
        "<agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>{}{}\
         <policy xmlns=\"urn:cats-sma:yang:cats-sma-policy\"><update-control><min-interval>0</min-interval></update-control></policy>\
         <c-ps xmlns=\"urn:cats-sma:yang:cats-sma-cps\"><peer><name>ref</name><url>http://{}</url>\
           <allowed-cs-id>AR1</allowed-cs-id><psk><key-id>{KEY_ID}</key-id><key>{}</key></psk></peer></c-ps>",
        sci("sci-a", 60_000),
        sci("sci-b", 60_000),
        cps.addr,
        hex(SECRET)
    ))
    .await;
    let mut events = Events::open(&agent).await;
    for (id, gas) in [("sci-a", 400), ("sci-b", 100)] {
        let (status, body) = push(&agent, &report(id, 1, gas)).await;
        assert_eq!(status, 200, "{body}");
    }
    wait_for("AR1 = 500 at the C-PS", || cst_services(&cps.state) == vec![("AR1".into(), 500)]).await;

    // The monitor calls the webhook over NETCONF: FAILED now, GAS contribution 0.
    let r = nc
        .call(&format!(
            "<report-sci-failure xmlns=\"{CATS}\"><csci-id>sci-a</csci-id><detail>liveness check failed 3 times</detail></report-sci-failure>"
        ))
        .await;
    assert!(r.contains(">healthy</old-state>") && r.contains(">failed</new-state>"), "{r}");
    let n = events.state_change("sci-a", "health-monitor").await;
    assert!(n.contains("<old-state>healthy</old-state>") && n.contains("<new-state>failed</new-state>"), "{n}");
    // An immediate update to the C-PS reflecting the reduced capacity.
    wait_for("AR1 = 100 at the C-PS", || cst_services(&cps.state) == vec![("AR1".into(), 100)]).await;
    let r = nc.get(&entry("sci-a")).await;
    assert!(r.contains("<state>failed</state>") && r.contains("gas-zeroed"), "{r}");
    let r = nc.get("<services/>").await;
    assert!(r.contains("<site-gas>100</site-gas>"), "{r}");
    // Logged for operational analysis.
    wait_for("the failure in the log", || {
        agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("external health monitor") && l.contains("sci-a"))
    })
    .await;

    // RESTCONF: POST /restconf/operations/cats-sma:report-sci-failure.
    let curl = Curl::new(&agent);
    let r = curl.send_json(
        "POST",
        "/operations/cats-sma:report-sci-failure",
        r#"{"cats-sma:input":{"csci-id":"sci-b","detail":"node down"}}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["cats-sma:output"]["new-state"], "failed", "{v}");
    events.state_change("sci-b", "health-monitor").await;
    wait_for("AR1 withdrawn or 0 at the C-PS", || cst_services(&cps.state).iter().all(|(_, g)| *g == 0)).await;
    // An SCI that is not registered is invalid input.
    let r =
        curl.send_json("POST", "/operations/cats-sma:report-sci-failure", r#"{"cats-sma:input":{"csci-id":"nobody"}}"#);
    assert_eq!(r.status, 400, "{r:?}");
    // NACM: the RPC is default-deny-all, a user without a permit rule is refused.
    let r = curl.as_user("bob", BOB_PW).send_json(
        "POST",
        "/operations/cats-sma:report-sci-failure",
        r#"{"cats-sma:input":{"csci-id":"sci-b"}}"#,
    );
    assert_eq!((r.status, r.error_tag()), (403, "access-denied".to_owned()), "{r:?}");
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let r =
        bob.call(&format!("<report-sci-failure xmlns=\"{CATS}\"><csci-id>sci-b</csci-id></report-sci-failure>")).await;
    assert!(r.contains("<error-tag>access-denied</error-tag>"), "{r}");
    // An exec rule for exactly this RPC lets the monitor's user call it.
    let r = nc
        .call(
            r#"<edit-config><target><running/></target><config><nacm xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-acm">
             <groups><group><name>monitors</name><user-name>bob</user-name></group></groups>
             <rule-list><name>monitors</name><group>monitors</group>
               <rule><name>health-monitor-webhook</name><module-name>cats-sma</module-name>
                 <rpc-name>report-sci-failure</rpc-name><access-operations>exec</access-operations>
                 <action>permit</action></rule></rule-list></nacm></config></edit-config>"#,
        )
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let r =
        bob.call(&format!("<report-sci-failure xmlns=\"{CATS}\"><csci-id>sci-b</csci-id></report-sci-failure>")).await;
    assert!(r.contains(">failed</old-state>") && r.contains(">failed</new-state>"), "{r}");
    // Audited, per front end.
    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    let calls: Vec<&str> = audit.lines().filter(|l| l.contains("report-sci-failure")).collect();
    assert!(calls.iter().any(|l| l.contains("\"netconf\"") && l.contains("success")), "{audit}");
    assert!(calls.iter().any(|l| l.contains("\"restconf\"") && l.contains("success")), "{audit}");
    let r = nc.get("<failure-detection/>").await;
    assert!(r.contains("<health-monitor-failures>2</health-monitor-failures>"), "{r}");

    // Recovered: the next accepted report brings the SCI back, as after any failure.
    let (status, body) = push(&agent, &report("sci-a", 2, 300)).await;
    assert_eq!(status, 200, "{body}");
    events.state_change("sci-a", "report-received").await;
    wait_for("AR1 = 300 at the C-PS", || cst_services(&cps.state) == vec![("AR1".into(), 300)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_failure_detection_active_probes_tell_sci_failure_from_partition() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent, "admin", PASSWORD).await;
    let (gateway, alive) = (listening().await, http_ok().await);
    let probe = |id: &str, how: String| format!("<target><csci-id>{id}</csci-id>{how}</target>");
    let tcp = |port: u16| format!("<tcp-connect><address>127.0.0.1</address><port>{port}</port></tcp-connect>");
    // TTL 500 ms, grace 60 s: FAILED within the minute is the probe's doing.
    nc.edit(&format!(
        "{}{}<cache><grace-period>60000</grace-period></cache>\
         <failure-detection><probe><timeout>1000</timeout>\
           <reference><name>gw</name>{}</reference>{}{}</probe></failure-detection>",
        sci("sci-dead", 250),
        sci("sci-alive", 250),
        tcp(gateway.port()),
        probe("sci-dead", tcp(closed_port())),
        probe("sci-alive", format!("<http-get>http://{alive}/healthz</http-get><timeout>1500</timeout>")),
    ))
    .await;
    let mut events = Events::open(&agent).await;
    for id in ["sci-dead", "sci-alive"] {
        let (status, body) = push(&agent, &report(id, 1, 100)).await;
        assert_eq!(status, 200, "{body}");
    }
    // Both stop reporting and go STALE. sci-dead does not answer while the gateway does:
    // FAILED at once, reason probe-failed (GAS contribution 0).
    events.state_change("sci-dead", "ttl-expired").await;
    let n = events.state_change("sci-dead", "probe-failed").await;
    assert!(n.contains("<old-state>stale</old-state>") && n.contains("<new-state>failed</new-state>"), "{n}");
    // sci-alive answers its HTTP GET: alive but not reporting, STALE, flagged.
    let r = nc
        .wait("both probe results", "<failure-detection/>", |r| {
            // State records, not the targets' configuration (which names both from the start).
            r.contains("<sci><csci-id>sci-dead</csci-id>") && r.contains("<sci><csci-id>sci-alive</csci-id>")
        })
        .await;
    assert!(r.contains("<verdict>sci-failed</verdict>") && r.contains("<reference>answered</reference>"), "{r}");
    assert!(r.contains("<verdict>alive-not-reporting</verdict>") && r.contains("<result>answered</result>"), "{r}");
    assert!(r.contains("<rtt>"), "{r}");
    assert!(
        r.contains("<probe-failures>1</probe-failures>") && r.contains("<alive-not-reporting>1</alive-not-reporting>"),
        "{r}"
    );
    let r = nc.get(&entry("sci-dead")).await;
    assert!(r.contains("<state>failed</state>") && r.contains("gas-zeroed"), "{r}");
    let r = nc.get(&entry("sci-alive")).await;
    assert!(r.contains("<state>stale</state>") && r.contains("alive-not-reporting"), "{r}");
    // probe-sci probes with the configured probe on demand, without changing the state.
    let r = nc.call(&format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-alive</csci-id></probe-sci>")).await;
    assert!(r.contains(">true</reachable>") && r.contains("</rtt>") && r.contains(">stale</state>"), "{r}");
    let r = nc.call(&format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-dead</csci-id></probe-sci>")).await;
    assert!(r.contains(">false</reachable>") && r.contains(">failed</state>"), "{r}");

    // The gateway goes away too: an SCI that stops answering now is a suspected partition,
    // STALE until its grace period ends, flagged and counted.
    nc.edit(&format!(
        "{}<failure-detection><probe><reference><name>gw</name>{}</reference>{}</probe></failure-detection>",
        sci("sci-cut", 250),
        tcp(closed_port()),
        probe("sci-cut", tcp(closed_port())),
    ))
    .await;
    let (status, body) = push(&agent, &report("sci-cut", 1, 100)).await;
    assert_eq!(status, 200, "{body}");
    let r = nc
        .wait("the partition verdict", "<failure-detection/>", |r| {
            r.contains("<partitions-suspected>1</partitions-suspected>")
        })
        .await;
    assert!(
        r.contains("<verdict>partition-suspected</verdict>") && r.contains("<reference>no-answer</reference>"),
        "{r}"
    );
    let r = nc.get(&entry("sci-cut")).await;
    assert!(r.contains("<state>stale</state>") && r.contains("partition-suspected"), "{r}");
    wait_for("the partition in the log", || {
        agent
            .stderr_lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("network partition suspected") && l.contains("sci-cut"))
    })
    .await;
    // An https probe is not supported: the commit is refused, saying so.
    let r = nc
        .call(&format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\"><failure-detection><probe>\
             <target><csci-id>sci-cut</csci-id><http-get>https://127.0.0.1/x</http-get></target></probe></failure-detection>\
             </cats-sma></config></edit-config>"
        ))
        .await;
    assert!(r.contains("<rpc-error>") && r.contains("https probes are not supported"), "{r}");
}

/// An HTTP server answering every GET with 200.
async fn http_ok() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
            });
        }
    });
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_hybrid_mode_anomalous_push_is_pulled_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent, "admin", PASSWORD).await;
    let (target, hits) = pull_target("sci-h", 150).await;
    // Interval one day: any pull below is asked for by the anomaly.
    nc.edit(&format!(
        "{}{}<validation><anomaly><action>accept-with-warning</action></anomaly></validation>",
        sci("sci-h", 60_000),
        pull_config("sci-h", target)
    ))
    .await;
    let (status, body) = push(&agent, &report("sci-h", 1, 100)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // GAS ×10 within a second: accepted with a warning, and the SCI is asked at once.
    let (status, body) = push(&agent, &report("sci-h", 2, 1000)).await;
    assert_eq!(status, 200, "{body}");
    let pulled = "<collection><pull><target><csci-id>sci-h</csci-id></target></pull></collection>";
    let r = nc.wait("the anomaly pull", pulled, |r| r.contains("<pulls>1</pulls>")).await;
    assert!(r.contains("<anomaly-pulls>1</anomaly-pulls>") && r.contains("<stale-pulls>0</stale-pulls>"), "{r}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // The pulled report went through the validator like any other and is in the cache.
    let r =
        nc.wait("the pulled report", &entry("sci-h"), |r| r.contains("<sequence-number>1001</sequence-number>")).await;
    assert!(r.contains("<gas>150</gas>"), "{r}");
    // It was anomalous too (1000 → 150), yet asked for no second pull.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(hits.load(Ordering::SeqCst), 1, "a pulled report never asks for another pull");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_metric_cache_eviction_and_deregistration_are_notified_and_replays_stay_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent, "admin", PASSWORD).await;
    nc.edit(&format!("<cache><max-entries>2</max-entries></cache>{}{}", sci("sci-a", 60_000), sci("sci-b", 60_000)))
        .await;
    let mut events = Events::open(&agent).await;
    let (a, b) = (report("sci-a", 5, 100), report("sci-b", 5, 100));
    for r in [&a, &b] {
        let (status, body) = push(&agent, r).await;
        assert_eq!(status, 200, "{body}");
    }
    // Deregistered: notified (new-state failed, its metrics withdrawn).
    nc.edit("<scis><sci nc:operation=\"delete\"><csci-id>sci-b</csci-id></sci></scis>").await;
    let n = events.state_change("sci-b", "deregistered").await;
    assert!(n.contains("<old-state>healthy</old-state>") && n.contains("<new-state>failed</new-state>"), "{n}");
    // Registered again: the replay of its last report is still refused.
    nc.edit(&sci("sci-b", 60_000)).await;
    let (status, body) = push(&agent, &b).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("\"duplicate\""), "{body}");
    // A third SCI fills the cache: the least recently used (sci-a) is evicted, notified.
    nc.edit(&sci("sci-c", 60_000)).await;
    let n = events.state_change("sci-a", "evicted").await;
    assert!(n.contains("<new-state>failed</new-state>"), "{n}");
    let r = nc.get("<cache/>").await;
    assert!(r.contains("<evictions>1</evictions>") && r.contains("<retained-histories>1</retained-histories>"), "{r}");
    // sci-a comes back with a replay: refused, its history outlived the entry.
    let (status, body) = push(&agent, &a).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("\"duplicate\""), "{body}");
    // Its next report is accepted as usual.
    let (status, body) = push(&agent, &report("sci-a", 6, 100)).await;
    assert_eq!(status, 200, "{body}");
    let r = nc.get("<statistics/>").await;
    assert!(r.contains("duplicate</reason><count>2</count>"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_soft_state_aging_stale_sci_is_pulled_and_recovers_through_the_running_agent() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent, "admin", PASSWORD).await;
    let (target, hits) = pull_target("sci-s", 250).await;
    // TTL 600 ms, grace 30 s, pull interval one day: a pull is the STALE path's.
    nc.edit(&format!(
        "{}{}<cache><grace-period>30000</grace-period></cache>",
        sci("sci-s", 300),
        pull_config("sci-s", target)
    ))
    .await;
    let mut events = Events::open(&agent).await;
    // (200 → 250 pulled within a second is no anomaly.)
    let (status, body) = push(&agent, &report("sci-s", 1, 200)).await;
    assert_eq!(status, 200, "{body}");
    // The SCI stops pushing: STALE, the agent pulls, the answer brings it back.
    events.state_change("sci-s", "ttl-expired").await;
    let n = events.state_change("sci-s", "report-received").await;
    assert!(n.contains("<old-state>stale</old-state>") && n.contains("<new-state>healthy</new-state>"), "{n}");
    assert!(hits.load(Ordering::SeqCst) >= 1);
    // Visible over RESTCONF: the pulled metrics, the pull counted as a STALE pull.
    let curl = Curl::new(&agent);
    let r = curl.get("/data/cats-sma:cats-sma/metric-cache/entry=sci-s");
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    let e = &v["cats-sma:entry"][0];
    assert_eq!(e["gas"], 250, "{v}");
    let seq: u64 = e["sequence-number"].to_string().trim_matches('"').parse().unwrap_or(0);
    assert!(seq > 1000, "the pulled report's sequence: {v}");
    let r = curl.get("/data/cats-sma:cats-sma/collection/pull/target=sci-s/state");
    let v = r.json();
    let stale = v["cats-sma:state"]["stale-pulls"].as_str().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    assert!(stale >= 1, "{v}");
    assert_eq!(v["cats-sma:state"]["anomaly-pulls"], "0", "{v}");
}
