//! A TLS server side that RESTCONF and the SCI HTTP listener share: the server certificate
//! (configured, or self-signed and generated once into the state directory), client
//! certificates verified against configured trust anchors and CRLs, RFC 7589 cert-to-name,
//! ALPN h2 and http/1.1, and a reload whenever one of the files changes.
//!
//! Each accept takes the configuration current at that moment ([`ServerTls::acceptor`]). A
//! poller ([`ServerTls::spawn_reloader`]) looks at the files' metadata every
//! [`RELOAD_POLL`]; when one changed it rebuilds the whole configuration and swaps it in,
//! and bumps a generation that live connections watch to check their client certificate
//! again ([`ServerTls::recheck`]), so a certificate revoked by a new CRL also loses the
//! connections it already has. A file that cannot be used on reload keeps the previous
//! configuration (logged, counted, in the operational state); at start it refuses the
//! listener (fail closed).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::{error, info, warn};

use super::cert_to_name::{CertToName, Entry, Mapped};
use super::crl::{self, CrlInfo};

/// How often the certificate, key, CA and CRL files are looked at for changes.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// Whether clients must present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client may present one (verified when it does); without one it authenticates
    /// otherwise (HTTP Basic for RESTCONF, an HMAC or JWT for SCIs).
    #[default]
    Optional,
    /// A client without a verified certificate that maps to a name is refused.
    Required,
}

impl ClientAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "required",
        }
    }
}

/// What a listener's TLS is configured with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain and private key; both absent: a self-signed pair generated
    /// into the state directory.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// PEM trust anchors for client certificates; absent: no client certificates.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// CRL files (PEM or DER), checked for the whole chain at every handshake.
    pub crl_files: Vec<PathBuf>,
    pub cert_to_name: Vec<Entry>,
}

impl TlsSettings {
    /// The checks a configuration must pass before anything is read.
    pub fn check(&self) -> Result<(), String> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("the certificate file and the private key file go together".into());
        }
        if self.client_ca.is_none() {
            if self.client_auth == ClientAuth::Required {
                return Err("client authentication 'required' needs a client CA file".into());
            }
            if !self.crl_files.is_empty() {
                return Err("CRL files need a client CA file".into());
            }
            if !self.cert_to_name.is_empty() {
                return Err("cert-to-name needs a client CA file".into());
            }
        }
        CertToName::new(self.cert_to_name.clone()).map(|_| ())
    }
}

/// Which listener a [`ServerTls`] serves: its name in logs and its generated files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    pub label: &'static str,
    pub generated_cert: &'static str,
    pub generated_key: &'static str,
    /// The protocols ALPN offers: h2 and http/1.1 for the HTTP listeners, h2 alone for
    /// gRPC; none for NETCONF over TLS, which has no ALPN protocol id (RFC 7589).
    pub alpn: &'static [&'static [u8]],
}

const HTTP_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];
pub const RESTCONF: Listener = Listener {
    label: "RESTCONF",
    generated_cert: "restconf-cert.pem",
    generated_key: "restconf-key.pem",
    alpn: HTTP_ALPN,
};
pub const SCI_HTTP: Listener =
    Listener { label: "SCI collection", generated_cert: "sci-cert.pem", generated_key: "sci-key.pem", alpn: HTTP_ALPN };
/// gRPC runs on HTTP/2 only (gRPC over HTTP2, "Protocol").
pub const SCI_GRPC: Listener = Listener {
    label: "SCI gRPC collection",
    generated_cert: "sci-grpc-cert.pem",
    generated_key: "sci-grpc-key.pem",
    alpn: &[b"h2"],
};
pub const NETCONF_TLS: Listener = Listener {
    label: "NETCONF over TLS",
    generated_cert: "netconf-tls-cert.pem",
    generated_key: "netconf-tls-key.pem",
    alpn: &[],
};

