//! Seed 004, Protocol Adapter (distributed model): the agent's BGP-LS speaker against a real
//! BGP speaker, Debian's gobgpd, started here on loopback with a generated configuration.
//! The session comes up (RFC 4271 OPEN with the BGP-LS AFI/SAFI of RFC 9552), the services'
//! Prefix NLRIs with the CATS TLVs reach gobgpd's RIB, an update and a withdrawal propagate,
//! RFC 2439 damping holds back a flapping service, and a gobgpd restart ends in a new
//! session and a full re-advertisement.

mod common;
mod cps_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::collections::BTreeMap;

use cats_sma::routing::bgp::encode::{decode_attribute, ls_contents, CodePoints, DecodedMetrics};
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use netgauze_bgp_pkt::codec::BgpCodec;
use netgauze_bgp_pkt::nlri::{BgpLsNlri, BgpLsNlriValue, BgpLsPrefixDescriptor};
use netgauze_bgp_pkt::path_attribute::PathAttributeValue;
use netgauze_bgp_pkt::BgpMessage;
use tokio_util::codec::Decoder;

/// Where gobgpd writes its MRT dump for a test whose directory is `dir`. gobgpd passes the
/// name through Go's time formatting (it forces a rotation interval), which rewrites the
/// digits of a temporary directory's name and the layout words in it (`pm`, `Jan`, `Mon`,
/// `MST`, `PM`, `Z07`…): this path is spelt from lowercase letters without `p`, so none can
/// form. Removed on drop.
fn mrt_file(dir: &Path) -> std::path::PathBuf {
    use std::hash::{Hash, Hasher};
    const ALPHABET: &[u8; 16] = b"abcdefghijklnoqr";
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    let letters: String =
        format!("{:x}", h.finish()).chars().map(|c| ALPHABET[c.to_digit(16).unwrap() as usize] as char).collect();
    std::path::PathBuf::from(format!("/tmp/cats-sma-bgp-{letters}/updates.mrt"))
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    gobgpd_with(dir, bgp_port, passive, agent_port, None)
}

/// `gobgpd` with an RFC 2385 password for the agent's session.
fn gobgpd_with(dir: &Path, bgp_port: u16, passive: bool, agent_port: u16, password: Option<&str>) -> Gobgpd {
    let conf = dir.join("gobgpd.toml");
    let auth = password.map(|p| format!("\n    auth-password = \"{p}\"")).unwrap_or_default();
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
    peer-as = 65000{auth}
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
            mrt = mrt_file(dir).display()
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
    let bytes = std::fs::read(mrt_file(dir)).unwrap_or_default();
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
        let (ls, reach, unreach) = ls_contents(&u);
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
    report_health(csci, cs, seq, gas, "HEALTHY")
}

fn report_health(csci: &str, cs: &str, seq: u64, gas: u32, health: &str) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"{health}"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

const NS: &str = "urn:cats-sma:yang:cats-sma";
const RT: &str = "urn:cats-sma:yang:cats-sma-routing";

fn sci(csci: &str, cs: &str) -> String {
    // A long expected interval: an SCI is not declared failed while a test waits.
    format!(
        "<sci><csci-id>{csci}</csci-id><cs-id>{cs}</cs-id><authentication>none</authentication>\
         <expected-interval>60000</expected-interval></sci>"
    )
}

fn edit(inner: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="{NS}">{inner}</cats-sma></config></edit-config>"#
    )
}

/// A neighbor on 127.0.0.1 the agent connects to.
fn active_neighbor(remote_as: u32, port: u16, extra: &str) -> String {
    format!(
        "<neighbor><address>127.0.0.1</address><remote-as>{remote_as}</remote-as><port>{port}</port>{extra}</neighbor>"
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
    let _mrt = RemoveOnDrop(mrt_file(dir.path()).parent().unwrap().to_owned());
    let bgp_port = free_port();
    let mut g = gobgpd(dir.path(), bgp_port, true, 0);
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let neighbor = active_neighbor(65001, bgp_port, "");
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

fn leaf(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].to_owned())
}

