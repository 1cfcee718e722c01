//! Seed 003 (draft-ietf-dime-agent-overload-11, RFC 8581 on RFC 7683 DOIC) on the SCI →
//! C-SMA hop, through the running agent: the agent is the reporting node, the SCIs (HTTP
//! posts from this test, a tonic gRPC client, mosquitto_pub through a real mosquitto) the
//! reacting nodes; the load test's SCIs run `cats_sma::overload::sci::SciReactor`.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cats_sma::engine::collect::grpc::pb;
use cats_sma::overload::sci::SciReactor;
use cats_sma::overload::wire::{Olr, Supported, OLR_DEFAULT_ALGO};
use common::mosquitto::{broker, free_port};
use common::{connect, leaf_after, rpc, start_agent, AgentProcess, RawSession, PASSWORD};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CSMA: &str = "csma-a";
const H_SUP: &str = "x-cats-oc-supported-features";
const H_OLR: &str = "x-cats-oc-olr";

fn json_report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

/// One POST /reports with extra headers; the status and the answer's headers (lower case).
async fn post(addr: SocketAddr, body: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect to the collector");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "POST /reports HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn scis(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("<sci><csci-id>{id}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>"))
        .collect()
}

fn config(scis: &str, collection: &str, reporting: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>site-a</site-id></agent>
          <collection>{collection}</collection>
          <scis>{scis}</scis>
          <overload-control xmlns="urn:cats-sma:yang:cats-sma-overload"><reporting>{reporting}</reporting></overload-control>
        </cats-sma></config></edit-config>"#
    )
}

const GET_OVERLOAD: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <overload-control xmlns="urn:cats-sma:yang:cats-sma-overload"/></cats-sma></filter></get>"#;

async fn wait_state(s: &mut RawSession, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let r = s.rpc11(&rpc(50, GET_OVERLOAD)).await;
        if cond(&r) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn session(agent: &AgentProcess) -> RawSession {
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    s
}

fn local(r: &str, leaf: &str) -> Option<String> {
    leaf_after(r, "<local-report>", leaf)
}

/// The control topic's retained message (payload JSON), read with mosquitto_sub waiting
/// at most `wait` seconds; Null when none came.
fn control_message(port: u16, csci: &str, wait: u32) -> serde_json::Value {
    let out = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "mqttv5", "-C", "1", "-W", &wait.to_string()])
        .args(["-t", &format!("cats/sci/{csci}/control")])
        .output()
        .expect("mosquitto_sub (mosquitto-clients) is installed by scripts/setup.sh");
    if out.stdout.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("control message ({e}): {out:?}"))
}

fn mqtt_publish(port: u16, csci: &str, seq: u64, announce: &str) {
    let st = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "mqttv5", "-q", "1"])
        .args(["-t", &format!("cats/sci/{csci}/report"), "-m", &json_report(csci, seq, 300)])
        .args(["-D", "publish", "user-property", H_SUP, announce])
        .status()
        .expect("mosquitto_pub");
    assert!(st.success());
}

fn grpc_report(csci: &str, seq: u64) -> pb::Report {
    let now = chrono::Utc::now();
    pb::Report {
        csci_id: csci.into(),
        cs_id: "AR1".into(),
        sequence: seq,
        timestamp: Some(prost_types::Timestamp {
            seconds: now.timestamp(),
            nanos: now.timestamp_subsec_nanos() as i32,
        }),
        gas: 300,
        computing_time: 5,
        health: pb::Health::Healthy as i32,
        ..pb::Report::default()
    }
}

async fn grpc_batch(port: u16, csci: &str, seq: u64, announce: &str) -> pb::Verdict {
    let ch =
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await.unwrap();
    let mut c = pb::sci_collector_client::SciCollectorClient::new(ch);
    let mut req = tonic::Request::new(pb::ReportBatch { reports: vec![grpc_report(csci, seq)] });
    req.metadata_mut().insert(H_SUP, announce.parse().unwrap());
    c.batch(req).await.unwrap().into_inner().verdicts.remove(0)
}