/// Why a connection did not get past TLS (the `reason` of the handshake-failure counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The handshake did not finish within the listener's handshake deadline.
    Timeout,
    /// Client authentication is required and no certificate came.
    NoCertificate,
    /// The certificate does not chain to a configured trust anchor.
    UnknownCa,
    Expired,
    NotYetValid,
    /// A loaded CRL lists the certificate (or a CA above it).
    Revoked,
    /// CRLs are configured but none covers a certificate of the chain, or it is expired.
    RevocationUnknown,
    /// Any other certificate problem (bad signature, encoding, key usage, ...).
    BadCertificate,
    /// Client authentication is required and cert-to-name gives the certificate no name.
    Unmapped,
    /// Not TLS, a version or cipher mismatch, an alert from the client, a reset.
    Protocol,
}

impl Failure {
    pub const ALL: [Failure; 10] = [
        Failure::Timeout,
        Failure::NoCertificate,
        Failure::UnknownCa,
        Failure::Expired,
        Failure::NotYetValid,
        Failure::Revoked,
        Failure::RevocationUnknown,
        Failure::BadCertificate,
        Failure::Unmapped,
        Failure::Protocol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::NoCertificate => "no-certificate",
            Failure::UnknownCa => "unknown-ca",
            Failure::Expired => "expired",
            Failure::NotYetValid => "not-yet-valid",
            Failure::Revoked => "revoked",
            Failure::RevocationUnknown => "revocation-unknown",
            Failure::BadCertificate => "bad-certificate",
            Failure::Unmapped => "unmapped-certificate",
            Failure::Protocol => "protocol",
        }
    }

    fn index(self) -> usize {
        Failure::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    /// A client's certificate was refused (an authentication failure worth an audit
    /// record), as opposed to a timeout or a peer that does not speak TLS.
    pub fn is_authentication(self) -> bool {
        !matches!(self, Failure::Timeout | Failure::Protocol)
    }

    fn of_rustls(e: &rustls::Error) -> Failure {
        match e {
            rustls::Error::NoCertificatesPresented => Failure::NoCertificate,
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => Failure::Expired,
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => Failure::NotYetValid,
                CertificateError::Revoked => Failure::Revoked,
                CertificateError::UnknownIssuer => Failure::UnknownCa,
                CertificateError::UnknownRevocationStatus
                | CertificateError::ExpiredRevocationList
                | CertificateError::ExpiredRevocationListContext { .. } => Failure::RevocationUnknown,
                _ => Failure::BadCertificate,
            },
            _ => Failure::Protocol,
        }
    }

    /// The reason of a failed tokio-rustls accept (rustls' error travels inside the
    /// io::Error).
    pub fn of_io(e: &io::Error) -> Failure {
        e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).map(Failure::of_rustls).unwrap_or(Failure::Protocol)
    }
}

/// A refused connection: why, and the detail for the log and the audit trail.
#[derive(Clone, Debug)]
pub struct Refused {
    pub failure: Failure,
    pub detail: String,
}

/// Who the peer of an accepted connection is.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The verified client chain (end entity first); empty without a client certificate.
    pub chain: Vec<CertificateDer<'static>>,
    /// What cert-to-name made of it.
    pub mapped: Option<Mapped>,
    /// ALPN chose h2.
    pub h2: bool,
}

/// A file's identity and version as the poller compares them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(p: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some(Stamp { modified: m.modified().ok(), len: m.len(), inode: m.ino() })
}

/// One built configuration.
struct Loaded {
    config: Arc<ServerConfig>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    anchors: Vec<CertificateDer<'static>>,
    crls: Vec<CrlInfo>,
    loaded_at: DateTime<Utc>,
}

