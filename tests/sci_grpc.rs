//! gRPC push through the real agent (seed 004, SCI Collection Interface, push mode: "gRPC
//! streaming (bidirectional)"; "Each connection is identified by the CSCI-ID and
//! authenticated"): a tonic client streams reports and gets one verdict each, with the
//! reasons HTTP push gives; a client certificate proves its CSCI-ID and no other; an
//! HMAC proof per stream report and in a Batch call's metadata; an oversized message ends
//! its call with RESOURCE_EXHAUSTED; everything counted in the operational state.

mod common;
#[path = "common/netconf_tls.rs"]
mod netconf_tls;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cats_sma::engine::collect::grpc::pb;
use common::*;
use netconf_tls::{c2n, fingerprint, startup, Ca, ClientCert, NS_CATS};
use prost::Message as _;

type Client = pb::sci_collector_client::SciCollectorClient<tonic::transport::Channel>;

const KEY: &[u8] = b"grpc-sci-b-shared-secret";

fn report(csci: &str, cs: &str, seq: u64, corr: &str) -> pb::Report {
    let now = chrono::Utc::now();
    pb::Report {
        csci_id: csci.into(),
        cs_id: cs.into(),
        sequence: seq,
        timestamp: Some(prost_types::Timestamp {
            seconds: now.timestamp(),
            nanos: now.timestamp_subsec_nanos() as i32,
        }),
        gas: 400,
        computing_time: 5,
        health: pb::Health::Healthy as i32,
        correlation_id: corr.into(),
        ..pb::Report::default()
    }
}

/// The report with its own proof: HMAC over its bytes without field 15.
fn signed(mut r: pb::Report) -> pb::Report {
    let body = r.encode_to_vec();
    r.authorization = cats_sma::engine::auth::sign_hmac(KEY, chrono::Utc::now().timestamp(), &body);
    r
}

/// A TLS connection to the gRPC listener trusting the agent's generated certificate,
/// offering h2, with a client certificate when given.
async fn connect(addr: std::net::SocketAddr, cacert: &Path, cert: Option<&ClientCert>) -> Client {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(cacert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match cert {
        Some(c) => {
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&c.key_file).unwrap();
            builder.with_client_auth_cert(vec![c.cert.der().clone()], key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .expect("gRPC connection");
    Client::new(channel)
}

/// Sends `reports` on one Stream call and collects the verdicts (or the final status).
async fn stream(client: &mut Client, reports: Vec<pb::Report>) -> (Vec<pb::Verdict>, Option<tonic::Status>) {
    let n = reports.len();
    let (tx, rx) = tokio::sync::mpsc::channel(n.max(1));
    for r in reports {
        tx.send(r).await.unwrap();
    }
    drop(tx);
    let mut inbound = match client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return (Vec::new(), Some(s)),
    };
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), inbound.message()).await.expect("a verdict in time") {
            Ok(Some(v)) => out.push(v),
            Ok(None) => return (out, None),
            Err(s) => return (out, Some(s)),
        }
    }
}

/// collection statistics over RESTCONF: (accepted, rejected count of `reason`).
fn counters(agent: &AgentProcess, reason: &str) -> (u64, u64) {
    let r = Curl::new(agent).get("/data/cats-sma:cats-sma/statistics");
    assert_eq!(r.status, 200, "{}", r.body);
    let s = &r.json()["cats-sma:statistics"];
    let num = |v: &serde_json::Value| v.as_str().and_then(|c| c.parse().ok()).or_else(|| v.as_u64()).unwrap_or(0);
    let rejected = s["rejection"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["reason"].as_str().is_some_and(|x| x.ends_with(reason))))
        .map(|e| num(&e["count"]))
        .unwrap_or(0);
    (num(&s["reports-accepted"]), rejected)
}

struct Site {
    _dir: tempfile::TempDir,
    agent: AgentProcess,
    grpc: std::net::SocketAddr,
    cacert: std::path::PathBuf,
    a: ClientCert,
}

