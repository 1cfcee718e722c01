//! HTTPS for RESTCONF (RFC 8040 section 2: TLS is mandatory): the server certificate
//! (configured, or self-signed and generated once into the state directory), optional
//! client certificates verified against a configured CA, and RFC 7589-style cert-to-name
//! (a verified certificate's SHA-256 fingerprint names the user).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use sha2::{Digest, Sha256};

use crate::config::RestconfSettings;

pub const GENERATED_CERT: &str = "restconf-cert.pem";
pub const GENERATED_KEY: &str = "restconf-key.pem";

/// The TLS side of the RESTCONF server.
pub struct Tls {
    pub config: Arc<ServerConfig>,
    /// SHA-256 fingerprint of a client certificate → user.
    pub cert_names: HashMap<[u8; 32], String>,
    /// The server certificate file (clients can pin or trust it).
    pub cert_file: PathBuf,
}

/// The certificate and key files: configured ones, or a self-signed pair generated into the
/// state directory on the first start and reused afterwards.
fn cert_files(settings: &RestconfSettings, state_dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    if let (Some(c), Some(k)) = (&settings.tls_cert, &settings.tls_key) {
        return Ok((c.clone(), k.clone()));
    }
    let cert = state_dir.join(GENERATED_CERT);
    let key = state_dir.join(GENERATED_KEY);
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let generated = rcgen::generate_simple_self_signed(names).map_err(|e| format!("generating a certificate: {e}"))?;
    crate::config::state::write_private(&key, generated.signing_key.serialize_pem().as_bytes())
        .map_err(|e| format!("{}: {e}", key.display()))?;
    crate::datastore::persist::write_atomic(&cert, generated.cert.pem().as_bytes())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    tracing::info!(cert = %cert.display(), "generated a self-signed RESTCONF certificate for localhost");
    Ok((cert, key))
}

/// Builds the TLS configuration (HTTP/2 and HTTP/1.1 by ALPN).
pub fn load(settings: &RestconfSettings, state_dir: &Path) -> Result<Tls, String> {
    let (cert_file, key_file) = cert_files(settings, state_dir)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_file)
        .map_err(|e| format!("{}: {e}", cert_file.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", cert_file.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_file).map_err(|e| format!("{}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &settings.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
                roots
                    .add(c.map_err(|e| format!("{}: {e}", ca.display()))?)
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            // Clients without a certificate may still use HTTP Basic.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| format!("{}: {e}", cert_file.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut cert_names = HashMap::new();
    for m in &settings.cert_to_name {
        cert_names.insert(m.digest()?, m.name.clone());
    }
    Ok(Tls { config: Arc::new(config), cert_names, cert_file })
}

/// SHA-256 of a certificate (RFC 7589 tls-fingerprint with the sha-256 hash).
pub fn fingerprint(cert: &CertificateDer<'_>) -> [u8; 32] {
    Sha256::digest(cert.as_ref()).into()
}
