//! The bootstrap configuration: what the agent needs before any datastore exists (listen
//! addresses, state directory, users). Everything has an embedded default, so `cats-sma
//! run` works with no file at all; a TOML file (see `docs/configuration.md`) overrides it.
//! Agent behaviour (SCIs, policies, C-PSes) is configured through the datastores instead.

pub mod cli;
pub mod message_limits;
pub mod peer_limits;
pub mod state;
pub mod status;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Default NETCONF-over-SSH port. IANA's 830 needs root; 8830 is the unprivileged default.
pub const DEFAULT_NETCONF_PORT: u16 = 8830;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Bootstrap {
    /// Where the host key, credentials and the startup datastore live.
    pub state_dir: Option<PathBuf>,
    pub netconf: NetconfSettings,
    /// Users besides the generated admin.
    pub users: Vec<UserEntry>,
    /// The SCI collection HTTP listen address, overriding the datastore's collection/http
    /// (which is otherwise authoritative and can be changed at run time).
    pub sci_listen: Option<SocketAddr>,
    /// Serve SCI collection over plain HTTP whatever collection/http/tls/enabled says (for
    /// tests and labs; a warning is logged at every bind). Default false: TLS.
    pub sci_plain_http: bool,
    /// The NACM recovery user (RFC 8341 section 3.2): not subject to access control, so a
    /// broken NACM configuration can always be repaired. Defaults to the generated admin.
    pub recovery_user: Option<String>,
    /// RESTCONF (RFC 8040) over HTTPS.
    pub restconf: RestconfSettings,
    /// What SCIs, brokers, pull targets and C-PSes can cost (`[peer_limits]`).
    pub peer_limits: peer_limits::PeerLimits,
    /// What a peer may cost before it authenticates, per listener (`[limits.ssh]`,
    /// `[limits.restconf]`, `[limits.sci_http]`), and the password-check pool.
    pub limits: crate::mgmt::auth_limits::LimitsSettings,
    /// What one filter may cost (XPath / subtree filters, YANG-Push selections,
    /// notification filters): see docs/security.md, "Filters and access control".
    pub filters: crate::mgmt::filter::FilterLimits,
    /// The audit trail (`audit.log` in the state directory).
    pub audit: crate::mgmt::audit::AuditSettings,
    /// Structural limits on every received management message.
    pub message_limits: message_limits::MessageLimits,
    /// How reports to C-PSes are signed (`[cps]`).
    pub cps: CpsSettings,
    /// Recording what goes into the engine, for `cats-sma replay` (`[record]`).
    pub record: crate::record::RecordSettings,
}

/// `[cps]`: the C-SMA's report signing key (seed 004, Metric Integrity).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CpsSettings {
    /// `ed25519` (JWS EdDSA, the default) or `ecdsa-p256` (JWS ES256). Each has its own key
    /// file in the state directory, generated on the first start that needs it.
    pub signing_algorithm: crate::cps::signing::Algorithm,
}

/// Default RESTCONF port (IANA's 443 needs root).
pub const DEFAULT_RESTCONF_PORT: u16 = 8443;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RestconfSettings {
    pub enabled: bool,
    /// Listen addresses; loopback only unless the operator says otherwise.
    pub listen: Vec<SocketAddr>,
    /// PEM certificate chain and private key of the server. When neither is given, a
    /// self-signed certificate for localhost is generated into the state directory on the
    /// first start and reused afterwards.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// PEM file of the CAs whose client certificates are accepted (RFC 7589 style client
    /// authentication); without it only HTTP Basic authentication is possible.
    pub client_ca: Option<PathBuf>,
    /// CRL files (PEM or DER) of those CAs: a revoked client certificate is refused at the
    /// handshake. Re-read when a file changes (docs/security.md, "TLS, client certificates
    /// and CRLs").
    pub client_crl: Vec<PathBuf>,
    /// Maps a verified client certificate to a user (RFC 7589 cert-to-name: by the
    /// fingerprint of the certificate or of a CA in its chain, then a map type).
    pub cert_to_name: Vec<CertToName>,
    /// Serve plain HTTP instead of HTTPS. For tests only: Basic credentials then travel in
    /// clear, so the agent refuses it on anything but a loopback address.
    pub plain_http_for_tests: bool,
    /// Largest accepted request body in bytes.
    pub max_body_size: usize,
    /// Seconds an RFC 8650 subscription established over RESTCONF waits for the GET of
    /// its URI before it is deleted.
    pub subscription_attach_timeout_secs: u64,
}

impl Default for RestconfSettings {
    fn default() -> Self {
        RestconfSettings {
            enabled: true,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], DEFAULT_RESTCONF_PORT))],
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            client_crl: Vec::new(),
            cert_to_name: Vec::new(),
            plain_http_for_tests: false,
            max_body_size: 64 * 1024 * 1024,
            subscription_attach_timeout_secs: 30,
        }
    }
}

