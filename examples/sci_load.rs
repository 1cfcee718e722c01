//! SCI report load generator (a benchmark, not a test): starts a cats-sma agent whose
//! startup configuration registers N SCIs, then pushes reports at it and reports how many
//! per second it ingested.
//!
//! ```sh
//! cargo build --release && cargo build --release --example sci_load
//! # HTTP: 100 000 SCIs, 3 rounds of one report per SCI, batches of 250, 2 connections
//! target/release/examples/sci_load --transport http --scis 100000 --rounds 3 --batch 250 --connections 2
//! # MQTT through mosquitto (started here on a free port), beside mosquitto_sub
//! target/release/examples/sci_load --transport mqtt --scis 100000 --rounds 1
//! # the generator's ceiling: the same load against a bare hyper server that decodes and drops
//! target/release/examples/sci_load --transport http --scis 100000 --rounds 3 --batch 250 --connections 2 --bare
//! # gRPC (plain h2c): Batch calls of 250 over 2 connections, or --grpc-stream: one Stream
//! # per connection, one report per message, a verdict each
//! target/release/examples/sci_load --transport grpc --scis 100000 --rounds 3 --batch 250 --connections 2
//! target/release/examples/sci_load --transport grpc --grpc-stream --scis 100000 --rounds 3 --connections 2
//! # keep the agent (and its 100 000 cache entries) for NETCONF measurements afterwards
//! target/release/examples/sci_load --transport http --hold --netconf-port 18850
//! ```
//!
//! HTTP: each round encodes one report per SCI (the next sequence number, the current
//! time, steady metrics, so every report is accepted), in batches of `--batch`, and posts
//! them over `--connections` keep-alive connections; only the posting is timed, and the
//! accepted counts from the answers are summed.
//!
//! MQTT: mosquitto runs on a free port; the agent subscribes through it (shared group
//! `bench`), and so does `mosquitto_sub -C N` in the same run. One report per message
//! (QoS 1, topic `cats/sci/<csci-id>/report`) is published for each SCI; mosquitto's rate
//! is N over the time until mosquitto_sub has received all N, the agent's is N over the
//! time until it has ingested the last message. The agent's progress is observed from
//! outside: a final marker report (SCI `marker`, sequence 2 000 000) is published after the
//! load, and HTTP probes for the same SCI with lower sequence numbers are accepted until the
//! marker has been ingested, after which they are refused as out-of-order (MQTT messages
//! are ingested in order).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cats_sma::engine::report::{encode, Encoding, RawReport};
use chrono::{DateTime, Utc};
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

const NS: &str = "urn:cats-sma:yang:cats-sma";
const MARKER: &str = "marker";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    Http,
    Mqtt,
    /// gRPC push (`cats.sma.v1.SciCollector`), plain HTTP/2.
    Grpc,
}

/// How each SCI proves its messages (seed 004, SCI Authentication).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Auth {
    /// `authentication none`: no proof (the baseline).
    None,
    /// `CATS-HMAC-SHA256` with one shared credential.
    Hmac,
    /// `Bearer` JWTs signed HS256 with one shared credential (claims and body hash as
    /// docs/sci-protocol.md).
    Jwt,
    /// `Bearer` JWTs signed EdDSA, the public key in a JWKS file.
    JwtEddsa,
    /// Mutual TLS: each SCI presents its own client certificate (P-256, issued by a CA made
    /// here), mapped to its CSCI-ID by cert-to-name `common-name`. Implies `--tls`.
    Mtls,
}

/// The CA and the SCIs' client certificates of `--auth mtls`.
struct Pki {
    ca_pem: String,
    ca_der: Vec<u8>,
    /// Per SCI: its certificate and key (DER).
    clients: Vec<(Vec<u8>, Vec<u8>)>,
}

static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();

fn pki(n: usize) -> &'static Pki {
    PKI.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.distinguished_name.push(rcgen::DnType::CommonName, "sci-load CA");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca = p.self_signed(&ca_key).expect("CA certificate");
        let issuer = rcgen::Issuer::new(p, ca_key);
        let clients = (0..n)
            .map(|i| {
                let key = rcgen::KeyPair::generate().expect("client key");
                let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("client params");
                p.distinguished_name = rcgen::DistinguishedName::new();
                p.distinguished_name.push(rcgen::DnType::CommonName, csci_id(i));
                p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
                let cert = p.signed_by(&key, &issuer).expect("client certificate");
                (cert.der().to_vec(), key.serialize_der())
            })
            .collect();
        Pki { ca_pem: ca.pem(), ca_der: ca.der().to_vec(), clients }
    })
}