/// What the operational state shows of a listener's TLS.
#[derive(Clone, Debug)]
pub struct Status {
    pub certificate_file: PathBuf,
    pub generated: bool,
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub cert_to_name_entries: usize,
    pub loaded_at: DateTime<Utc>,
    pub crls: Vec<CrlInfo>,
    pub reloads: u64,
    pub reload_failures: u64,
    pub last_reload_error: Option<String>,
    /// (reason, count) for every reason, zeros included.
    pub failures: Vec<(&'static str, u64)>,
    pub mapped: u64,
}

/// The TLS side of one listener.
pub struct ServerTls {
    listener: Listener,
    settings: TlsSettings,
    cert_file: PathBuf,
    key_file: PathBuf,
    generated: bool,
    names: CertToName,
    current: RwLock<Arc<Loaded>>,
    /// The files' stamps at the last (attempted) load: a failed reload is not retried
    /// until a file changes again.
    seen: Mutex<Vec<Option<Stamp>>>,
    generation: tokio::sync::watch::Sender<u64>,
    failures: [AtomicU64; Failure::ALL.len()],
    mapped: AtomicU64,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    last_reload_error: Mutex<Option<String>>,
}

/// The certificate and key files: configured ones, or a self-signed pair generated into the
/// state directory on the first start and reused afterwards.
fn cert_files(listener: Listener, s: &TlsSettings, state_dir: &Path) -> Result<(PathBuf, PathBuf, bool), String> {
    if let (Some(c), Some(k)) = (&s.cert_file, &s.key_file) {
        return Ok((c.clone(), k.clone(), false));
    }
    let cert = state_dir.join(listener.generated_cert);
    let key = state_dir.join(listener.generated_key);
    if cert.exists() && key.exists() {
        return Ok((cert, key, true));
    }
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let generated = rcgen::generate_simple_self_signed(names).map_err(|e| format!("generating a certificate: {e}"))?;
    crate::config::state::write_private(&key, generated.signing_key.serialize_pem().as_bytes())
        .map_err(|e| format!("{}: {e}", key.display()))?;
    crate::datastore::persist::write_atomic(&cert, generated.cert.pem().as_bytes())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    info!(cert = %cert.display(), "generated a self-signed {} certificate for localhost", listener.label);
    Ok((cert, key, true))
}

fn read_certs(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .map_err(|e| format!("{what} {}: {e}", file.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("{what} {}: no certificate in the file", file.display()));
    }
    Ok(certs)
}

impl ServerTls {
    /// Reads every file and builds the first configuration; any problem refuses the start.
    pub fn start(listener: Listener, settings: TlsSettings, state_dir: &Path) -> Result<Arc<ServerTls>, String> {
        settings.check()?;
        let (cert_file, key_file, generated) = cert_files(listener, &settings, state_dir)?;
        let names = CertToName::new(settings.cert_to_name.clone())?;
        let seen = files(&settings, &cert_file, &key_file).into_iter().map(stamp).collect();
        let loaded = build(listener, &settings, &cert_file, &key_file)?;
        note_crls(listener, &loaded);
        Ok(Arc::new(ServerTls {
            listener,
            settings,
            cert_file,
            key_file,
            generated,
            names,
            current: RwLock::new(Arc::new(loaded)),
            seen: Mutex::new(seen),
            generation: tokio::sync::watch::channel(0).0,
            failures: Default::default(),
            mapped: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            last_reload_error: Mutex::new(None),
        }))
    }

    pub fn listener(&self) -> Listener {
        self.listener
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The server certificate file (clients can pin or trust it).
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    fn stamps(&self) -> Vec<Option<Stamp>> {
        files(&self.settings, &self.cert_file, &self.key_file).into_iter().map(stamp).collect()
    }

    fn current(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// An acceptor with the configuration current now.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current().config.clone())
    }

    /// Rebuilds the configuration when a file changed since the last attempt: `None` when
    /// nothing changed, else whether the new one is in force.
    pub fn reload_if_changed(&self) -> Option<Result<(), String>> {
        let now = self.stamps();
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if *seen == now {
                return None;
            }
            *seen = now;
        }
        match build(self.listener, &self.settings, &self.cert_file, &self.key_file) {
            Ok(l) => {
                note_crls(self.listener, &l);
                let n = l.crls.iter().map(|c| c.revoked).sum::<usize>();
                info!(
                    "{} TLS: files changed, configuration reloaded ({} CRL(s), {n} revoked entries)",
                    self.listener.label,
                    l.crls.len()
                );
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(l);
                *self.last_reload_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.reloads.fetch_add(1, Ordering::Relaxed);
                self.generation.send_modify(|g| *g += 1);
                Some(Ok(()))
            }
            Err(e) => {
                error!(
                    "{} TLS: files changed but cannot be used; the previous configuration stays: {e}",
                    self.listener.label
                );
                *self.last_reload_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                Some(Err(e))
            }
        }
    }

