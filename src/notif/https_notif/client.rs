//! One HTTPS-notif receiver instance: a task that keeps an HTTP/1.1 connection over TLS
//! (rustls, trusting only the configured anchors, `tls::client`), discovers the
//! receiver's capabilities on every new connection (the draft: before sending any
//! notification and after any error), and POSTs the queued notifications one by one in
//! the negotiated encoding. The queue is bounded; a full queue drops the new message and
//! counts it. A failed connection is retried with exponential backoff; the message in
//! flight when it failed is sent again on the next connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::capabilities::{self, Capabilities, CapabilityError};
use crate::backoff::Backoff;
use crate::notif::{Encoding, Envelope, Notification};
use crate::tls::client::{ClientFiles, Loader};

/// Connect, TLS handshake and each request must finish within this.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest error body read from a refusing receiver (for the log).
const MAX_ERROR_BODY: usize = 4096;

/// The receiver-instance leaves the client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    pub host: String,
    pub port: u16,
    /// The `path` under which the receiver serves `capabilities` and `relay-notification`
    /// (path-absolute; a trailing slash is ignored).
    pub path: String,
    pub tls: ClientFiles,
    /// The subscription's `encoding`, when configured; otherwise the receiver's
    /// capabilities decide (JSON first).
    pub encoding: Option<Encoding>,
    /// Messages waiting for the receiver at most; beyond, new ones are dropped.
    pub queue: usize,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// What one receiver instance did.
#[derive(Debug, Default)]
pub struct ClientCounters {
    /// Notifications the receiver accepted (2xx).
    pub sent: AtomicU64,
    /// Notifications dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Notifications the receiver answered with a non-2xx status (not retried).
    pub rejected: AtomicU64,
    /// State notifications not sent: the receiver did not announce `sub-notif`.
    pub state_skipped: AtomicU64,
    /// Notifications not sent: the receiver takes only XML and the producer wrote none.
    pub unencodable: AtomicU64,
    /// Connections (with capability discovery) established.
    pub connects: AtomicU64,
    /// Connection or discovery attempts that failed.
    pub failures: AtomicU64,
}

/// Where the link to the receiver stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    Connecting,
    /// Connected; the receiver's capabilities and the encoding chosen from them.
    Up {
        capabilities: Capabilities,
        encoding: Encoding,
    },
    /// The last attempt failed (why); the next one comes after the backoff.
    Down(String),
}

/// What one POST carries.
enum Payload {
    /// Rendered in whichever encoding the connection negotiated.
    Notification(Arc<Notification>),
    /// Already written in one encoding (a configured subscription's messages: XML, or JSON
    /// in the RFC 8040 envelope, renamed for HTTPS-notif here).
    Encoded(Encoding, Arc<str>),
}

struct Item {
    payload: Payload,
    /// A subscription state notification (RFC 8639 section 2.7), sent only to receivers
    /// that announce `sub-notif`.
    state: bool,
}

/// The handle of one receiver instance's task; dropping it ends the task once the queue
/// is empty.
pub struct Client {
    tx: mpsc::Sender<Item>,
    pub counters: Arc<ClientCounters>,
    link: Arc<Mutex<Link>>,
}

impl Client {
    pub fn spawn(config: ClientConfig) -> Client {
        Self::start(config, false)
    }

    /// Like [`Client::spawn`], connecting (and reading the capabilities) at once rather
    /// than at the first message: a configured subscription starts for this receiver only
    /// once the encoding is known.
    pub fn spawn_eager(config: ClientConfig) -> Client {
        Self::start(config, true)
    }

    fn start(config: ClientConfig, eager: bool) -> Client {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let counters = Arc::new(ClientCounters::default());
        let link = Arc::new(Mutex::new(Link::Connecting));
        tokio::spawn(run(config, rx, counters.clone(), link.clone(), eager));
        Client { tx, counters, link }
    }

    /// Queues one notification; false (and counted) when the queue is full.
    pub fn send(&self, notification: Arc<Notification>, state: bool) -> bool {
        self.queue(Item { payload: Payload::Notification(notification), state })
    }

