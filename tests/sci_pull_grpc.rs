//! gRPC pull through the real agent (seed 004, SCI Collection Interface, pull mode: "HTTP
//! GET or gRPC unary"; hybrid mode: "the C-SMA pulls on-demand during recovery"): tonic
//! SciAgent servers here play the SCIs; the agent calls `GetReport` on the target's interval
//! and when the SCI goes STALE, over h2c (allow-plaintext) and over TLS (server verified
//! against the configured anchor, client certificate presented, a wrong anchor refused);
//! an answer over the size limit, a compressed one, one for another CSCI-ID and an error
//! status are refused and counted, each visible in the target's state and the statistics.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cats_sma::engine::collect::grpc::pb;
use common::*;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::ServiceExt as _;

const CATS: &str = "urn:cats-sma:yang:cats-sma";

/// What a test SciAgent answers.
#[derive(Clone, Copy)]
enum Answer {
    /// A fresh report for the CSCI-ID asked for: GAS `gas`, sequence 1000 + calls.
    Report { gas: i64 },
    /// A report over the agent's 1 MiB pull response limit.
    Oversized,
    /// A report for another SCI.
    OtherSci,
    /// UNAVAILABLE.
    Unavailable,
}

#[derive(Clone)]
struct Sci {
    answer: Answer,
    calls: Arc<AtomicU64>,
    asked: Arc<Mutex<Vec<String>>>,
}

fn report(csci: &str, seq: u64, gas: i64) -> pb::Report {
    let now = chrono::Utc::now();
    pb::Report {
        csci_id: csci.into(),
        cs_id: "AR1".into(),
        sequence: seq,
        timestamp: Some(prost_types::Timestamp {
            seconds: now.timestamp(),
            nanos: now.timestamp_subsec_nanos() as i32,
        }),
        gas,
        computing_time: 7,
        health: pb::Health::Healthy as i32,
        ..pb::Report::default()
    }
}

#[tonic::async_trait]
impl pb::sci_agent_server::SciAgent for Sci {
    async fn get_report(
        &self,
        req: tonic::Request<pb::GetReportRequest>,
    ) -> Result<tonic::Response<pb::Report>, tonic::Status> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let id = req.into_inner().csci_id;
        self.asked.lock().unwrap().push(id.clone());
        match self.answer {
            Answer::Report { gas } => Ok(tonic::Response::new(report(&id, 1000 + n, gas))),
            Answer::Oversized => {
                let mut r = report(&id, 1000 + n, 100);
                r.correlation_id = "x".repeat(2 * 1024 * 1024);
                Ok(tonic::Response::new(r))
            }
            Answer::OtherSci => Ok(tonic::Response::new(report("someone-else", 1000 + n, 100))),
            Answer::Unavailable => Err(tonic::Status::unavailable("the SCI is restarting")),
        }
    }
}

/// Serves `sci` on 127.0.0.1 (HTTP/2: h2c, or TLS with ALPN h2); `saw_cert` is set when a
/// client presented a certificate.
async fn serve(sci: Sci, tls: Option<tokio_rustls::TlsAcceptor>) -> (SocketAddr, Arc<AtomicBool>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let saw_cert = Arc::new(AtomicBool::new(false));
    let saw = saw_cert.clone();
    let svc = pb::sci_agent_server::SciAgentServer::new(sci);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (svc, tls, saw) = (svc.clone(), tls.clone(), saw.clone());
            tokio::spawn(async move {
                let call = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                let b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                match tls {
                    Some(acceptor) => {
                        let Ok(s) = acceptor.accept(tcp).await else { return };
                        if s.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()) {
                            saw.store(true, Ordering::SeqCst);
                        }
                        let _ = b.serve_connection(TokioIo::new(s), call).await;
                    }
                    None => {
                        let _ = b.serve_connection(TokioIo::new(tcp), call).await;
                    }
                }
            });
        }
    });
    (addr, saw_cert)
}

/// An SCI whose GetReport answer is gzip-compressed (`grpc-encoding: gzip`, the message's
/// compressed flag set), which the agent never asked for and does not take.
async fn serve_compressed() -> SocketAddr {
    use std::io::Write as _;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            tokio::spawn(async move {
                let call = hyper::service::service_fn(|_req| async {
                    let msg = prost::Message::encode_to_vec(&report("sci-gz", 1, 100));
                    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                    gz.write_all(&msg).unwrap();
                    let z = gz.finish().unwrap();
                    let mut frame = vec![1u8];
                    frame.extend((z.len() as u32).to_be_bytes());
                    frame.extend(z);
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    let frames = vec![
                        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from(frame))),
                        Ok(hyper::body::Frame::trailers(trailers)),
                    ];
                    let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .header("content-type", "application/grpc")
                            .header("grpc-encoding", "gzip")
                            .body(body)
                            .unwrap(),
                    )
                });
                let b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                let _ = b.serve_connection(TokioIo::new(tcp), call).await;
            });
        }
    });
    addr
}

