//! Seed 004, Protocol Adapter (distributed model): the agent's BGP-LS speaker against a real
//! BGP speaker, Debian's gobgpd, started here on loopback with a generated configuration.
//! The session comes up (RFC 4271 OPEN with the BGP-LS AFI/SAFI of RFC 9552), the services'
//! Prefix NLRIs with the CATS TLVs reach gobgpd's RIB, an update and a withdrawal propagate,
//! RFC 2439 damping holds back a flapping service, and a gobgpd restart ends in a new
//! session and a full re-advertisement.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::collections::BTreeMap;

use cats_sma::routing::bgp::encode::{decode_attribute, CodePoints, DecodedMetrics};
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use netgauze_bgp_pkt::codec::BgpCodec;
use netgauze_bgp_pkt::nlri::{BgpLsNlri, BgpLsNlriValue, BgpLsPrefixDescriptor};
use netgauze_bgp_pkt::path_attribute::{MpReach, MpUnreach, PathAttributeValue};
use netgauze_bgp_pkt::BgpMessage;
use tokio_util::codec::Decoder;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A gobgpd process, killed on drop.
struct Gobgpd {
    child: Child,
    api: u16,
    dir: std::path::PathBuf,
}

impl Drop for Gobgpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// gobgpd as AS 65001 on `bgp_port`, with the agent (AS 65000 on 127.0.0.1) as a passive
/// BGP-LS neighbor (`passive`: gobgpd waits for the agent) or an active one it connects to
/// on `agent_port`.
fn gobgpd(dir: &Path, bgp_port: u16, passive: bool, agent_port: u16) -> Gobgpd {
    let conf = dir.join("gobgpd.toml");
    let transport = if passive {
        "passive-mode = true".to_owned()
    } else {
        format!("passive-mode = false\n    remote-port = {agent_port}")
    };
    std::fs::write(
        &conf,
        format!(
            r#"[global.config]
  as = 65001
  router-id = "10.255.0.1"
  port = {bgp_port}
  local-address-list = ["127.0.0.1"]

[[neighbors]]
  [neighbors.config]
    neighbor-address = "127.0.0.1"
    peer-as = 65000
  [neighbors.timers.config]
    connect-retry = 1
  [neighbors.transport.config]
    {transport}
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ls"

[[mrt-dump]]
  [mrt-dump.config]
    dump-type = "updates"
    file-name = "{mrt}"
"#,
            mrt = dir.join("updates.mrt").display()
        ),
    )
    .unwrap();
    let api = free_port();
    let child = Command::new("gobgpd")
        .arg("-f")
        .arg(&conf)
        .arg(format!("--api-hosts=127.0.0.1:{api}"))
        .args(["--pprof-disable", "-p", "-l", "info"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("gobgpd.log")).unwrap())
        .spawn()
        .expect("gobgpd (Debian package gobgpd, installed by scripts/setup.sh)");
    Gobgpd { child, api, dir: dir.to_owned() }
}

/// The prefixes of the BGP-LS routes gobgpd holds (`gobgp global rib -a ls -j`: its keys
/// name each NLRI; gobgp 3.10's client cannot convert BGP-LS paths back, so their
/// attributes come from the MRT dump below).
fn rib_prefixes(g: &Gobgpd) -> Vec<String> {
    let out = Command::new("gobgp")
        .args(["-p", &g.api.to_string(), "-u", "127.0.0.1", "global", "rib", "-a", "ls", "-j"])
        .output()
        .expect("gobgp client");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut out = Vec::new();
    for key in v.as_object().into_iter().flat_map(|m| m.keys()) {
        // "NLRI { PREFIXv4 { LOCAL_NODE: 10.255.0.2 PREFIX: [198.51.100.0/24] } }"
        if let Some(p) = key.split("PREFIX: [").nth(1).and_then(|r| r.split(']').next()) {
            out.push(p.to_owned());
        }
    }
    out
}