/// RFC 7407 tls-fingerprint (SHA-256) of a certificate.
fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest;
    let mut s = "04".to_owned();
    for b in sha2::Sha256::digest(der) {
        s.push_str(&format!(":{b:02X}"));
    }
    s
}

#[derive(Parser, Debug)]
#[command(about = "SCI report load generator: HTTP batches or MQTT through mosquitto")]
struct Args {
    #[arg(long, value_enum, default_value_t = Transport::Http)]
    transport: Transport,
    /// Registered SCIs (one report per SCI per round).
    #[arg(long, default_value_t = 100_000)]
    scis: usize,
    /// CS-IDs the SCIs are spread over.
    #[arg(long, default_value_t = 100)]
    services: usize,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Reports per HTTP POST.
    #[arg(long, default_value_t = 250)]
    batch: usize,
    /// Concurrent HTTP connections.
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// CBOR bodies instead of JSON.
    #[arg(long)]
    cbor: bool,
    /// The agent binary.
    #[arg(long, default_value = "target/release/cats-sma")]
    agent: PathBuf,
    #[arg(long, default_value = "/usr/sbin/mosquitto")]
    mosquitto: PathBuf,
    /// NETCONF port of the agent (admin password "bench"); a free one when not given.
    #[arg(long)]
    netconf_port: Option<u16>,
    /// MQTT publisher connections (the reports are split over them; one is not enough to
    /// load the broker and its subscribers).
    #[arg(long, default_value_t = 4)]
    publishers: usize,
    /// Keep the agent running after the load until stdin closes (for NETCONF measurements).
    #[arg(long)]
    hold: bool,
    /// How SCIs prove their messages. Anything but `none` implies `--per-sci`.
    #[arg(long, value_enum, default_value_t = Auth::None)]
    auth: Auth,
    /// The collector over TLS (its generated certificate; HTTP/1.1), for every `--auth`.
    #[arg(long)]
    tls: bool,
    /// HTTP as SCIs really report: one connection per SCI, one report per message, each
    /// message proven per `--auth` (proofs made before the timed part of each round).
    #[arg(long)]
    per_sci: bool,
    /// The generator's own ceiling: instead of the agent, a bare hyper HTTP/1.1 server in
    /// its own thread (2 tokio workers) that decodes each body with the agent's decoder
    /// (`report::decode`) and drops the reports, answering `{"accepted": n}`.
    #[arg(long)]
    bare: bool,
    /// With `--transport grpc`: Stream calls (one report per message, one verdict each)
    /// instead of Batch calls of `--batch` reports.
    #[arg(long)]
    grpc_stream: bool,
}

/// The `--bare` server: parses and drops. Returns its address.
fn start_bare_server() -> SocketAddr {
    use hyper::service::service_fn;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("address")).expect("send address");
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let n = cats_sma::engine::report::decode(&body, Encoding::Json).map_or(0, |r| r.len());
                        let answer = format!("{{\"accepted\":{n},\"rejected\":[]}}");
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(answer))))
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
    });
    rx.recv().expect("bare server address")
}

/// The HMAC key every SCI shares in `--auth hmac` (and the HS256 key of `--auth jwt`).
const BENCH_KEY: &[u8] = b"sci-load-shared-hmac-key-of-32-bytes";

