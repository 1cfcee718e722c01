//! Client-side TLS for the agent's outgoing SCI connections (HTTPS pull targets, the MQTT
//! broker): a rustls configuration that trusts only the configured anchors, presents a
//! client certificate when one is configured, and verifies the server's name against the
//! host the agent connects to (rustls' webpki verifier). The system's root store is not
//! used: an SCI-facing peer belongs to the operator's deployment, and the public web PKI
//! says nothing about who may serve SCI metrics. [`Loader`] re-reads the files when they
//! change on disk, so a renewed certificate is picked up without a commit.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::ClientConfig;

/// The files of one client TLS setting (YANG grouping `sci-tls-client`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientFiles {
    pub trusted_ca_file: Option<String>,
    pub client_certificate_file: Option<String>,
    pub client_key_file: Option<String>,
}

impl ClientFiles {
    /// These leaves, each missing one taken from `fallback` (the certificate and its key as
    /// a pair, never one from each).
    pub fn or(self, fallback: &ClientFiles) -> ClientFiles {
        let (cert, key) = match (self.client_certificate_file, self.client_key_file) {
            (None, None) => (fallback.client_certificate_file.clone(), fallback.client_key_file.clone()),
            pair => pair,
        };
        ClientFiles {
            trusted_ca_file: self.trusted_ca_file.or_else(|| fallback.trusted_ca_file.clone()),
            client_certificate_file: cert,
            client_key_file: key,
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == ClientFiles::default()
    }

    fn paths(&self) -> impl Iterator<Item = &str> {
        [&self.trusted_ca_file, &self.client_certificate_file, &self.client_key_file]
            .into_iter()
            .flatten()
            .map(|s| s.as_str())
    }
}

/// Why a client TLS configuration cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientTlsError {
    #[error("no trusted-ca-file: the server could not be verified (the system's roots are not used)")]
    NoTrustAnchors,
    #[error("{path}: {detail}")]
    File { path: String, detail: String },
    #[error("{0}: no PEM certificate in it")]
    NoCertificate(String),
    #[error("client-certificate-file and client-key-file go together")]
    Unpaired,
    #[error("client certificate: {0}")]
    ClientAuth(String),
    #[error("server name {name:?}: {detail}")]
    ServerName { name: String, detail: String },
}

fn file_error(path: &str, e: impl std::fmt::Display) -> ClientTlsError {
    ClientTlsError::File { path: path.to_owned(), detail: e.to_string() }
}

fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, ClientTlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(ClientTlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

/// Builds the configuration from the files (reads them now). `alpn` is offered in the
/// handshake (empty: no ALPN).
pub fn config(files: &ClientFiles, alpn: &[&[u8]]) -> Result<Arc<ClientConfig>, ClientTlsError> {
    let ca = files.trusted_ca_file.as_deref().ok_or(ClientTlsError::NoTrustAnchors)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates(ca)? {
        roots.add(c).map_err(|e| file_error(ca, e))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientTlsError::ClientAuth(e.to_string()))?
        .with_root_certificates(roots);
    let mut cfg = match (&files.client_certificate_file, &files.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| ClientTlsError::ClientAuth(e.to_string()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(ClientTlsError::Unpaired),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// The name the server's certificate must carry: the host of the URL or the broker host
/// (an address is checked against the certificate's IP SANs).
pub fn server_name(host: &str) -> Result<ServerName<'static>, ClientTlsError> {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(h.to_owned())
        .map_err(|e| ClientTlsError::ServerName { name: crate::text::printable(h, 255), detail: e.to_string() })
}

/// When each file was last changed, and its size (None: unreadable).
type Stamp = Vec<Option<(SystemTime, u64)>>;

/// The stamp of the files now, to notice a replaced file.
fn stamp(files: &ClientFiles) -> Stamp {
    files.paths().map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len())))).collect()
}

/// A configuration kept between connections and rebuilt when one of its files changes
/// (or the last attempt failed).
pub struct Loader {
    files: ClientFiles,
    alpn: Vec<Vec<u8>>,
    loaded: Option<(Stamp, Arc<ClientConfig>)>,
}