fn sci(answer: Answer) -> Sci {
    Sci { answer, calls: Arc::new(AtomicU64::new(0)), asked: Arc::new(Mutex::new(Vec::new())) }
}

// ----- NETCONF -----------------------------------------------------------------------------

/// The statistics' count of rejections for `reason`.
fn rejected(xml: &str, reason: &str) -> u64 {
    leaf_after(xml, &format!("cats-sma-types:{reason}</reason>"), "count").and_then(|v| v.parse().ok()).unwrap_or(0)
}

// ----- tests -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_grpc_pull_on_schedule_and_when_the_sci_goes_stale() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent).await;
    let scheduled = sci(Answer::Report { gas: 250 });
    let stale = sci(Answer::Report { gas: 260 });
    let (a, _) = serve(scheduled.clone(), None).await;
    let (b, _) = serve(stale.clone(), None).await;
    let plain = "<allow-plaintext>true</allow-plaintext>";
    // sci-g: every second. sci-s: once a day, TTL 600 ms: any pull of it is the STALE path's.
    let r = nc
        .edit(&format!(
            "<scis>{}{}</scis><cache><grace-period>30000</grace-period></cache><collection><pull>{}{}</pull></collection>",
            registered("sci-g", 60_000),
            registered("sci-s", 300),
            target("sci-g", &format!("grpc://{a}"), 1, plain),
            target("sci-s", &format!("grpc://{b}"), 86400, plain),
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");

    // On schedule: the pulled Report went through the engine into the cache, for the
    // CSCI-ID the agent asked for.
    nc.wait("the scheduled gRPC pull", &entry("sci-g"), |r| r.contains("<gas>250</gas>")).await;
    let s = nc.wait("two scheduled pulls", &state("sci-g"), |r| count(r, "pulls") >= 2).await;
    assert!(s.contains("<transport>grpc</transport>"), "{s}");
    assert_eq!(count(&s, "stale-pulls"), 0, "{s}");
    assert!(scheduled.asked.lock().unwrap().iter().all(|id| id == "sci-g"));
    // probe-sci calls GetReport through the same channel.
    let probe = nc.call(&format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-g</csci-id></probe-sci>")).await;
    assert!(probe.contains(">true</reachable>") && probe.contains("</rtt>"), "{probe}");

    // STALE: sci-s pushes once over HTTP, then stops; the agent pulls it over gRPC.
    assert_eq!(stale.calls.load(Ordering::SeqCst), 0, "not pulled before it went STALE");
    let push = format!(
        r#"{{"csci-id":"sci-s","cs-id":"AR1","seq":1,"timestamp":"{}","gas":240,"computing-time":7,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    );
    let (status, body) = http_post(agent.sci_addr.unwrap(), "/reports", "application/json", push.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    let s =
        nc.wait("the STALE pull", &state("sci-s"), |r| count(r, "stale-pulls") >= 1 && count(r, "pulls") >= 1).await;
    assert_eq!(count(&s, "anomaly-pulls"), 0, "{s}");
    let e = nc.wait("the report pulled on STALE", &entry("sci-s"), |r| r.contains("<gas>260</gas>")).await;
    assert!(e.contains("<sequence-number>1001</sequence-number>") || e.contains("<sequence-number>100"), "{e}");
    assert!(stale.calls.load(Ordering::SeqCst) >= 1);
}

// ----- TLS ---------------------------------------------------------------------------------

struct Pki {
    ca: String,
    other_ca: String,
    srv: (String, String),
    cli: (String, String),
}

fn pki(dir: &Path) -> Pki {
    let pki = TestPki::new(dir, "grpc pull test CA");
    let (srv_pem, srv_key, _) = pki.leaf("srv", &["127.0.0.1"]);
    let (cli_pem, cli_key, _) = pki.leaf("cli", &["cats-sma-agent"]);
    Pki {
        ca: pki.path("ca.pem"),
        other_ca: pki.other_ca("other-ca.pem"),
        srv: (srv_pem, srv_key),
        cli: (cli_pem, cli_key),
    }
}

/// A TLS acceptor offering h2 that requires a client certificate from `ca`.
fn acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(&pki.srv.0).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(&pki.srv.1).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&pki.ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

fn tls_leaves(ca: &str, cli: &(String, String)) -> String {
    format!(
        "<tls><trusted-ca-file>{ca}</trusted-ca-file><client-certificate-file>{}</client-certificate-file>\
         <client-key-file>{}</client-key-file></tls>",
        cli.0, cli.1
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_grpc_pull_over_tls_verifies_the_server_and_presents_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let good = sci(Answer::Report { gas: 270 });
    let (a, saw_cert) = serve(good.clone(), Some(acceptor(&pki))).await;
    let untrusted = sci(Answer::Report { gas: 280 });
    let (b, _) = serve(untrusted.clone(), Some(acceptor(&pki))).await;
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    // A grpc:// URL without allow-plaintext is refused at commit.
    let r = nc
        .edit(&format!(
            "<scis>{}</scis><collection><pull>{}</pull></collection>",
            registered("sci-t", 60_000),
            target("sci-t", &format!("grpc://{a}"), 1, "")
        ))
        .await;
    assert!(r.contains("<rpc-error>") && r.contains("allow-plaintext"), "{r}");
    // sci-t has no credential: the verified server certificate is its proof. sci-u's server
    // is not from the configured anchor.
    let r = nc
        .edit(&format!(
            "<scis>{}{}</scis><collection><pull>{}{}</pull></collection>",
            registered("sci-t", 60_000).replace("<authentication>none</authentication>", ""),
            registered("sci-u", 60_000).replace("<authentication>none</authentication>", ""),
            target("sci-t", &format!("grpcs://{a}"), 1, &tls_leaves(&pki.ca, &pki.cli)),
            target("sci-u", &format!("grpcs://{b}"), 1, &tls_leaves(&pki.other_ca, &pki.cli)),
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    nc.wait("the report pulled over grpcs", &entry("sci-t"), |r| r.contains("<gas>270</gas>")).await;
    assert!(saw_cert.load(Ordering::SeqCst), "the agent presented its client certificate");
    let s = nc.wait("the grpcs pull counted", &state("sci-t"), |r| count(r, "pulls") >= 1).await;
    assert!(s.contains("<transport>grpcs</transport>"), "{s}");
    let s = nc.wait("the untrusted server refused", &state("sci-u"), |r| count(r, "failures") >= 2).await;
    assert_eq!(count(&s, "pulls"), 0, "{s}");
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("TLS")), "{s}");
    assert_eq!(untrusted.calls.load(Ordering::SeqCst), 0, "no call reached the untrusted server");
    let e = nc.get(&entry("sci-u")).await;
    assert!(!e.contains("<gas>"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_grpc_pull_answers_over_the_limit_for_another_sci_or_failed_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let (big, _) = serve(sci(Answer::Oversized), None).await;
    let (liar, _) = serve(sci(Answer::OtherSci), None).await;
    let (down, _) = serve(sci(Answer::Unavailable), None).await;
    let gz = serve_compressed().await;
    let plain = "<allow-plaintext>true</allow-plaintext>";
    let r = nc
        .edit(&format!(
            "<scis>{}{}{}{}{}</scis><collection><pull>{}{}{}{}</pull></collection>",
            registered("sci-big", 60_000),
            registered("sci-liar", 60_000),
            registered("sci-down", 60_000),
            registered("someone-else", 60_000),
            registered("sci-gz", 60_000),
            target("sci-big", &format!("grpc://{big}"), 1, plain),
            target("sci-liar", &format!("grpc://{liar}"), 1, plain),
            target("sci-down", &format!("grpc://{down}"), 1, plain),
            target("sci-gz", &format!("grpc://{gz}"), 1, plain),
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let s = nc.wait("the oversized answer refused", &state("sci-big"), |r| count(r, "failures") >= 2).await;
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("larger than")), "{s}");
    assert_eq!(count(&s, "pulls"), 0, "{s}");
    let s = nc.wait("the error status counted", &state("sci-down"), |r| count(r, "failures") >= 2).await;
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("Unavailable")), "{s}");
    // A compressed answer: refused as the SCI's fault (malformed), not as unreachable.
    let s = nc.wait("the compressed answer refused", &state("sci-gz"), |r| count(r, "failures") >= 2).await;
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("compress")), "{s}");
    assert_eq!(count(&s, "pulls"), 0, "{s}");
    nc.wait("a report for another SCI refused", "<statistics/>", |r| {
        rejected(r, "unauthenticated") >= 1 && rejected(r, "malformed") >= 4
    })
    .await;
    for id in ["sci-big", "sci-liar", "sci-down", "someone-else", "sci-gz"] {
        let e = nc.get(&entry(id)).await;
        assert!(!e.contains("<gas>"), "{id}: {e}");
    }
    // The agent stays well: a NETCONF read still answers.
    let r = nc.get("<collection><pull/></collection>").await;
    assert!(r.contains("sci-liar"), "{r}");
}

/// A gRPC pull target that accepts TCP, reads and never answers: each pull ends at the
/// pull timeout (5 s) as a failure, and its connection is closed, not left to the server
/// (seed 004 Security Considerations: a peer cannot hold the agent's resources).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_grpc_pull_a_silent_server_times_out_and_its_connections_are_closed() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (accepted, closed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (a2, c2) = (accepted.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a2.fetch_add(1, Ordering::SeqCst);
            let closed = c2.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 4096];
                while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let r = nc
        .edit(&format!(
            "<scis>{}</scis><collection><pull>{}</pull></collection>",
            registered("sci-mute", 60_000),
            target("sci-mute", &format!("grpc://{addr}"), 1, "<allow-plaintext>true</allow-plaintext>")
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let s = nc.wait("two pulls timed out", &state("sci-mute"), |r| count(r, "failures") >= 2).await;
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("timed out")), "{s}");
    // Every connection but the pull in progress is closed by the agent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (a, c) = (accepted.load(Ordering::SeqCst), closed.load(Ordering::SeqCst));
        if c + 1 >= a {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{a} connections, {c} closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
