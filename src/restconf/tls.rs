//! HTTPS for RESTCONF (RFC 8040 section 2: TLS is mandatory), through the shared server
//! TLS of [`crate::tls`]: the server certificate (configured, or self-signed and generated
//! once into the state directory), optional client certificates verified against a
//! configured CA and its CRLs (reloaded when a file changes), and RFC 7589 cert-to-name
//! (a verified certificate names the user).

use std::path::Path;
use std::sync::Arc;

use crate::config::{CertToName, RestconfSettings};
use crate::tls::{ClientAuth, ServerTls, TlsSettings};

pub const GENERATED_CERT: &str = crate::tls::server::RESTCONF.generated_cert;
pub const GENERATED_KEY: &str = crate::tls::server::RESTCONF.generated_key;

/// The `[restconf]` TLS keys as the shared module takes them. Client certificates stay
/// optional: a client without one authenticates with HTTP Basic.
pub fn settings(s: &RestconfSettings) -> Result<TlsSettings, String> {
    Ok(TlsSettings {
        cert_file: s.tls_cert.clone(),
        key_file: s.tls_key.clone(),
        client_ca: s.client_ca.clone(),
        client_auth: ClientAuth::Optional,
        crl_files: s.client_crl.clone(),
        cert_to_name: CertToName::entries(&s.cert_to_name).map_err(|e| format!("restconf.cert_to_name: {e}"))?,
    })
}

/// Builds the TLS configuration (HTTP/2 and HTTP/1.1 by ALPN) and starts watching its files.
pub fn load(s: &RestconfSettings, state_dir: &Path) -> Result<Arc<ServerTls>, String> {
    let tls = ServerTls::start(crate::tls::server::RESTCONF, settings(s)?, state_dir)?;
    tls.spawn_reloader();
    Ok(tls)
}