    /// Polls the files every [`RELOAD_POLL`] until the last reference elsewhere is gone.
    pub fn spawn_reloader(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(t) = weak.upgrade() else { return };
                // File reads and CRL parsing off the runtime's workers.
                let _ = tokio::task::spawn_blocking(move || t.reload_if_changed()).await;
            }
        })
    }

    /// Changes whenever a new configuration is in force.
    pub fn generation(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Counts a refused connection.
    pub fn record(&self, f: Failure) {
        self.failures[f.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The TLS handshake within `deadline`, then cert-to-name. With client authentication
    /// required, a certificate without a name is refused here.
    pub async fn accept(&self, stream: TcpStream, deadline: Duration) -> Result<(TlsStream<TcpStream>, Peer), Refused> {
        let acceptor = self.acceptor();
        let anchors = self.current().anchors.clone();
        let tls = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
            Err(_) => {
                return Err(Refused {
                    failure: Failure::Timeout,
                    detail: format!("TLS handshake not done within {} s", deadline.as_secs()),
                })
            }
            Ok(Err(e)) => return Err(Refused { failure: Failure::of_io(&e), detail: format!("TLS handshake: {e}") }),
            Ok(Ok(t)) => t,
        };
        let conn = tls.get_ref().1;
        let chain: Vec<CertificateDer<'static>> =
            conn.peer_certificates().map(|c| c.iter().map(|d| d.clone().into_owned()).collect()).unwrap_or_default();
        let h2 = conn.alpn_protocol() == Some(b"h2");
        let mapped = if chain.is_empty() { None } else { self.names.map(&chain, &anchors) };
        if mapped.is_some() {
            self.mapped.fetch_add(1, Ordering::Relaxed);
        }
        if self.settings.client_auth == ClientAuth::Required && mapped.is_none() {
            let fp = chain.first().map(|c| super::cert_to_name::Fingerprint::sha256_of(c.as_ref())).unwrap_or_default();
            return Err(Refused {
                failure: Failure::Unmapped,
                detail: format!("the client certificate {fp} maps to no name (cert-to-name)"),
            });
        }
        Ok((tls, Peer { chain, mapped, h2 }))
    }

    /// Checks a connection's client chain against the configuration in force now (after a
    /// reload: new CRLs, another CA).
    pub fn recheck(&self, chain: &[CertificateDer<'static>]) -> Result<(), Refused> {
        let Some(ee) = chain.first() else { return Ok(()) };
        let l = self.current();
        let Some(v) = &l.verifier else {
            return Err(Refused {
                failure: Failure::UnknownCa,
                detail: "client certificates are no longer accepted".into(),
            });
        };
        v.verify_client_cert(ee, &chain[1..], UnixTime::now()).map(|_| ()).map_err(|e| Refused {
            failure: Failure::of_rustls(&e),
            detail: format!("client certificate no longer valid after a reload: {e}"),
        })
    }

    /// Whether a live session's `chain`, accepted as `user` under another configuration,
    /// is still accepted by this one as the same user (a new TLS configuration in force:
    /// other anchors, CRLs or cert-to-name entries).
    pub fn admits_as(&self, chain: &[CertificateDer<'static>], user: &str) -> Result<(), Refused> {
        if chain.is_empty() {
            return Err(Refused { failure: Failure::Unmapped, detail: "no client certificate".into() });
        }
        self.recheck(chain)?;
        let anchors = self.current().anchors.clone();
        match self.names.map(chain, &anchors) {
            Some(m) if m.name == user => Ok(()),
            Some(m) => Err(Refused {
                failure: Failure::Unmapped,
                detail: format!("the client certificate now maps to {} instead of {user}", m.name),
            }),
            None => Err(Refused {
                failure: Failure::Unmapped,
                detail: "the client certificate maps to no name under the new cert-to-name".into(),
            }),
        }
    }

    /// Resolves when a reload makes `chain` unacceptable (never for an empty chain, nor
    /// while it stays valid): the caller then closes the connection.
    pub async fn invalidated(&self, chain: &[CertificateDer<'static>]) -> Refused {
        if chain.is_empty() {
            return std::future::pending().await;
        }
        let mut generation = self.generation();
        loop {
            if generation.changed().await.is_err() {
                return std::future::pending().await;
            }
            if let Err(r) = self.recheck(chain) {
                return r;
            }
        }
    }

    pub fn status(&self) -> Status {
        let l = self.current();
        Status {
            certificate_file: self.cert_file.clone(),
            generated: self.generated,
            client_ca: self.settings.client_ca.clone(),
            client_auth: self.settings.client_auth,
            cert_to_name_entries: self.names.entries().len(),
            loaded_at: l.loaded_at,
            crls: l.crls.clone(),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_failures: self.reload_failures.load(Ordering::Relaxed),
            last_reload_error: self.last_reload_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            failures: Failure::ALL
                .iter()
                .map(|f| (f.as_str(), self.failures[f.index()].load(Ordering::Relaxed)))
                .collect(),
            mapped: self.mapped.load(Ordering::Relaxed),
        }
    }
}

fn files<'a>(s: &'a TlsSettings, cert: &'a Path, key: &'a Path) -> Vec<&'a Path> {
    let mut v = vec![cert, key];
    v.extend(s.client_ca.as_deref());
    v.extend(s.crl_files.iter().map(PathBuf::as_path));
    v
}

/// Reads every file and builds a configuration.
fn build(listener: Listener, s: &TlsSettings, cert_file: &Path, key_file: &Path) -> Result<Loaded, String> {
    let certs = read_certs(cert_file, "certificate")?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| format!("private key {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let client = client_side(s)?;
    let builder = match &client.verifier {
        Some(v) => builder.with_client_cert_verifier(v.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate {} / key {}: {e}", cert_file.display(), key_file.display()))?;
    config.alpn_protocols = listener.alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Loaded {
        config: Arc::new(config),
        verifier: client.verifier,
        anchors: client.anchors,
        crls: client.crls,
        loaded_at: Utc::now(),
    })
}

struct ClientSide {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    anchors: Vec<CertificateDer<'static>>,
    crls: Vec<CrlInfo>,
}

/// The client certificate verifier: trust anchors and CRLs.
fn client_side(s: &TlsSettings) -> Result<ClientSide, String> {
    let Some(ca) = &s.client_ca else {
        return Ok(ClientSide { verifier: None, anchors: Vec::new(), crls: Vec::new() });
    };
    let anchors = read_certs(ca, "client CA")?;
    let mut roots = rustls::RootCertStore::empty();
    for c in &anchors {
        roots.add(c.clone()).map_err(|e| format!("client CA {}: {e}", ca.display()))?;
    }
    let (mut crls, mut ders) = (Vec::new(), Vec::new());
    for f in &s.crl_files {
        let (d, i) = crl::load(f)?;
        ders.extend(d);
        crls.extend(i);
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut vb = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).with_crls(ders);
    if s.client_auth == ClientAuth::Optional {
        vb = vb.allow_unauthenticated();
    }
    let v = vb.build().map_err(|e| format!("client CA {} / CRLs: {e}", ca.display()))?;
    Ok(ClientSide { verifier: Some(v), anchors, crls })
}

/// Reads the configured files as a start would, without generating anything: for refusing
/// a commit whose files cannot be used.
pub fn check_files(s: &TlsSettings) -> Result<(), String> {
    s.check()?;
    match (&s.cert_file, &s.key_file) {
        // The listener only decides ALPN, which a check does not look at.
        (Some(c), Some(k)) => build(RESTCONF, s, c, k).map(|_| ()),
        _ => client_side(s).map(|_| ()),
    }
}

fn note_crls(listener: Listener, l: &Loaded) {
    let now = Utc::now();
    for c in &l.crls {
        if c.next_update.is_some_and(|n| n < now) {
            warn!(
                file = %c.file.display(),
                issuer = %c.issuer,
                "{} TLS: this CRL's next update has passed; revocations since are not known until the file is replaced",
                listener.label
            );
        }
    }
}
