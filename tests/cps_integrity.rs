//! The reference C-PS refuses tampered, stale and replayed reports (seed 004, Metric
//! Integrity: HMAC, ±30 s timestamp window, monotonically increasing nonce), over real
//! HTTP; and the adapter reaches a C-PS over TLS (rustls) with server verification and a
//! client certificate.

mod cps_support;
#[path = "common/pki.rs"]
mod pki;

use std::sync::Arc;
use std::time::Duration;

use cats_sma::cps::auth::{sign, Signed};
use cats_sma::cps::reference::{CpsConfig, CpsState, RefCps};
use cats_sma::cps::session::Role;
use cats_sma::cps::transport::{client_config, Endpoint, HttpTransport, Request, TlsFiles, Transport};
use cats_sma::cps::wire::{MetricBatch, MetricReport, ReportKind, ServiceMetrics};
use cats_sma::engine::model::Health;
use cps_support::*;

fn batch(seq: u64, gas: u32) -> Vec<u8> {
    serde_json::to_vec(&MetricBatch {
        csma_id: CSMA.into(),
        site_id: SITE.into(),
        reports: vec![MetricReport {
            sequence: seq,
            kind: ReportKind::Delta,
            trigger: "metric-change".into(),
            generated_at: chrono::Utc::now(),
            services: vec![ServiceMetrics {
                cs_id: "AR1".into(),
                gas,
                computing_time: 5,
                health: Health::Healthy,
                cost: None,
                reputation: None,
                security_label: None,
                sci_count: 1,
            }],
            withdrawn: vec![],
            sci_withdrawn: vec![],
        }],
    })
    .unwrap()
}

