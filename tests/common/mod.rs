//! Test support: start the real `cats-sma` binary on an ephemeral loopback port, and a
//! minimal NETCONF client over real SSH (russh) for what the Python clients cannot express.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use russh::client;
use russh::keys::PublicKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub mod mosquitto;
pub mod pki;
#[allow(unused_imports)]
pub use pki::TestPki;

pub const PASSWORD: &str = "test-admin-pw";

/// A running agent process, killed on drop.
pub struct AgentProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// Where SCIs POST reports (when HTTP collection is on).
    pub sci_addr: Option<SocketAddr>,
    /// The RESTCONF API root (`https://127.0.0.1:PORT/restconf`), when enabled.
    pub restconf: Option<String>,
    pub state_dir: PathBuf,
    pub stderr_lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AgentProcess {
    /// Stops the agent as an operator does (SIGTERM: a clean stop) and waits for it.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait for the agent") {
                return st;
            }
            assert!(std::time::Instant::now() < end, "the agent did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether a line of the agent's log so far contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.stderr_lines.lock().unwrap().iter().any(|l| l.contains(needle))
    }
}

/// Starts `cats-sma run --state-dir DIR --netconf-listen 127.0.0.1:0` and waits for the
/// ready line, from which it learns the port. The SCI listener serves plain HTTP
/// (`--sci-plain-http`, the explicit choice the agent asks for and warns about) so that
/// [`http_post`] can talk to it; [`start_agent_tls`] keeps the default, HTTPS.
pub fn start_agent(state_dir: &Path, extra: &[&str]) -> AgentProcess {
    let mut args = extra.to_vec();
    args.push("--sci-plain-http");
    start_agent_tls(state_dir, &args)
}

/// Like [`start_agent`], with the SCI listener as configured (TLS unless told otherwise).
///
/// To see what the agent did in a failing run: `TEST_AGENT_LOG` replaces its `RUST_LOG`
/// (`info`), and `TEST_AGENT_LOG_FILE` appends every line it logs to that file.
pub fn start_agent_tls(state_dir: &Path, extra: &[&str]) -> AgentProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cats-sma"))
        .args(["run", "--state-dir"])
        .arg(state_dir)
        .args(["--netconf-listen", "127.0.0.1:0"])
        // Never the fixed default port: tests run side by side.
        .args(["--restconf-listen", "127.0.0.1:0"])
        .args(extra)
        .env("CATS_SMA_ADMIN_PASSWORD", PASSWORD)
        .env("RUST_LOG", std::env::var("TEST_AGENT_LOG").unwrap_or_else(|_| "info".into()))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cats-sma");
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let keep = lines.clone();
    std::thread::spawn(move || {
        let mut log_file = std::env::var("TEST_AGENT_LOG_FILE")
            .ok()
            .and_then(|d| std::fs::OpenOptions::new().create(true).append(true).open(d).ok());
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // Kept before the ready line is reported, so a test sees every line up to it.
            keep.lock().unwrap().push(line.clone());
            if let Some(f) = log_file.as_mut() {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
            if let Some(rest) = line.split("cats-sma ready: NETCONF over SSH listening on ").nth(1) {
                let addr = rest.split([',', ' ', ';']).next().unwrap_or("").to_owned();
                let sci = line
                    .split("SCI reports: http://")
                    .nth(1)
                    .or_else(|| line.split("SCI reports: https://").nth(1))
                    .and_then(|r| r.split('/').next())
                    .map(str::to_owned);
                let rc =
                    line.split("RESTCONF: ").nth(1).and_then(|r| r.split([',', ' ', ';']).next()).map(str::to_owned);
                let _ = tx.send((addr, sci, rc));
            }
        }
    });
    let (addr, sci, restconf) = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("agent did not report ready: {:?}", lines.lock().unwrap())
    });
    AgentProcess {
        child,
        addr: addr.parse().expect("ready line address"),
        sci_addr: sci.and_then(|s| s.parse().ok()),
        restconf,
        state_dir: state_dir.to_owned(),
        stderr_lines: lines,
    }
}

struct AcceptAny {
    seen: Arc<std::sync::Mutex<Option<PublicKey>>>,
}

impl client::Handler for AcceptAny {
    type Error = russh::Error;
    async fn check_server_key(&mut self, key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        if let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = key {
            *self.seen.lock().unwrap() = Some(key.clone());
        }
        Ok(true)
    }
}

/// A raw NETCONF session over SSH: bytes in, bytes out, no framing help.
pub struct RawSession {
    pub stream: russh::ChannelStream<client::Msg>,
    pub host_key: Option<PublicKey>,
    _handle: client::Handle<AcceptAny>,
}

pub async fn connect(addr: SocketAddr, user: &str, password: &str) -> Result<RawSession, String> {
    connect_after_attempts(addr, user, &[password]).await
}

