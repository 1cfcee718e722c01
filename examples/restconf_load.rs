//! RESTCONF load generator (a benchmark, not a test), run against a live agent over HTTPS
//! with one keep-alive HTTP/1.1 connection (hyper + rustls, the agent's certificate
//! verified):
//!
//! 1. PUT of `/cats-sma:cats-sma/scis` holding N SCIs (one request; Clixon's published
//!    figure for a 100 000-entry single put is about 0.41 s),
//! 2. GET of one SCI entry, R times one after the other,
//! 3. PATCH of one leaf (an SCI's description), R times,
//! 4. GET of the whole unified datastore (`/restconf/data`: configuration and state), a few
//!    times.
//!
//! ```sh
//! cargo build --release --example restconf_load
//! CATS_SMA_ADMIN_PASSWORD=bench target/release/cats-sma run --state-dir /tmp/rc-bench \
//!     --netconf-listen 127.0.0.1:0 --restconf-listen 127.0.0.1:18443 &
//! target/release/examples/restconf_load --url https://127.0.0.1:18443/restconf \
//!     --cacert /tmp/rc-bench/restconf-cert.pem --password bench --scis 100000 --requests 2000
//! ```
//!
//! Exits non-zero when any request fails or answers an unexpected status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;

#[derive(Parser, Debug)]
#[command(about = "RESTCONF load generator: bulk PUT, single-entry GET, one-leaf PATCH, whole-tree GET")]
struct Args {
    #[arg(long, default_value = "https://127.0.0.1:8443/restconf")]
    url: String,
    /// The agent's certificate (restconf-cert.pem in its state directory).
    #[arg(long)]
    cacert: std::path::PathBuf,
    #[arg(long, default_value = "admin")]
    user: String,
    #[arg(long, default_value = "")]
    password: String,
    /// SCIs in the bulk PUT.
    #[arg(long, default_value_t = 100_000)]
    scis: usize,
    /// Sequential requests per single-entry phase.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Whole-datastore GETs.
    #[arg(long, default_value_t = 3)]
    full_gets: usize,
}

struct Client {
    send: SendRequest<Full<Bytes>>,
    host: String,
    prefix: String,
    auth: String,
}

impl Client {
    async fn call(&mut self, method: &str, path: &str, body: Option<String>) -> Result<(u16, Bytes), String> {
        self.send.ready().await.map_err(|e| e.to_string())?;
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header("host", &self.host)
            .header("authorization", &self.auth)
            .header("accept", "application/yang-data+json");
        if body.is_some() {
            b = b.header("content-type", "application/yang-data+json");
        }
        let req = b.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| e.to_string())?;
        let resp = self.send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, bytes))
    }
}

fn stats(name: &str, mut d: Vec<Duration>) {
    d.sort();
    let n = d.len().max(1);
    let total: Duration = d.iter().sum();
    let pct =
        |p: f64| d.get(((d.len() as f64 * p) as usize).min(d.len().saturating_sub(1))).copied().unwrap_or_default();
    println!(
        "{name}: {} requests, mean {:.1} us, p50 {:.1} us, p99 {:.1} us, {:.0} req/s",
        d.len(),
        total.as_secs_f64() * 1e6 / n as f64,
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        n as f64 / total.as_secs_f64().max(1e-9)
    );
}

fn expect(what: &str, got: (u16, Bytes), want: &[u16]) -> Result<Bytes, String> {
    if want.contains(&got.0) {
        Ok(got.1)
    } else {
        Err(format!("{what}: status {} ({})", got.0, String::from_utf8_lossy(&got.1)))
    }
}

async fn run(a: Args) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    let rest = a.url.strip_prefix("https://").ok_or("--url must be https://HOST:PORT/restconf")?;
    let (host, prefix) =
        rest.split_once('/').map(|(h, p)| (h.to_owned(), format!("/{p}"))).unwrap_or((rest.into(), "/restconf".into()));
    let addr: std::net::SocketAddr = host.parse().map_err(|e| format!("{host}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&a.cacert).map_err(|e| e.to_string())? {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(addr.ip().to_string()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    use base64ct::Encoding as _;
    let auth = format!("Basic {}", base64ct::Base64::encode_string(format!("{}:{}", a.user, a.password).as_bytes()));
    let mut c = Client { send, host, prefix, auth };

    // The first request pays the argon2 password check; later ones reuse the verified
    // credential, as any client sending the same Basic header does.
    expect("first request", c.call("GET", "/yang-library-version", None).await?, &[200])?;

    // 1. Bulk PUT.
    let mut body = String::with_capacity(a.scis * 64);
    body.push_str("{\"cats-sma:scis\":{\"sci\":[");
    for i in 0..a.scis {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            "{{\"csci-id\":\"10.{}.{}.{}:80\",\"cs-id\":[\"CS{}\"]}}",
            i >> 16,
            (i >> 8) & 255,
            i & 255,
            i % 100
        ));
    }
    body.push_str("]}}");
    let size = body.len();
    let t = Instant::now();
    expect("bulk PUT", c.call("PUT", "/data/cats-sma:cats-sma/scis", Some(body)).await?, &[201, 204])?;
    println!("PUT of {} SCIs ({size} bytes) in one request: {:.3} s", a.scis, t.elapsed().as_secs_f64());

    // 2. GET one entry.
    let one = "/data/cats-sma:cats-sma/scis/sci=10.0.1.1%3A80";
    for _ in 0..a.requests.min(50) {
        expect("warm-up GET", c.call("GET", one, None).await?, &[200])?;
    }
    let mut d = Vec::with_capacity(a.requests);
    for _ in 0..a.requests {
        let t = Instant::now();
        let b = expect("GET one SCI", c.call("GET", one, None).await?, &[200])?;
        d.push(t.elapsed());
        if !b.starts_with(b"{\"cats-sma:sci\"") {
            return Err(format!("GET one SCI: unexpected body {}", String::from_utf8_lossy(&b)));
        }
    }
    stats(&format!("GET one SCI entry ({} SCIs configured)", a.scis), d);

    // 3. PATCH one leaf.
    let leaf = "/data/cats-sma:cats-sma/scis/sci=10.0.1.1%3A80/description";
    // PATCH never creates its target (RFC 8040 4.6.1): the leaf is created once with PUT.
    expect("PUT one leaf", c.call("PUT", leaf, Some("{\"cats-sma:description\":\"v\"}".into())).await?, &[201, 204])?;
    let mut d = Vec::with_capacity(a.requests);
    for i in 0..a.requests {
        let t = Instant::now();
        expect(
            "PATCH one leaf",
            c.call("PATCH", leaf, Some(format!("{{\"cats-sma:description\":\"v{i}\"}}"))).await?,
            &[204],
        )?;
        d.push(t.elapsed());
    }
    stats(&format!("PATCH one leaf ({} SCIs configured)", a.scis), d);

    // 4. The whole unified datastore (configuration + state).
    for _ in 0..a.full_gets {
        let t = Instant::now();
        let b = expect("GET /data", c.call("GET", "/data", None).await?, &[200])?;
        println!("GET /restconf/data (whole operational tree): {:.3} s, {} bytes", t.elapsed().as_secs_f64(), b.len());
    }
    Ok(())
}

fn main() {
    let a = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    if let Err(e) = rt.block_on(run(a)) {
        eprintln!("restconf_load: {e}");
        std::process::exit(1);
    }
}