    /// Queues a message already written in `encoding`; false (and counted) when the queue
    /// is full.
    pub fn send_encoded(&self, encoding: Encoding, text: Arc<str>, state: bool) -> bool {
        self.queue(Item { payload: Payload::Encoded(encoding, text), state })
    }

    fn queue(&self, item: Item) -> bool {
        match self.tx.try_send(item) {
            Ok(()) => true,
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    pub fn link(&self) -> Link {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Why a connection ended or never started.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("connect to {0}: {1}")]
    Connect(String, String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("timed out")]
    Timeout,
    #[error("capabilities: HTTP {0}")]
    CapabilitiesStatus(u16),
    #[error(transparent)]
    Capabilities(#[from] CapabilityError),
}

struct Connection {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    encoding: Encoding,
    capabilities: Capabilities,
}

fn base(path: &str) -> &str {
    path.trim_end_matches('/')
}

fn authority(cfg: &ClientConfig) -> String {
    if cfg.host.contains(':') && !cfg.host.starts_with('[') {
        format!("[{}]:{}", cfg.host, cfg.port)
    } else {
        format!("{}:{}", cfg.host, cfg.port)
    }
}

async fn connect(cfg: &ClientConfig, loader: &mut Loader) -> Result<Connection, Failure> {
    let tls = loader.get().map_err(|e| Failure::Config(e.to_string()))?;
    let name = crate::tls::client::server_name(&cfg.host).map_err(|e| Failure::Config(e.to_string()))?;
    let host = cfg.host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect((host, cfg.port)))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| Failure::Connect(authority(cfg), e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio::time::timeout(TIMEOUT, tokio_rustls::TlsConnector::from(tls).connect(name, tcp))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| Failure::Tls(e.to_string()))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| Failure::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let authority = authority(cfg);
    let req = hyper::Request::get(format!("{}/capabilities", base(&cfg.path)))
        .header(hyper::header::HOST, &authority)
        .header(hyper::header::ACCEPT, capabilities::ACCEPT)
        .body(Full::new(Bytes::new()))
        .map_err(|e| Failure::Http(e.to_string()))?;
    let resp = tokio::time::timeout(TIMEOUT, sender.send_request(req))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| Failure::Http(e.to_string()))?;
    let status = resp.status();
    let ct = resp
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_else(|| "application/json".into());
    let body = tokio::time::timeout(TIMEOUT, Limited::new(resp.into_body(), capabilities::MAX_BODY).collect())
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Failure::Capabilities(CapabilityError::TooLarge)
            } else {
                Failure::Http(e.to_string())
            }
        })?
        .to_bytes();
    if !status.is_success() {
        return Err(Failure::CapabilitiesStatus(status.as_u16()));
    }
    let caps = capabilities::parse(&ct, &body)?;
    let encoding = caps.choose(cfg.encoding)?;
    tracing::info!(receiver = %authority, ?caps, ?encoding, "HTTPS-notif receiver connected");
    Ok(Connection { sender, authority, encoding, capabilities: caps })
}

/// What became of one POST.
enum Posted {
    Accepted,
    Refused(u16),
    /// Not in the negotiated encoding (no XML form).
    Unencodable,
    /// The connection failed: send again on the next one.
    Lost(String),
}