impl Loader {
    pub fn new(files: ClientFiles, alpn: &[&[u8]]) -> Loader {
        Loader { files, alpn: alpn.iter().map(|p| p.to_vec()).collect(), loaded: None }
    }

    pub fn files(&self) -> &ClientFiles {
        &self.files
    }

    /// The configuration, re-read when a file changed since it was built.
    pub fn get(&mut self) -> Result<Arc<ClientConfig>, ClientTlsError> {
        let now = stamp(&self.files);
        if let Some((at, cfg)) = &self.loaded {
            if *at == now {
                return Ok(cfg.clone());
            }
        }
        let alpn: Vec<&[u8]> = self.alpn.iter().map(|p| p.as_slice()).collect();
        let cfg = config(&self.files, &alpn)?;
        if self.loaded.is_some() {
            tracing::info!(files = ?self.files, "client TLS files changed: reloaded");
        }
        self.loaded = Some((now, cfg.clone()));
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, data: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p.to_string_lossy().into_owned()
    }

    #[test]
    fn configured_anchors_only_and_pairs_checked() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap();
        let ca_file = write(dir.path(), "ca.pem", &ca.cert.pem());
        let key_file = write(dir.path(), "key.pem", &ca.signing_key.serialize_pem());
        let files = |ca: Option<&str>, cert: Option<&str>, key: Option<&str>| ClientFiles {
            trusted_ca_file: ca.map(str::to_owned),
            client_certificate_file: cert.map(str::to_owned),
            client_key_file: key.map(str::to_owned),
        };
        assert!(config(&files(Some(&ca_file), None, None), &[]).is_ok());
        assert!(config(&files(Some(&ca_file), Some(&ca_file), Some(&key_file)), &[b"http/1.1"]).is_ok());
        assert_eq!(config(&files(None, None, None), &[]).unwrap_err(), ClientTlsError::NoTrustAnchors);
        assert_eq!(config(&files(Some(&ca_file), Some(&ca_file), None), &[]).unwrap_err(), ClientTlsError::Unpaired);
        let missing = dir.path().join("nope.pem").to_string_lossy().into_owned();
        assert!(matches!(config(&files(Some(&missing), None, None), &[]), Err(ClientTlsError::File { .. })));
        let empty = write(dir.path(), "empty.pem", "not PEM at all\n");
        assert_eq!(config(&files(Some(&empty), None, None), &[]).unwrap_err(), ClientTlsError::NoCertificate(empty));
    }

    #[test]
    fn target_leaves_fall_back_to_the_collection_wide_ones() {
        let wide = ClientFiles {
            trusted_ca_file: Some("wide-ca".into()),
            client_certificate_file: Some("wide-cert".into()),
            client_key_file: Some("wide-key".into()),
        };
        let own = ClientFiles { trusted_ca_file: Some("own-ca".into()), ..Default::default() }.or(&wide);
        assert_eq!(own.trusted_ca_file.as_deref(), Some("own-ca"));
        assert_eq!(own.client_certificate_file.as_deref(), Some("wide-cert"));
        let pair = ClientFiles {
            client_certificate_file: Some("own-cert".into()),
            client_key_file: Some("own-key".into()),
            ..Default::default()
        }
        .or(&wide);
        assert_eq!(
            (pair.client_certificate_file.as_deref(), pair.client_key_file.as_deref()),
            (Some("own-cert"), Some("own-key"))
        );
        assert_eq!(pair.trusted_ca_file.as_deref(), Some("wide-ca"));
    }

    #[test]
    fn loader_rereads_a_changed_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca_file = write(dir.path(), "ca.pem", "garbage\n");
        let mut l = Loader::new(ClientFiles { trusted_ca_file: Some(ca_file.clone()), ..Default::default() }, &[]);
        assert!(l.get().is_err());
        let ca = rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap();
        write(dir.path(), "ca.pem", &ca.cert.pem());
        let first = l.get().unwrap();
        assert!(Arc::ptr_eq(&first, &l.get().unwrap()), "unchanged files: the same configuration");
        assert_eq!(server_name("[::1]").unwrap(), ServerName::try_from("::1").unwrap());
        assert!(server_name("bad host name!").is_err());
    }
}