/// One cert-to-name entry (RFC 7407 / RFC 7589): the fingerprint of a client certificate
/// or of a CA certificate in its chain (hex, colons optional; SHA-256, or `04:` + SHA-256
/// as in RFC 7407), the map type (`specified` by default, `san-rfc822-name`,
/// `san-dns-name`, `san-ip-address`, `san-any`, `common-name`) and, for `specified`, the
/// user. Entries are searched by `id` (default: the position in the file, from 1).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CertToName {
    pub id: Option<u32>,
    pub fingerprint: String,
    #[serde(default = "specified")]
    pub map_type: String,
    pub name: Option<String>,
}

fn specified() -> String {
    "specified".into()
}

impl CertToName {
    /// The entry as the TLS module uses it (`position` from 0 gives the default id).
    pub fn entry(&self, position: usize) -> Result<crate::tls::Entry, String> {
        let map = crate::tls::MapType::from_identity(&self.map_type, self.name.as_deref())?;
        if self.name.is_some() && !matches!(map, crate::tls::MapType::Specified(_)) {
            return Err(format!("name is for map_type \"specified\", not {:?}", self.map_type));
        }
        Ok(crate::tls::Entry {
            id: self.id.unwrap_or(position as u32 + 1),
            fingerprint: crate::tls::Fingerprint::parse(&self.fingerprint)?,
            map,
        })
    }

    /// A whole list, checked (ids unique).
    pub fn entries(list: &[CertToName]) -> Result<Vec<crate::tls::Entry>, String> {
        let v = list.iter().enumerate().map(|(i, m)| m.entry(i)).collect::<Result<Vec<_>, _>>()?;
        crate::tls::CertToName::new(v.clone())?;
        Ok(v)
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NetconfSettings {
    /// Listen addresses; loopback only unless the operator says otherwise.
    pub listen: Vec<SocketAddr>,
    pub max_sessions: usize,
    /// Seconds without any message before a session is closed (0 = never).
    pub idle_timeout: u64,
    /// Largest accepted NETCONF message in bytes; larger ones are answered with an error.
    pub max_message_size: usize,
}

impl Default for NetconfSettings {
    fn default() -> Self {
        NetconfSettings {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], DEFAULT_NETCONF_PORT))],
            max_sessions: 256,
            idle_timeout: 3600,
            max_message_size: 64 * 1024 * 1024,
        }
    }
}

/// A user of the management interfaces.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    /// A PHC-format argon2 hash (`cats-sma hash-password` prints one); never a clear text.
    pub password_hash: Option<String>,
    /// OpenSSH public keys (`ssh-ed25519 AAAA… comment`).
    #[serde(default)]
    pub authorized_keys: Vec<String>,
}

/// A bootstrap file that could not be used, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Bootstrap {
    /// Reads and checks a bootstrap file.
    pub fn load(path: &Path) -> Result<Bootstrap, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let b: Bootstrap = toml::from_str(&text)
            .map_err(|e| ConfigError::Invalid { path: path.to_owned(), message: e.to_string() })?;
        b.check().map_err(|message| ConfigError::Invalid { path: path.to_owned(), message })?;
        Ok(b)
    }

    /// Semantic checks beyond the TOML schema.
    pub fn check(&self) -> Result<(), String> {
        if self.netconf.listen.is_empty() {
            return Err("netconf.listen: at least one address is needed".into());
        }
        if self.netconf.max_sessions == 0 {
            return Err("netconf.max_sessions must be at least 1".into());
        }
        if self.netconf.max_message_size < 4096 {
            return Err("netconf.max_message_size must be at least 4096 bytes".into());
        }
        self.message_limits.check()?;
        let r = &self.restconf;
        if r.enabled {
            if r.listen.is_empty() {
                return Err("restconf.listen: at least one address is needed (or enabled = false)".into());
            }
            if r.plain_http_for_tests && r.listen.iter().any(|a| !a.ip().is_loopback()) {
                return Err("restconf.plain_http_for_tests is only allowed on loopback addresses".into());
            }
            if r.tls_cert.is_some() != r.tls_key.is_some() {
                return Err("restconf.tls_cert and restconf.tls_key go together".into());
            }
            if r.max_body_size < 4096 {
                return Err("restconf.max_body_size must be at least 4096 bytes".into());
            }
            if r.subscription_attach_timeout_secs == 0 {
                return Err("restconf.subscription_attach_timeout_secs must be at least 1".into());
            }
            if !r.cert_to_name.is_empty() && r.client_ca.is_none() {
                return Err("restconf.cert_to_name needs restconf.client_ca".into());
            }
            if !r.client_crl.is_empty() && r.client_ca.is_none() {
                return Err("restconf.client_crl needs restconf.client_ca".into());
            }
            CertToName::entries(&r.cert_to_name).map_err(|e| format!("restconf.cert_to_name: {e}"))?;
        }
        self.peer_limits.check()?;
        self.limits.check()?;
        self.audit.check()?;
        self.record.check()?;
        let mut seen = std::collections::HashSet::new();
        for u in &self.users {
            if u.name.is_empty() || u.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!("users: invalid user name {:?}", u.name));
            }
            if !seen.insert(&u.name) {
                return Err(format!("users: {} is listed twice", u.name));
            }
            if u.password_hash.is_none() && u.authorized_keys.is_empty() {
                return Err(format!("users: {} has neither a password_hash nor authorized_keys", u.name));
            }
            if let Some(h) = &u.password_hash {
                crate::mgmt::users::check_hash(h).map_err(|e| format!("users: {}: password_hash: {e}", u.name))?;
            }
            for k in &u.authorized_keys {
                crate::mgmt::users::parse_authorized_key(k)
                    .map_err(|e| format!("users: {}: authorized_keys: {e}", u.name))?;
            }
        }
        Ok(())
    }

    /// The state directory: configured, else /var/lib/cats-sma for root, else
    /// $XDG_STATE_HOME/cats-sma (~/.local/state/cats-sma).
    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.state_dir {
            return d.clone();
        }
        if is_root() {
            return PathBuf::from("/var/lib/cats-sma");
        }
        if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
            return PathBuf::from(x).join("cats-sma");
        }
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/cats-sma"),
            None => PathBuf::from("cats-sma-state"),
        }
    }
}