async fn post(conn: &mut Connection, path: &str, item: &Item) -> Posted {
    let body = match &item.payload {
        Payload::Notification(n) => match n.render(conn.encoding, Envelope::HttpsNotif) {
            Some(b) => b,
            // A producer without an XML form: nothing this receiver could take.
            None => return Posted::Unencodable,
        },
        // Already written: sent as it is if the receiver takes that encoding at all.
        Payload::Encoded(enc, _) if conn.capabilities.choose(Some(*enc)).is_err() => return Posted::Unencodable,
        Payload::Encoded(Encoding::Json, text) => {
            let restconf = format!("{{\"{}\":", Envelope::Restconf.member());
            match text.strip_prefix(restconf.as_str()) {
                Some(rest) => format!("{{\"{}\":{rest}", Envelope::HttpsNotif.member()).into_bytes(),
                None => text.as_bytes().to_vec(),
            }
        }
        Payload::Encoded(_, text) => text.as_bytes().to_vec(),
    };
    let sent_in = match &item.payload {
        Payload::Encoded(enc, _) => *enc,
        Payload::Notification(_) => conn.encoding,
    };
    let content_type = match sent_in {
        Encoding::Xml => "application/xml",
        _ => "application/json",
    };
    if let Err(e) = conn.sender.ready().await {
        return Posted::Lost(e.to_string());
    }
    let req = match hyper::Request::post(format!("{}/relay-notification", base(path)))
        .header(hyper::header::HOST, &conn.authority)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
    {
        Ok(r) => r,
        Err(e) => return Posted::Lost(e.to_string()),
    };
    let resp = match tokio::time::timeout(TIMEOUT, conn.sender.send_request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Posted::Lost(e.to_string()),
        Err(_) => return Posted::Lost("timed out".into()),
    };
    let status = resp.status();
    // Read (a bounded part of) the body so the connection can carry the next request.
    let _ = tokio::time::timeout(TIMEOUT, Limited::new(resp.into_body(), MAX_ERROR_BODY).collect()).await;
    if status.is_success() {
        Posted::Accepted
    } else {
        Posted::Refused(status.as_u16())
    }
}

fn set(link: &Mutex<Link>, l: Link) {
    *link.lock().unwrap_or_else(|e| e.into_inner()) = l;
}

async fn run(
    cfg: ClientConfig,
    mut rx: mpsc::Receiver<Item>,
    counters: Arc<ClientCounters>,
    link: Arc<Mutex<Link>>,
    mut eager: bool,
) {
    let mut loader = Loader::new(cfg.tls.clone(), &[b"http/1.1"]);
    let mut backoff = Backoff::new(cfg.backoff_initial, cfg.backoff_max);
    let mut pending: Option<Item> = None;
    loop {
        // Connect only when there is something to send (or a retry is owed), unless eager
        // (then until the first connection).
        if pending.is_none() && !eager {
            match rx.recv().await {
                Some(item) => pending = Some(item),
                None => return,
            }
        }
        set(&link, Link::Connecting);
        let mut conn = match connect(&cfg, &mut loader).await {
            Ok(c) => c,
            Err(e) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(receiver = %authority(&cfg), error = %e, "HTTPS-notif receiver unreachable");
                set(&link, Link::Down(e.to_string()));
                // Nobody can queue anything any more (the receiver instance is gone): stop
                // retrying.
                if rx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff.fail()).await;
                continue;
            }
        };
        counters.connects.fetch_add(1, Ordering::Relaxed);
        backoff.reset();
        eager = false;
        // The capabilities are read again on every connection: show what they said now.
        set(&link, Link::Up { capabilities: conn.capabilities.clone(), encoding: conn.encoding });
        loop {
            let item = match pending.take() {
                Some(i) => i,
                None => match rx.recv().await {
                    Some(i) => i,
                    None => return,
                },
            };
            if item.state && !conn.capabilities.sub_notif {
                counters.state_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match post(&mut conn, &cfg.path, &item).await {
                Posted::Accepted => {
                    counters.sent.fetch_add(1, Ordering::Relaxed);
                }
                Posted::Unencodable => {
                    counters.unencodable.fetch_add(1, Ordering::Relaxed);
                }
                Posted::Refused(status) => {
                    counters.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(receiver = %authority(&cfg), status, "HTTPS-notif receiver refused a notification");
                }
                Posted::Lost(e) => {
                    counters.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(receiver = %authority(&cfg), error = %e, "HTTPS-notif connection lost: reconnecting");
                    set(&link, Link::Down(e));
                    pending = Some(item);
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths_join_the_configured_prefix() {
        assert_eq!(format!("{}/capabilities", base("/some/path/")), "/some/path/capabilities");
        assert_eq!(format!("{}/relay-notification", base("/")), "/relay-notification");
        let mut cfg = ClientConfig {
            host: "::1".into(),
            port: 8443,
            path: "/".into(),
            tls: ClientFiles::default(),
            encoding: None,
            queue: 1,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
        };
        assert_eq!(authority(&cfg), "[::1]:8443");
        cfg.host = "receiver.example".into();
        assert_eq!(authority(&cfg), "receiver.example:8443");
    }
}