/// SCIs sci-a (its certificate, CommonName sci-a, maps to it through the CA's
/// fingerprint) and sci-b (an HMAC credential), both for CS-ID AR1; gRPC with TLS on an
/// ephemeral port, client certificates optional.
fn site(max_message: u32, collection: &str) -> Site {
    site_with(max_message, collection, "")
}

/// [`site`] with more configuration under `/cats-sma` (`top`).
fn site_with(max_message: u32, collection: &str, top: &str) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ca = Ca::new("grpc test CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let a = ca.client(dir.path(), "sci-a", Some("sci-a"), vec![]);
    let map = c2n(1, &fingerprint(ca.cert.der()), "common-name", None);
    let key = {
        use base64ct::Encoding;
        base64ct::Base64::encode_string(KEY)
    };
    startup(
        &state,
        &format!(
            "<cats-sma xmlns=\"{NS_CATS}\"><collection>\
             <grpc><enabled>true</enabled><port>0</port><max-message-size>{max_message}</max-message-size>\
             <tls><client-ca-file>{}</client-ca-file>{map}</tls></grpc>\
             <authentication><credential><name>kb</name><type>hmac-sha256</type><key>{key}</key></credential></authentication>{collection}\
             </collection><scis>\
             <sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id></sci>\
             <sci><csci-id>sci-b</csci-id><cs-id>AR1</cs-id><credential-ref>kb</credential-ref></sci>\
             </scis>{top}</cats-sma>",
            ca_file.display()
        ),
    );
    let agent = start_agent(&state, &[]);
    let grpc = grpc_addr(&agent);
    let cacert = state.join("sci-grpc-cert.pem");
    Site { _dir: dir, agent, grpc, cacert, a }
}

/// Where the agent's gRPC listener is, from its ready line.
fn grpc_addr(agent: &AgentProcess) -> std::net::SocketAddr {
    let line = agent.stderr_lines.lock().unwrap().iter().find(|l| l.contains("cats-sma ready")).cloned().unwrap();
    line.split("SCI gRPC: grpcs://")
        .nth(1)
        .and_then(|r| r.split([';', ' ']).next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("the ready line names the gRPC listener: {line}"))
}

