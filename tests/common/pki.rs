//! A test PKI for the TLS tests (a CA and the leaf certificates it issues, as files). In
//! `common` for the tests that use it; `#[path = "common/pki.rs"] mod pki;` for the others.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A test PKI in a directory: a CA (`ca.pem`) and the leaf certificates it issues, each
/// written as `NAME.pem` and `NAME.key` (PKCS#8). Paths are returned as strings, as the
/// configurations take them.
pub struct TestPki {
    dir: PathBuf,
    pub ca: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestPki {
    pub fn new(dir: &Path, name: &str) -> TestPki {
        let (ca, issuer) = test_ca(name);
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        TestPki { dir: dir.to_owned(), ca, issuer }
    }

    /// `dir/file` as a string.
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// A leaf certificate for `names` (DNS names or IP addresses), written as `file.pem` and
    /// `file.key`; returns their paths. The certificate itself too, for fingerprints.
    pub fn leaf(&self, file: &str, names: &[&str]) -> (String, String, rcgen::Certificate) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = rcgen::CertificateParams::new(names).unwrap().signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (self.path(&format!("{file}.pem")), self.path(&format!("{file}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k, cert)
    }

    /// An unrelated CA (trusts nothing of this PKI), written as `file`; returns its path.
    pub fn other_ca(&self, file: &str) -> String {
        let p = self.path(file);
        std::fs::write(&p, test_ca("another test CA").0.pem()).unwrap();
        p
    }
}

fn test_ca(name: &str) -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert, rcgen::Issuer::new(params, key))
}