/// The signer of `--auth jwt` / `jwt-eddsa`.
fn jwt_signer(auth: Auth) -> &'static cats_sma::engine::auth::JwtSigner {
    use cats_sma::engine::auth::{JwtAlg, JwtSigner};
    static HS: std::sync::OnceLock<JwtSigner> = std::sync::OnceLock::new();
    static ED: std::sync::OnceLock<JwtSigner> = std::sync::OnceLock::new();
    match auth {
        Auth::JwtEddsa => ED.get_or_init(|| JwtSigner::generate(JwtAlg::EdDSA, "bench-ed")),
        _ => HS.get_or_init(|| JwtSigner::hs256(BENCH_KEY)),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn raw(csci: &str, cs: &str, seq: u64, ts: DateTime<Utc>, i: usize) -> RawReport {
    RawReport {
        csci_id: csci.into(),
        cs_id: cs.into(),
        sequence: seq,
        timestamp: ts,
        gas: 400 + (i % 50) as i64,
        computing_time: 5 + (i % 7) as i64,
        health: "HEALTHY".into(),
        cost: Some(10),
        reputation: None,
        security_label: None,
    }
}

/// Kills and reaps a child process on every path out.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn startup_xml(args: &Args, mqtt_port: Option<u16>, grpc_port: Option<u16>, dir: &Path) -> String {
    let mut xml = String::with_capacity(args.scis * 80 + 1024);
    xml.push_str(&format!(
        "<cats-sma xmlns=\"{NS}\"><agent><csma-id>sci-load</csma-id></agent><collection>\
         <http><max-body-size>67108864</max-body-size>"
    ));
    if args.auth == Auth::Mtls {
        let pki = pki(args.scis);
        let ca = dir.join("sci-ca.pem");
        std::fs::write(&ca, &pki.ca_pem).expect("CA file");
        xml.push_str(&format!(
            "<tls><client-ca-file>{}</client-ca-file><client-auth>optional</client-auth>\
             <cert-to-name><id>1</id><fingerprint>{}</fingerprint>\
             <map-type xmlns:x509c2n=\"urn:ietf:params:xml:ns:yang:ietf-x509-cert-to-name\">x509c2n:common-name</map-type>\
             </cert-to-name></tls>",
            ca.display(),
            fingerprint(&pki.ca_der)
        ));
    }
    xml.push_str("</http>");
    if let Some(p) = grpc_port {
        // Plain h2c, like the plain HTTP the HTTP figures are for.
        xml.push_str(&format!(
            "<grpc><enabled>true</enabled><port>{p}</port><max-message-size>67108864</max-message-size>\
             <tls><enabled>false</enabled></tls></grpc>"
        ));
    }
    if let Some(p) = mqtt_port {
        xml.push_str(&format!(
            "<mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{p}</broker-port><allow-plaintext>true</allow-plaintext>\
             <shared-group>bench</shared-group></mqtt>"
        ));
    }
    // The generator is one source posting for every SCI: the per-source bucket is opened
    // wide. In --per-sci each SCI posts --rounds reports in about a second, far above any
    // real SCI's rate, so its bucket is opened wide too; both buckets stay on the measured
    // path.
    let per_sci = if args.per_sci || args.tls || args.auth != Auth::None {
        "<per-sci><rate>100000</rate><burst>1000000</burst></per-sci>"
    } else {
        ""
    };
    xml.push_str(&format!(
        "<rate-limit><per-source><rate>1000000</rate><burst>10000000</burst></per-source>{per_sci}</rate-limit>"
    ));
    let proof = match args.auth {
        Auth::None => "<authentication>none</authentication>".to_owned(),
        // No credential-ref: the client certificate is the proof.
        Auth::Mtls => String::new(),
        Auth::Hmac => {
            use base64ct::Encoding;
            xml.push_str(&format!(
                "<authentication><credential><name>bench</name><type>hmac-sha256</type><key>{}</key>\
                 </credential></authentication>",
                base64ct::Base64::encode_string(BENCH_KEY)
            ));
            "<credential-ref>bench</credential-ref>".to_owned()
        }
        Auth::Jwt | Auth::JwtEddsa => {
            use base64ct::Encoding;
            let (alg, extra) = if args.auth == Auth::Jwt {
                ("HS256", format!("<key>{}</key>", base64ct::Base64::encode_string(BENCH_KEY)))
            } else {
                let jwks = dir.join("jwks.json");
                let jwk = jwt_signer(Auth::JwtEddsa).public_jwk().expect("an EdDSA key has a public JWK");
                std::fs::write(&jwks, serde_json::json!({ "keys": [jwk] }).to_string()).expect("JWKS file");
                ("EdDSA", format!("<jwks-file>{}</jwks-file>", jwks.display()))
            };
            xml.push_str(&format!(
                "<authentication><credential><name>bench</name><type>jwt</type><algorithm>{alg}</algorithm>{extra}\
                 <issuer>sci-load</issuer><audience>sci-load</audience></credential></authentication>"
            ));
            "<credential-ref>bench</credential-ref>".to_owned()
        }
    };
    xml.push_str("</collection><scis>");
    for i in 0..args.scis {
        xml.push_str(&format!(
            "<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id>{proof}</sci>",
            csci_id(i),
            i % args.services
        ));
    }
    xml.push_str(&format!("<sci><csci-id>{MARKER}</csci-id><cs-id>MARK</cs-id><authentication>none</authentication></sci></scis></cats-sma>"));
    xml
}