/// RFC 4271 section 8 (passive), RFC 9552 section 5.3.3.6: gobgpd connects to the agent's
/// listener; the metrics ride in the Opaque Prefix Attribute TLV; the session's coming up
/// and going down are notified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc4271_passive_session_and_opaque_prefix_attribute() {
    let dir = tempfile::tempdir().unwrap();
    let _mrt = RemoveOnDrop(mrt_file(dir.path()).parent().unwrap().to_owned());
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let mut events = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    events.hello(true).await;
    let sub = events
        .rpc11(&rpc(1, r#"<create-subscription xmlns="urn:ietf:params:xml:ns:netconf:notification:1.0"/>"#))
        .await;
    assert!(sub.contains("<ok/>"), "{sub}");
    ok(
        &mut s,
        &edit(&format!(
            r#"<agent><site-id>site-b</site-id></agent><scis>{}</scis>
            <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval></update-control></policy>
            {}"#,
            sci("10.0.0.1:80", "AR1"),
            speaker(
                "<neighbor><address>127.0.0.1</address><remote-as>65001</remote-as><passive>true</passive></neighbor>",
                "<listen-address>127.0.0.1</listen-address><listen-port>0</listen-port>\
                 <encoding>opaque-prefix-attribute</encoding>"
            )
        )),
    )
    .await;
    let st = wait_state(&mut s, "listener bound", |r| r.contains("<listening-port>")).await;
    let port: u16 = leaf(&st, "listening-port").unwrap().parse().unwrap();
    assert_eq!(leaf(&st, "state").as_deref(), Some("active"), "{st}");
    let g = gobgpd(dir.path(), free_port(), false, port);
    post(sci_addr, report("10.0.0.1:80", "AR1", 1, 640)).await;
    wait_rib(&g, "AR1 in gobgpd, from the opaque attribute", |r| gas_of(r, "198.51.100.0/24") == Some(640)).await;
    let n = String::from_utf8_lossy(&events.read_until(b"</bgp-ls-session>").await).into_owned();
    assert!(n.contains("<state>established</state>") && n.contains("<neighbor>127.0.0.1</neighbor>"), "{n}");

    // gobgpd goes away: the session-down notification says why.
    drop(g);
    let n = String::from_utf8_lossy(&events.read_until(b"</bgp-ls-session>").await).into_owned();
    assert!(n.contains("<state>down</state>") && n.contains("<reason>"), "{n}");
}

/// RFC 4271 sections 6.1 and 6.2, hostile neighbors: an OPEN with the wrong AS is answered
/// with NOTIFICATION 2/2 (Bad Peer AS), one without BGP-LS with 2/7 (Unsupported
/// Capability), a broken marker with 1/1, a bad length with 1/2 and an unknown type with
/// 1/3; the agent keeps running and says why in the session state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc4271_6_hostile_neighbor_gets_the_right_notification() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    ok(
        &mut s,
        &edit(&speaker(
            "<neighbor><address>127.0.0.1</address><remote-as>65001</remote-as><passive>true</passive></neighbor>",
            "<listen-address>127.0.0.1</listen-address><listen-port>0</listen-port>",
        )),
    )
    .await;
    let st = wait_state(&mut s, "listener bound", |r| r.contains("<listening-port>")).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", leaf(&st, "listening-port").unwrap()).parse().unwrap();

    // The agent's OPEN, then whatever it answers to `ours`.
    async fn exchange(addr: SocketAddr, ours: &[u8]) -> Vec<u8> {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(ours).await.unwrap();
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut got)).await;
        got
    }
    fn open(asn: u32, ls: bool) -> Vec<u8> {
        use netgauze_bgp_pkt::capabilities::*;
        use netgauze_bgp_pkt::open::*;
        let mut caps = vec![BgpCapability::FourOctetAs(FourOctetAsCapability::new(asn))];
        if ls {
            caps.push(BgpCapability::MultiProtocolExtensions(MultiProtocolExtensionsCapability::new(
                netgauze_iana::address_family::AddressType::BgpLs,
            )));
        }
        let m = BgpMessage::Open(BgpOpenMessage::new(
            asn as u16,
            90,
            "10.255.0.9".parse().unwrap(),
            vec![BgpOpenMessageParameter::new_capabilities(caps)],
        ));
        cats_sma::routing::bgp::encode::to_bytes(&m).unwrap()
    }
    /// The (code, subcode) of the NOTIFICATION in `bytes` (after the agent's OPEN).
    fn notification(bytes: &[u8]) -> Option<(u8, u8)> {
        let mut at = 0;
        while at + 19 <= bytes.len() {
            let len = u16::from_be_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            if bytes[at + 18] == 3 {
                return Some((bytes[at + 19], bytes[at + 20]));
            }
            at += len.max(19);
        }
        None
    }
    // Each attempt once the session waits for its neighbor again (after the backoff): a
    // connection while it is not waiting is closed unanswered (RFC 4271 section 6.8).
    let mut bad_marker = open(65001, true);
    bad_marker[3] = 0;
    let mut bad_len = open(65001, true);
    bad_len[16..18].copy_from_slice(&5000u16.to_be_bytes());
    let mut garbage = vec![0xff; 16];
    garbage.extend_from_slice(&[0, 19, 9]);
    let cases: [(&str, Vec<u8>, (u8, u8)); 5] = [
        ("Bad Peer AS", open(65099, true), (2, 2)),
        ("Unsupported Capability", open(65001, false), (2, 7)),
        ("Connection Not Synchronized", bad_marker, (1, 1)),
        ("Bad Message Length", bad_len, (1, 2)),
        ("Bad Message Type", garbage, (1, 3)),
    ];
    for (what, bytes, want) in cases {
        wait_state(&mut s, "waiting for the neighbor", |r| leaf(r, "state").as_deref() == Some("active")).await;
        assert_eq!(notification(&exchange(addr, &bytes).await), Some(want), "{what}");
    }
    let st = wait_state(&mut s, "last error recorded", |r| r.contains("<last-error>")).await;
    assert!(leaf(&st, "last-error").unwrap().contains("NOTIFICATION sent: 1/"), "{st}");
    // Still serving: a NETCONF read works and the session waits for the next attempt.
    wait_state(&mut s, "back to active", |r| leaf(r, "state").as_deref() == Some("active")).await;
}