impl Site {
    /// Stops the agent (SIGTERM, or SIGKILL when `kill`) and starts it again on the same
    /// state directory; the gRPC listener gets a new port.
    fn restart(&mut self, kill: bool) {
        if kill {
            let _ = self.agent.child.kill();
            let _ = self.agent.child.wait();
        } else {
            let st = self.agent.terminate();
            assert!(st.success(), "a clean stop exits 0: {st:?}");
        }
        let state = self.agent.state_dir.clone();
        self.agent = start_agent(&state, &[]);
        self.grpc = grpc_addr(&self.agent);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_grpc_stream_verdicts_identities_and_counters() {
    let s = site(65536, "");
    let (accepted0, _) = counters(&s.agent, "unknown-sci");

    // No client certificate: sci-b proves each report with its HMAC.
    let mut anon = connect(s.grpc, &s.cacert, None).await;
    let (v, end) = stream(
        &mut anon,
        vec![
            signed(report("sci-b", "AR1", 1, "b-1")),
            report("sci-unknown", "AR1", 1, "u-1"),
            signed(report("sci-b", "AR9", 2, "b-2")),
        ],
    )
    .await;
    assert!(end.is_none(), "{end:?}");
    let got: Vec<(&str, bool, &str, u64)> =
        v.iter().map(|v| (v.correlation_id.as_str(), v.accepted, v.reason.as_str(), v.sequence)).collect();
    assert_eq!(
        got,
        vec![("b-1", true, "", 1), ("u-1", false, "unknown-sci", 1), ("b-2", false, "unauthorized-cs-id", 2),],
        "{v:?}"
    );
    assert_eq!(v[1].csci_id, "sci-unknown");
    // A proof that does not cover the bytes sent: refused as unauthenticated.
    let mut forged = signed(report("sci-b", "AR1", 3, "b-3"));
    forged.gas = 1;
    let (v, _) = stream(&mut anon, vec![forged]).await;
    assert_eq!((v[0].accepted, v[0].reason.as_str()), (false, "unauthenticated"), "{v:?}");

    // sci-a's certificate proves sci-a: its reports need no proof, and it cannot report
    // for sci-b (the mTLS identity mismatch is refused).
    let mut a = connect(s.grpc, &s.cacert, Some(&s.a)).await;
    let (v, end) = stream(&mut a, vec![report("sci-a", "AR1", 1, "a-1"), report("sci-b", "AR1", 9, "a-as-b")]).await;
    assert!(end.is_none(), "{end:?}");
    assert!(v[0].accepted, "{v:?}");
    assert_eq!((v[1].accepted, v[1].reason.as_str()), (false, "unauthenticated"), "{v:?}");

    // Batch: the metadata proves the ReportBatch bytes.
    let batch =
        pb::ReportBatch { reports: vec![report("sci-b", "AR1", 10, "b-10"), report("sci-b", "AR1", 11, "b-11")] };
    let mut req = tonic::Request::new(batch.clone());
    let proof = cats_sma::engine::auth::sign_hmac(KEY, chrono::Utc::now().timestamp(), &batch.encode_to_vec());
    req.metadata_mut().insert("authorization", proof.parse().unwrap());
    let bv = anon.batch(req).await.expect("batch").into_inner();
    assert_eq!(bv.accepted, 2, "{bv:?}");
    assert_eq!(bv.verdicts.iter().map(|v| v.correlation_id.as_str()).collect::<Vec<_>>(), ["b-10", "b-11"]);
    // Without a proof, sci-b's batch is refused by its credential rule, per report.
    let bv =
        anon.batch(pb::ReportBatch { reports: vec![report("sci-b", "AR1", 12, "b-12")] }).await.unwrap().into_inner();
    assert_eq!((bv.accepted, bv.verdicts[0].reason.as_str()), (0, "unauthenticated"), "{bv:?}");
    // A wrong proof refuses the whole call.
    let mut req = tonic::Request::new(pb::ReportBatch { reports: vec![report("sci-b", "AR1", 13, "b-13")] });
    req.metadata_mut().insert("authorization", proof.parse().unwrap());
    let e = anon.batch(req).await.expect_err("the proof covers another batch");
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");

    // The state shows it: 1 + 1 + 2 accepted over gRPC, the unknown SCI counted.
    let (accepted, unknown) = counters(&s.agent, "unknown-sci");
    assert_eq!(accepted - accepted0, 4);
    assert_eq!(unknown, 1);
    let r = Curl::new(&s.agent).get("/data/cats-sma:cats-sma/collection/grpc/tls-state");
    assert_eq!(r.status, 200, "{}", r.body);
    let t = &r.json()["cats-sma:tls-state"];
    assert_eq!(t["enabled"], true, "{t}");
    assert_eq!(t["generated-certificate"], true, "{t}");
    let mapped = t["mapped-connections"].as_str().and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
    assert!(mapped >= 1, "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_grpc_bad_input_gets_a_status_and_a_count() {
    let s = site(1024, "");
    let (_, malformed0) = counters(&s.agent, "malformed");
    // sci-a's certificate proves its reports.
    let mut anon = connect(s.grpc, &s.cacert, Some(&s.a)).await;

    // Not a valid Report (its timestamp is missing): a malformed verdict, the stream goes on.
    let mut no_time = report("sci-a", "AR1", 1, "bad");
    no_time.timestamp = None;
    let (v, end) = stream(&mut anon, vec![no_time, report("sci-a", "AR1", 2, "next")]).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!((v[0].accepted, v[0].reason.as_str()), (false, "malformed"), "{v:?}");
    assert!(v[0].detail.contains("timestamp"), "{v:?}");
    assert_eq!(v[1].correlation_id, "next", "the stream survives a malformed report: {v:?}");

    // Over max-message-size (1024 bytes): the stream ends with RESOURCE_EXHAUSTED.
    let mut big = report("sci-a", "AR1", 3, "big");
    big.cs_id = "x".repeat(2000);
    let (v, end) = stream(&mut anon, vec![report("sci-a", "AR1", 4, "before"), big]).await;
    assert_eq!(v.len(), 1, "{v:?}");
    let end = end.expect("the oversized message ends the stream");
    assert_eq!(end.code(), tonic::Code::ResourceExhausted, "{end:?}");
    assert!(end.message().contains("1024"), "{end:?}");

    // The same for a Batch (refused before the handler, by the framing).
    let mut req = pb::ReportBatch { reports: vec![] };
    for i in 0..20 {
        req.reports.push(report("sci-a", "AR1", 100 + i, &"c".repeat(100)));
    }
    let e = anon.batch(req).await.expect_err("too large");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    // A batch whose reports carry their own proofs is refused as a whole.
    let e = anon.batch(pb::ReportBatch { reports: vec![signed(report("sci-b", "AR1", 1, "x"))] }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    // A Stream call with authorization metadata is a protocol error.
    let mut req = tonic::Request::new(tokio_stream::iter(vec![report("sci-a", "AR1", 5, "m")]));
    req.metadata_mut().insert("authorization", "Bearer x".parse().unwrap());
    let e = anon.stream(req).await.expect_err("metadata on a stream");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // Each counted as malformed: the report, the two oversized messages, the batch, the call.
    let (_, malformed) = counters(&s.agent, "malformed");
    assert_eq!(malformed - malformed0, 5);
    // And the agent still serves.
    let (v, _) = stream(&mut anon, vec![report("sci-a", "AR1", 6, "after")]).await;
    assert!(v[0].accepted, "{v:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_grpc_rate_limited_reports_say_when_to_retry() {
    // seed 004, Security Considerations: rate limiting per SCI, as over HTTP.
    let s = site(65536, "<rate-limit><per-sci><rate>0.1</rate><burst>1</burst></per-sci></rate-limit>");
    let mut a = connect(s.grpc, &s.cacert, Some(&s.a)).await;
    let batch = pb::ReportBatch { reports: (1..=3).map(|i| report("sci-a", "AR1", i, &format!("a-{i}"))).collect() };
    let bv = a.batch(batch).await.unwrap().into_inner();
    assert_eq!(bv.accepted, 1, "{bv:?}");
    for v in &bv.verdicts[1..] {
        assert_eq!(v.reason, "rate-limited", "{bv:?}");
        assert!(v.retry_after_seconds >= 1, "{bv:?}");
    }
    let (v, _) = stream(&mut a, vec![report("sci-a", "AR1", 4, "a-4")]).await;
    assert_eq!((v[0].reason.as_str(), v[0].retry_after_seconds >= 1), ("rate-limited", true), "{v:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_grpc_stream_half_closed_by_the_sci_gets_every_verdict_then_ok() {
    // The SCI sends everything and half-closes at once, before any verdict is read: each
    // report still gets its verdict, in order, and the call ends with OK. A stream closed
    // without a report ends with OK and no verdict.
    let s = site(65536, "");
    let mut a = connect(s.grpc, &s.cacert, Some(&s.a)).await;
    let (accepted0, _) = counters(&s.agent, "malformed");
    // 40: within the default per-SCI burst (50).
    let reports: Vec<_> = (1..=40).map(|i| report("sci-a", "AR1", i, &format!("h-{i}"))).collect();
    let (v, end) = stream(&mut a, reports).await;
    assert!(end.is_none(), "a half-closed stream ends with OK: {end:?}");
    assert_eq!(v.len(), 40, "{v:?}");
    for (i, v) in v.iter().enumerate() {
        assert_eq!((v.correlation_id.clone(), v.accepted), (format!("h-{}", i + 1), true), "{v:?}");
    }
    let (v, end) = stream(&mut a, Vec::new()).await;
    assert_eq!((v.len(), end.map(|e| e.code())), (0, None));
    let (accepted, _) = counters(&s.agent, "malformed");
    assert_eq!(accepted - accepted0, 40);
    // The connection serves the next call.
    let (v, _) = stream(&mut a, vec![report("sci-a", "AR1", 41, "after")]).await;
    assert!(v[0].accepted, "{v:?}");
}

/// Sends one report on an open stream and waits for its verdict.
async fn send_one(
    tx: &tokio::sync::mpsc::Sender<pb::Report>,
    inbound: &mut tonic::Streaming<pb::Verdict>,
    r: pb::Report,
) -> pb::Verdict {
    tx.send(r).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), inbound.message()).await.expect("a verdict in time").unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_collection_grpc_agent_restart_mid_stream_accepts_nothing_twice() {
    // seed 004, Validator & Sanitizer ("old reports are discarded") across a restart: an SCI
    // whose stream breaks when the agent stops reconnects and sends again what it is not
    // sure of; the new run refuses what the old one accepted, after a clean stop (the
    // saved history) and after a kill (reports timestamped before the start are refused).
    // A timestamp window of 300 s: the restarts of a loaded machine stay well inside it, so
    // what refuses a report below is the history, not the window.
    let mut s = site_with(65536, "", "<validation><timestamp-window>300</timestamp-window></validation>");
    let sent: Vec<pb::Report> = (1..=3).map(|i| signed(report("sci-b", "AR1", i, &format!("b-{i}")))).collect();
    let mut c = connect(s.grpc, &s.cacert, None).await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut inbound = c.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    for r in &sent {
        let v = send_one(&tx, &mut inbound, r.clone()).await;
        assert!(v.accepted, "{v:?}");
    }

    // A clean stop in the middle of the stream: the stream ends (no verdict is invented).
    s.restart(false);
    let end = tokio::time::timeout(Duration::from_secs(20), inbound.message()).await.expect("the stream ends");
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
    assert!(s.agent.logged("validator history of the last run restored"));
    let (accepted0, dup0) = counters(&s.agent, "duplicate");
    let mut c = connect(s.grpc, &s.cacert, None).await;
    let (v, end) =
        stream(&mut c, vec![sent[1].clone(), sent[2].clone(), signed(report("sci-b", "AR1", 4, "b-4"))]).await;
    assert!(end.is_none(), "{end:?}");
    let got: Vec<(bool, &str)> = v.iter().map(|v| (v.accepted, v.reason.as_str())).collect();
    assert_eq!(got, [(false, "out-of-order"), (false, "duplicate"), (true, "")], "{v:?}");
    let (accepted, dup) = counters(&s.agent, "duplicate");
    assert_eq!((accepted - accepted0, dup - dup0), (1, 1));

    // Killed: nothing was saved. What the killed run accepted is refused as a replay, a new
    // report is accepted.
    let b5 = signed(report("sci-b", "AR1", 5, "b-5"));
    let (v, _) = stream(&mut c, vec![b5.clone()]).await;
    assert!(v[0].accepted, "{v:?}");
    s.restart(true);
    assert!(s.agent.logged("the last run stopped without saving the validator history"));
    let mut c = connect(s.grpc, &s.cacert, None).await;
    let (v, _) = stream(&mut c, vec![b5.clone()]).await;
    assert_eq!((v[0].accepted, v[0].reason.as_str()), (false, "replay"), "{v:?}");
    assert!(v[0].detail.contains("unclean stop"), "{v:?}");
    // The floor is the start plus 1 s (an SCI clock a little ahead of the agent's).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (v, _) = stream(&mut c, vec![b5, signed(report("sci-b", "AR1", 6, "b-6"))]).await;
    let got: Vec<(bool, &str)> = v.iter().map(|v| (v.accepted, v.reason.as_str())).collect();
    assert_eq!(got, [(false, "replay"), (true, "")], "{v:?}");
    assert!(v[0].detail.contains("unclean stop"), "{v:?}");
    // A clean stop of this run restores normal service: no floor the run after.
    s.restart(false);
    assert!(!s.agent.logged("stopped without saving"));
}
