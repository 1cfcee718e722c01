//! SSE collection through the real agent (seed 004, SCI Collection Interface, push mode:
//! "HTTP/2 with Server-Sent Events"): an SCI served here exposes a `text/event-stream`; the
//! agent subscribes (pull target in mode sse), ingests each event as a report, refuses a
//! malformed and an oversized event (counted as malformed; the stream goes on), and after
//! the SCI drops the connection reconnects with `Last-Event-ID` (WHATWG HTML 9.2.4); over
//! TLS the stream is HTTP/2 (ALPN h2). Connection status, events, reconnects and the last
//! event id are read back from the target's state over NETCONF.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CATS: &str = "urn:cats-sma:yang:cats-sma";

fn report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":7,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

/// The request head an HTTP/1.1 client sent (None: it went first).
async fn request_head(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    Some(req)
}

/// An SCI with an event stream over HTTP/1.1: the first connection sends four events (a
/// report, a malformed one, one over the agent's 1 MiB limit, a report) and closes; later
/// ones send one more report and stay open. Records each request's Last-Event-ID.
async fn sse_sci(csci: &'static str) -> (SocketAddr, Arc<Mutex<Vec<Option<String>>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move {
                let Some(req) = request_head(&mut s).await else { return };
                let text = String::from_utf8_lossy(&req).to_lowercase();
                assert!(text.contains("accept: text/event-stream"), "{text}");
                let last = text.lines().find_map(|l| l.strip_prefix("last-event-id: ").map(|v| v.trim().to_owned()));
                let n = {
                    let mut v = seen.lock().unwrap();
                    v.push(last);
                    v.len()
                };
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                if n == 1 {
                    let big = "x".repeat(2 * 1024 * 1024);
                    let events = format!(
                        ": hello\n\nid: 1\ndata: {}\n\nid: 2\ndata: not a report\n\nid: 3\ndata: {big}\n\nid: 4\ndata: {}\n\n",
                        report(csci, 1, 100),
                        report(csci, 2, 110)
                    );
                    let _ = s.write_all(events.as_bytes()).await;
                    let _ = s.shutdown().await;
                    return;
                }
                let e = format!(
                    "id: {}\nevent: report\ndata: {}\n\n",
                    3 + n,
                    report(csci, n as u64 + 1, 100 + 10 * n as u32)
                );
                let _ = s.write_all(e.as_bytes()).await;
                // Open until the agent goes; a comment now and then keeps it from idling out.
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if s.write_all(b": keep-alive\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_sse_events_are_reports_and_the_stream_resumes_with_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let (sci, seen) = sse_sci("sci-e").await;
    // An sse target must be http(s).
    let r = nc
        .edit(
            "<scis><sci><csci-id>sci-e</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><pull><target><csci-id>sci-e</csci-id><url>grpc://127.0.0.1:1</url><mode>sse</mode>\
             <allow-plaintext>true</allow-plaintext></target></pull></collection>",
        )
        .await;
    assert!(r.contains("<rpc-error>") && r.contains("sse"), "{r}");
    let r = nc
        .edit(&format!(
            "<scis><sci><csci-id>sci-e</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><pull><target><csci-id>sci-e</csci-id><url>http://{sci}/events</url><mode>sse</mode>\
             <interval>2</interval><allow-plaintext>true</allow-plaintext></target></pull></collection>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    // The second connection's report (seq 3, GAS 120) lands: the stream was resumed.
    nc.wait("the report of the resumed stream", &entry("sci-e"), |r| r.contains("<gas>120</gas>")).await;
    let s = nc
        .wait("the stream's state", &state("sci-e"), |r| {
            r.contains("<status>connected</status>") && count(r, "events-received") >= 5
        })
        .await;
    assert_eq!(leaf_after(&s, "", "last-event-id").as_deref(), Some("5"), "{s}");
    assert!(count(&s, "reconnects") >= 1, "{s}");
    assert!(s.contains("<http-version>1.1</http-version>"), "{s}");
    assert_eq!(count(&s, "stale-pulls") + count(&s, "anomaly-pulls"), 0, "{s}");
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("over")), "{s}");
    {
        let v = seen.lock().unwrap();
        assert_eq!(v[0], None, "the first request has no Last-Event-ID: {v:?}");
        assert_eq!(v[1].as_deref(), Some("4"), "the reconnection resumes after the last event: {v:?}");
    }
    // The malformed and the oversized event: refused as malformed, the two good ones accepted.
    let stats = nc.get("<statistics/>").await;
    let malformed = leaf_after(&stats, "cats-sma-types:malformed</reason>", "count");
    assert_eq!(malformed.as_deref(), Some("2"), "{stats}");
    assert!(count(&stats, "reports-accepted") >= 3, "{stats}");
}

/// An SCI with an event stream over HTTP/2 (TLS, ALPN h2 and http/1.1): each connection
/// sends one report event with the next id.
async fn h2_sci(cert: &str, key: &str) -> SocketAddr {
    use http_body_util::StreamBody;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).unwrap().map(|c| c.unwrap()).collect();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the agent offers h2");
                let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    assert_eq!(req.version(), hyper::Version::HTTP_2);
                    let (tx, rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, Infallible>>(4);
                    tokio::spawn(async move {
                        let e = format!("id: h2-1\ndata: {}\n\n", report("sci-h", 1, 130));
                        let _ = tx.send(Ok(hyper::body::Frame::data(Bytes::from(e)))).await;
                        loop {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            if tx.send(Ok(hyper::body::Frame::data(Bytes::from_static(b":\n")))).await.is_err() {
                                return;
                            }
                        }
                    });
                    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
                    Ok::<_, Infallible>(
                        hyper::Response::builder().header("content-type", "text/event-stream").body(body).unwrap(),
                    )
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_sse_over_tls_is_http2_when_the_server_offers_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "sse test CA");
    let p = |n: &str| pki.path(n);
    let (srv, srv_key, _) = pki.leaf("srv", &["127.0.0.1"]);
    let sci = h2_sci(&srv, &srv_key).await;
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    // sci-h has no credential: the verified server certificate proves the stream's reports.
    let r = nc
        .edit(&format!(
            "<scis><sci><csci-id>sci-h</csci-id><cs-id>AR1</cs-id></sci></scis>\
             <collection><pull><target><csci-id>sci-h</csci-id><url>https://{sci}/events</url><mode>sse</mode>\
             <tls><trusted-ca-file>{}</trusted-ca-file></tls></target></pull></collection>",
            p("ca.pem")
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    nc.wait("the report of the HTTP/2 stream", &entry("sci-h"), |r| r.contains("<gas>130</gas>")).await;
    let s = nc.wait("the stream's state", &state("sci-h"), |r| r.contains("<status>connected</status>")).await;
    assert!(s.contains("<http-version>2</http-version>") && s.contains("<transport>https</transport>"), "{s}");
    assert_eq!(leaf_after(&s, "", "last-event-id").as_deref(), Some("h2-1"), "{s}");
    assert_eq!(count(&s, "reconnects"), 0, "{s}");
    // probe-sci opens the stream (200, text/event-stream) and closes it.
    let probe = nc.call(&format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-h</csci-id></probe-sci>")).await;
    assert!(probe.contains(">true</reachable>"), "{probe}");
}

/// An SCI whose stream is accepted (200, text/event-stream) and sends `events`, then is
/// closed at once (`close`) or held open until the agent closes it. Returns when each
/// connection came, and how many the agent closed.
type Times = Arc<Mutex<Vec<tokio::time::Instant>>>;
async fn canned_sci(events: String, close: bool) -> (SocketAddr, Times, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let closed = Arc::new(AtomicUsize::new(0));
    let (s2, c2) = (seen.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            s2.lock().unwrap().push(tokio::time::Instant::now());
            let events = events.clone();
            let closed = c2.clone();
            tokio::spawn(async move {
                let Some(_) = request_head(&mut s).await else { return };
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = s.write_all(format!("{head}{events}").as_bytes()).await;
                if close {
                    let _ = s.shutdown().await;
                    return;
                }
                let mut buf = [0u8; 4096];
                while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen, closed)
}

/// WHATWG HTML 9.2.3 leaves the reconnection delay to the client; seed 004 asks the C-SMA
/// not to be driven by a faulty SCI: a stream accepted and closed without an event (with
/// `retry: 0`) is reconnected to after 1 s, 2 s, 4 s, not every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_sse_a_stream_closed_without_events_is_backed_off() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let (sci, seen, _) = canned_sci("retry: 0\n\n".into(), true).await;
    let r = nc
        .edit(&format!(
            "<scis><sci><csci-id>sci-c</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><pull><target><csci-id>sci-c</csci-id><url>http://{sci}/events</url><mode>sse</mode>\
             <allow-plaintext>true</allow-plaintext></target></pull></collection>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Some(t) = seen.lock().unwrap().first() {
            break *t;
        }
        assert!(tokio::time::Instant::now() < deadline, "the agent never connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Connections at 0, 1 and 3 s (the next at 7 s); every second would be six by 5.5 s.
    tokio::time::sleep_until(first + Duration::from_millis(5500)).await;
    let n = seen.lock().unwrap().iter().filter(|t| **t <= first + Duration::from_millis(5500)).count();
    assert_eq!(n, 3, "connections in the first 5.5 s");
    let s = nc.get(&state("sci-c")).await;
    assert_eq!(count(&s, "events-received"), 0, "{s}");
    assert!(count(&s, "reconnects") >= 2, "{s}");
}

/// Seed 004 Security Considerations (rate limiting and burst control): an SSE event is a
/// message of the SCI's pace, so it takes a per-source token before it is decoded; a
/// stream of malformed events is refused past the burst as rate-limited (transport sse),
/// not decoded, logged and counted one by one without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_security_sse_events_take_per_source_rate_limit_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let (sci, _, _) = canned_sci("data: not a report\n\n".repeat(10), false).await;
    let r = nc
        .edit(&format!(
            "<scis><sci><csci-id>sci-r</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><rate-limit><per-source><rate>1</rate><burst>3</burst></per-source></rate-limit>\
             <pull><target><csci-id>sci-r</csci-id><url>http://{sci}/events</url><mode>sse</mode>\
             <interval>60</interval><allow-plaintext>true</allow-plaintext></target></pull></collection>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    let s = nc.wait("the ten events", &state("sci-r"), |r| count(r, "events-received") >= 10).await;
    assert!(leaf_after(&s, "", "last-error").is_some_and(|e| e.contains("rate limit")), "{s}");
    let stats = nc.get("<statistics/>").await;
    let malformed = leaf_after(&stats, "cats-sma-types:malformed</reason>", "count");
    assert_eq!(malformed.as_deref(), Some("3"), "the burst's events only are decoded: {stats}");
    let rl = nc.get("<collection><rate-limit/></collection>").await;
    assert_eq!(leaf_after(&rl, "<transport>sse</transport>", "count").as_deref(), Some("7"), "{rl}");
}

/// A target removed, or switched from sse to poll, ends its subscription: the stream's
/// connection is closed (no task or connection outlives its target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_collection_sse_a_removed_or_switched_target_closes_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let (sci, seen, closed) = canned_sci(": open\n".into(), false).await;
    let target = |mode: &str| {
        format!(
            "<scis><sci><csci-id>sci-x</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><pull><target><csci-id>sci-x</csci-id><url>http://{sci}/events</url><mode>{mode}</mode>\
             <interval>60</interval><allow-plaintext>true</allow-plaintext></target></pull></collection>"
        )
    };
    let wait = |n: usize| {
        let closed = closed.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while closed.load(Ordering::SeqCst) < n {
                assert!(tokio::time::Instant::now() < deadline, "the stream was not closed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(nc.edit(&target("sse")).await.contains("<ok/>"));
    nc.wait("connected", &state("sci-x"), |r| r.contains("<status>connected</status>")).await;
    // Switched to poll: the stream is closed (the poll itself comes after 60 s).
    assert!(nc.edit(&target("poll")).await.contains("<ok/>"));
    wait(1).await;
    let s = nc.get(&state("sci-x")).await;
    assert!(!s.contains("<sse>"), "a poll target has no sse state: {s}");
    // Back to sse, then the target removed: closed again.
    assert!(nc.edit(&target("sse")).await.contains("<ok/>"));
    nc.wait("connected again", &state("sci-x"), |r| r.contains("<status>connected</status>")).await;
    let r = nc
        .edit(
            "<collection><pull><target xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\" nc:operation=\"delete\">\
             <csci-id>sci-x</csci-id></target></pull></collection>",
        )
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    wait(2).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "no reconnection after the target went");
}

/// WHATWG HTML 9.2.4 and 9.2.6: a reconnection sends the last event ID string, which a
/// blank line sets even for an event without data, and which a connection that brings no
/// event leaves as it was. Connection 1 sends a report with id 7, connection 2 nothing,
/// connection 3 an id-only event (8); each then closes. Connection 2 and 3 must resume
/// after 7, connection 4 after 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatwg_9_2_6_last_event_id_survives_an_empty_connection_and_moves_on_an_id_only_event() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let Some(req) = request_head(&mut s).await else { continue };
            let text = String::from_utf8_lossy(&req).to_lowercase();
            let last = text.lines().find_map(|l| l.strip_prefix("last-event-id: ").map(|v| v.trim().to_owned()));
            let n = {
                let mut v = s2.lock().unwrap();
                v.push(last);
                v.len()
            };
            let events = match n {
                1 => format!("id: 7\ndata: {}\n\n", report("sci-l", 1, 100)),
                3 => "id: 8\n\n".to_owned(),
                _ => String::new(),
            };
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = s.write_all(format!("{head}{events}").as_bytes()).await;
            let _ = s.shutdown().await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = Nc::open(&agent).await;
    let r = nc
        .edit(&format!(
            "<scis><sci><csci-id>sci-l</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
             <collection><pull><target><csci-id>sci-l</csci-id><url>http://{addr}/events</url><mode>sse</mode>\
             <allow-plaintext>true</allow-plaintext></target></pull></collection>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    // Connections at about 0, 1, 3 and 7 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 4 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", seen.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = seen.lock().unwrap().clone();
    assert_eq!(v[..4], [None, Some("7".into()), Some("7".into()), Some("8".into())], "{v:?}");
    let s = nc.get(&state("sci-l")).await;
    assert_eq!(leaf_after(&s, "", "last-event-id").as_deref(), Some("8"), "{s}");
}