/// A minimal BGP peer written here with NetGauze's codec (gobgpd never sends ROUTE-REFRESH).
struct Peer {
    c: tokio::net::TcpStream,
    codec: BgpCodec,
    buf: bytes::BytesMut,
}

impl Peer {
    async fn send(&mut self, m: &BgpMessage) {
        use tokio::io::AsyncWriteExt;
        self.c.write_all(&cats_sma::routing::bgp::encode::to_bytes(m).unwrap()).await.unwrap();
    }

    async fn next(&mut self) -> BgpMessage {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some((m, _)) = self.codec.decode(&mut self.buf).unwrap() {
                return m;
            }
            let n = tokio::time::timeout(Duration::from_secs(10), self.c.read_buf(&mut self.buf))
                .await
                .expect("a message within 10 s")
                .unwrap();
            assert!(n > 0, "the agent closed the session");
        }
    }

    /// The next UPDATE that announces something, skipping KEEPALIVEs.
    async fn next_announcement(&mut self) -> DecodedMetrics {
        loop {
            if let BgpMessage::Update(u) = self.next().await {
                for a in u.path_attributes() {
                    if let PathAttributeValue::BgpLs(ls) = a.value() {
                        return decode_attribute(&CodePoints::default(), ls).unwrap();
                    }
                }
            }
        }
    }
}