/// 5.1.2 (the reporting node answers an announcement only from the SCI it authenticated)
/// and 5.2.2 / 5.2.4 (overloaded, it reports to the SCIs that announced, over HTTP, gRPC
/// and MQTT, with a new sequence number per change, and ends the overload with validity 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc8581_5_2_4_reporting_node_over_http_grpc_and_mqtt() {
    let dir = tempfile::tempdir().unwrap();
    let mqtt = free_port();
    let _b = broker(dir.path(), mqtt);
    let grpc = free_port();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut s = session(&agent).await;
    let collection = format!(
        "<mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{mqtt}</broker-port>\
         <allow-plaintext>true</allow-plaintext></mqtt>\
         <grpc><enabled>true</enabled><port>{grpc}</port><tls><enabled>false</enabled></tls></grpc>"
    );
    let reporting = "<evaluation-interval>200</evaluation-interval><rate-threshold>5</rate-threshold>";
    let r = s.rpc11(&rpc(1, &config(&scis(&["sci-h", "sci-g", "sci-m"]), &collection, reporting))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let mut events = session(&agent).await;
    let r = events
        .rpc11(&rpc(9, r#"<create-subscription xmlns="urn:ietf:params:xml:ns:netconf:notification:1.0"/>"#))
        .await;
    assert!(r.contains("<ok/>"), "{r}");

    // 5.1.2: an announcement under another SCI's CSCI-ID gets no answer; its own does.
    let other = Supported::announce(OLR_DEFAULT_ALGO, "sci-g").to_string();
    let (st, h) = post(sci, &json_report("sci-h", 1, 300), &[(H_SUP, &other)]).await;
    assert_eq!(st, 200);
    assert!(header(&h, H_SUP).is_none(), "{h:?}");
    let mine = Supported::announce(OLR_DEFAULT_ALGO, "sci-h").to_string();
    let (_, h) = post(sci, &json_report("sci-h", 2, 300), &[(H_SUP, &mine)]).await;
    let answer = Supported::decode(header(&h, H_SUP).expect("the answer")).unwrap();
    assert!(answer.peer_report() && answer.peer_algo == OLR_DEFAULT_ALGO && answer.source_id == CSMA, "{answer:?}");
    assert!(header(&h, H_OLR).is_none(), "not overloaded yet: {h:?}");
    // MQTT: the announcement rides in a user property; the answer comes on the control topic
    // (published again until the collector has subscribed and taken one).
    let mut m = serde_json::Value::Null;
    for seq in 1..=10 {
        mqtt_publish(mqtt, "sci-m", seq, &Supported::announce(OLR_DEFAULT_ALGO, "sci-m").to_string());
        m = control_message(mqtt, "sci-m", 3);
        if !m.is_null() {
            break;
        }
    }
    assert!(m[H_SUP].as_str().is_some_and(|v| v.contains("source-id=csma-a")), "{m}");

    // Over the rate threshold (sci-h posts about 30/s until told to stop): the agent reports.
    let (load_stop, last_report) =
        (Arc::new(std::sync::atomic::AtomicBool::new(false)), Arc::new(std::sync::Mutex::new(None)));
    let load = {
        let (load_stop, last_report, mine) = (load_stop.clone(), last_report.clone(), mine.clone());
        tokio::spawn(async move {
            let mut seq = 3;
            while !load_stop.load(Ordering::Relaxed) {
                let (st, h) = post(sci, &json_report("sci-h", seq, 300), &[(H_SUP, &mine)]).await;
                assert_eq!(st, 200);
                seq += 1;
                if let Some(o) = header(&h, H_OLR) {
                    *last_report.lock().unwrap() = Some(Olr::decode(o).unwrap());
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            seq
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let report = loop {
        if let Some(r) = last_report.lock().unwrap().clone() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no report once the rate passed the threshold");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(report.reduction > 0 && report.report_type == 2 && report.source_id == CSMA, "{report:?}");
    assert_eq!(report.validity, Some(30));
    let n = String::from_utf8_lossy(&events.read_until(b"</overload-state-change>").await).into_owned();
    assert!(n.contains("<direction>to-sci</direction>") && n.contains("<cause>started</cause>"), "{n}");
    // gRPC: the verdict carries the answer and the report.
    let v = grpc_batch(grpc, "sci-g", 1, &Supported::announce(OLR_DEFAULT_ALGO, "sci-g").to_string()).await;
    assert!(v.accepted, "{v:?}");
    assert!(v.oc_supported_features.contains("source-id=csma-a"), "{v:?}");
    let g = Olr::decode(&v.oc_olr).unwrap();
    assert!(g.reduction > 0 && g.source_id == CSMA, "{g:?}");
    // MQTT: the new report is published to the SCI that announced over MQTT (retained).
    let mut published = None;
    for _ in 0..20 {
        let m = control_message(mqtt, "sci-m", 5);
        if let Some(o) = m[H_OLR].as_str() {
            published = Some(Olr::decode(o).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(published.expect("a report on the control topic").reduction > 0);
    let r = wait_state(&mut s, "local report", |r| local(r, "overloaded").as_deref() == Some("true")).await;
    assert!(r.contains("<direction>to-sci</direction>") && r.contains("<name>sci-h</name>"), "{r}");
    assert!(r.contains("<transport>mqtt</transport>") && r.contains("<transport>grpc</transport>"), "{r}");

    // The load is gone: the overload ends, and the end (validity 0) is what is sent.
    load_stop.store(true, Ordering::Relaxed);
    let seq = load.await.unwrap();
    let r = wait_state(&mut s, "the end", |r| local(r, "overloaded").as_deref() == Some("false")).await;
    assert_eq!(local(&r, "validity-duration").as_deref(), Some("0"), "{r}");
    let n = String::from_utf8_lossy(&events.read_until(b"</overload-state-change>").await).into_owned();
    assert!(n.contains("<overloaded>false</overloaded>") && n.contains("<cause>ended</cause>"), "{n}");
    let (_, h) = post(sci, &json_report("sci-h", seq, 300), &[(H_SUP, &mine)]).await;
    let end = Olr::decode(header(&h, H_OLR).expect("the end is still sent")).unwrap();
    assert_eq!((end.reduction, end.validity), (0, Some(0)));
    assert!(end.sequence > report.sequence);
}

/// An overloaded agent recovers because its SCIs back off (5.2.4 with 5.2.5 on the SCI
/// side): 20 SCIs offer 200 reports/s against a 60/s threshold; they take the reports and
/// skip by the loss algorithm, the rate the agent takes falls to its threshold while the
/// offered load stays; when the offered load falls the overload ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed003_5_2_4_overloaded_agent_recovers_because_its_scis_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut s = session(&agent).await;
    let ids: Vec<String> = (0..20).map(|i| format!("sci-{i}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let reporting = "<evaluation-interval>500</evaluation-interval><rate-threshold>60</rate-threshold>";
    let r = s
        .rpc11(&rpc(1, &config(&scis(&id_refs), "<rate-limit><enabled>false</enabled></rate-limit>", reporting)))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    // Each SCI offers one report per `period` (10/s to start), sends it unless abated.
    let period_ms = Arc::new(AtomicU64::new(100));
    let (offered, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in ids.clone() {
        let (period_ms, offered, sent, stop) = (period_ms.clone(), offered.clone(), sent.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut me = SciReactor::new(&id, CSMA);
            let announce = me.announcement();
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(period_ms.load(Ordering::Relaxed))).await;
                offered.fetch_add(1, Ordering::Relaxed);
                if !me.should_send(false) {
                    continue;
                }
                seq += 1;
                let (_, h) = post(sci, &json_report(&id, seq, 300), &[(H_SUP, &announce)]).await;
                sent.fetch_add(1, Ordering::Relaxed);
                me.take(header(&h, H_SUP), header(&h, H_OLR));
            }
        }));
    }
    let r = wait_state(&mut s, "overload", |r| local(r, "overloaded").as_deref() == Some("true")).await;
    let first: u32 = local(&r, "reduction-percentage").unwrap().parse().unwrap();
    assert!(first > 0, "{r}");
    // Recovered: the SCIs back off; over 3 s the agent takes no more than its threshold
    // (with the measurement's slack) although the offered load has not changed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (o0, s0) = (offered.load(Ordering::Relaxed), sent.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (o1, s1) = (offered.load(Ordering::Relaxed), sent.load(Ordering::Relaxed));
    let (offered_rate, sent_rate) = ((o1 - o0) as f64 / 3.0, (s1 - s0) as f64 / 3.0);
    let r = s.rpc11(&rpc(60, GET_OVERLOAD)).await;
    assert_eq!(local(&r, "overloaded").as_deref(), Some("true"), "{r}");
    // Offered about 200/s against 60/s: the agent takes at most a third more than its
    // threshold, and well under what is offered.
    assert!(sent_rate <= 80.0 && sent_rate < 0.6 * offered_rate, "offered {offered_rate}/s, sent {sent_rate}/s: {r}");
    eprintln!("offered {offered_rate:.0}/s, sent {sent_rate:.0}/s, reduction {:?}", local(&r, "reduction-percentage"));
    // The offered load falls to 40/s (two thirds of the threshold): the reduction falls and
    // the overload ends.
    period_ms.store(500, Ordering::Relaxed);
    let r = wait_state(&mut s, "the end", |r| local(r, "overloaded").as_deref() == Some("false")).await;
    assert_eq!(local(&r, "reduction-percentage").as_deref(), Some("0"), "{r}");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
}