/// A POST /cats/metrics signed over `signed_body` at `ts_ms` with `nonce`, carrying `body`.
fn request(signed_body: &[u8], body: &[u8], ts_ms: i64, nonce: u64) -> Request {
    let s = Signed { method: "POST", path: "/cats/metrics", csma_id: CSMA, timestamp_ms: ts_ms, nonce };
    Request {
        method: "POST",
        path: "/cats/metrics".into(),
        headers: vec![
            ("x-cats-csma-id", CSMA.into()),
            ("content-type", "application/json".into()),
            ("x-cats-key-id", KEY_ID.into()),
            ("x-cats-timestamp", ts_ms.to_string()),
            ("x-cats-nonce", nonce.to_string()),
            ("x-cats-signature", sign(SECRET, &s, signed_body)),
        ],
        body: body.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_stale_and_replayed_reports_are_refused() {
    let cps = start_cps(free_addr(), None).await;
    let t = transport(cps.addr);
    let now = chrono::Utc::now().timestamp_millis();
    let good = batch(1, 400);

    let ok = request(&good, &good, now, 10);
    let r = t.send(ok.clone()).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(cst_services(&cps.state), vec![("AR1".into(), 400)]);

    // Replayed: the same request again.
    let r = t.send(ok).await.unwrap();
    assert_eq!(r.status, 401);
    assert!(String::from_utf8_lossy(&r.body).contains("replayed-nonce"));

    // Tampered: a different body under the original signature.
    let r = t.send(request(&batch(2, 400), &batch(2, 9999), now, 11)).await.unwrap();
    assert_eq!(r.status, 401);
    assert!(String::from_utf8_lossy(&r.body).contains("bad-signature"));

    // Stale: correctly signed, 31 s old (and one 31 s ahead).
    let old = batch(3, 300);
    let r = t.send(request(&old, &old, now - 31_000, 12)).await.unwrap();
    assert_eq!(r.status, 401);
    assert!(String::from_utf8_lossy(&r.body).contains("stale-timestamp"));
    let r = t.send(request(&old, &old, chrono::Utc::now().timestamp_millis() + 31_000, 13)).await.unwrap();
    assert_eq!(r.status, 401);

    // Unsigned.
    let mut unsigned = request(&old, &old, now, 14);
    unsigned.headers.retain(|(k, _)| !k.starts_with("x-cats-") || *k == "x-cats-csma-id");
    let r = t.send(unsigned).await.unwrap();
    assert_eq!(r.status, 400);

    // None of them changed the table; a fresh, correctly signed one still does.
    assert_eq!(cst_services(&cps.state), vec![("AR1".into(), 400)]);
    let next = batch(4, 250);
    let r = t.send(request(&next, &next, chrono::Utc::now().timestamp_millis(), 15)).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(cst_services(&cps.state), vec![("AR1".into(), 250)]);
    assert_eq!(
        (
            cps.state.refused("replayed-nonce"),
            cps.state.refused("bad-signature"),
            cps.state.refused("stale-timestamp"),
            cps.state.refused("malformed-auth")
        ),
        (1, 1, 2, 1)
    );

    // Malformed JSON under a good signature: 400 with the reason, no panic.
    let junk = b"{\"csma-id\": 5}".to_vec();
    let r = t.send(request(&junk, &junk, chrono::Utc::now().timestamp_millis(), 16)).await.unwrap();
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("malformed"));
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_with_the_wrong_key_is_refused_and_counts_it() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let cps = start_cps(free_addr(), None).await;
    let adapters = ctl.start_adapters();
    let mut s = settings("cps1", cps.addr, Role::Primary, 10);
    s.psk.as_mut().unwrap().secret = b"not the key the C-PS has.......".to_vec();
    adapters.start_peer(s, transport(cps.addr));
    let peer = adapters.peer("cps1").unwrap();
    wait_for("rejected", || peer.status.lock().unwrap().rejected >= 1).await;
    let st = peer.status.lock().unwrap().clone();
    assert!(st.last_error.unwrap().contains("bad-signature"));
    assert!(cps.state.cst.lock().unwrap().sites.is_empty());
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_server_verification_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    // A CA, a server certificate for 127.0.0.1 and localhost, a client certificate.
    let pki = pki::TestPki::new(dir.path(), "cps test CA");
    let p = |n: &str| pki.path(n);
    pki.leaf("srv", &["localhost", "127.0.0.1"]);
    pki.leaf("cli", &["csma-a"]);

    let config = CpsConfig {
        tls_cert: Some(p("srv.pem")),
        tls_key: Some(p("srv.key")),
        client_ca: Some(p("ca.pem")),
        ..cps_config()
    };
    let cps = RefCps::start(free_addr(), CpsState::new(config).unwrap()).await.unwrap();
    let url = format!("https://localhost:{}", cps.addr.port());
    let files = TlsFiles {
        trusted_ca_file: p("ca.pem"),
        server_name: None,
        client_certificate_file: Some(p("cli.pem")),
        client_key_file: Some(p("cli.key")),
    };
    let tls = client_config(&files).unwrap();
    let transport = Arc::new(
        HttpTransport::new(Endpoint::parse(&url).unwrap(), Some((tls, None)), Duration::from_secs(5)).unwrap(),
    );
    let ctl = Controller::new();
    ctl.delta("AR1", 70);
    let adapters = ctl.start_adapters();
    let mut s = settings("tls", cps.addr, Role::Primary, 10);
    s.url = url.clone();
    adapters.start_peer(s, transport);
    wait_for("delivered over TLS", || cst_services(&cps.state) == vec![("AR1".into(), 70)]).await;

    // Without a client certificate the C-PS refuses the handshake; with a wrong trust
    // anchor the C-SMA refuses the server.
    let no_cert = TlsFiles { client_certificate_file: None, client_key_file: None, ..files.clone() };
    let t = HttpTransport::new(
        Endpoint::parse(&url).unwrap(),
        Some((client_config(&no_cert).unwrap(), None)),
        Duration::from_secs(5),
    )
    .unwrap();
    let get = Request { method: "GET", path: "/cats/cst".into(), headers: vec![], body: vec![] };
    assert!(t.send(get.clone()).await.is_err());
    std::fs::write(p("other.pem"), {
        let k = rcgen::KeyPair::generate().unwrap();
        rcgen::CertificateParams::new(vec!["x".into()]).unwrap().self_signed(&k).unwrap().pem()
    })
    .unwrap();
    let wrong = TlsFiles { trusted_ca_file: p("other.pem"), ..files };
    let t = HttpTransport::new(
        Endpoint::parse(&url).unwrap(),
        Some((client_config(&wrong).unwrap(), None)),
        Duration::from_secs(5),
    )
    .unwrap();
    let e = t.send(get).await.unwrap_err();
    assert!(e.to_string().contains("TLS"), "{e}");
    adapters.shutdown();
    cps.stop().await;
}

/// Any signed request, with extra headers.
fn signed(method: &'static str, path: &str, csma: &str, body: &[u8], extra: &[(&'static str, &str)]) -> Request {
    let ts = chrono::Utc::now().timestamp_millis();
    static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);
    let nonce = NONCE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let s = Signed { method, path, csma_id: csma, timestamp_ms: ts, nonce };
    let mut headers = vec![
        ("x-cats-csma-id", csma.to_owned()),
        ("x-cats-key-id", KEY_ID.into()),
        ("x-cats-timestamp", ts.to_string()),
        ("x-cats-nonce", nonce.to_string()),
        ("x-cats-signature", sign(SECRET, &s, body)),
    ];
    headers.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    Request { method, path: path.into(), headers, body: body.to_vec() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_4xx_with_the_reason() {
    let cps = start_cps(free_addr(), None).await;
    let t = transport(cps.addr);
    let good = batch(1, 10);
    let r = t.send(signed("POST", "/cats/metrics", CSMA, &good, &[])).await.unwrap();
    assert_eq!(r.status, 200);
    let cases: Vec<(Request, u16, &str)> = vec![
        (signed("POST", "/cats/metrics", CSMA, b"\x1f\x8b garbage", &[("content-encoding", "gzip")]), 400, "gzip"),
        (signed("POST", "/cats/metrics", CSMA, &good, &[("content-encoding", "br")]), 415, "unsupported-encoding"),
        // Another C-SMA claiming the same site.
        (
            signed(
                "POST",
                "/cats/metrics",
                "intruder",
                &String::from_utf8(batch(2, 10)).unwrap().replace(CSMA, "intruder").into_bytes(),
                &[],
            ),
            403,
            "forbidden",
        ),
        (signed("GET", "/cats/metrics", "intruder", b"", &[("x-cats-site-id", SITE)]), 403, "forbidden"),
        (signed("GET", "/cats/metrics", CSMA, b"", &[]), 400, "x-cats-site-id"),
        (signed("DELETE", "/cats/metrics/188.3.67.3:67", CSMA, b"", &[]), 400, "x-cats-site-id"),
        (signed("PATCH", "/cats/metrics/site-a", CSMA, b"", &[]), 405, "method-not-allowed"),
        (signed("GET", "/cats/metrics", CSMA, b"", &[("x-cats-site-id", "nowhere")]), 404, "no state"),
        (signed("GET", "/cats/metrics/188.3.67.3:99", CSMA, b"", &[]), 404, "no SCI"),
        (signed("PUT", "/cats/metrics/188.3.67.3:67", CSMA, b"{}", &[]), 400, "malformed"),
        (
            signed("POST", "/cats/metrics", CSMA, &good, &[("content-type", "text/plain")]),
            415,
            "unsupported-media-type",
        ),
        (signed("GET", "/cats/keepalive", CSMA, b"", &[]), 405, "method-not-allowed"),
        // A keepalive is authenticated like every request.
        (
            Request {
                method: "POST",
                path: "/cats/keepalive".into(),
                headers: vec![("x-cats-csma-id", CSMA.into())],
                body: br#"{"csma-id":"csma-a","site-id":"site-a","sequence":1}"#.to_vec(),
            },
            400,
            "x-cats-key-id",
        ),
        (signed("GET", "/cats/other", CSMA, b"", &[]), 404, "not-found"),
        (
            Request { method: "GET", path: "/cats/select?cs-id=AR1".into(), headers: vec![], body: vec![] },
            400,
            "ingress",
        ),
    ];
    for (req, status, reason) in cases {
        let what = format!("{} {}", req.method, req.path);
        let r = t.send(req).await.unwrap();
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, status, "{what}: {body}");
        assert!(body.contains(reason), "{what}: {body}");
    }
    // The site is unchanged and still served.
    assert_eq!(cst_services(&cps.state), vec![("AR1".into(), 10)]);
    cps.stop().await;
}