/// RFC 2918 with RFC 4271 section 9.2: a ROUTE-REFRESH for BGP-LS is answered with the
/// Adj-RIB-Out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc2918_route_refresh_is_answered_with_the_routes_again() {
    use netgauze_bgp_pkt::route_refresh::BgpRouteRefreshMessage;
    use netgauze_iana::address_family::AddressType;
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    ok(
        &mut s,
        &edit(&format!(
            r#"<scis>{}</scis>
            <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval></update-control></policy>
            {}"#,
            sci("10.0.0.1:80", "AR1"),
            speaker(
                "<neighbor><address>127.0.0.1</address><remote-as>65000</remote-as><passive>true</passive></neighbor>",
                "<listen-address>127.0.0.1</listen-address><listen-port>0</listen-port>"
            )
        )),
    )
    .await;
    post(sci_addr, report("10.0.0.1:80", "AR1", 1, 77)).await;
    let st = wait_state(&mut s, "listener bound", |r| r.contains("<listening-port>")).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", leaf(&st, "listening-port").unwrap()).parse().unwrap();
    let mut p = Peer {
        c: tokio::net::TcpStream::connect(addr).await.unwrap(),
        codec: BgpCodec::new(true),
        buf: Default::default(),
    };
    {
        use netgauze_bgp_pkt::capabilities::*;
        use netgauze_bgp_pkt::open::*;
        // iBGP (AS 65000 on both sides), hold time 3: KEEPALIVEs every second.
        p.send(&BgpMessage::Open(BgpOpenMessage::new(
            65000,
            3,
            "10.255.0.7".parse().unwrap(),
            vec![BgpOpenMessageParameter::new_capabilities(vec![
                BgpCapability::FourOctetAs(FourOctetAsCapability::new(65000)),
                BgpCapability::MultiProtocolExtensions(MultiProtocolExtensionsCapability::new(AddressType::BgpLs)),
                BgpCapability::RouteRefresh,
            ])],
        )))
        .await;
    }
    assert!(matches!(p.next().await, BgpMessage::Open(_)));
    p.send(&BgpMessage::KeepAlive).await;
    assert!(matches!(p.next().await, BgpMessage::KeepAlive));
    let first = p.next_announcement().await;
    assert_eq!((first.gas, first.cs_id.as_deref()), (Some(77), Some("AR1")));
    let st = wait_state(&mut s, "hold 3 negotiated", |r| r.contains("<state>established</state>")).await;
    assert_eq!(leaf(&st, "negotiated-hold-time").as_deref(), Some("3"), "{st}");

    p.send(&BgpMessage::RouteRefresh(BgpRouteRefreshMessage::new(
        AddressType::BgpLs,
        netgauze_bgp_pkt::iana::RouteRefreshSubcode::NormalRequest,
    )))
    .await;
    let again = p.next_announcement().await;
    assert_eq!(again, first, "the same route, sent again");
    wait_state(&mut s, "route refresh counted", |r| leaf(r, "route-refreshes-received").as_deref() == Some("1")).await;
    // The session stays up across several hold periods on the agent's KEEPALIVEs and ours.
    for _ in 0..4 {
        p.send(&BgpMessage::KeepAlive).await;
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let st = s.rpc11(&rpc(42, STATE)).await;
    assert_eq!(leaf(&st, "established-transitions").as_deref(), Some("1"), "{st}");
    assert_eq!(leaf(&st, "state").as_deref(), Some("established"), "{st}");
}

