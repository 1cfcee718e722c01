//! A TLS server container of the YANG model as [`TlsSettings`]: the leaves the SCI
//! listener (collection/http/tls) and NETCONF over TLS (netconf-server/tls) share
//! (certificate-file, private-key-file, client-ca-file, client-auth, crl-file) and the
//! RFC 7407 `cert-to-name` list of ietf-x509-cert-to-name. One reader for every listener,
//! so one configuration means the same at each.

use std::path::PathBuf;

use yang2::data::{Data, DataTree};

use super::cert_to_name::{Entry, Fingerprint, MapType};
use super::server::{ClientAuth, TlsSettings};

pub use crate::datastore::tree::leaf;

/// The settings of the container at `base` (a data path). `client-auth` absent means
/// optional; the caller decides what else applies (NETCONF over TLS always requires a
/// certificate). Not checked: see [`TlsSettings::check`].
pub fn settings(t: &DataTree<'static>, base: &str) -> Result<TlsSettings, String> {
    let path = |l: &str| leaf(t, &format!("{base}/{l}")).map(PathBuf::from);
    let mut s = TlsSettings {
        cert_file: path("certificate-file"),
        key_file: path("private-key-file"),
        client_ca: path("client-ca-file"),
        client_auth: match leaf(t, &format!("{base}/client-auth")).as_deref() {
            Some("required") => ClientAuth::Required,
            _ => ClientAuth::Optional,
        },
        ..TlsSettings::default()
    };
    if let Ok(set) = t.find_xpath(&format!("{base}/crl-file")) {
        s.crl_files = set.filter_map(|n| n.value_canonical()).map(PathBuf::from).collect();
    }
    s.cert_to_name = cert_to_name(t, &format!("{base}/cert-to-name"))?;
    Ok(s)
}

/// The entries of a `cert-to-name` list (RFC 7407) at `list` (a data path).
pub fn cert_to_name(t: &DataTree<'static>, list: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let Ok(set) = t.find_xpath(list) else { return Ok(out) };
    for e in set {
        let (mut id, mut fp, mut map, mut name) = (None, None, None, None);
        for c in e.children() {
            let v = c.value_canonical();
            match c.schema().name() {
                "id" => id = v.and_then(|v| v.parse::<u32>().ok()),
                "fingerprint" => fp = v,
                "map-type" => map = v,
                "name" => name = v,
                _ => {}
            }
        }
        let (Some(id), Some(fp), Some(map)) = (id, fp, map) else {
            return Err("a cert-to-name entry lacks id, fingerprint or map-type".into());
        };
        out.push(Entry {
            id,
            fingerprint: Fingerprint::parse(&fp).map_err(|e| format!("cert-to-name {id}: {e}"))?,
            map: MapType::from_identity(&map, name.as_deref()).map_err(|e| format!("cert-to-name {id}: {e}"))?,
        });
    }
    Ok(out)
}