fn is_root() -> bool {
    // The effective uid decides where system state goes; /proc/self/status avoids libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_embedded_default() {
        let b: Bootstrap = toml::from_str("").unwrap();
        assert_eq!(b, Bootstrap::default());
        assert!(b.netconf.listen.iter().all(|a| a.ip().is_loopback()));
        assert!(b.restconf.listen.iter().all(|a| a.ip().is_loopback()));
        assert!(!b.restconf.plain_http_for_tests);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<Bootstrap>("nosuch = 1").is_err());
        let b: Bootstrap = toml::from_str("[netconf]\nlisten = []").unwrap();
        assert!(b.check().is_err());
        let b: Bootstrap = toml::from_str("[[users]]\nname = \"bob\"").unwrap();
        assert!(b.check().unwrap_err().contains("neither"));
        let b: Bootstrap = toml::from_str("[[users]]\nname = \"bob\"\npassword_hash = \"secret\"").unwrap();
        assert!(b.check().unwrap_err().contains("password_hash"));
        let b: Bootstrap =
            toml::from_str("[restconf]\nlisten = [\"0.0.0.0:8443\"]\nplain_http_for_tests = true").unwrap();
        assert!(b.check().unwrap_err().contains("loopback"));
        let b: Bootstrap = toml::from_str(
            "[restconf]\nclient_ca = \"ca.pem\"\n[[restconf.cert_to_name]]\nfingerprint = \"ab\"\nname = \"x\"",
        )
        .unwrap();
        assert!(b.check().unwrap_err().contains("fingerprint"));
        // RFC 7589 map types: `specified` by default (older files keep working), a name only
        // with it, the other types by name.
        let fp = "AB".repeat(32);
        let b: Bootstrap = toml::from_str(&format!(
            "[restconf]\nclient_ca = \"ca.pem\"\nclient_crl = [\"ca.crl\"]\n\
             [[restconf.cert_to_name]]\nfingerprint = \"{fp}\"\nname = \"x\"\n\
             [[restconf.cert_to_name]]\nfingerprint = \"04:{fp}\"\nmap_type = \"common-name\""
        ))
        .unwrap();
        b.check().unwrap();
        let e = CertToName::entries(&b.restconf.cert_to_name).unwrap();
        assert_eq!((e[0].id, e[1].id), (1, 2));
        assert_eq!(e[1].map, crate::tls::MapType::CommonName);
        for bad in ["map_type = \"san-any\"\nname = \"x\"", "map_type = \"specified\"", "map_type = \"sn\""] {
            let b: Bootstrap = toml::from_str(&format!(
                "[restconf]\nclient_ca = \"ca.pem\"\n[[restconf.cert_to_name]]\nfingerprint = \"{fp}\"\n{bad}"
            ))
            .unwrap();
            assert!(b.check().unwrap_err().contains("cert_to_name"), "{bad}");
        }
        let b: Bootstrap = toml::from_str("[restconf]\nclient_crl = [\"ca.crl\"]").unwrap();
        assert!(b.check().unwrap_err().contains("client_ca"));
        let b: Bootstrap = toml::from_str("[limits.ssh]\nmax_pending = 0").unwrap();
        assert!(b.check().unwrap_err().contains("limits.ssh.max_pending"));
        let b: Bootstrap = toml::from_str("[limits]\npassword_workers = 0").unwrap();
        assert!(b.check().unwrap_err().contains("limits.password_workers"));
        assert!(toml::from_str::<Bootstrap>("[limits.ssh]\nmax_pendin = 3").is_err(), "typo refused");
        let b: Bootstrap = toml::from_str("[limits.restconf]\nauth_timeout_secs = 5").unwrap();
        assert_eq!(b.limits.restconf.auth_timeout_secs, 5);
        assert_eq!(b.limits.restconf.max_pending, 256, "the rest keeps its default");
    }
}