/// Seed 004, C-PS Failure Handling: "MAY ... advertise metrics via a routing protocol".
/// With `advertise when-c-ps-unreachable`, nothing goes by BGP-LS while the REST C-PS takes
/// the metrics; when it stops answering, the services are advertised to gobgpd; when it is
/// back, they are withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_cps_failure_falls_back_to_bgp_ls_and_back() {
    use cps_support::{cst_services, free_addr, start_cps, wait_for};
    let dir = tempfile::tempdir().unwrap();
    let _mrt = RemoveOnDrop(mrt_file(dir.path()).parent().unwrap().to_owned());
    let bgp_port = free_port();
    let g = gobgpd(dir.path(), bgp_port, true, 0);
    let cps_addr = free_addr();
    let cps = start_cps(cps_addr, None).await;
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let neighbor = active_neighbor(65001, bgp_port, "");
    ok(
        &mut s,
        &with_cps(
            cps_addr,
            "<backoff-initial>100</backoff-initial><backoff-max>300</backoff-max>",
            &speaker(&neighbor, "<advertise>when-c-ps-unreachable</advertise>"),
        ),
    )
    .await;
    wait_state(&mut s, "session established", |r| r.contains("<state>established</state>")).await;
    post(sci_addr, report("10.0.0.1:80", "AR1", 1, 500)).await;
    wait_for("the C-PS has AR1", || cst_services(&cps.state) == [("AR1".to_owned(), 500)]).await;
    let st = s.rpc11(&rpc(43, STATE)).await;
    assert_eq!(leaf(&st, "advertising").as_deref(), Some("false"), "{st}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rib(&g).is_empty(), "nothing by BGP-LS while the C-PS is reachable: {:?}", rib(&g));

    // The C-PS goes away; the next update (a health change goes at once) fails to reach it
    // and the routes go by BGP-LS.
    cps.stop().await;
    post(sci_addr, report_health("10.0.0.1:80", "AR1", 2, 450, "DEGRADED")).await;
    wait_rib(&g, "AR1 advertised by BGP-LS while no C-PS answers", |r| {
        r.iter().any(|(p, m)| p == "198.51.100.0/24" && m.gas == Some(450) && m.health == Some(1))
    })
    .await;
    let st = s.rpc11(&rpc(44, STATE)).await;
    assert_eq!(leaf(&st, "advertising").as_deref(), Some("true"), "{st}");

    // The C-PS is back: the session reconnects, and the BGP-LS routes are withdrawn.
    let cps = start_cps(cps_addr, None).await;
    wait_for("the C-PS has AR1 again", || cst_services(&cps.state) == [("AR1".to_owned(), 450)]).await;
    wait_rib(&g, "AR1 withdrawn from BGP-LS", |r| r.is_empty()).await;
}

/// The edit that configures AR1's SCI, the reference C-PS at `cps` as a REST peer (with
/// `peer_extra`) and `routing`, as CSMA of SITE.
fn with_cps(cps: SocketAddr, peer_extra: &str, routing: &str) -> String {
    use cats_sma::cps::auth::hex;
    use cps_support::{CSMA, KEY_ID, SECRET, SITE};
    edit(&format!(
        r#"<agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent><scis>{}</scis>
        <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval></update-control></policy>
        <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer><name>ref</name><url>http://{cps}</url>
          <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk><allowed-cs-id>AR1</allowed-cs-id>{peer_extra}</peer></c-ps>
        {routing}"#,
        sci("10.0.0.1:80", "AR1"),
        hex(SECRET)
    ))
}

/// A TCP relay that holds what the agent sends for `delay` before passing it on (a slow
/// routing path: route reflectors, a busy speaker); the other direction is not delayed.
async fn delaying_relay(to: SocketAddr, delay: Duration) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((a, _)) = l.accept().await {
            let Ok(b) = tokio::net::TcpStream::connect(to).await else { continue };
            let (mut ar, mut aw) = a.into_split();
            let (mut br, mut bw) = b.into_split();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = ar.read(&mut buf).await {
                    if n == 0 || tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some((due, bytes)) = rx.recv().await {
                    tokio::time::sleep_until(due).await;
                    if bw.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut br, &mut aw).await;
            });
        }
    });
    addr
}