/// The UPDATEs gobgpd received, from its MRT "updates" dump (RFC 6396 BGP4MP_MESSAGE_AS4,
/// which gobgpd writes with the message as received), decoded with NetGauze: the last
/// attribute announced per prefix.
fn received(dir: &Path) -> BTreeMap<String, DecodedMetrics> {
    let bytes = std::fs::read(dir.join("updates.mrt")).unwrap_or_default();
    let mut last = BTreeMap::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, sub) =
            (u16::from_be_bytes([bytes[at + 4], bytes[at + 5]]), u16::from_be_bytes([bytes[at + 6], bytes[at + 7]]));
        let len = u32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let Some(body) = bytes.get(at + 12..at + 12 + len) else { break };
        at += 12 + len;
        if kind != 16 || sub != 4 {
            continue; // only BGP4MP / MESSAGE_AS4
        }
        let afi = u16::from_be_bytes([body[10], body[11]]);
        let ip_len = if afi == 1 { 4 } else { 16 };
        let mut msg = bytes::BytesMut::from(&body[12 + 2 * ip_len..]);
        let Ok(Some((BgpMessage::Update(u), _))) = BgpCodec::new(true).decode(&mut msg) else { continue };
        let mut ls = None;
        let mut reach = vec![];
        let mut unreach = vec![];
        for a in u.path_attributes() {
            match a.value() {
                PathAttributeValue::BgpLs(x) => ls = Some(x.clone()),
                PathAttributeValue::MpReach(MpReach::BgpLs { nlri, .. }) => reach = nlri.to_vec(),
                PathAttributeValue::MpUnreach(MpUnreach::BgpLs { nlri }) => unreach = nlri.to_vec(),
                _ => {}
            }
        }
        for n in unreach {
            last.remove(&prefix_of(&n));
        }
        for n in reach {
            let m = ls
                .as_ref()
                .map(|a| decode_attribute(&CodePoints::default(), a).expect("CATS TLVs"))
                .unwrap_or_default();
            last.insert(prefix_of(&n), m);
        }
    }
    last
}

