//! Network I/O towards one C-PS: HTTP/1.1 over TCP or TLS (rustls, server certificate
//! verified against the configured trust anchors, optional client certificate), one kept-
//! alive connection re-established after any error. The session state machine only sees
//! the [`Transport`] trait, so it is tested without sockets.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// Largest C-PS reply body read (`peer_limits.cps_reply_bytes`): replies are small JSON
/// acknowledgements, so a C-PS that answers a gigabyte is cut off after this much. Replies
/// are read as sent (no content coding is asked for or decoded), so a compressed reply
/// cannot expand past it either.
static REPLY_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1024 * 1024);

pub fn set_reply_limit(bytes: usize) {
    REPLY_LIMIT.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

pub fn reply_limit() -> usize {
    REPLY_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// One request, path relative to the C-PS base URL.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// The reply headers the adapter reads (names in lowercase): the reply signature, the
    /// content type and the overload headers (seed 003).
    pub headers: Vec<(String, String)>,
}

impl Response {
    pub fn new(status: u16, body: Vec<u8>) -> Response {
        Response { status, body, headers: Vec::new() }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("HTTP: {0}")]
    Http(String),
    /// The gRPC stream failed or ended (`grpc.rs`).
    #[error("gRPC stream: {0}")]
    Grpc(String),
}

pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<Response, TransportError>> + Send + 'a>>;

/// How requests reach a C-PS.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, req: Request) -> SendFuture<'_>;
}

/// Where a C-PS is, from its base URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix of the API ("" or "/prefix", no trailing slash).
    pub base: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("url '{url}': {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("url '{url}': the scheme must be http or https")),
        };
        let host = uri.host().ok_or_else(|| format!("url '{url}': no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if uri.query().is_some() {
            return Err(format!("url '{url}': a query is not allowed in the base URL"));
        }
        let base = uri.path().trim_end_matches('/').to_owned();
        Ok(Endpoint { https, host, port, base })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// TLS settings of a peer: the files named in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub trusted_ca_file: String,
    pub server_name: Option<String>,
    pub client_certificate_file: Option<String>,
    pub client_key_file: Option<String>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read_certs(path: &str) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let certs: Vec<_> =
        rustls_pemfile::certs(&mut data.as_slice()).collect::<Result<_, _>>().map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no PEM certificate in it"));
    }
    Ok(certs)
}

/// Builds the rustls client configuration (reads the files: called in a commit's prepare,
/// so a missing or bad file refuses the commit).
pub fn client_config(t: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(&t.trusted_ca_file)? {
        roots.add(c).map_err(|e| format!("{}: {e}", t.trusted_ca_file))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let cfg = match (&t.client_certificate_file, &t.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert)?;
            let data = std::fs::read(key).map_err(|e| format!("{key}: {e}"))?;
            let key_der = rustls_pemfile::private_key(&mut data.as_slice())
                .map_err(|e| format!("{key}: {e}"))?
                .ok_or_else(|| format!("{key}: no PEM private key in it"))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| format!("client certificate: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("client-certificate-file and client-key-file go together".into()),
    };
    Ok(Arc::new(cfg))
}

/// The real transport.
pub struct HttpTransport {
    endpoint: Endpoint,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl HttpTransport {
    pub fn new(
        endpoint: Endpoint,
        tls: Option<(Arc<rustls::ClientConfig>, Option<String>)>,
        timeout: Duration,
    ) -> Result<HttpTransport, String> {
        let tls = match (endpoint.https, tls) {
            (true, Some((cfg, name))) => {
                let name = name.unwrap_or_else(|| endpoint.host.clone());
                let sn = ServerName::try_from(name.clone()).map_err(|e| format!("server name '{name}': {e}"))?;
                Some((tokio_rustls::TlsConnector::from(cfg), sn))
            }
            (true, None) => return Err("an https url needs the 'tls' container (trusted-ca-file)".into()),
            (false, Some(_)) => return Err("'tls' is configured but the url is not https".into()),
            (false, None) => None,
        };
        Ok(HttpTransport { endpoint, tls, timeout, conn: tokio::sync::Mutex::new(None) })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, TransportError> {
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(|e| TransportError::Connect(format!("{}: {e}", self.endpoint.authority())))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            Some((connector, name)) => {
                let stream =
                    connector.connect(name.clone(), tcp).await.map_err(|e| TransportError::Tls(e.to_string()))?;
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| TransportError::Http(e.to_string()))?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Ok(sender)
            }
            None => {
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(|e| TransportError::Http(e.to_string()))?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Ok(sender)
            }
        }
    }

    async fn exchange(&self, req: Request) -> Result<Response, TransportError> {
        let mut guard = self.conn.lock().await;
        let mut sender = match guard.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.connect().await?,
        };
        sender.ready().await.map_err(|e| TransportError::Http(e.to_string()))?;
        let mut b = hyper::Request::builder()
            .method(req.method)
            .uri(format!("{}{}", self.endpoint.base, req.path))
            .header(hyper::header::HOST, self.endpoint.authority());
        for (k, v) in &req.headers {
            b = b.header(*k, v);
        }
        let request = b.body(Full::new(Bytes::from(req.body))).map_err(|e| TransportError::Http(e.to_string()))?;
        let resp = sender.send_request(request).await.map_err(|e| TransportError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        let headers = [
            crate::cps::auth::H_REPLY_SIGNATURE,
            "content-type",
            crate::overload::wire::H_OC_SUPPORTED,
            crate::overload::wire::H_OC_OLR,
        ]
        .iter()
        .filter_map(|h| resp.headers().get(*h).and_then(|v| v.to_str().ok()).map(|v| ((*h).to_owned(), v.to_owned())))
        .collect();
        let limit = reply_limit();
        let declared =
            resp.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(TransportError::Http(format!("reply body larger than {limit} bytes")));
        }
        let body = Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| TransportError::Http(format!("reply body: {e}")))?
            .to_bytes()
            .to_vec();
        // Only a connection that completed an exchange is kept.
        *guard = Some(sender);
        Ok(Response { status, body, headers })
    }
}

impl Transport for HttpTransport {
    fn send(&self, req: Request) -> SendFuture<'_> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.exchange(req)).await {
                Ok(r) => r,
                Err(_) => Err(TransportError::Timeout(self.timeout)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_from_urls() {
        let e = Endpoint::parse("https://cps.example:8443/api/").unwrap();
        assert_eq!(e, Endpoint { https: true, host: "cps.example".into(), port: 8443, base: "/api".into() });
        let e = Endpoint::parse("http://[::1]").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.base.as_str()), ("::1", 80, ""));
        assert_eq!(e.authority(), "[::1]:80");
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://x/?q=1").is_err());
        assert!(Endpoint::parse("not a url").is_err());
    }

    #[test]
    fn tls_needs_https_and_a_readable_ca() {
        let ep = Endpoint::parse("https://h:1").unwrap();
        assert!(HttpTransport::new(ep, None, Duration::from_secs(1)).is_err());
        let files = TlsFiles {
            trusted_ca_file: "/nonexistent/ca.pem".into(),
            server_name: None,
            client_certificate_file: None,
            client_key_file: None,
        };
        let e = client_config(&files).unwrap_err();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
