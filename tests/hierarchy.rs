//! Seed 004, Scalability (issue 20): a coordinator C-SMA over subordinate C-SMAs, each a
//! real agent process; the coordinator holds a NETCONF session over SSH and an RFC 8641
//! on-change subscription to each subordinate's metric cache, and reports one site to the
//! reference C-PS.

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use cats_sma::cps::auth::hex;
use cats_sma::cps::reference::RefCps;
use common::{connect, http_post, leaf_after, start_agent, AgentProcess, Nc, PASSWORD};
use cps_support::*;

/// Registers SCIs (authentication none, reporting every ten minutes: none goes stale here
/// however slow the machine).
async fn register(agent: &AgentProcess, scis: &[&str]) {
    let mut nc = Nc::open(agent).await;
    let r = nc.edit(&format!("<scis>{}</scis>", sci_list(scis))).await;
    assert!(r.contains("<ok/>"), "{r}");
    persist(&mut nc).await;
}

/// SCI entries for these CSCI-IDs.
fn sci_list<S: AsRef<str>>(ids: &[S]) -> String {
    ids.iter()
        .map(|id| {
            format!(
                "<sci><csci-id>{}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication>\
                 <expected-interval>600000</expected-interval></sci>",
                id.as_ref()
            )
        })
        .collect()
}

/// running → startup, so that a restart keeps the configuration.
async fn persist(nc: &mut Nc) {
    let r = nc.call("<copy-config><target><startup/></target><source><running/></source></copy-config>").await;
    assert!(r.contains("<ok/>"), "{r}");
}

/// Posts one report per SCI to a subordinate's collector. After a `kill -9` the agent
/// refuses reports timestamped before its replay floor (a moment after its start) as an
/// SCI's retry would find: the report is sent again, with a new timestamp, until then.
async fn report(agent: &AgentProcess, seq: u64, scis: &[(&str, u32)]) {
    for (id, gas) in scis {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let body = format!(
                r#"{{"csci-id":"{id}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
                chrono::Utc::now().to_rfc3339()
            );
            let (status, text) =
                http_post(agent.sci_addr.unwrap(), "/reports", "application/json", body.as_bytes()).await;
            if status != 200 && text.contains("\"replay\"") && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(status, 200, "{id}: {text}");
            break;
        }
    }
}

/// The subordinate's SSH host key as an OpenSSH public key line.
async fn host_key(agent: &AgentProcess) -> String {
    let s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.host_key.unwrap().to_openssh().unwrap()
}

fn subordinate(name: &str, addr: SocketAddr, key: &str) -> String {
    format!(
        "<subordinate><name>{name}</name><address>{}</address><port>{}</port><username>admin</username>\
         <password>{PASSWORD}</password><host-key>{key}</host-key></subordinate>",
        addr.ip(),
        addr.port()
    )
}