/// Seed 004, hybrid model: "the PA MUST ensure consistency between the two channels: the
/// more recent update takes precedence". The agent reports to the reference C-PS by REST
/// and by BGP-LS (its BGP listener), the BGP-LS path one second slower. GAS 500 then 400:
/// REST delivers 400 while BGP-LS still carries the older 500, which arrives after it; the
/// C-PS keeps 400 (the advertisement sequence in the generation TLV is older) and counts
/// the older value kept out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_hybrid_rest_and_bgp_ls_newest_wins() {
    use cats_sma::cps::reference::bgp::{BgpPeer, RefBgp};
    use cps_support::{cst_services, free_addr, start_cps, wait_for, CSMA, SITE};
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let cps = start_cps(free_addr(), None).await;
    let bgp = RefBgp::start(
        "127.0.0.1:0".parse().unwrap(),
        cps.state.clone(),
        65010,
        "10.255.0.10".parse().unwrap(),
        vec![BgpPeer { address: "127.0.0.1".parse().unwrap(), remote_as: 65000, csma_id: CSMA.into() }],
    )
    .await
    .unwrap();
    let relay = delaying_relay(bgp.addr, Duration::from_secs(1)).await;
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let neighbor = active_neighbor(65010, relay.port(), "");
    ok(&mut s, &with_cps(cps.addr, "", &speaker(&neighbor, ""))).await;
    wait_state(&mut s, "BGP-LS session with the C-PS", |r| r.contains("<state>established</state>")).await;
    post(sci_addr, report("10.0.0.1:80", "AR1", 1, 500)).await;
    wait_for("REST: 500", || cst_services(&cps.state) == [("AR1".to_owned(), 500)]).await;
    post(sci_addr, report("10.0.0.1:80", "AR1", 2, 400)).await;
    wait_for("REST: 400", || cst_services(&cps.state) == [("AR1".to_owned(), 400)]).await;
    assert!(bgp.routes_received.load(Ordering::Relaxed) == 0, "the BGP-LS path is the slower one");
    // The BGP-LS routes arrive: 500 (older) first, then 400.
    wait_for("both BGP-LS routes taken in", || bgp.routes_received.load(Ordering::Relaxed) >= 2).await;
    assert_eq!(cst_services(&cps.state), [("AR1".to_owned(), 400)], "the later advertisement wins");
    let kept_out = cps.state.cst.lock().unwrap().sites[SITE].older_than_held;
    assert!(kept_out >= 1, "the older BGP-LS value was kept out");
    bgp.stop().await;
}

/// RFC 2385: with `tcp-md5-key` the agent signs its session with gobgpd (configured with the
/// same `auth-password`) and it comes up; with another key the kernel drops the segments
/// and no session forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc2385_tcp_md5_signed_session_with_gobgpd() {
    let dir = tempfile::tempdir().unwrap();
    let _mrt = RemoveOnDrop(mrt_file(dir.path()).parent().unwrap().to_owned());
    let bgp_port = free_port();
    let _g = gobgpd_with(dir.path(), bgp_port, true, 0, Some("s3cret-key"));
    let agent = start_agent(dir.path(), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let neighbor = |key: &str| active_neighbor(65001, bgp_port, &format!("<tcp-md5-key>{key}</tcp-md5-key>"));
    ok(&mut s, &edit(&speaker(&neighbor("s3cret-key"), ""))).await;
    wait_state(&mut s, "signed session established", |r| r.contains("<state>established</state>")).await;

    // Another key: the session is torn down by the configuration change and cannot form again.
    ok(&mut s, &edit(&speaker(&neighbor("wrong-key"), ""))).await;
    wait_state(&mut s, "session down", |r| !r.contains("<state>established</state>")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = s.rpc11(&rpc(45, STATE)).await;
    assert!(!st.contains("<state>established</state>"), "{st}");
    assert_eq!(leaf(&st, "established-transitions").as_deref(), Some("0"), "a new session that never came up: {st}");
}
