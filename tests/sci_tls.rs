//! TLS and mutual TLS on the SCI HTTP listener and RESTCONF (seed 004, SCI Authentication:
//! "validate the SCI's certificate against a trusted CA and check that its subject matches
//! the CSCI-ID; maintain a CRL"; Security Considerations), with RFC 7589 cert-to-name. The
//! real agent; a CA, client certificates and CRLs made with rcgen at test time; curl with
//! --cert/--key/--cacert for HTTP/1.1 and a rustls + hyper client for HTTP/2 (ALPN h2).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sha2::Digest;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const C2N: &str = "urn:ietf:params:xml:ns:yang:ietf-x509-cert-to-name";

/// A test CA: its certificate and what signs with it.
struct Ca {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, issuer: rcgen::Issuer::new(p, key) }
    }

    /// A client certificate with serial `serial`, CommonName `cn` (if any) and these SANs;
    /// `expired` puts its validity in the past.
    fn client(&self, serial: u64, cn: Option<&str>, sans: Vec<rcgen::SanType>, expired: bool) -> Client {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.subject_alt_names = sans;
        p.serial_number = Some(rcgen::SerialNumber::from(serial));
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        if expired {
            p.not_before = now - time::Duration::days(30);
            p.not_after = now - time::Duration::days(1);
        } else {
            p.not_before = now - time::Duration::days(1);
            p.not_after = now + time::Duration::days(30);
        }
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Client { serial, cert, key }
    }

    /// A CRL of this CA listing `revoked` serials.
    fn crl(&self, number: u64, revoked: &[u64]) -> String {
        let now = time::OffsetDateTime::now_utc();
        let params = rcgen::CertificateRevocationListParams {
            this_update: now - time::Duration::minutes(1),
            next_update: now + time::Duration::days(1),
            crl_number: rcgen::SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(*s),
                    revocation_time: now - time::Duration::minutes(1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        params.signed_by(&self.issuer).unwrap().pem().unwrap()
    }
}

struct Client {
    serial: u64,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Client {
    /// Writes `NAME.pem` and `NAME.key` into `dir`.
    fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&c, self.cert.pem()).unwrap();
        std::fs::write(&k, self.key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// RFC 7407 tls-fingerprint: 04 (SHA-256) then the digest.
fn fingerprint(der: &[u8]) -> String {
    let mut s = "04".to_owned();
    for b in sha2::Sha256::digest(der) {
        s.push_str(&format!(":{b:02X}"));
    }
    s
}

fn report(csci: &str, cs: &str, seq: u64) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{now}","gas":400,"computing-time":5,"health":"HEALTHY"}}"#
    )
}

/// One cert-to-name entry as XML.
fn c2n(id: u32, fp: &str, map: &str, name: Option<&str>) -> String {
    let name = name.map(|n| format!("<name>{n}</name>")).unwrap_or_default();
    format!(
        "<cert-to-name><id>{id}</id><fingerprint>{fp}</fingerprint>\
         <map-type xmlns:x509c2n=\"{C2N}\">x509c2n:{map}</map-type>{name}</cert-to-name>"
    )
}

/// The startup datastore: the SCIs (each for CS-ID AR1) and collection/http/tls.
fn startup(state: &Path, tls: &str, scis: &[&str]) {
    std::fs::create_dir_all(state).unwrap();
    let scis: String = scis.iter().map(|s| format!("<sci><csci-id>{s}</csci-id><cs-id>AR1</cs-id></sci>")).collect();
    std::fs::write(
        state.join("startup.xml"),
        format!("<cats-sma xmlns=\"{CATS}\"><collection><http><tls>{tls}</tls></http></collection><scis>{scis}</scis></cats-sma>"),
    )
    .unwrap();
}

/// What curl got: its exit status, the HTTP status (0 when there was none), the body and
/// curl's error text.
#[derive(Debug)]
struct Got {
    ok: bool,
    status: u16,
    version: String,
    body: String,
    err: String,
}

/// POSTs a report with curl over HTTPS (HTTP/1.1), trusting the agent's generated
/// certificate, with a client certificate when given.
fn curl_post(url: &str, cacert: &Path, cert: Option<&(PathBuf, PathBuf)>, body: &str) -> Got {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--http1.1", "--max-time", "20", "--cacert"]).arg(cacert);
    if let Some((c, k)) = cert {
        cmd.arg("--cert").arg(c).arg("--key").arg(k);
    }
    cmd.args(["-H", "content-type: application/json", "--data-binary", body, "-w", "\n%{http_code} %{http_version}"])
        .arg(url)
        .stdin(Stdio::null());
    let out = cmd.output().expect("curl is installed (scripts/setup.sh)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut tail = tail.split_whitespace();
    Got {
        ok: out.status.success(),
        status: tail.next().and_then(|c| c.parse().ok()).unwrap_or(0),
        version: tail.next().unwrap_or("").to_owned(),
        body: body.to_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// No HTTP answer: the TLS handshake (or the first read after it) failed.
fn refused(g: &Got) -> bool {
    !g.ok && g.status == 0 && !g.err.is_empty()
}

/// A rustls client with a client certificate, offering only h2 by ALPN.
fn h2_connector(cacert: &Path, cert: &Client) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(cacert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.key.serialize_pem().as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type H2 = hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// An HTTP/2 connection over TLS to the SCI listener; also says what ALPN chose.
async fn h2_connect(addr: std::net::SocketAddr, connector: &tokio_rustls::TlsConnector) -> (H2, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let alpn = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    (send, alpn)
}

async fn h2_post(send: &mut H2, addr: std::net::SocketAddr, body: String) -> Result<(u16, String), String> {
    use http_body_util::BodyExt;
    let req = hyper::Request::post(format!("https://{addr}/reports"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    send.ready().await.map_err(|e| e.to_string())?;
    let r = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let body = r.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// collection/http/tls-state as JSON (RESTCONF, as admin).
fn tls_state(agent: &AgentProcess) -> serde_json::Value {
    let r = Curl::new(agent).get("/data/cats-sma:cats-sma/collection/http/tls-state");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["cats-sma:tls-state"].clone()
}

fn failures(state: &serde_json::Value, reason: &str) -> u64 {
    state["handshake-failures"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["reason"] == reason))
        .and_then(|f| f["count"].as_str().and_then(|c| c.parse().ok()).or_else(|| f["count"].as_u64()))
        .unwrap_or(0)
}

/// Polls `f` until it holds (a reload is asynchronous); fails after 30 s.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn audit(agent: &AgentProcess) -> String {
    std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default()
}

/// A CA, SCI A's and B's certificates mapped by fingerprint, the CRL file, client-auth
/// required; the agent started on it.
struct Site {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    ca: Ca,
    a: Client,
    b: Client,
    a_files: (PathBuf, PathBuf),
    crl: PathBuf,
    agent: AgentProcess,
    url: String,
    cacert: PathBuf,
}

const SCI_A: &str = "10.0.0.1:8080";
const SCI_B: &str = "10.0.0.2:8080";

fn site(extra_tls: &str) -> Site {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let ca = Ca::new("SCI CA");
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    let crl = dir.join("ca.crl");
    std::fs::write(&crl, ca.crl(1, &[])).unwrap();
    let a = ca.client(101, Some("sci-a"), vec![], false);
    let b = ca.client(102, Some("sci-b"), vec![], false);
    let a_files = a.write(&dir, "a");
    let tls = format!(
        "<client-ca-file>{}</client-ca-file><client-auth>required</client-auth><crl-file>{}</crl-file>{}{}{extra_tls}",
        dir.join("ca.pem").display(),
        crl.display(),
        c2n(1, &fingerprint(a.cert.der()), "specified", Some(SCI_A)),
        c2n(2, &fingerprint(b.cert.der()), "specified", Some(SCI_B)),
    );
    let state = dir.join("state");
    startup(&state, &tls, &[SCI_A, SCI_B]);
    let agent = start_agent_tls(&state, &["--sci-listen", "127.0.0.1:0"]);
    let addr = agent.sci_addr.expect("the ready line names the SCI listener");
    assert!(
        agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains(&format!("SCI reports: https://{addr}/reports"))),
        "TLS by default: the ready line says https"
    );
    let url = format!("https://{addr}/reports");
    let cacert = state.join("sci-cert.pem");
    Site { _dir: tmp, dir, ca, a, b, a_files, crl, agent, url, cacert }
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_mutual_tls_accepted_over_http1_and_http2() {
    let s = site("");
    // HTTP/1.1 with curl: the certificate names SCI A, which reports for itself.
    let g = curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_A, "AR1", 1));
    assert_eq!(g.status, 200, "{g:?}");
    assert_eq!(g.version, "1.1");
    assert!(g.body.contains("\"accepted\":1"), "{g:?}");
    // HTTP/2 chosen by ALPN, with a rustls client presenting B's certificate.
    let addr = s.agent.sci_addr.unwrap();
    let (mut h2, alpn) = h2_connect(addr, &h2_connector(&s.cacert, &s.b)).await;
    assert_eq!(alpn, b"h2");
    for seq in 1..=2 {
        let (status, body) = h2_post(&mut h2, addr, report(SCI_B, "AR1", seq)).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"accepted\":1"), "{body}");
    }
    let st = tls_state(&s.agent);
    assert_eq!(st["enabled"], true, "{st}");
    assert_eq!(st["client-auth"], "required", "{st}");
    assert_eq!(st["generated-certificate"], true, "{st}");
    assert_eq!(st["crl"][0]["revoked-certificates"], 0, "{st}");
    assert!(st["mapped-connections"].as_str().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) >= 2, "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_certificate_for_a_cannot_report_for_b() {
    let s = site("");
    let g = curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_B, "AR1", 1));
    assert_eq!(g.status, 422, "{g:?}");
    assert!(g.body.contains("unauthenticated"), "{g:?}");
    assert!(g.body.contains(&format!("message is from {SCI_A}")), "{g:?}");
    // A batch that smuggles B's report beside A's own: A's is taken, B's is not.
    let batch = format!("[{},{}]", report(SCI_A, "AR1", 1), report(SCI_B, "AR1", 1));
    let g = curl_post(&s.url, &s.cacert, Some(&s.a_files), &batch);
    assert_eq!(g.status, 200, "{g:?}");
    assert!(g.body.contains("\"accepted\":1") && g.body.contains("unauthenticated"), "{g:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_revoked_certificate_refused_after_crl_reload() {
    let s = site("");
    let addr = s.agent.sci_addr.unwrap();
    assert_eq!(curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_A, "AR1", 1)).status, 200);
    // B keeps an HTTP/2 connection open across the reload.
    let (mut h2, _) = h2_connect(addr, &h2_connector(&s.cacert, &s.b)).await;
    assert_eq!(h2_post(&mut h2, addr, report(SCI_B, "AR1", 1)).await.unwrap().0, 200);
    // The CA revokes A and B; the CRL file is rewritten in place, the agent is not restarted.
    std::fs::write(&s.crl, s.ca.crl(2, &[s.a.serial, s.b.serial])).unwrap();
    eventually("A's certificate refused at the handshake", || {
        refused(&curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_A, "AR1", 2)))
    })
    .await;
    let st = tls_state(&s.agent);
    assert!(failures(&st, "revoked") >= 1, "{st}");
    assert_eq!(st["crl"][0]["revoked-certificates"], 2, "{st}");
    assert!(st["reloads"].as_str().unwrap_or("0") != "0", "{st}");
    // The connection B already had is closed too.
    let mut closed = false;
    for seq in 2..50 {
        if h2_post(&mut h2, addr, report(SCI_B, "AR1", seq)).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(closed, "B's open connection ends once its certificate is revoked");
    // Logged and audited as an SCI authentication failure.
    eventually("the audit record", || {
        audit(&s.agent).lines().any(|l| l.contains("sci-auth-failure") && l.contains("revoked"))
    })
    .await;
    assert!(
        s.agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("configuration reloaded")),
        "the reload is logged"
    );
    // A broken CRL file keeps the previous configuration (fail closed: A stays refused).
    std::fs::write(&s.crl, "-----BEGIN X509 CRL-----\nnot base64\n-----END X509 CRL-----\n").unwrap();
    eventually("the reload failure in the operational state", || {
        tls_state(&s.agent)["reload-failures"].as_str().unwrap_or("0") != "0"
    })
    .await;
    assert!(refused(&curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_A, "AR1", 3))));
    assert!(tls_state(&s.agent)["last-reload-error"].as_str().unwrap_or("").contains("CRL"));
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_unmapped_missing_and_expired_certificates_refused() {
    let s = site("");
    // Issued by the trusted CA, but no cert-to-name entry names it.
    let c = s.ca.client(103, Some("nobody"), vec![], false);
    let c_files = c.write(&s.dir, "c");
    assert!(refused(&curl_post(&s.url, &s.cacert, Some(&c_files), &report(SCI_A, "AR1", 1))));
    // No certificate at all.
    assert!(refused(&curl_post(&s.url, &s.cacert, None, &report(SCI_A, "AR1", 1))));
    // Expired (and otherwise mapped: its fingerprint is not listed, so map by CA would not
    // matter; the handshake refuses it first).
    let e = s.ca.client(104, Some("sci-a"), vec![], true);
    let e_files = e.write(&s.dir, "e");
    assert!(refused(&curl_post(&s.url, &s.cacert, Some(&e_files), &report(SCI_A, "AR1", 1))));
    // From another CA.
    let other = Ca::new("Other CA").client(105, Some("sci-a"), vec![], false);
    let o_files = other.write(&s.dir, "o");
    assert!(refused(&curl_post(&s.url, &s.cacert, Some(&o_files), &report(SCI_A, "AR1", 1))));
    let st = tls_state(&s.agent);
    for reason in ["unmapped-certificate", "no-certificate", "expired", "unknown-ca"] {
        assert_eq!(failures(&st, reason), 1, "{reason}: {st}");
    }
    eventually("audit records", || audit(&s.agent).lines().filter(|l| l.contains("sci-auth-failure")).count() >= 1)
        .await;
    // The good certificate still works beside them.
    assert_eq!(curl_post(&s.url, &s.cacert, Some(&s.a_files), &report(SCI_A, "AR1", 1)).status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_cert_to_name_each_map_type_names_the_csci_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("SCI CA");
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    let dns = ca.client(1, None, vec![rcgen::SanType::DnsName("SCI-D.Example.NET".try_into().unwrap())], false);
    let ip = ca.client(2, None, vec![rcgen::SanType::IpAddress("192.0.2.7".parse().unwrap())], false);
    let mail = ca.client(3, None, vec![rcgen::SanType::Rfc822Name("Ops@Example.COM".try_into().unwrap())], false);
    let any = ca.client(
        4,
        Some("ignored"),
        vec![
            rcgen::SanType::DnsName("any.example.net".try_into().unwrap()),
            rcgen::SanType::IpAddress("192.0.2.9".parse().unwrap()),
        ],
        false,
    );
    let cn = ca.client(5, Some("sci-cn"), vec![], false);
    let tls = format!(
        "<client-ca-file>{}</client-ca-file><client-auth>required</client-auth>{}{}{}{}{}",
        dir.join("ca.pem").display(),
        c2n(1, &fingerprint(dns.cert.der()), "san-dns-name", None),
        c2n(2, &fingerprint(ip.cert.der()), "san-ip-address", None),
        c2n(3, &fingerprint(mail.cert.der()), "san-rfc822-name", None),
        c2n(4, &fingerprint(any.cert.der()), "san-any", None),
        // By the CA's fingerprint: every certificate it issued, by CommonName.
        c2n(9, &fingerprint(ca.cert.der()), "common-name", None),
    );
    let names = ["sci-d.example.net", "192.0.2.7", "Ops@example.com", "any.example.net", "sci-cn"];
    let state = dir.join("state");
    startup(&state, &tls, &names);
    let agent = start_agent_tls(&state, &["--sci-listen", "127.0.0.1:0"]);
    let url = format!("https://{}/reports", agent.sci_addr.unwrap());
    let cacert = state.join("sci-cert.pem");
    for ((client, file), name) in
        [(&dns, "dns"), (&ip, "ip"), (&mail, "mail"), (&any, "any"), (&cn, "cn")].into_iter().zip(names)
    {
        let files = client.write(dir, file);
        let g = curl_post(&url, &cacert, Some(&files), &report(name, "AR1", 1));
        assert_eq!(g.status, 200, "{file} maps to {name}: {g:?}");
        // And to nothing else.
        let g = curl_post(&url, &cacert, Some(&files), &report("sci-cn", "AR1", 2));
        if name != "sci-cn" {
            assert_eq!(g.status, 422, "{file}: {g:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_security_considerations_plaintext_only_by_choice_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("startup.xml"),
        format!("<cats-sma xmlns=\"{CATS}\"><collection><http><tls><enabled>false</enabled></tls></http></collection></cats-sma>"),
    )
    .unwrap();
    // A fixed port: the listener rebinds below and the test must find it again.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let agent = start_agent_tls(&state, &["--sci-listen", &format!("127.0.0.1:{port}")]);
    let addr = agent.sci_addr.unwrap();
    let lines = agent.stderr_lines.lock().unwrap().clone();
    assert!(lines.iter().any(|l| l.contains("WARN") && l.contains("plain HTTP")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains(&format!("SCI reports: http://{addr}/reports"))), "{lines:?}");
    let (status, body) = http_post(addr, "/reports", "application/json", report(SCI_A, "AR1", 1).as_bytes()).await;
    assert_eq!(status, 422, "plain HTTP answers: {body}");
    assert_eq!(tls_state(&agent)["enabled"], false);
    // Turned on at run time: the listener rebinds with TLS, plaintext is gone.
    let r = Curl::new(&agent).send_json(
        "PUT",
        "/data/cats-sma:cats-sma/collection/http/tls/enabled",
        r#"{"cats-sma:enabled":true}"#,
    );
    assert!(r.status == 204 || r.status == 201, "{r:?}");
    eventually("the listener speaks TLS", || tls_state(&agent)["enabled"] == true).await;
    let g = curl_post(&format!("https://{addr}/reports"), &state.join("sci-cert.pem"), None, &report(SCI_A, "AR1", 1));
    assert_eq!(g.status, 422, "{g:?}");
    // And off again: warned again at the rebind.
    let r = Curl::new(&agent).send_json(
        "PUT",
        "/data/cats-sma:cats-sma/collection/http/tls/enabled",
        r#"{"cats-sma:enabled":false}"#,
    );
    assert!(r.status == 204 || r.status == 201, "{r:?}");
    eventually("a second warning", || {
        agent.stderr_lines.lock().unwrap().iter().filter(|l| l.contains("WARN") && l.contains("plain HTTP")).count()
            >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_sci_authentication_unusable_tls_files_refuse_the_listener_and_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let missing = dir.path().join("no-such-ca.pem");
    startup(&state, &format!("<client-ca-file>{}</client-ca-file>", missing.display()), &[]);
    let agent = start_agent_tls(&state, &["--sci-listen", "127.0.0.1:0"]);
    assert_eq!(agent.sci_addr, None, "fail closed: no listener");
    let st = tls_state(&agent);
    assert_eq!(st["enabled"], false, "{st}");
    assert!(st["last-reload-error"].as_str().unwrap_or("").contains("no-such-ca.pem"), "{st}");
    // A commit naming an unusable CRL is refused with the reason.
    std::fs::write(dir.path().join("ca.pem"), Ca::new("CA").cert.pem()).unwrap();
    std::fs::write(dir.path().join("bad.crl"), "junk").unwrap();
    let r = Curl::new(&agent).send_json(
        "PUT",
        "/data/cats-sma:cats-sma/collection/http/tls",
        &format!(
            r#"{{"cats-sma:tls":{{"client-ca-file":"{}","crl-file":["{}"]}}}}"#,
            dir.path().join("ca.pem").display(),
            dir.path().join("bad.crl").display()
        ),
    );
    assert!(r.status >= 400, "{r:?}");
    assert!(r.body.contains("bad.crl"), "{r:?}");
}

/// A bootstrap file for RESTCONF client certificates: the CA, its CRL, cert-to-name by the
/// CA's fingerprint with map type common-name.
fn restconf_boot(dir: &Path, ca: &Ca, revoked: &[u64]) -> PathBuf {
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    std::fs::write(dir.join("ca.crl"), ca.crl(1, revoked)).unwrap();
    let boot = dir.join("boot.toml");
    std::fs::write(
        &boot,
        format!(
            "[restconf]\nclient_ca = \"{}\"\nclient_crl = [\"{}\"]\n\
             [[restconf.cert_to_name]]\nfingerprint = \"{}\"\nmap_type = \"common-name\"\n",
            dir.join("ca.pem").display(),
            dir.join("ca.crl").display(),
            fingerprint(ca.cert.der())
        ),
    )
    .unwrap();
    boot
}

fn restconf_with_cert(agent: &AgentProcess, files: &(PathBuf, PathBuf)) -> Curl {
    Curl {
        user: None,
        extra: vec!["--cert".into(), files.0.display().to_string(), "--key".into(), files.1.display().to_string()],
        ..Curl::new(agent)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7589_restconf_common_name_maps_the_user_and_a_revoked_certificate_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("Operators CA");
    let good = ca.client(7, Some("admin"), vec![], false).write(dir, "good");
    let revoked = ca.client(8, Some("admin"), vec![], false).write(dir, "revoked");
    let boot = restconf_boot(dir, &ca, &[8]);
    let agent = start_agent(&dir.join("state"), &["--config", boot.to_str().unwrap()]);
    // CommonName "admin" under the CA's fingerprint: authenticated as admin, no password.
    let r = restconf_with_cert(&agent, &good).get("/yang-library-version");
    assert_eq!(r.status, 200, "{}", r.body);
    // The revoked one never gets an HTTP answer.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(agent.state_dir.join("restconf-cert.pem"))
        .arg("--cert")
        .arg(&revoked.0)
        .arg("--key")
        .arg(&revoked.1)
        .arg(format!("{}/yang-library-version", agent.restconf.clone().unwrap()))
        .output()
        .unwrap();
    assert!(!out.status.success(), "revoked: {}", String::from_utf8_lossy(&out.stdout));
    eventually("the audit record", || {
        audit(&agent).lines().any(|l| l.contains("\"restconf\"") && l.contains("certificate") && l.contains("revoked"))
    })
    .await;
}