/// The coordinator's configuration: its subordinates and the reference C-PS.
async fn coordinate(coordinator: &AgentProcess, subordinates: &str, cps: SocketAddr) {
    let mut nc = Nc::open(coordinator).await;
    let r = nc
        .edit(&format!(
            r#"<agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
            <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval>
              <gas-delta-percent>0</gas-delta-percent><gas-delta-absolute>0</gas-delta-absolute></update-control></policy>
            <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer><name>ref</name><url>http://{cps}</url>
              <allowed-cs-id>AR1</allowed-cs-id><psk><key-id>{KEY_ID}</key-id><key>{}</key></psk></peer></c-ps>
            <hierarchy xmlns="urn:cats-sma:yang:cats-sma-hierarchy"><withdraw-after>3</withdraw-after>
              <reconnect><initial>200</initial><max>1000</max></reconnect>{subordinates}</hierarchy>"#,
            hex(SECRET)
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    persist(&mut nc).await;
}

fn site_gas(cps: &RefCps) -> Option<u32> {
    cst_services(&cps.state).into_iter().find(|(cs, _)| cs == "AR1").map(|(_, g)| g)
}

async fn wait_gas(cps: &RefCps, want: u32, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while site_gas(cps) != Some(want) {
        assert!(tokio::time::Instant::now() < deadline, "{what}: the C-PS has {:?}, not {want}", site_gas(cps));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const STATE: &str = "<hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\"/>";

fn sub(dir: &Path) -> AgentProcess {
    start_agent(dir, &["--sci-listen", "127.0.0.1:0"])
}

/// A subordinate that also listens for NETCONF on a fixed port, so that a restart comes
/// back where the coordinator looks for it.
fn sub_at(dir: &Path, netconf: SocketAddr) -> AgentProcess {
    start_agent(dir, &["--sci-listen", "127.0.0.1:0", "--netconf-listen", &netconf.to_string()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_scalability_coordinator_over_three_subordinates_kill_restart_and_rebuild() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let fixed: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut subs: Vec<AgentProcess> = (0..3).map(|i| sub_at(dirs[i].path(), fixed[i])).collect();
    register(&subs[0], &["a1", "a2"]).await;
    register(&subs[1], &["b1", "b2"]).await;
    // c1 is also held by the first subordinate: a duplicate, counted once.
    register(&subs[2], &["c1", "a1"]).await;
    report(&subs[0], 1, &[("a1", 100), ("a2", 20)]).await;
    report(&subs[1], 1, &[("b1", 300), ("b2", 4)]).await;
    let cps = start_cps(free_addr(), None).await;
    let mut coordinator = sub(dirs[3].path());
    let mut list = String::new();
    for (i, s) in subs.iter().enumerate() {
        list.push_str(&subordinate(&format!("s{i}"), fixed[i], &host_key(s).await));
    }
    coordinate(&coordinator, &list, cps.addr).await;
    wait_gas(&cps, 424, "the sync-on-start push-updates of two subordinates").await;
    // The third reports after its subscription: an on-change push. Its a1 is refused.
    let mut nc = Nc::open(&coordinator).await;
    nc.wait("s2 subscribed", STATE, |r| {
        r.split("<name>s2</name>").nth(1).is_some_and(|t| t.contains("<status>subscribed</status>"))
    })
    .await;
    report(&subs[2], 1, &[("c1", 500), ("a1", 7)]).await;
    wait_gas(&cps, 924, "an on-change push-change-update").await;
    let r = nc.wait("the duplicate listed", STATE, |r| r.contains("<held-by>s0</held-by>")).await;
    assert!(r.contains("<csci-id>a1</csci-id>"), "{r}");
    // The operator removes it from s2: the duplicate goes, s0's a1 stays.
    let mut nc2 = Nc::open(&subs[2]).await;
    let r = nc2
        .edit(r#"<scis><sci xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:operation="delete"><csci-id>a1</csci-id></sci></scis>"#)
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    persist(&mut nc2).await;
    nc.wait("the duplicate gone", STATE, |r| !r.contains("<held-by>")).await;
    assert_eq!(site_gas(&cps), Some(924));
    // Each SCI is attributed to its subordinate.
    let r = nc.get("<metric-cache><entry><csci-id>b1</csci-id></entry></metric-cache>").await;
    assert!(r.contains("<learned-from>s1</learned-from>"), "{r}");
    assert!(r.contains("<authentication>subordinate</authentication>"), "{r}");
    // A report of a mirrored SCI straight to the coordinator is refused.
    let body = format!(
        r#"{{"csci-id":"b1","cs-id":"AR1","seq":9,"timestamp":"{}","gas":1,"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    );
    let (status, _) = http_post(coordinator.sci_addr.unwrap(), "/reports", "application/json", body.as_bytes()).await;
    assert_ne!(status, 200);

    // kill -9 of a subordinate: its contribution is withdrawn after withdraw-after (3 s).
    let _ = subs[1].child.kill();
    let _ = subs[1].child.wait();
    wait_gas(&cps, 620, "the killed subordinate's SCIs withdrawn").await;
    nc.wait("s1 withdrawn", STATE, |r| {
        r.split("<name>s1</name>").nth(1).is_some_and(|t| t.contains("<status>withdrawn</status>"))
    })
    .await;

    // Restarted (same state directory: same host key and SCIs; same port), the
    // coordinator's retries find it; it reports again and its contribution comes back, once.
    subs[1] = sub_at(dirs[1].path(), fixed[1]);
    let mut nc = Nc::open(&coordinator).await;
    nc.wait("s1 subscribed again", STATE, |r| {
        r.split("<name>s1</name>").nth(1).is_some_and(|t| t.contains("<status>subscribed</status>"))
    })
    .await;
    report(&subs[1], 2, &[("b1", 300), ("b2", 4)]).await;
    wait_gas(&cps, 924, "the restarted subordinate's SCIs back").await;
    // (Changes below the anomaly threshold, 50 %, and above the update controller's
    // GAS delta, 10 % of the site.)
    report(&subs[1], 3, &[("b1", 440), ("b2", 4)]).await;
    wait_gas(&cps, 1064, "no double counting after the restart").await;
    // A change of the global settings restarts every session; each new session's
    // push-update confirms its contribution, so withdraw-after (3 s) passing withdraws
    // nothing.
    let r = nc
        .edit("<hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\"><connect-timeout>4000</connect-timeout></hierarchy>")
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(site_gas(&cps), Some(1064));
    let r = nc.get("<services/>").await;
    assert!(r.contains("<site-gas>1064</site-gas>"), "{r}");

    // A coordinator restart rebuilds everything from the subordinates.
    let _ = coordinator.child.kill();
    let _ = coordinator.child.wait();
    coordinator = sub(dirs[3].path());
    let mut nc = Nc::open(&coordinator).await;
    nc.wait("all subscribed again", STATE, |r| r.matches("<status>subscribed</status>").count() == 3).await;
    nc.wait("the rebuilt site", "<services/>", |r| r.contains("<site-gas>1064</site-gas>")).await;
    report(&subs[1], 4, &[("b1", 640)]).await;
    wait_gas(&cps, 1264, "the rebuilt coordinator reports on").await;
    // Disabling a subordinate withdraws its contribution at once.
    let r = nc
        .edit(
            "<hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\"><subordinate><name>s0</name>\
             <enabled>false</enabled></subordinate></hierarchy>",
        )
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    wait_gas(&cps, 1144, "the disabled subordinate's SCIs withdrawn").await;
    nc.wait("s0 disabled", STATE, |r| {
        r.split("<name>s0</name>").nth(1).is_some_and(|t| t.contains("<status>disabled</status>"))
    })
    .await;
    drop(coordinator);
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_scalability_subordinate_with_a_wrong_host_key_is_refused() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let s0 = sub(dirs[0].path());
    let other = sub(dirs[1].path());
    register(&s0, &["x1"]).await;
    report(&s0, 1, &[("x1", 10)]).await;
    let coordinator = sub(dirs[2].path());
    // The pin is another agent's key: no session, no SCI, the mismatch counted.
    let wrong = host_key(&other).await;
    let mut nc = Nc::open(&coordinator).await;
    let r = nc
        .edit(&format!(
            "<hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\"><reconnect><initial>200</initial>\
             <max>500</max></reconnect>{}</hierarchy>",
            subordinate("s0", s0.addr, &wrong)
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let r = nc
        .wait("the mismatch counted", STATE, |r| {
            !r.contains("<host-key-mismatches>0<") && r.contains("<host-key-mismatches>")
        })
        .await;
    assert!(r.contains("host key"), "{r}");
    let r = nc.get("<metric-cache/>").await;
    assert!(!r.contains("x1"), "{r}");
}

fn mqtt_report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_scalability_agents_of_one_mqtt_shared_group_under_a_coordinator_give_one_site() {
    // Two agents split an MQTT v5 shared subscription (each report reaches one of them), so
    // both hold every SCI; the coordinator (shared-scis) keeps the newest report of each.
    let dir = tempfile::tempdir().unwrap();
    let port = common::mosquitto::free_port();
    let _broker = common::mosquitto::broker(dir.path(), port);
    let subs: Vec<AgentProcess> = (0..2).map(|i| sub(&dir.path().join(format!("s{i}")))).collect();
    let n = 10u64;
    let ids: Vec<String> = (0..n).map(|k| format!("sci-{k}")).collect();
    let mut ncs = Vec::new();
    for (i, a) in subs.iter().enumerate() {
        let mut nc = Nc::open(a).await;
        let scis = sci_list(&ids);
        let r = nc
            .edit(&format!(
                "<collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port>\
                 <allow-plaintext>true</allow-plaintext><shared-group>site-a</shared-group><client-id>agent-{i}</client-id></mqtt></collection>\
                 <validation><anomaly><gas-change-window>1</gas-change-window></anomaly></validation><scis>{scis}</scis>"
            ))
            .await;
        assert!(r.contains("<ok/>"), "{r}");
        ncs.push(nc);
    }
    // Both agents in the group: probe until each has received a report.
    let received = |r: &str| common::count(r, "reports-received");
    let mut seq = 1u64;
    loop {
        common::mosquitto::publish(port, "cats/sci/sci-0/report", &mqtt_report("sci-0", seq, 100));
        seq += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let a = received(&ncs[0].get("<statistics/>").await);
        let b = received(&ncs[1].get("<statistics/>").await);
        if a > 0 && b > 0 {
            break;
        }
        assert!(seq < 100, "both agents joined the shared group");
    }
    let cps = start_cps(free_addr(), None).await;
    let coordinator = sub(&dir.path().join("coordinator"));
    let mut list = String::new();
    for (i, s) in subs.iter().enumerate() {
        list.push_str(&subordinate(&format!("s{i}"), s.addr, &host_key(s).await));
    }
    coordinate(&coordinator, &format!("<shared-scis>true</shared-scis>{list}"), cps.addr).await;
    for (k, id) in ids.iter().enumerate() {
        common::mosquitto::publish(port, &format!("cats/sci/{id}/report"), &mqtt_report(id, 1000 + k as u64, 100));
    }
    wait_gas(&cps, 1000, "one site of ten SCIs, wherever their reports landed").await;
    // Each SCI's next report lands at either agent: the newest wins at the coordinator.
    for (k, id) in ids.iter().enumerate() {
        common::mosquitto::publish(port, &format!("cats/sci/{id}/report"), &mqtt_report(id, 2000 + k as u64, 60));
    }
    wait_gas(&cps, 600, "the newest report of every SCI").await;
    let mut nc = Nc::open(&coordinator).await;
    let r = nc.get("<services/>").await;
    assert!(r.contains("<sci-count>10</sci-count>"), "{r}");
    // Both agents took a share of the reports.
    let a = received(&ncs[0].get("<statistics/>").await);
    let b = received(&ncs[1].get("<statistics/>").await);
    assert!(a > 1 && b > 1, "{a} {b}");
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_scalability_domain_c_sma_aggregates_two_sites_before_the_c_ps() {
    // Site-level C-SMAs report to a domain-level C-SMA, which aggregates across sites: it
    // keeps each site's aggregate per CS-ID and reports the domain total.
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let fixed: Vec<SocketAddr> = (0..2).map(|_| free_addr()).collect();
    let mut sites: Vec<AgentProcess> = (0..2).map(|i| sub_at(dirs[i].path(), fixed[i])).collect();
    register(&sites[0], &["a1", "a2"]).await;
    register(&sites[1], &["b1"]).await;
    report(&sites[0], 1, &[("a1", 100), ("a2", 50)]).await;
    report(&sites[1], 1, &[("b1", 300)]).await;
    let cps = start_cps(free_addr(), None).await;
    let domain = sub(dirs[2].path());
    let mut list = String::new();
    for (i, s) in sites.iter().enumerate() {
        list.push_str(&subordinate(&format!("site-{i}"), fixed[i], &host_key(s).await));
    }
    coordinate(&domain, &format!("<role>domain</role>{list}"), cps.addr).await;
    wait_gas(&cps, 450, "the domain total of two sites").await;
    let mut nc = Nc::open(&domain).await;
    // Per site and CS-ID, attributed to its site.
    let r = nc.get("<metric-cache/>").await;
    assert!(r.contains("<csci-id>site-0/AR1</csci-id>"), "{r}");
    assert!(r.contains("<learned-from>site-1</learned-from>"), "{r}");
    assert!(leaf_after(&r, "<csci-id>site-0/AR1</csci-id>", "gas").as_deref() == Some("150"), "{r}");
    let r = nc.get("<services/>").await;
    assert!(r.contains("<sci-count>2</sci-count>"), "{r}");
    // A site's aggregate changes: the domain total follows.
    report(&sites[1], 2, &[("b1", 400)]).await;
    wait_gas(&cps, 550, "a site's change in the domain total").await;
    // A site lost: its aggregate leaves the domain total after withdraw-after.
    drop(sites.pop());
    wait_gas(&cps, 150, "the lost site withdrawn").await;
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed003_agent_chain_an_overloaded_coordinator_dampens_its_subordinates_subscriptions() {
    // The coordinator is its subordinates' adjacent peer: its overload (here: more mirrored
    // updates per second than its rate threshold) is asked of them as YANG-Push dampening,
    // and taken back when the overload ends.
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let s0 = sub(dirs[0].path());
    register(&s0, &["x1", "x2"]).await;
    report(&s0, 1, &[("x1", 100), ("x2", 100)]).await;
    let coordinator = sub(dirs[1].path());
    let mut nc = Nc::open(&coordinator).await;
    let r = nc
        .edit(&format!(
            "<overload-control xmlns=\"urn:cats-sma:yang:cats-sma-overload\"><reporting>\
             <evaluation-interval>100</evaluation-interval><rate-threshold>2</rate-threshold></reporting></overload-control>\
             <hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\">{}</hierarchy>",
            subordinate("s0", s0.addr, &host_key(&s0).await)
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    nc.wait("s0 subscribed", STATE, |r| r.contains("<status>subscribed</status>")).await;
    // Twenty updates a second for two seconds: ten times the threshold.
    for seq in 2..42u64 {
        report(&s0, seq, &[("x1", 100 + seq as u32)]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = nc.wait("dampening asked", STATE, |r| !r.contains("<dampening-period>0<")).await;
    assert!(!r.contains("<dampening-changes>0<"), "{r}");
    // The subordinate's subscription carries it (RFC 8641 modify-subscription).
    let mut sub_nc = Nc::open(&s0).await;
    let subs = sub_nc
        .call(
            "<get><filter type=\"subtree\"><subscriptions xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\"/></filter></get>",
        )
        .await;
    let d = leaf_after(&subs, "<on-change", "dampening-period").and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    assert!(d > 0, "{subs}");
    // The overload ends (no more updates): the dampening is taken back.
    nc.wait("dampening back to 0", STATE, |r| r.contains("<dampening-period>0<")).await;
}