/// Tries the passwords in turn on one SSH connection (as an interactive client re-prompting
/// does) and opens the NETCONF subsystem after the first that succeeds.
pub async fn connect_after_attempts(addr: SocketAddr, user: &str, passwords: &[&str]) -> Result<RawSession, String> {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let config = Arc::new(client::Config::default());
    let mut handle =
        client::connect(config, addr, AcceptAny { seen: seen.clone() }).await.map_err(|e| e.to_string())?;
    let mut ok = false;
    for p in passwords {
        if handle.authenticate_password(user, *p).await.map_err(|e| e.to_string())?.success() {
            ok = true;
            break;
        }
    }
    if !ok {
        return Err("authentication failed".into());
    }
    let channel = handle.channel_open_session().await.map_err(|e| e.to_string())?;
    channel.request_subsystem(true, "netconf").await.map_err(|e| e.to_string())?;
    let host_key = seen.lock().unwrap().clone();
    Ok(RawSession { stream: channel.into_stream(), host_key, _handle: handle })
}

impl RawSession {
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    /// Reads until `marker` appears; returns everything read (marker included).
    pub async fn read_until(&mut self, marker: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        tokio::time::timeout(Duration::from_secs(20), async {
            while !got.windows(marker.len()).any(|w| w == marker) {
                let n = self.stream.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .unwrap_or_else(|_| {
            if marker != b"never" {
                panic!("timed out waiting for the server")
            }
        });
        got
    }

    /// Exchanges hellos (base:1.1 when `v11`) and returns the server hello.
    pub async fn hello(&mut self, v11: bool) -> String {
        let server = self.read_until(b"]]>]]>").await;
        let caps = if v11 {
            "<capability>urn:ietf:params:netconf:base:1.0</capability><capability>urn:ietf:params:netconf:base:1.1</capability>"
        } else {
            "<capability>urn:ietf:params:netconf:base:1.0</capability>"
        };
        let hello = format!(
            "<hello xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><capabilities>{caps}</capabilities></hello>]]>]]>"
        );
        self.send(hello.as_bytes()).await;
        String::from_utf8(server).unwrap()
    }

    /// Sends one rpc with chunked framing and returns the reply text.
    pub async fn rpc11(&mut self, body: &str) -> String {
        let frame = format!("\n#{}\n{}\n##\n", body.len(), body);
        self.send(frame.as_bytes()).await;
        let raw = self.read_until(b"\n##\n").await;
        decode_chunks(&raw)
    }

    /// Sends one rpc with end-of-message framing and returns the reply text.
    pub async fn rpc10(&mut self, body: &str) -> String {
        self.send(format!("{body}]]>]]>").as_bytes()).await;
        let raw = self.read_until(b"]]>]]>").await;
        String::from_utf8(raw[..raw.len() - 6].to_vec()).unwrap()
    }
}

/// Joins the data of chunked frames (test helper; assumes well-formed input).
pub fn decode_chunks(raw: &[u8]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < raw.len() {
        assert_eq!(&raw[i..i + 2], b"\n#", "chunk header at {i}");
        if raw[i + 2] == b'#' {
            break;
        }
        let nl = raw[i + 2..].iter().position(|&b| b == b'\n').unwrap() + i + 2;
        let n: usize = std::str::from_utf8(&raw[i + 2..nl]).unwrap().parse().unwrap();
        out.extend_from_slice(&raw[nl + 1..nl + 1 + n]);
        i = nl + 1 + n;
    }
    String::from_utf8(out).unwrap()
}

pub const NC: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";

pub fn rpc(id: u32, op: &str) -> String {
    format!("<rpc xmlns=\"{NC}\" message-id=\"{id}\">{op}</rpc>")
}

/// POSTs a body over plain HTTP/1.1 and returns (status, body).
pub async fn http_post(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> (u16, String) {
    http_post_with(addr, path, content_type, &[], body).await
}

/// Like [`http_post`], with extra header lines (`name`, `value`).
pub async fn http_post_with(
    addr: SocketAddr,
    path: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect to the collector");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

// ----- RESTCONF through curl ------------------------------------------------------------

/// One curl answer: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    /// The first error-tag of an RFC 8040 errors body (JSON or XML).
    pub fn error_tag(&self) -> String {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&self.body) {
            if let Some(t) = v["ietf-restconf:errors"]["error"][0]["error-tag"].as_str() {
                return t.to_owned();
            }
        }
        self.body.split("<error-tag>").nth(1).and_then(|r| r.split('<').next()).unwrap_or("").to_owned()
    }
}

/// A RESTCONF client: curl over HTTPS, verifying the agent's certificate.
pub struct Curl {
    /// `https://127.0.0.1:PORT/restconf`
    pub root: String,
    pub cacert: PathBuf,
    pub user: Option<(String, String)>,
    pub extra: Vec<String>,
}

impl Curl {
    pub fn new(agent: &AgentProcess) -> Curl {
        Curl {
            root: agent.restconf.clone().expect("the ready line names the RESTCONF URL"),
            cacert: agent.state_dir.join("restconf-cert.pem"),
            user: Some(("admin".into(), PASSWORD.into())),
            extra: Vec::new(),
        }
    }

    pub fn as_user(&self, user: &str, password: &str) -> Curl {
        Curl {
            root: self.root.clone(),
            cacert: self.cacert.clone(),
            user: Some((user.into(), password.into())),
            extra: self.extra.clone(),
        }
    }

    /// `path` is relative to the API root (`/data/...`), or absolute from the host when it
    /// starts with `//` (`//.well-known/host-meta`).
    pub fn call(&self, method: &str, path: &str, headers: &[&str], body: Option<&str>) -> HttpReply {
        let url = match path.strip_prefix("//") {
            Some(p) => format!("{}/{p}", self.root.trim_end_matches("/restconf")),
            None => format!("{}{path}", self.root),
        };
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-i", "--max-time", "30", "--cacert"]).arg(&self.cacert).args(["-X", method]);
        if method == "HEAD" {
            cmd.arg("-I");
        }
        if let Some((u, p)) = &self.user {
            cmd.args(["-u", &format!("{u}:{p}")]);
        }
        for h in headers {
            cmd.args(["-H", h]);
        }
        cmd.args(&self.extra);
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        cmd.arg(&url).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("curl is installed (scripts/setup.sh)");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            if let Some(b) = body {
                stdin.write_all(b.as_bytes()).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "curl {method} {url}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        HttpReply { status, headers, body: body.to_owned() }
    }

    pub fn get(&self, path: &str) -> HttpReply {
        self.call("GET", path, &[], None)
    }
    pub fn get_xml(&self, path: &str) -> HttpReply {
        self.call("GET", path, &["Accept: application/yang-data+xml"], None)
    }
    pub fn send_json(&self, method: &str, path: &str, body: &str) -> HttpReply {
        self.call(method, path, &["Content-Type: application/yang-data+json"], Some(body))
    }
    pub fn send_xml(&self, method: &str, path: &str, body: &str) -> HttpReply {
        self.call(
            method,
            path,
            &["Content-Type: application/yang-data+xml", "Accept: application/yang-data+xml"],
            Some(body),
        )
    }
}

/// A TLS client trusting exactly the agent's certificate.
pub fn tls_connector(cert: &std::path::Path) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The cats-sma namespace, for edit-config and get bodies.
pub const CATS_NS: &str = "urn:cats-sma:yang:cats-sma";

/// A NETCONF 1.1 session as admin for the SCI collection tests: edit-config on running,
/// subtree gets inside `<cats-sma>`, and polling a read until it holds.
pub struct Nc {
    pub s: RawSession,
    pub id: u32,
}

impl Nc {
    pub async fn open(agent: &AgentProcess) -> Nc {
        let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
        s.hello(true).await;
        Nc { s, id: 0 }
    }

    pub async fn call(&mut self, op: &str) -> String {
        self.id += 1;
        self.s.rpc11(&rpc(self.id, op)).await
    }

    pub async fn edit(&mut self, inner: &str) -> String {
        self.call(&format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS_NS}\">{inner}</cats-sma></config></edit-config>"
        ))
        .await
    }

    pub async fn get(&mut self, inner: &str) -> String {
        self.call(&format!(
            "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS_NS}\">{inner}</cats-sma></filter></get>"
        ))
        .await
    }

    /// Polls a read until `ok` holds (the deadline only guards against a hang).
    pub async fn wait(&mut self, what: &str, inner: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.get(inner).await;
            if ok(&r) {
                return r;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: {r}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A bootstrap file in `dir` adding these users (name, password) besides the admin.
pub fn boot_with_users(dir: &Path, users: &[(&str, &str)]) -> PathBuf {
    let mut toml = String::new();
    for (name, pw) in users {
        let hash = cats_sma::mgmt::users::hash_password(pw).unwrap();
        toml.push_str(&format!("[[users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n"));
    }
    let path = dir.join("boot.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// One SCI report as JSON (docs/sci-protocol.md), timestamped now.
pub fn report_json(csci: &str, cs: &str, seq: u64, gas: i64, health: &str) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{now}","gas":{gas},"computing-time":12,"health":"{health}"}}"#
    )
}

pub fn registered(id: &str, interval_ms: u32) -> String {
    format!(
        "<sci><csci-id>{id}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication>\
         <expected-interval>{interval_ms}</expected-interval></sci>"
    )
}

pub fn target(id: &str, url: &str, interval: u32, extra: &str) -> String {
    format!("<target><csci-id>{id}</csci-id><url>{url}</url><interval>{interval}</interval>{extra}</target>")
}

pub fn state(id: &str) -> String {
    format!("<collection><pull><target><csci-id>{id}</csci-id><state/></target></pull></collection>")
}

pub fn entry(id: &str) -> String {
    format!("<metric-cache><entry><csci-id>{id}</csci-id></entry></metric-cache>")
}

/// The text of the first `<tag>` after `from` in `xml`.
pub fn leaf_after(xml: &str, from: &str, tag: &str) -> Option<String> {
    let rest = &xml[xml.find(from)?..];
    let v = rest.split(&format!("<{tag}>")).nth(1)?;
    Some(v.split(&format!("</{tag}>")).next()?.to_owned())
}

pub fn count(xml: &str, tag: &str) -> u64 {
    leaf_after(xml, "", tag).and_then(|v| v.parse().ok()).unwrap_or(0)
}