fn start_agent(args: &Args, dir: &Path, mqtt_port: Option<u16>, grpc_port: Option<u16>) -> (Reaped, SocketAddr, u16) {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    std::fs::write(state.join("startup.xml"), startup_xml(args, mqtt_port, grpc_port, dir)).expect("startup file");
    let sci = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let nc = args.netconf_port.unwrap_or_else(free_port);
    let log = std::fs::File::create(dir.join("agent.log")).expect("agent log");
    let child = Command::new(&args.agent)
        .args(["run", "--state-dir"])
        .arg(&state)
        .args(["--netconf-listen", &format!("127.0.0.1:{nc}"), "--sci-listen", &sci.to_string()])
        // A free RESTCONF port: the default one may be taken by another agent.
        .args(["--restconf-listen", &format!("127.0.0.1:{}", free_port())])
        // Plain HTTP unless asked: most figures in docs/performance.md are for the plaintext
        // collector; --tls / --auth mtls measure the TLS one beside them.
        .args((!uses_tls(args)).then_some("--sci-plain-http"))
        .env("CATS_SMA_ADMIN_PASSWORD", "bench")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e} (cargo build --release first)", args.agent.display()));
    (Reaped(child), sci, nc)
}

fn uses_tls(args: &Args) -> bool {
    args.tls || args.auth == Auth::Mtls
}

/// The client side of `--tls`: trusts the agent's generated collector certificate; with a
/// client certificate for `--auth mtls`.
fn tls_connector(state: &Path, client: Option<&(Vec<u8>, Vec<u8>)>) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(state.join("sci-cert.pem")).expect("the agent's sci-cert.pem") {
        roots.add(c.expect("certificate")).expect("trust anchor");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from(cert.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.clone())),
            )
            .expect("client certificate"),
        None => b.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One keep-alive HTTP/1.1 connection to the collector.
struct Conn {
    send: http1::SendRequest<Full<Bytes>>,
    content_type: &'static str,
}

impl Conn {
    async fn open(addr: SocketAddr, cbor: bool) -> std::io::Result<Conn> {
        Conn::open_with(addr, cbor, None).await
    }

    /// Over TLS when `tls` is given.
    async fn open_with(
        addr: SocketAddr,
        cbor: bool,
        tls: Option<&tokio_rustls::TlsConnector>,
    ) -> std::io::Result<Conn> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let send = match tls {
            None => {
                let (send, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                send
            }
            Some(c) => {
                let name = rustls::pki_types::ServerName::try_from("localhost").expect("server name");
                let tls = c.connect(name, stream).await?;
                let (send, conn) = http1::handshake(TokioIo::new(tls)).await.map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                send
            }
        };
        Ok(Conn { send, content_type: if cbor { "application/cbor" } else { "application/json" } })
    }

    /// Posts a body; returns the status and the answer.
    async fn post(&mut self, body: Bytes) -> Result<(u16, serde_json::Value), String> {
        self.post_proven(body, None).await
    }

