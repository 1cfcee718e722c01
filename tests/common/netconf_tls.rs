#![allow(dead_code)]
//! Support for the NETCONF over TLS and Call Home tests: a test CA and client
//! certificates made with rcgen, RFC 7407 fingerprints and cert-to-name entries, the
//! module's configuration as XML, and the Python client (`tests/netconf_tls_client.py`:
//! ncclient, and Python ssl for TLS Call Home).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use sha2::Digest;

pub const NS_NCS: &str = "urn:cats-sma:yang:cats-sma-netconf-server";
pub const NS_C2N: &str = "urn:ietf:params:xml:ns:yang:ietf-x509-cert-to-name";
pub const NS_CATS: &str = "urn:cats-sma:yang:cats-sma";

/// A test CA: its certificate and what signs with it.
pub struct Ca {
    pub cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A client certificate and its key, written to `<name>.pem` / `<name>.key`.
pub struct ClientCert {
    pub cert: rcgen::Certificate,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, issuer: rcgen::Issuer::new(p, key) }
    }

    /// Writes the CA certificate to `dir/<file>`.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let p = dir.join(file);
        std::fs::write(&p, self.cert.pem()).unwrap();
        p
    }

    /// A client certificate with CommonName `cn` (if any) and these SANs, in `dir`.
    pub fn client(&self, dir: &Path, name: &str, cn: Option<&str>, sans: Vec<rcgen::SanType>) -> ClientCert {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.subject_alt_names = sans;
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(30);
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (cert_file, key_file) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        ClientCert { cert, cert_file, key_file }
    }
}

pub fn dns(name: &str) -> rcgen::SanType {
    rcgen::SanType::DnsName(name.try_into().unwrap())
}

/// RFC 7407 tls-fingerprint: 04 (SHA-256) then the digest.
pub fn fingerprint(der: &[u8]) -> String {
    let mut s = "04".to_owned();
    for b in sha2::Sha256::digest(der) {
        s.push_str(&format!(":{b:02X}"));
    }
    s
}

/// One cert-to-name entry as XML.
pub fn c2n(id: u32, fp: &str, map: &str, name: Option<&str>) -> String {
    let name = name.map(|n| format!("<name>{n}</name>")).unwrap_or_default();
    format!(
        "<cert-to-name><id>{id}</id><fingerprint>{fp}</fingerprint>\
         <map-type xmlns:x509c2n=\"{NS_C2N}\">x509c2n:{map}</map-type>{name}</cert-to-name>"
    )
}

/// `<cats-sma><netconf-server>{inner}</netconf-server></cats-sma>`.
pub fn netconf_server(inner: &str) -> String {
    format!("<cats-sma xmlns=\"{NS_CATS}\"><netconf-server xmlns=\"{NS_NCS}\">{inner}</netconf-server></cats-sma>")
}

/// Writes the startup datastore of `state`.
pub fn startup(state: &Path, config: &str) {
    std::fs::create_dir_all(state).unwrap();
    std::fs::write(state.join("startup.xml"), config).unwrap();
}

/// The Python with ncclient: `CATS_SMA_PYTHON`, else the checkout's `.venv` (scripts/setup.sh).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CATS_SMA_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/netconf_tls_client.py")
}

/// Runs the client to its end and returns its JSON line.
pub fn run_client(args: &[&str]) -> serde_json::Value {
    let out = Command::new(python()).arg(script()).args(args).output().expect("python with ncclient");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client {args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("client output {stdout:?}: {e}"))
}

/// A listening client (Call Home): started, its port read from its first line.
pub struct Listening {
    pub child: Child,
    pub port: u16,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Listening {
    fn spawn(args: &[&str]) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
        let mut child = Command::new(python())
            .arg(script())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python with ncclient");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        (child, lines)
    }

    pub fn start(args: &[&str]) -> Listening {
        let (child, mut lines) = Self::spawn(args);
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let port = first.strip_prefix("LISTENING ").and_then(|p| p.trim().parse().ok()).expect("LISTENING <port>");
        Listening { child, port, lines }
    }

    /// A client that connects out (not a listener); its lines are read with
    /// [`Listening::next_session`], and it is killed on drop.
    pub fn start_kept(args: &[&str]) -> Listening {
        let (child, lines) = Self::spawn(args);
        Listening { child, port: 0, lines }
    }

    /// The next session's JSON line (blocking; the client times out on its own).
    pub fn next_session(&mut self) -> serde_json::Value {
        let line = self.lines.next().and_then(Result::ok).expect("the client reports a session");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("client output {line:?}: {e}"))
    }

    /// Waits for the client to exit (it has taken its sessions).
    pub fn wait(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "the client did not finish");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The line the agent logs when the NETCONF over TLS listener is bound.
pub async fn tls_listen_addr(agent: &crate::common::AgentProcess) -> std::net::SocketAddr {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = agent.stderr_lines.lock().unwrap().iter().find_map(|l| {
            l.split("NETCONF over TLS listening on ").nth(1).and_then(|r| r.split_whitespace().next()?.parse().ok())
        });
        if let Some(a) = found {
            return a;
        }
        assert!(std::time::Instant::now() < deadline, "no NETCONF over TLS listener");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `f` until it holds; fails after 30 s.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