fn prefix_of(n: &BgpLsNlri) -> String {
    let (BgpLsNlriValue::Ipv4Prefix(p) | BgpLsNlriValue::Ipv6Prefix(p)) = n.nlri() else { return String::new() };
    p.prefix_descriptors()
        .iter()
        .find_map(|d| match d {
            BgpLsPrefixDescriptor::IpReachabilityInformation(r) => Some(r.address().to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

/// What gobgpd holds: each prefix in its RIB with the metrics it was last announced with.
fn rib(g: &Gobgpd) -> Vec<(String, DecodedMetrics)> {
    let got = received(&g.dir);
    rib_prefixes(g)
        .into_iter()
        .map(|p| {
            let m = got.get(&p).cloned().unwrap_or_default();
            (p, m)
        })
        .collect()
}

fn gas_of(routes: &[(String, DecodedMetrics)], prefix: &str) -> Option<u32> {
    routes.iter().find(|(p, _)| p.contains(prefix)).and_then(|(_, m)| m.gas)
}

async fn wait_rib(g: &Gobgpd, what: &str, ok: impl Fn(&[(String, DecodedMetrics)]) -> bool) {
    for _ in 0..300 {
        let r = rib(g);
        if ok(&r) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: gobgpd holds {:?}", rib(g));
}

fn report(csci: &str, cs: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

const NS: &str = "urn:cats-sma:yang:cats-sma";
const RT: &str = "urn:cats-sma:yang:cats-sma-routing";

fn sci(csci: &str, cs: &str) -> String {
    format!("<sci><csci-id>{csci}</csci-id><cs-id>{cs}</cs-id><authentication>none</authentication></sci>")
}

fn edit(inner: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="{NS}">{inner}</cats-sma></config></edit-config>"#
    )
}

fn speaker(neighbor: &str, extra: &str) -> String {
    format!(
        r#"<routing xmlns="{RT}"><bgp-ls>
          <local-as>65000</local-as><router-id>10.255.0.2</router-id><hold-time>30</hold-time>
          <connect-retry-initial>100</connect-retry-initial><connect-retry-max>1000</connect-retry-max>
          <min-advertisement-interval>0</min-advertisement-interval>
          <damping><half-life>4</half-life><reuse-limit>750</reuse-limit><suppress-limit>2000</suppress-limit>
            <withdrawal-penalty>1000</withdrawal-penalty></damping>
          <service><cs-id>AR1</cs-id><prefix>198.51.100.0/24</prefix></service>
          {neighbor}{extra}
        </bgp-ls></routing>"#
    )
}

const STATE: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <routing xmlns="urn:cats-sma:yang:cats-sma-routing"><bgp-ls/></routing></cats-sma></filter></get>"#;

async fn wait_state(s: &mut RawSession, what: &str, ok: impl Fn(&str) -> bool) -> String {
    for _ in 0..300 {
        let r = s.rpc11(&rpc(40, STATE)).await;
        if ok(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: {}", s.rpc11(&rpc(41, STATE)).await);
}

async fn ok(s: &mut RawSession, body: &str) {
    let r = s.rpc11(&rpc(7, body)).await;
    assert!(r.contains("<ok/>"), "{r}");
}

async fn post(sci: SocketAddr, body: String) {
    let (status, text) = http_post(sci, "/reports", "application/json", body.as_bytes()).await;
    assert!(status < 300, "{status} {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_bgp_ls_to_gobgpd_update_withdraw_damping_and_peer_restart() {
    let dir = tempfile::tempdir().unwrap();
    let bgp_port = free_port();
    let mut g = gobgpd(dir.path(), bgp_port, true, 0);
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let neighbor =
        format!("<neighbor><address>127.0.0.1</address><remote-as>65001</remote-as><port>{bgp_port}</port></neighbor>");
    let scis = format!(
        "<scis>{}{}{}</scis>",
        sci("10.0.0.1:80", "AR1"),
        sci("10.0.0.2:80", "203.0.113.10"),
        sci("10.0.0.3:80", "LLM1")
    );
    ok(
        &mut s,
        &edit(&format!(
            r#"<agent><site-id>site-a</site-id></agent>{scis}
            <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval></update-control></policy>
            {}"#,
            speaker(&neighbor, "")
        )),
    )
    .await;

    // RFC 4271 section 8: the session reaches Established with gobgpd.
    let st = wait_state(&mut s, "session established", |r| r.contains("<state>established</state>")).await;
    assert!(st.contains("<peer-router-id>10.255.0.1</peer-router-id>"), "{st}");
    assert!(st.contains("<negotiated-hold-time>30</negotiated-hold-time>"), "{st}");

    post(sci_addr, report("10.0.0.1:80", "AR1", 1, 500)).await;
    post(sci_addr, report("10.0.0.2:80", "203.0.113.10", 1, 70)).await;
    post(sci_addr, report("10.0.0.3:80", "LLM1", 1, 9)).await;
    // The configured prefix, and a CS-ID that is itself an address (a host prefix); LLM1
    // has neither and is counted, not advertised.
    wait_rib(&g, "both services in gobgpd's BGP-LS RIB", |r| {
        gas_of(r, "198.51.100.0/24") == Some(500) && gas_of(r, "203.0.113.10/32") == Some(70)
    })
    .await;
    let routes = rib(&g);
    assert_eq!(routes.len(), 2, "{routes:?}");
    let (_, m) = routes.iter().find(|(p, _)| p.contains("198.51.100.0/24")).unwrap();
    assert_eq!(m.cs_id.as_deref(), Some("AR1"));
    assert_eq!(m.site_id.as_deref(), Some("site-a"));
    assert_eq!(m.computing_time_ms, Some(5));
    assert_eq!(m.health, Some(0));
    assert!(m.generation.is_some());
    wait_state(&mut s, "LLM1 unmapped", |r| r.contains("<unmapped-services>1</unmapped-services>")).await;

    // An update propagates.
    post(sci_addr, report("10.0.0.1:80", "AR1", 2, 400)).await;
    wait_rib(&g, "AR1 updated to 400", |r| gas_of(r, "198.51.100.0/24") == Some(400)).await;

    // A withdrawal: the service loses its only SCI.
    ok(&mut s, &edit(r#"<scis><sci xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:operation="delete"><csci-id>10.0.0.1:80</csci-id></sci></scis>"#)).await;
    wait_rib(&g, "AR1 withdrawn", |r| gas_of(r, "198.51.100.0/24").is_none() && r.len() == 1).await;

    // RFC 2439: two more flaps (penalty 3 x 1000 > 2000) and the service is held back.
    for seq in [3, 4] {
        ok(&mut s, &edit(&format!("<scis>{}</scis>", sci("10.0.0.1:80", "AR1")))).await;
        post(sci_addr, report("10.0.0.1:80", "AR1", seq, 300)).await;
        wait_rib(&g, "AR1 back", |r| gas_of(r, "198.51.100.0/24") == Some(300)).await;
        ok(&mut s, &edit(r#"<scis><sci xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:operation="delete"><csci-id>10.0.0.1:80</csci-id></sci></scis>"#)).await;
        wait_rib(&g, "AR1 withdrawn again", |r| gas_of(r, "198.51.100.0/24").is_none()).await;
    }
    ok(&mut s, &edit(&format!("<scis>{}</scis>", sci("10.0.0.1:80", "AR1")))).await;
    post(sci_addr, report("10.0.0.1:80", "AR1", 5, 250)).await;
    let st = wait_state(&mut s, "AR1 suppressed", |r| r.contains("<status>suppressed</status>")).await;
    assert!(st.contains("<flaps>3</flaps>"), "{st}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(gas_of(&rib(&g), "198.51.100.0/24"), None, "a suppressed service stays withdrawn");
    // Half-life 4 s: the penalty decays below reuse in about 8 s, and it is advertised again.
    wait_rib(&g, "AR1 reused after the penalty decayed", |r| gas_of(r, "198.51.100.0/24") == Some(250)).await;

    // gobgpd restarts: a new session and a full re-advertisement.
    drop(g);
    wait_state(&mut s, "session down", |r| !r.contains("<state>established</state>")).await;
    g = gobgpd(dir.path(), bgp_port, true, 0);
    wait_state(&mut s, "session re-established", |r| {
        r.contains("<established-transitions>2</established-transitions>")
    })
    .await;
    wait_rib(&g, "full re-advertisement", |r| {
        gas_of(r, "198.51.100.0/24") == Some(250) && gas_of(r, "203.0.113.10/32") == Some(70)
    })
    .await;
}