    /// Posts a body with an `Authorization` value.
    async fn post_proven(&mut self, body: Bytes, proof: Option<&str>) -> Result<(u16, serde_json::Value), String> {
        let mut req =
            hyper::Request::post("/reports").header("host", "127.0.0.1").header("content-type", self.content_type);
        if let Some(p) = proof {
            req = req.header("authorization", p);
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = self.send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        let v = serde_json::from_slice(&bytes).map_err(|e| format!("answer {status}: {e}"))?;
        Ok((status, v))
    }
}

/// Waits until the collector answers (the agent has loaded its startup configuration).
async fn wait_ready(addr: SocketAddr, tls_state: Option<&Path>) -> Conn {
    let t0 = Instant::now();
    loop {
        // Over TLS, once the agent has written its collector certificate.
        let tls = match tls_state {
            Some(st) if st.join("sci-cert.pem").exists() => Some(tls_connector(st, None)),
            Some(_) => None,
            None => None,
        };
        let conn = match (tls_state, &tls) {
            (Some(_), None) => Err(std::io::Error::other("no certificate yet")),
            (_, t) => Conn::open_with(addr, false, t.as_ref()).await,
        };
        if let Ok(mut c) = conn {
            let probe = encode(&[raw(MARKER, "MARK", 0, Utc::now(), 0)], Encoding::Json);
            if let Ok((_, v)) = c.post(probe.into()).await {
                if v.get("accepted").is_some() {
                    eprintln!("agent ready after {:.1} s", t0.elapsed().as_secs_f64());
                    return c;
                }
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "the agent did not start within 300 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn http_load(args: &Args, addr: SocketAddr) {
    let enc = if args.cbor { Encoding::Cbor } else { Encoding::Json };
    let ids: Vec<String> = (0..args.scis).map(csci_id).collect();
    let cs: Vec<String> = (0..args.scis).map(|i| format!("CS{}", i % args.services)).collect();
    let mut conns = Vec::new();
    for _ in 0..args.connections.max(1) {
        conns.push(Conn::open(addr, args.cbor).await.expect("connect to the collector"));
    }
    let (mut total, mut elapsed) = (0usize, Duration::ZERO);
    for round in 1..=args.rounds {
        let ts = Utc::now();
        let bodies: Arc<Vec<Bytes>> = Arc::new(
            (0..args.scis)
                .collect::<Vec<_>>()
                .chunks(args.batch.max(1))
                .map(|c| {
                    let reports: Vec<RawReport> =
                        c.iter().map(|&i| raw(&ids[i], &cs[i], round as u64, ts, i)).collect();
                    Bytes::from(encode(&reports, enc))
                })
                .collect(),
        );
        let bytes: usize = bodies.iter().map(|b| b.len()).sum();
        let next = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for mut c in conns.drain(..) {
            let (bodies, next) = (bodies.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut accepted = 0usize;
                let mut refused = 0usize;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    let (status, v) = c.post(body.clone()).await.expect("POST /reports");
                    accepted += v.get("accepted").and_then(|a| a.as_u64()).unwrap_or(0) as usize;
                    let r = v.get("rejected").and_then(|r| r.as_array()).map(|r| r.len()).unwrap_or(0);
                    if r > 0 && refused == 0 {
                        eprintln!("status {status}, first refusal: {}", v["rejected"][0]);
                    }
                    refused += r;
                }
                (c, accepted, refused)
            }));
        }
        let (mut accepted, mut refused) = (0, 0);
        for t in tasks {
            let (c, a, r) = t.await.expect("load task");
            conns.push(c);
            accepted += a;
            refused += r;
        }
        let dt = t0.elapsed();
        println!(
            "http round {round}: {accepted} accepted, {refused} refused in {:.3} s: {:.0} reports/s ({} posts of {} reports, {:.1} MB)",
            dt.as_secs_f64(),
            accepted as f64 / dt.as_secs_f64(),
            bodies.len(),
            args.batch,
            bytes as f64 / 1e6
        );
        total += accepted;
        elapsed += dt;
    }
    println!(
        "http total: {total} reports accepted in {:.3} s: {:.0} reports/s (batch {}, {} connections, {})",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        args.batch,
        args.connections,
        if args.cbor { "CBOR" } else { "JSON" }
    );
}

/// `--per-sci`: SCI k reports over its own connection k, one report per message, every
/// message proven per `--auth`; `--rounds` messages per SCI, the rounds one after the other.
async fn per_sci_load(args: &Args, addr: SocketAddr, state: &Path) {
    let enc = if args.cbor { Encoding::Cbor } else { Encoding::Json };
    let mut conns = Vec::new();
    let shared = uses_tls(args).then(|| tls_connector(state, None));
    for i in 0..args.scis {
        let own = (args.auth == Auth::Mtls).then(|| tls_connector(state, Some(&pki(args.scis).clients[i])));
        let tls = own.as_ref().or(shared.as_ref());
        conns.push(Conn::open_with(addr, args.cbor, tls).await.expect("connect to the collector"));
    }
    let (mut total, mut refused_total, mut elapsed) = (0usize, 0usize, Duration::ZERO);
    for round in 1..=args.rounds {
        let ts = Utc::now();
        let messages: Vec<(Bytes, Option<String>)> = (0..args.scis)
            .map(|i| {
                let body = encode(&[raw(&csci_id(i), &format!("CS{}", i % args.services), round as u64, ts, i)], enc);
                let proof = match args.auth {
                    Auth::None | Auth::Mtls => None,
                    Auth::Hmac => Some(cats_sma::engine::auth::sign_hmac(BENCH_KEY, ts.timestamp(), &body)),
                    Auth::Jwt | Auth::JwtEddsa => Some(cats_sma::engine::auth::sign_jwt(
                        jwt_signer(args.auth),
                        &csci_id(i),
                        "sci-load",
                        "sci-load",
                        &body,
                    )),
                };
                (Bytes::from(body), proof)
            })
            .collect();
        let t0 = Instant::now();
        let tasks: Vec<_> = conns
            .drain(..)
            .zip(messages)
            .map(|(mut c, (body, proof))| {
                tokio::spawn(async move {
                    let (status, v) = c.post_proven(body, proof.as_deref()).await.expect("POST /reports");
                    let a = v.get("accepted").and_then(|a| a.as_u64()).unwrap_or(0) as usize;
                    if a == 0 {
                        eprintln!("status {status}: {v}");
                    }
                    (c, a)
                })
            })
            .collect();
        let mut accepted = 0;
        for t in tasks {
            let (c, a) = t.await.expect("load task");
            conns.push(c);
            accepted += a;
        }
        elapsed += t0.elapsed();
        total += accepted;
        refused_total += args.scis - accepted;
    }
    println!(
        "http{} per-SCI ({:?}): {total} reports accepted, {refused_total} refused in {:.3} s: {:.0} reports/s \
         ({} SCIs on their own connections, {} rounds, {})",
        if uses_tls(args) { "s" } else { "" },
        args.auth,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        args.scis,
        args.rounds,
        if args.cbor { "CBOR" } else { "JSON" }
    );
}

fn start_broker(bin: &Path, dir: &Path, port: u16) -> Reaped {
    let conf = dir.join("mosquitto.conf");
    // No queue limits: mosquitto's default (1000 queued QoS 1 messages per client) drops
    // messages for a subscriber that falls behind, which would hide the agent's real rate.
    std::fs::write(
        &conf,
        format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\n"),
    )
    .expect("mosquitto.conf");
    let b = Reaped(
        Command::new(bin).arg("-c").arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("mosquitto"),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return b;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("mosquitto did not start on port {port}");
}

/// Publishes `messages` (topic, payload) at QoS 1 and waits until the broker acknowledged
/// them all.
async fn publish_all(port: u16, messages: Vec<(String, Bytes)>) -> Duration {
    publish_on(port, messages, 0).await
}

/// Publishes over `n` connections at once; returns when the broker acknowledged all.
async fn publish_parallel(port: u16, messages: Vec<(String, Bytes)>, n: usize) -> Duration {
    let n = n.max(1);
    let mut parts: Vec<Vec<(String, Bytes)>> = (0..n).map(|_| Vec::new()).collect();
    for (i, m) in messages.into_iter().enumerate() {
        parts[i % n].push(m);
    }
    let t0 = Instant::now();
    let tasks: Vec<_> = parts.into_iter().enumerate().map(|(k, p)| tokio::spawn(publish_on(port, p, k + 1))).collect();
    for t in tasks {
        t.await.expect("publisher");
    }
    t0.elapsed()
}

async fn publish_on(port: u16, messages: Vec<(String, Bytes)>, k: usize) -> Duration {
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let mut opts = MqttOptions::new(format!("sci-load-{}-{k}", std::process::id()), "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = AsyncClient::new(opts, 10_000);
    let n = messages.len();
    let acks = tokio::spawn(async move {
        let mut acked = 0;
        while acked < n {
            match events.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                Ok(_) => {}
                Err(e) => panic!("publisher connection: {e}"),
            }
        }
        events
    });
    let t0 = Instant::now();
    for (topic, payload) in messages {
        client.publish(topic, QoS::AtLeastOnce, false, payload).await.expect("publish");
    }
    let _events = acks.await.expect("publisher");
    t0.elapsed()
}

/// Sends the marker report for `seq` and says whether the agent refused it as out of order
/// (the MQTT marker with a higher sequence number has been ingested).
async fn marker_seen(c: &mut Conn, seq: u64, ts: DateTime<Utc>) -> bool {
    let body = encode(&[raw(MARKER, "MARK", seq, ts, 0)], Encoding::Json);
    match c.post(body.into()).await {
        Ok((_, v)) => v["rejected"][0]["reason"] == "out-of-order",
        Err(e) => panic!("marker probe: {e}"),
    }
}

async fn mqtt_load(args: &Args, mut probe: Conn, port: u16) {
    let enc = if args.cbor { Encoding::Cbor } else { Encoding::Json };
    let marker_topic = format!("cats/sci/{MARKER}/report");
    // Readiness: the agent has subscribed once a published marker is ingested.
    let t0 = Instant::now();
    let mut probe_seq = 1u64;
    let ts0 = Utc::now();
    publish_all(port, vec![(marker_topic.clone(), encode(&[raw(MARKER, "MARK", 1_000_000, ts0, 0)], enc).into())])
        .await;
    while !marker_seen(&mut probe, probe_seq, ts0).await {
        probe_seq += 1;
        if probe_seq.is_multiple_of(50) {
            // Published before the subscription existed: publish it again.
            publish_all(
                port,
                vec![(marker_topic.clone(), encode(&[raw(MARKER, "MARK", 1_000_000, ts0, 0)], enc).into())],
            )
            .await;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the agent did not subscribe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("agent subscribed after {:.1} s", t0.elapsed().as_secs_f64());

    for round in 1..=args.rounds {
        let n = args.scis + 1;
        let mut sub = Reaped(
            Command::new("mosquitto_sub")
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "mqttv5", "-q", "1"])
                .args(["-t", "cats/sci/+/report", "-C", &n.to_string()])
                .stdout(Stdio::null())
                .spawn()
                .expect("mosquitto_sub (mosquitto-clients)"),
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let ts = Utc::now();
        let messages: Vec<(String, Bytes)> = (0..args.scis)
            .map(|i| {
                let id = csci_id(i);
                let body = encode(&[raw(&id, &format!("CS{}", i % args.services), round as u64, ts, i)], enc);
                (format!("cats/sci/{id}/report"), Bytes::from(body))
            })
            .collect();
        let marker_seq = 2_000_000 * round as u64;
        // The marker goes last, once the broker has acknowledged (routed) every report.
        let marker = vec![(marker_topic.clone(), encode(&[raw(MARKER, "MARK", marker_seq, ts, 0)], enc).into())];
        probe_seq = marker_seq - 1_000_000 + 1;
        let publishers = args.publishers;
        let start = Instant::now();
        let publish = tokio::spawn(async move {
            let d = publish_parallel(port, messages, publishers).await;
            publish_all(port, marker).await;
            d
        });
        // mosquitto_sub exits when it has received all n messages.
        let sub_done = tokio::task::spawn_blocking(move || {
            let st = sub.0.wait();
            (Instant::now(), st)
        });
        let mut agent_done = None;
        let mut sub_time = None;
        let mut publish_time = None;
        let mut publish = Some(publish);
        let mut sub_done = Some(sub_done);
        while agent_done.is_none() || sub_time.is_none() || publish_time.is_none() {
            if agent_done.is_none() && marker_seen(&mut probe, probe_seq, ts).await {
                agent_done = Some(start.elapsed());
            }
            probe_seq += 1;
            if sub_done.as_ref().is_some_and(|h| h.is_finished()) {
                let (at, st) = sub_done.take().expect("checked").await.expect("mosquitto_sub waiter");
                assert!(st.map(|s| s.success()).unwrap_or(false), "mosquitto_sub failed");
                sub_time = Some(at - start);
            }
            if publish.as_ref().is_some_and(|h| h.is_finished()) {
                publish_time = Some(publish.take().expect("checked").await.expect("publisher"));
            }
            assert!(start.elapsed() < Duration::from_secs(600), "MQTT round did not finish in 600 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (a, s, p) =
            (agent_done.unwrap_or_default(), sub_time.unwrap_or_default(), publish_time.unwrap_or_default());
        let rate = |d: Duration| n as f64 / d.as_secs_f64();
        println!(
            "mqtt round {round}: {n} messages; published over {publishers} connections (all PUBACKs) in {:.3} s ({:.0}/s); mosquitto_sub received all in {:.3} s ({:.0}/s); agent ingested all in {:.3} s ({:.0}/s) = {:.1} % of mosquitto_sub",
            p.as_secs_f64(),
            rate(p),
            s.as_secs_f64(),
            rate(s),
            a.as_secs_f64(),
            rate(a),
            100.0 * rate(a) / rate(s)
        );
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.bare {
        let addr = start_bare_server();
        eprintln!("bare HTTP server (decode and drop) on {addr}");
        http_load(&args, addr).await;
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let broker_port = (args.transport == Transport::Mqtt).then(free_port);
    let _broker = broker_port.map(|p| start_broker(&args.mosquitto, dir.path(), p));
    let grpc_port = (args.transport == Transport::Grpc).then(free_port);
    let (mut agent, sci, nc) = start_agent(&args, dir.path(), broker_port, grpc_port);
    eprintln!(
        "agent pid {} with {} SCIs; collector {sci}, NETCONF 127.0.0.1:{nc} (admin/bench); log {}",
        agent.0.id(),
        args.scis,
        dir.path().join("agent.log").display()
    );
    let state = dir.path().join("state");
    let probe = wait_ready(sci, uses_tls(&args).then_some(state.as_path())).await;
    match (args.transport, broker_port) {
        (Transport::Mqtt, Some(port)) => mqtt_load(&args, probe, port).await,
        (Transport::Grpc, _) => {
            drop(probe);
            grpc_load(&args, SocketAddr::from(([127, 0, 0, 1], grpc_port.unwrap_or(0)))).await
        }
        _ if args.per_sci || args.tls || args.auth != Auth::None => per_sci_load(&args, sci, &state).await,
        _ => http_load(&args, sci).await,
    }
    if let Ok(Some(st)) = agent.0.try_wait() {
        panic!("the agent exited: {st}");
    }
    if args.hold {
        eprintln!("holding the agent (pid {}); close stdin (Ctrl-D) to stop", agent.0.id());
        let _ = std::io::stderr().flush();
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    }
}

type GrpcClient =
    cats_sma::engine::collect::grpc::pb::sci_collector_client::SciCollectorClient<tonic::transport::Channel>;

/// gRPC: like HTTP, one report per SCI per round, over `--connections` HTTP/2 connections:
/// Batch calls of `--batch` reports, or with `--grpc-stream` one Stream per connection with
/// one report per message (each answered by its verdict). Only the sending is timed.
async fn grpc_load(args: &Args, addr: SocketAddr) {
    use cats_sma::engine::collect::grpc::pb;
    let ids: Vec<String> = (0..args.scis).map(csci_id).collect();
    let cs: Vec<String> = (0..args.scis).map(|i| format!("CS{}", i % args.services)).collect();
    let mut clients = Vec::new();
    for _ in 0..args.connections.max(1) {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to the gRPC collector");
        clients.push(GrpcClient::new(ch));
    }
    let report = |i: usize, seq: u64, ts: DateTime<Utc>| pb::Report {
        csci_id: ids[i].clone(),
        cs_id: cs[i].clone(),
        sequence: seq,
        timestamp: Some(prost_types::Timestamp { seconds: ts.timestamp(), nanos: ts.timestamp_subsec_nanos() as i32 }),
        gas: 400 + (i % 50) as i64,
        computing_time: 5 + (i % 7) as i64,
        health: pb::Health::Healthy as i32,
        cost: Some(10),
        ..pb::Report::default()
    };
    let mode = if args.grpc_stream { "stream" } else { "batch" };
    let (mut total, mut elapsed) = (0usize, Duration::ZERO);
    for round in 1..=args.rounds {
        let ts = Utc::now();
        let per = if args.grpc_stream { args.scis.div_ceil(clients.len()) } else { args.batch.max(1) };
        let chunks: Arc<Vec<Vec<pb::Report>>> = Arc::new(
            (0..args.scis)
                .collect::<Vec<_>>()
                .chunks(per.max(1))
                .map(|c| c.iter().map(|&i| report(i, round as u64, ts)).collect())
                .collect(),
        );
        let next = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for mut c in clients.drain(..) {
            let (chunks, next, stream) = (chunks.clone(), next.clone(), args.grpc_stream);
            tasks.push(tokio::spawn(async move {
                let (mut accepted, mut refused) = (0usize, 0usize);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(chunk) = chunks.get(i) else { break };
                    let verdicts = if stream {
                        let out = c.stream(tokio_stream::iter(chunk.clone())).await.expect("Stream call");
                        let mut inbound = out.into_inner();
                        let mut v = Vec::with_capacity(chunk.len());
                        while let Some(x) = inbound.message().await.expect("verdict") {
                            v.push(x);
                        }
                        v
                    } else {
                        let b = pb::ReportBatch { reports: chunk.clone() };
                        c.batch(b).await.expect("Batch call").into_inner().verdicts
                    };
                    for v in verdicts {
                        if v.accepted {
                            accepted += 1;
                        } else {
                            if refused == 0 {
                                eprintln!("first refusal: {} {}", v.reason, v.detail);
                            }
                            refused += 1;
                        }
                    }
                }
                (c, accepted, refused)
            }));
        }
        let (mut accepted, mut refused) = (0, 0);
        for t in tasks {
            let (c, a, r) = t.await.expect("load task");
            clients.push(c);
            accepted += a;
            refused += r;
        }
        let dt = t0.elapsed();
        println!(
            "grpc {mode} round {round}: {accepted} accepted, {refused} refused in {:.3} s: {:.0} reports/s",
            dt.as_secs_f64(),
            accepted as f64 / dt.as_secs_f64(),
        );
        total += accepted;
        elapsed += dt;
    }
    println!(
        "grpc total: {total} reports accepted in {:.3} s: {:.0} reports/s ({mode}{}, {} connections)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        if args.grpc_stream { String::new() } else { format!(" of {}", args.batch) },
        args.connections,
    );
}
