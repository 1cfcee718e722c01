//! Certificate revocation lists (RFC 5280 section 5) from files, PEM or DER, for rustls'
//! WebPkiClientVerifier (`with_crls`), which checks them at every handshake. Each file is
//! parsed here too, so that an unusable file is refused with its name and reason, and the
//! operational state can say what is loaded (issuer, this/next update, entries).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateRevocationListDer;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

/// Largest CRL file read (a CA revoking a million certificates is ~40 MB; beyond 64 MiB the
/// file is refused rather than held in memory).
pub const MAX_CRL_FILE: u64 = 64 * 1024 * 1024;

/// What one loaded CRL says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrlInfo {
    pub file: PathBuf,
    pub issuer: String,
    pub this_update: Option<DateTime<Utc>>,
    pub next_update: Option<DateTime<Utc>>,
    pub revoked: usize,
}

fn time(t: x509_parser::time::ASN1Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.timestamp(), 0)
}

/// Reads the CRLs in `file` (a DER CRL, or one or more PEM `X509 CRL` blocks).
pub fn load(file: &Path) -> Result<(Vec<CertificateRevocationListDer<'static>>, Vec<CrlInfo>), String> {
    let shown = file.display();
    let meta = std::fs::metadata(file).map_err(|e| format!("CRL {shown}: {e}"))?;
    if meta.len() > MAX_CRL_FILE {
        return Err(format!("CRL {shown}: larger than {MAX_CRL_FILE} bytes"));
    }
    let bytes = std::fs::read(file).map_err(|e| format!("CRL {shown}: {e}"))?;
    let ders: Vec<CertificateRevocationListDer<'static>> = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        CertificateRevocationListDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("CRL {shown}: {e}"))?
    } else {
        vec![CertificateRevocationListDer::from(bytes)]
    };
    if ders.is_empty() {
        return Err(format!("CRL {shown}: no X509 CRL in the file"));
    }
    let mut infos = Vec::new();
    for d in &ders {
        let (rest, crl) =
            CertificateRevocationList::from_der(d.as_ref()).map_err(|e| format!("CRL {shown}: not a CRL: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("CRL {shown}: {} bytes after the CRL", rest.len()));
        }
        infos.push(CrlInfo {
            file: file.to_owned(),
            issuer: crl.issuer().to_string(),
            this_update: time(crl.last_update()),
            next_update: crl.next_update().and_then(time),
            revoked: crl.iter_revoked_certificates().count(),
        });
    }
    Ok((ders, infos))
}
