//! Seed 000 (draft-dunbar-ippm-5g-edge-compute-ip-layer-metrics) with a real exporter:
//! Debian's softflowd reads a pcap written here (UDP flows to and from two application
//! servers with known packet and byte counts, plus a flow of neither) and exports it over
//! IPFIX (RFC 7011) and NetFlow v9 (RFC 3954) to the agent's collector. The agent's
//! counters (section 3.2: ToPackets, FromPackets, ToBytes, FromBytes), the Load Index of
//! the measurement interval, and the ranking of select-site (section 4) are checked exactly.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{leaf_after, start_agent, Nc};

const IPM: &str = "urn:cats-sma:yang:cats-ip-metrics";
const APP: &str = "203.0.113.80";

/// One UDP packet of a pcap: source, destination, ports and payload length.
struct Pkt {
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: usize,
}

/// `n` packets of `payload` octets from `src` to `dst`.
fn flow(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: usize, n: usize) -> Vec<Pkt> {
    (0..n).map(|_| Pkt { src, dst, sport, dport, payload }).collect()
}

/// A libpcap file (Ethernet link type) of IPv4/UDP packets, 1 ms apart.
fn write_pcap(path: &Path, pkts: &[Pkt]) {
    let mut out = Vec::new();
    out.extend(0xa1b2c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend([0u8; 8]);
    out.extend(65535u32.to_le_bytes());
    out.extend(1u32.to_le_bytes());
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as u32;
    for (k, p) in pkts.iter().enumerate() {
        let total = (20 + 8 + p.payload) as u16;
        let mut frame = vec![2u8; 6];
        frame.extend([4u8; 6]);
        frame.extend([0x08, 0x00]);
        frame.extend([0x45, 0]);
        frame.extend(total.to_be_bytes());
        frame.extend([0, 1, 0, 0, 64, 17, 0, 0]);
        frame.extend(p.src);
        frame.extend(p.dst);
        frame.extend(p.sport.to_be_bytes());
        frame.extend(p.dport.to_be_bytes());
        frame.extend(((8 + p.payload) as u16).to_be_bytes());
        frame.extend([0, 0]);
        frame.extend(std::iter::repeat_n(0u8, p.payload));
        out.extend(t0.to_le_bytes());
        out.extend(((k as u32) * 1000).to_le_bytes());
        out.extend((frame.len() as u32).to_le_bytes());
        out.extend((frame.len() as u32).to_le_bytes());
        out.extend(frame);
    }
    std::fs::write(path, out).unwrap();
}

fn softflowd() -> PathBuf {
    for p in ["/usr/sbin/softflowd", "/usr/bin/softflowd"] {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    PathBuf::from("softflowd")
}

/// Runs softflowd over `pcap`, exporting with `version` (9 or 10) to `dest`, and waits for
/// it to finish (it exports every flow at the end of the file).
fn export(dir: &Path, pcap: &Path, dest: &str, version: u8) {
    let out = Command::new(softflowd())
        .arg("-r")
        .arg(pcap)
        .args(["-n", dest, "-v", &version.to_string(), "-d"])
        // No control socket: with one, softflowd 1.1.0 reading a file tests poll results it
        // never asked for (an uninitialised array) and may block in accept() for ever.
        .args(["-c", "none"])
        .arg("-p")
        .arg(dir.join("softflowd.pid"))
        .output()
        .expect("softflowd runs (scripts/setup.sh installs it)");
    assert!(out.status.success(), "softflowd: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two sites of APP: s1's A-ER exports from 127.0.0.1 for server 192.0.2.10, s2's from ::1
/// for server 192.0.2.20.
fn config(interval: u32, weights: [&str; 4], capacity: [u32; 2]) -> String {
    format!(
        r#"<ip-metrics xmlns="{IPM}">
             <collector><enabled>true</enabled><listen-address>::</listen-address><listen-port>0</listen-port></collector>
             <load-index><w1>{}</w1><w2>{}</w2><w3>{}</w3><w4>{}</w4><measurement-interval>{interval}</measurement-interval></load-index>
             <application><application-id>{APP}</application-id>
               <site><site-id>s1</site-id><a-er>127.0.0.1</a-er><server-address>192.0.2.10</server-address><capacity-index>{}</capacity-index></site>
               <site><site-id>s2</site-id><a-er>::1</a-er><server-address>192.0.2.20</server-address><capacity-index>{}</capacity-index></site>
             </application>
           </ip-metrics>"#,
        weights[0], weights[1], weights[2], weights[3], capacity[0], capacity[1]
    )
}

async fn port(nc: &mut Nc) -> u16 {
    let r = nc
        .wait("collector bound", &format!("<ip-metrics xmlns=\"{IPM}\"><collector/></ip-metrics>"), |r| {
            r.contains("<listening-port>")
        })
        .await;
    leaf_after(&r, "<statistics>", "listening-port").unwrap().parse().unwrap()
}

fn site_filter(site: &str) -> String {
    format!(
        "<ip-metrics xmlns=\"{IPM}\"><application><application-id>{APP}</application-id><site><site-id>{site}</site-id>\
         <measurement/></site></application></ip-metrics>"
    )
}

/// The counters of `total` or `last-interval` in a reply: (to-packets, from-packets,
/// to-bytes, from-bytes).
fn counters(r: &str, container: &str) -> (u64, u64, u64, u64) {
    let l = |tag| leaf_after(r, &format!("<{container}>"), tag).and_then(|v| v.parse().ok()).unwrap_or(0);
    (l("to-packets"), l("from-packets"), l("to-bytes"), l("from-bytes"))
}

/// Flows of s1's server (192.0.2.10): 5 packets of 128 octets (100 payload) in, 3 of 1028
/// out; of s2's (192.0.2.20): 2 of 228 in, 7 of 78 out; and 4 packets between two other
/// hosts, which count for no site.
fn traffic() -> Vec<Pkt> {
    let client = [198, 51, 100, 1];
    let mut p = flow(client, [192, 0, 2, 10], 40000, 443, 100, 5);
    p.extend(flow([192, 0, 2, 10], client, 443, 40000, 1000, 3));
    p.extend(flow(client, [192, 0, 2, 20], 40001, 443, 200, 2));
    p.extend(flow([192, 0, 2, 20], client, 443, 40001, 50, 7));
    p.extend(flow([10, 0, 0, 1], [10, 0, 0, 2], 5000, 5001, 10, 4));
    p
}

/// Waits until the last complete interval of `site` shows what was exported, and returns
/// the reply (an interval with the counts is visible for a whole interval).
async fn interval_with(nc: &mut Nc, site: &str, to_packets: u64) -> String {
    nc.wait(&format!("{site}: an interval with {to_packets} packets in"), &site_filter(site), |r| {
        counters(r, "last-interval").0 == to_packets
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_3_2_softflowd_ipfix_and_netflow_v9_counters_and_load_index() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    let r = nc.edit(&config(3, ["0.100", "0.200", "0.300", "0.400"], [10, 10])).await;
    assert!(r.contains("<ok/>"), "{r}");
    let port = port(&mut nc).await;
    let pcap = dir.path().join("flows.pcap");
    write_pcap(&pcap, &traffic());

    // s1's A-ER over IPFIX from 127.0.0.1.
    export(dir.path(), &pcap, &format!("127.0.0.1:{port}"), 10);
    let r = interval_with(&mut nc, "s1", 5).await;
    assert_eq!(counters(&r, "last-interval"), (5, 3, 640, 3084), "{r}");
    assert_eq!(counters(&r, "total"), (5, 3, 640, 3084), "{r}");
    // 0.1*5 + 0.2*3 + 0.3*640 + 0.4*3084 = 0.5 + 0.6 + 192 + 1233.6
    assert_eq!(leaf_after(&r, "<last-interval>", "load-index").as_deref(), Some("1426.7"), "{r}");
    assert_eq!(leaf_after(&r, "<measurement>", "capacity-source").as_deref(), Some("configured"));
    // s2's server's flows were exported by s1's A-ER: they count for no site.
    let r = nc.get(&site_filter("s2")).await;
    assert_eq!(counters(&r, "total"), (0, 0, 0, 0), "{r}");

    // s2's A-ER over NetFlow v9 from ::1.
    export(dir.path(), &pcap, &format!("[::1]:{port}"), 9);
    let r = interval_with(&mut nc, "s2", 2).await;
    assert_eq!(counters(&r, "last-interval"), (2, 7, 456, 546), "{r}");
    // 0.1*2 + 0.2*7 + 0.3*456 + 0.4*546 = 0.2 + 1.4 + 136.8 + 218.4
    assert_eq!(leaf_after(&r, "<last-interval>", "load-index").as_deref(), Some("356.8"), "{r}");
    // s1 is unchanged by exports of another A-ER.
    let r = nc.get(&site_filter("s1")).await;
    assert_eq!(counters(&r, "total"), (5, 3, 640, 3084), "{r}");

    let r = nc.get(&format!("<ip-metrics xmlns=\"{IPM}\"><collector/></ip-metrics>")).await;
    let stat = |t| leaf_after(&r, "<statistics>", t).and_then(|v| v.parse::<u64>().ok()).unwrap();
    // Each export: two records per server (one per direction), one for the other hosts'
    // one-way flow and one options record (softflowd's exporter statistics).
    assert_eq!(stat("records"), 12, "{r}");
    assert_eq!(stat("matched-records"), 4, "{r}");
    assert_eq!(stat("malformed"), 0, "{r}");
    assert!(r.contains("<protocol>ipfix</protocol>") && r.contains("<protocol>netflow-v9</protocol>"), "{r}");
    assert!(r.contains("<address>127.0.0.1</address>") && r.contains("<address>::1</address>"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_3_2_exports_from_unknown_or_malformed_sources_are_counted_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    // s1's A-ER is 127.0.0.1 only here; ::1 is nobody's.
    let cfg =
        config(2, ["0.25", "0.25", "0.25", "0.25"], [1, 1]).replace("<a-er>::1</a-er>", "<a-er>192.0.2.254</a-er>");
    let r = nc.edit(&cfg).await;
    assert!(r.contains("<ok/>"), "{r}");
    let port = port(&mut nc).await;
    let pcap = dir.path().join("flows.pcap");
    write_pcap(&pcap, &traffic());
    export(dir.path(), &pcap, &format!("[::1]:{port}"), 10);
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Truncated IPFIX, an unknown version, a set longer than its message.
    for m in
        [&[0u8, 10, 0, 40][..], &[0, 5, 0, 0, 0, 0], &[0, 10, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 99]]
    {
        u.send_to(m, ("127.0.0.1", port)).unwrap();
    }
    let filter = format!("<ip-metrics xmlns=\"{IPM}\"><collector><statistics/></collector></ip-metrics>");
    let r = nc
        .wait("unknown exporter and malformed counted", &filter, |r| {
            leaf_after(r, "<statistics>", "malformed").as_deref() == Some("3")
                && leaf_after(r, "<statistics>", "unknown-exporter").is_some_and(|v| v != "0")
        })
        .await;
    assert_eq!(leaf_after(&r, "<statistics>", "records").as_deref(), Some("0"), "{r}");
    let r = nc.get(&site_filter("s1")).await;
    assert_eq!(counters(&r, "total"), (0, 0, 0, 0), "{r}");
    // The collector still takes a good export afterwards.
    export(dir.path(), &pcap, &format!("127.0.0.1:{port}"), 10);
    let r = interval_with(&mut nc, "s1", 5).await;
    assert_eq!(counters(&r, "total"), (5, 3, 640, 3084), "{r}");
    // Each refusal is in the audit trail (aggregated per source).
    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(audit.contains("\"transport\":\"ipfix\"") && audit.contains("input-refused"), "{audit}");
}

fn select_site(rtt: &[(&str, u32)], extra: &str) -> String {
    let rtt: String = rtt.iter().map(|(a, v)| format!("<rtt><a-er>{a}</a-er><value>{v}</value></rtt>")).collect();
    format!("<select-site xmlns=\"{IPM}\"><application-id>{APP}</application-id>{extra}{rtt}</select-site>")
}

fn ranking(r: &str) -> Vec<String> {
    r.split("<site-id>").skip(1).map(|s| s.split("</site-id>").next().unwrap().to_owned()).collect()
}

/// Section 4 through the select-site RPC, with the counters of the softflowd exports:
/// Load-s1 = 0.25*(5+3+640+3084) = 933, Load-s2 = 0.25*(2+7+456+546) = 252.75, equal
/// capacity and preference, RTT 2 ms to s1's A-ER and 8 ms to s2's.
///   w = 0.5: r(s1,s2) = .5*933/252.75 + .5*2/8 = 1.845697 + .125 = 1.970697
///            r(s2,s1) = .5*252.75/933 + .5*8/2 = .135450 + 2 = 2.135450: a tie on wins,
///            s1 first on cost.
///   w = 0.9: r(s2,s1) = .9*252.75/933 + .1*4 = .243810 + .4 = .643810 < 1: s2 beats s1 —
///            the choice moved away from the nearer site because its A-ER counted more.
/// A flow group that prefers s1 four times as much (Pref-s1 = 4) at w = 0.9:
///            r(s1,s2) = .9*933/252.75 + .1*(1*2)/(4*8) = 3.322255 + .00625 = 3.328505,
///            r(s2,s1) = .243810 + .1*(4*8)/(1*2) = .243810 + 1.6 = 1.843810: s2 still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_4_select_site_ranks_by_measured_load_and_rtt() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    let r = nc.edit(&config(3600, ["0.25", "0.25", "0.25", "0.25"], [10, 10])).await;
    assert!(r.contains("<ok/>"), "{r}");
    // Before any interval completed, both sites are incomplete.
    let r = nc.call(&select_site(&[("127.0.0.1", 2000), ("::1", 8000)], "")).await;
    assert_eq!(r.matches("<incomplete>no-load-index</incomplete>").count(), 2, "{r}");
    let r = nc
        .edit(&format!(
            "<ip-metrics xmlns=\"{IPM}\"><load-index><measurement-interval>2</measurement-interval></load-index></ip-metrics>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let port = port(&mut nc).await;
    let pcap = dir.path().join("flows.pcap");
    write_pcap(&pcap, &traffic());
    let rtt = [("127.0.0.1", 2000), ("::1", 8000)];
    let loaded =
        |r: &str| r.contains("<load-index>933.0</load-index>") && r.contains("<load-index>252.75</load-index>");
    // Both exports in one 2 s interval, then a measurement interval of an hour so that the
    // last complete interval stays the one with the exports while the RPCs below run (a
    // changed interval starts a new one and keeps the last). If the exports fell into two
    // intervals, or the change came after the next boundary, try again.
    let mut attempts = 0;
    let r = loop {
        attempts += 1;
        assert!(attempts <= 8, "the two exports never landed in one interval");
        export(dir.path(), &pcap, &format!("127.0.0.1:{port}"), 10);
        export(dir.path(), &pcap, &format!("[::1]:{port}"), 9);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut seen = false;
        while tokio::time::Instant::now() < deadline {
            let r = nc.call(&select_site(&rtt, "")).await;
            if loaded(&r) {
                let e = nc
                    .edit(&format!(
                        "<ip-metrics xmlns=\"{IPM}\"><load-index><measurement-interval>3600</measurement-interval></load-index></ip-metrics>"
                    ))
                    .await;
                assert!(e.contains("<ok/>"), "{e}");
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = nc.call(&select_site(&rtt, "")).await;
        if seen && loaded(&r) {
            break r;
        }
        let e = nc
            .edit(&format!(
                "<ip-metrics xmlns=\"{IPM}\"><load-index><measurement-interval>2</measurement-interval></load-index></ip-metrics>"
            ))
            .await;
        assert!(e.contains("<ok/>"), "{e}");
    };
    assert_eq!(ranking(&r), ["s1", "s2"], "{r}");
    assert!(r.contains("<cost>1.970697</cost>") && r.contains("<cost>2.13545</cost>"), "{r}");
    assert!(r.contains("<delay>2000</delay>") && r.contains("<delay>8000</delay>"), "{r}");
    assert_eq!(r.matches("<wins>0</wins>").count(), 2, "{r}");

    // Same measurements, w = 0.9: s2.
    let r = nc.edit(&format!("<ip-metrics xmlns=\"{IPM}\"><w>0.9</w></ip-metrics>")).await;
    assert!(r.contains("<ok/>"), "{r}");
    let r = nc.call(&select_site(&rtt, "")).await;
    assert!(loaded(&r), "{r}");
    assert_eq!(ranking(&r), ["s2", "s1"], "{r}");
    assert!(r.contains("<cost>0.64381</cost>") && r.contains("<wins>1</wins>"), "{r}");
    // A flow group by source prefix.
    let g = format!(
        "<ip-metrics xmlns=\"{IPM}\"><application><application-id>{APP}</application-id><flow-group><name>sticky</name>\
         <source-prefix>198.51.100.0/24</source-prefix><site><site-id>s1</site-id><preference-index>4</preference-index>\
         </site></flow-group></application></ip-metrics>"
    );
    let r = nc.edit(&g).await;
    assert!(r.contains("<ok/>"), "{r}");
    let r = nc.call(&select_site(&rtt, "<source-address>198.51.100.7</source-address>")).await;
    assert!(r.contains(">sticky</flow-group>") && r.contains("<preference-index>4</preference-index>"), "{r}");
    assert!(r.contains("<cost>1.84381</cost>") && r.contains("<cost>3.328505</cost>"), "{r}");
    assert_eq!(ranking(&r), ["s2", "s1"], "{r}");
    // Another source: no group, the site preferences.
    let r = nc.call(&select_site(&rtt, "<source-address>192.0.2.99</source-address>")).await;
    assert!(!r.contains("</flow-group>") && r.contains("<cost>0.64381</cost>"), "{r}");
    // Errors: an application that is not configured, a flow group that does not exist.
    let r = nc.call(&select_site(&rtt, "").replace(APP, "203.0.113.81")).await;
    assert!(r.contains("<error-tag>invalid-value</error-tag>") && r.contains("application-id"), "{r}");
    let r = nc.call(&select_site(&rtt, "<flow-group>nope</flow-group>")).await;
    assert!(r.contains("<error-tag>invalid-value</error-tag>") && r.contains("flow-group"), "{r}");
}

fn stat(r: &str, from: &str, leaf: &str) -> u64 {
    leaf_after(r, from, leaf).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Section 3.5 with STAMP (RFC 8762): agent A reflects, agent B's session-sender probes
/// A's reflector as the A-ER of site s1, and 127.0.0.2 (where nothing reflects) as the
/// A-ER of s2. B measures an RTT to s1's A-ER and counts every probe to s2's as lost; A
/// counts what it reflected, and, once B is outside its client-prefix, what it refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_3_5_stamp_two_agents_measure_each_other() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let a = start_agent(dir_a.path(), &[]);
    let b = start_agent(dir_b.path(), &[]);
    let mut nca = Nc::open(&a).await;
    let mut ncb = Nc::open(&b).await;
    let r = nca
        .edit(&format!(
            "<ip-metrics xmlns=\"{IPM}\"><stamp><reflector><enabled>true</enabled><listen-address>127.0.0.1</listen-address>\
             <listen-port>0</listen-port></reflector></stamp></ip-metrics>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let reflector = format!("<ip-metrics xmlns=\"{IPM}\"><stamp><reflector/></stamp></ip-metrics>");
    let r = nca.wait("reflector bound", &reflector, |r| r.contains("<listening-port>")).await;
    let port = stat(&r, "<statistics>", "listening-port");
    let r = ncb
        .edit(&format!(
            "<ip-metrics xmlns=\"{IPM}\"><stamp><sender><enabled>true</enabled><interval>200</interval><timeout>300</timeout>\
             <reflector-port>{port}</reflector-port><window>4</window></sender></stamp>\
             <application><application-id>{APP}</application-id>\
             <site><site-id>s1</site-id><a-er>127.0.0.1</a-er><server-address>192.0.2.10</server-address></site>\
             <site><site-id>s2</site-id><a-er>127.0.0.2</a-er><server-address>192.0.2.20</server-address></site>\
             </application></ip-metrics>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let app = format!(
        "<ip-metrics xmlns=\"{IPM}\"><application><application-id>{APP}</application-id></application></ip-metrics>"
    );
    let r = ncb
        .wait("RTTs measured and losses counted", &app, |r| {
            stat(r, "<a-er>127.0.0.1</a-er>", "received") >= 3 && stat(r, "<a-er>127.0.0.2</a-er>", "lost") >= 2
        })
        .await;
    let s1 = |leaf| stat(&r, "<a-er>127.0.0.1</a-er>", leaf);
    assert!(s1("latest") > 0 && s1("min") > 0 && s1("min") <= s1("mean"), "{r}");
    assert!(s1("sent") >= s1("received"), "{r}");
    assert_eq!(stat(&r, "<a-er>127.0.0.2</a-er>", "received"), 0, "{r}");
    // Delay-i of s1 is the mean to its A-ER; s2 has none.
    let delay = stat(&r, "<site-id>s1</site-id>", "delay");
    assert!(delay > 0, "{r}");
    // The agent's own ranking has both sites waiting for a Load Index; s1 has a delay.
    assert!(r.contains("<selection>") && r.matches("<incomplete>").count() >= 2, "{r}");
    // select-site without an RTT list uses the measured ones.
    let rr = ncb.call(&select_site(&[], "")).await;
    assert!(rr.contains("<delay>") && !rr.contains("<rpc-error>"), "{rr}");

    let r = nca.get(&reflector).await;
    assert!(stat(&r, "<statistics>", "reflected") >= 3, "{r}");
    // B outside A's client-prefix: refused and counted, B counts losses.
    let r = nca
        .edit(&format!(
            "<ip-metrics xmlns=\"{IPM}\"><stamp><reflector><client-prefix>192.0.2.0/24</client-prefix></reflector></stamp></ip-metrics>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let lost_before = stat(&ncb.get(&app).await, "<a-er>127.0.0.1</a-er>", "lost");
    nca.wait("refused", &reflector, |r| stat(r, "<statistics>", "not-allowed") >= 2).await;
    ncb.wait("lost", &app, |r| stat(r, "<a-er>127.0.0.1</a-er>", "lost") >= lost_before + 2).await;
}

/// Section 5, Application Bound Group Routers: an ingress router joins an application's
/// group with its first select-site, each later one refreshes its timer, and it leaves when
/// the timer expires; the group is bounded; each member's ranking is in the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_5_application_bound_group_join_refresh_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    let cfg = config(10, ["0.25", "0.25", "0.25", "0.25"], [1, 1]).replace(
        "<application>",
        "<group-timeout>3</group-timeout><max-group-members>2</max-group-members><application>",
    );
    let r = nc.edit(&cfg).await;
    assert!(r.contains("<ok/>"), "{r}");
    let group = format!(
        "<ip-metrics xmlns=\"{IPM}\"><application><application-id>{APP}</application-id><group/></application></ip-metrics>"
    );
    let join = |ingress: &str, rtt: &[(&str, u32)]| select_site(rtt, &format!("<ingress>{ingress}</ingress>"));
    let r = nc.call(&join("ir1", &[("127.0.0.1", 1000), ("::1", 3000)])).await;
    assert!(!r.contains("<rpc-error>"), "{r}");
    let r = nc.get(&group).await;
    assert!(r.contains("<ingress>ir1</ingress>") && r.contains("<requests>1</requests>"), "{r}");
    // The member's ranking uses its RTTs.
    assert!(r.contains("<delay>1000</delay>") && r.contains("<delay>3000</delay>"), "{r}");
    assert!(stat(&r, "<ingress>ir1</ingress>", "expires-in") <= 8, "{r}");
    let r = nc.call(&join("ir2", &[])).await;
    assert!(!r.contains("<rpc-error>"), "{r}");
    // The group is full: a third ingress router is refused.
    let r = nc.call(&join("ir3", &[])).await;
    assert!(r.contains("<error-tag>resource-denied</error-tag>"), "{r}");
    // ir1 keeps asking every 2.5 s; ir2 does not: after the timeout only ir1 is left.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let r = nc.call(&join("ir1", &[])).await;
        assert!(!r.contains("<rpc-error>"), "{r}");
    }
    let r = nc.get(&group).await;
    assert!(r.contains("<ingress>ir1</ingress>") && !r.contains("<ingress>ir2</ingress>"), "{r}");
    assert!(r.contains("<requests>5</requests>"), "{r}");
    // ir1's RTTs from its first request are kept while it sends none.
    assert!(r.contains("<delay>1000</delay>"), "{r}");
    // The room ir2 left is free again.
    let r = nc.call(&join("ir3", &[])).await;
    assert!(!r.contains("<rpc-error>"), "{r}");
    // Without requests, the group empties.
    tokio::time::sleep(Duration::from_millis(8200)).await;
    let r = nc.get(&group).await;
    assert!(!r.contains("<member>"), "{r}");
}

/// An IPFIX message (RFC 7011) with template 300 (source and destination IPv4 address,
/// packetDeltaCount, octetDeltaCount) and one data record of it.
fn ipfix_record(src: [u8; 4], dst: [u8; 4], packets: u64, octets: u64) -> Vec<u8> {
    let mut sets = vec![0, 2, 0, 24, 1, 44, 0, 4, 0, 8, 0, 4, 0, 12, 0, 4, 0, 2, 0, 8, 0, 1, 0, 8];
    sets.extend([1, 44, 0, 28]);
    sets.extend(src);
    sets.extend(dst);
    sets.extend(packets.to_be_bytes());
    sets.extend(octets.to_be_bytes());
    let mut m = vec![0, 10, 0, 0, 0x60, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    m.extend(sets);
    let n = m.len() as u16;
    m[2..4].copy_from_slice(&n.to_be_bytes());
    m
}

/// Section 3.2, weights "learned by self-adjusting based on user feedbacks": each interval
/// the A-ER counts a different mix of packets and bytes to s1's server, and the users'
/// feedback (load-feedback) follows the bytes only; after min-samples intervals the fitted
/// weights are (0, 0, 1, 0) with R² = 1 and the Load Index is the byte count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_3_2_learned_weights_follow_user_feedback() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    let cfg = config(2, ["0.25", "0.25", "0.25", "0.25"], [1, 1]).replace(
        "<measurement-interval>2</measurement-interval>",
        "<measurement-interval>2</measurement-interval><weights>learned</weights>\
         <learning><min-samples>4</min-samples><forgetting>1</forgetting></learning>",
    );
    let r = nc.edit(&cfg).await;
    assert!(r.contains("<ok/>"), "{r}");
    let port = port(&mut nc).await;
    // Before any interval: feedback has nothing to describe.
    let fb = |v: &str| {
        format!(
            "<load-feedback xmlns=\"{IPM}\"><application-id>{APP}</application-id><site-id>s1</site-id>\
             <value>{v}</value></load-feedback>"
        )
    };
    // Feedback naming the interval it is about.
    let fb_at = |v: &str, start: &str| {
        fb(v).replace("</load-feedback>", &format!("<interval-start>{start}</interval-start></load-feedback>"))
    };
    let r = nc.call(&fb("1")).await;
    assert!(r.contains("<error-tag>operation-failed</error-tag>"), "{r}");
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0;
    let mut k = 0u64;
    while sent < 6 {
        k += 1;
        let (packets, octets) = (10 + k, 1000 * (k % 3 + 1) + 37 * k);
        u.send_to(&ipfix_record([198, 51, 100, 1], [192, 0, 2, 10], packets, octets), ("127.0.0.1", port)).unwrap();
        // Once the interval with this record completed, the users report on it: twice the
        // bytes (in any unit).
        let r = interval_with(&mut nc, "s1", packets).await;
        assert_eq!(counters(&r, "last-interval").2, octets, "{r}");
        let start = leaf_after(&r, "<last-interval>", "start").unwrap();
        let r = nc.call(&fb_at(&(2 * octets).to_string(), &start)).await;
        if r.contains("<error-tag>operation-failed</error-tag>") {
            // The next interval completed before the feedback came (a loaded machine): the
            // feedback was refused, not misapplied; try another record.
            continue;
        }
        assert!(r.contains("<ok/>"), "{r}");
        sent += 1;
        // Feedback is taken at the next boundary: wait for it before the next record.
        let filter =
            format!("<ip-metrics xmlns=\"{IPM}\"><load-index><learning><fit/></learning></load-index></ip-metrics>");
        nc.wait("feedback taken", &filter, |r| stat(r, "<fit>", "samples") == sent).await;
    }
    let r = nc.get(&format!("<ip-metrics xmlns=\"{IPM}\"><load-index/></ip-metrics>")).await;
    assert_eq!(leaf_after(&r, "<fit>", "w3").as_deref(), Some("1.0"), "{r}");
    for w in ["w1", "w2", "w4"] {
        assert_eq!(leaf_after(&r, "<fit>", w).as_deref(), Some("0.0"), "{r}");
    }
    assert_eq!(leaf_after(&r, "<fit>", "r-squared").as_deref(), Some("1.0"), "{r}");
    assert_eq!(leaf_after(&r, "<fit>", "in-use").as_deref(), Some("true"), "{r}");
    // The Load Index now is the byte count of the interval.
    u.send_to(&ipfix_record([198, 51, 100, 1], [192, 0, 2, 10], 99, 4321), ("127.0.0.1", port)).unwrap();
    let r = interval_with(&mut nc, "s1", 99).await;
    assert_eq!(leaf_after(&r, "<last-interval>", "load-index").as_deref(), Some("4321.0"), "{r}");
    // Feedback on an interval that is not the last one is refused.
    let r = nc.call(&fb_at("5", "2020-01-01T00:00:00Z")).await;
    assert!(r.contains("<error-tag>operation-failed</error-tag>"), "{r}");
    // Unknown site: invalid-value.
    let r = nc.call(&fb("1").replace("<site-id>s1</site-id>", "<site-id>s9</site-id>")).await;
    assert!(r.contains("<error-tag>invalid-value</error-tag>"), "{r}");
}

/// The next NETCONF 1.1 message of a session, keeping what follows it for the next call.
async fn next_message(nc: &mut Nc, buf: &mut Vec<u8>) -> String {
    use tokio::io::AsyncReadExt;
    let mut tmp = [0u8; 65536];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\n##\n") {
            let msg: Vec<u8> = buf.drain(..end + 4).collect();
            return common::decode_chunks(&msg);
        }
        let n = tokio::time::timeout(Duration::from_secs(30), nc.s.stream.read(&mut tmp))
            .await
            .expect("a message from the agent")
            .expect("read");
        assert!(n > 0, "session closed");
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// RFC 8641 on-change for the IP-layer metrics: a subscription to `ip-metrics` in
/// operational gets a push-change-update with a site's measurement when an interval with
/// new counts completes, and one with a group member when an ingress router joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed000_rfc8641_on_change_pushes_measurements_and_group_members() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut nc = Nc::open(&agent).await;
    let r = nc.edit(&config(1, ["0.25", "0.25", "0.25", "0.25"], [1, 1])).await;
    assert!(r.contains("<ok/>"), "{r}");
    let port = port(&mut nc).await;
    let mut sub = Nc::open(&agent).await;
    let r = sub
        .call(&format!(
            "<establish-subscription xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\" \
             xmlns:yp=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\" xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\">\
             <yp:datastore>ds:operational</yp:datastore><yp:datastore-subtree-filter><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\">\
             <ip-metrics xmlns=\"{IPM}\"><application/></ip-metrics></cats-sma></yp:datastore-subtree-filter>\
             <yp:on-change><yp:dampening-period>0</yp:dampening-period></yp:on-change></establish-subscription>"
        ))
        .await;
    assert!(r.contains("<id"), "{r}");
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.send_to(&ipfix_record([198, 51, 100, 1], [192, 0, 2, 10], 7, 700), ("127.0.0.1", port)).unwrap();
    let mut buf = Vec::new();
    // 0.25 * (7 + 700) = 176.75
    loop {
        let m = next_message(&mut sub, &mut buf).await;
        if m.contains("push-change-update") && m.contains("<load-index>176.75</load-index>") {
            assert!(m.contains("<to-packets>7</to-packets>") && m.contains("site=s1"), "{m}");
            break;
        }
    }
    let r = nc.call(&select_site(&[("127.0.0.1", 1000)], "<ingress>ir-7</ingress>")).await;
    assert!(!r.contains("<rpc-error>"), "{r}");
    loop {
        let m = next_message(&mut sub, &mut buf).await;
        if m.contains("push-change-update") && m.contains("<ingress>ir-7</ingress>") {
            assert!(m.contains("<requests>1</requests>"), "{m}");
            break;
        }
    }
}
