//! RFC 7407 / RFC 7589 cert-to-name: which name a verified client certificate stands for.
//! Entries are tried in `id` order; an entry matches when its fingerprint is that of the
//! presented certificate, or of a CA certificate in the chain from it to a configured trust
//! anchor. The first matching entry whose map type yields a name wins; an entry that
//! matches but yields nothing (say `san-dns-name` on a certificate without a dNSName)
//! passes the search on to the next entry (RFC 7407, the cert-to-name list).
//!
//! The certificate is parsed with x509-parser. The CA chain is rebuilt from the presented
//! intermediates and the trust anchors by issuer name *and* signature, so a CA certificate a
//! client merely appends to its chain (without it signing anything in the path) never
//! selects an entry.

use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256, Sha384, Sha512};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// The hash of a fingerprint: the first octet of an RFC 7407 `tls-fingerprint` (IANA TLS
/// HashAlgorithm registry). SHA-1 and MD5 are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlg {
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    fn digest(self, der: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha256 => Sha256::digest(der).to_vec(),
            HashAlg::Sha384 => Sha384::digest(der).to_vec(),
            HashAlg::Sha512 => Sha512::digest(der).to_vec(),
        }
    }
}

/// A certificate fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub alg: HashAlg,
    pub digest: Vec<u8>,
}

impl Fingerprint {
    /// Parses hex octets, colons optional: an RFC 7407 `tls-fingerprint` (hash algorithm
    /// octet 4, 5 or 6, then the digest), or a bare 32-octet SHA-256 digest (the older
    /// bootstrap-file form).
    pub fn parse(text: &str) -> Result<Fingerprint, String> {
        let hex: String = text.chars().filter(|c| *c != ':').collect();
        if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "{:?} is not a fingerprint (hex octets, colons optional)",
                crate::text::truncate(text, 80)
            ));
        }
        let bytes: Vec<u8> =
            (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect();
        if bytes.len() == 32 {
            return Ok(Fingerprint { alg: HashAlg::Sha256, digest: bytes });
        }
        let (alg, len) = match bytes[0] {
            4 => (HashAlg::Sha256, 32),
            5 => (HashAlg::Sha384, 48),
            6 => (HashAlg::Sha512, 64),
            1 | 2 => return Err("MD5 and SHA-1 fingerprints are not accepted; use SHA-256 (04:...)".into()),
            n => return Err(format!("fingerprint hash algorithm {n} is not known (04 = SHA-256)")),
        };
        if bytes.len() != len + 1 {
            return Err(format!("a fingerprint of hash algorithm {} has {len} digest octets", bytes[0]));
        }
        Ok(Fingerprint { alg, digest: bytes[1..].to_vec() })
    }

    /// The RFC 7407 form: `04:` then the SHA-256 digest, upper-case hex with colons.
    pub fn sha256_of(der: &[u8]) -> String {
        let mut out = String::from("04");
        for b in Sha256::digest(der) {
            out.push_str(&format!(":{b:02X}"));
        }
        out
    }

    fn matches(&self, der: &[u8]) -> bool {
        self.alg.digest(der) == self.digest
    }
}

/// How a matching entry derives the name (the identities of ietf-x509-cert-to-name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapType {
    /// The configured name.
    Specified(String),
    /// The first subjectAltName rfc822Name, host part in lower case.
    SanRfc822Name,
    /// The first subjectAltName dNSName, in lower case.
    SanDnsName,
    /// The first subjectAltName iPAddress: dotted quad, or 32 lower-case hex digits.
    SanIpAddress,
    /// The first subjectAltName of those three kinds, mapped as above.
    SanAny,
    /// The subject's CommonName (exactly one).
    CommonName,
}

/// The map-type identities, without prefix.
pub const MAP_TYPES: &[&str] =
    &["specified", "san-rfc822-name", "san-dns-name", "san-ip-address", "san-any", "common-name"];

impl MapType {
    /// From an identity name (`specified`, `x509c2n:san-any`,
    /// `ietf-x509-cert-to-name:common-name`); `name` is needed by `specified` only.
    pub fn from_identity(identity: &str, name: Option<&str>) -> Result<MapType, String> {
        let bare = identity.rsplit(':').next().unwrap_or(identity);
        Ok(match bare {
            "specified" => match name {
                Some(n) if !n.is_empty() => MapType::Specified(n.to_owned()),
                _ => return Err("map type 'specified' needs a name".into()),
            },
            "san-rfc822-name" => MapType::SanRfc822Name,
            "san-dns-name" => MapType::SanDnsName,
            "san-ip-address" => MapType::SanIpAddress,
            "san-any" => MapType::SanAny,
            "common-name" => MapType::CommonName,
            other => {
                return Err(format!(
                    "map type {:?} is not one of {}",
                    crate::text::truncate(other, 64),
                    MAP_TYPES.join(", ")
                ))
            }
        })
    }

    pub fn identity(&self) -> &'static str {
        match self {
            MapType::Specified(_) => "specified",
            MapType::SanRfc822Name => "san-rfc822-name",
            MapType::SanDnsName => "san-dns-name",
            MapType::SanIpAddress => "san-ip-address",
            MapType::SanAny => "san-any",
            MapType::CommonName => "common-name",
        }
    }

    /// The name this map type derives from `cert`, if any.
    fn derive(&self, cert: &X509Certificate<'_>) -> Option<String> {
        let sans = || -> Vec<GeneralName<'_>> {
            match cert.subject_alternative_name() {
                Ok(Some(ext)) => ext.value.general_names.clone(),
                _ => Vec::new(),
            }
        };
        match self {
            MapType::Specified(n) => Some(n.clone()),
            MapType::SanRfc822Name => sans().iter().find_map(rfc822),
            MapType::SanDnsName => sans().iter().find_map(dns),
            MapType::SanIpAddress => sans().iter().find_map(ip),
            MapType::SanAny => sans().iter().find_map(|g| rfc822(g).or_else(|| dns(g)).or_else(|| ip(g))),
            MapType::CommonName => {
                let mut cns = cert.subject().iter_common_name();
                let first = cns.next()?.as_str().ok()?.to_owned();
                // Two CommonNames: which one the CA meant is not ours to guess.
                cns.next().is_none().then_some(first)
            }
        }
    }
}

fn rfc822(g: &GeneralName<'_>) -> Option<String> {
    let GeneralName::RFC822Name(m) = g else { return None };
    let (local, host) = m.rsplit_once('@')?;
    Some(format!("{local}@{}", host.to_ascii_lowercase()))
}

fn dns(g: &GeneralName<'_>) -> Option<String> {
    let GeneralName::DNSName(d) = g else { return None };
    Some(d.to_ascii_lowercase())
}

fn ip(g: &GeneralName<'_>) -> Option<String> {
    let GeneralName::IPAddress(b) = g else { return None };
    match b.len() {
        4 => Some(format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])),
        16 => Some(b.iter().map(|x| format!("{x:02x}")).collect()),
        _ => None,
    }
}

/// One cert-to-name entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: u32,
    pub fingerprint: Fingerprint,
    pub map: MapType,
}

/// What a certificate maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub name: String,
    /// The entry that matched.
    pub id: u32,
    pub map_type: &'static str,
}

/// The cert-to-name list, in search order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertToName {
    entries: Vec<Entry>,
}

/// How long a CA chain is followed (RFC 5280 paths beyond this are not seen in practice).
const MAX_PATH: usize = 8;

impl CertToName {
    /// The list sorted by id; two entries with one id are refused.
    pub fn new(mut entries: Vec<Entry>) -> Result<CertToName, String> {
        entries.sort_by_key(|e| e.id);
        if let Some(w) = entries.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(format!("cert-to-name id {} is used twice", w[0].id));
        }
        Ok(CertToName { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The name of a client whose chain (`presented`: end entity first, then the
    /// intermediates it sent) the TLS verifier accepted against `anchors`.
    pub fn map(&self, presented: &[CertificateDer<'_>], anchors: &[CertificateDer<'_>]) -> Option<Mapped> {
        let ee_der = presented.first()?;
        let Ok((_, ee)) = X509Certificate::from_der(ee_der.as_ref()) else { return None };
        let mut path: Option<Vec<&[u8]>> = None;
        for e in &self.entries {
            let hit = e.fingerprint.matches(ee_der.as_ref())
                || path
                    .get_or_insert_with(|| ca_path(&ee, &presented[1..], anchors))
                    .iter()
                    .any(|ca| e.fingerprint.matches(ca));
            if !hit {
                continue;
            }
            if let Some(name) = e.map.derive(&ee) {
                return Some(Mapped { name, id: e.id, map_type: e.map.identity() });
            }
        }
        None
    }
}

/// The CA certificates (DER) from `ee`'s issuer up to a trust anchor, each found by subject
/// name and checked to have signed the one below. Empty when no anchor is reached: then
/// only the end entity's own fingerprint can match.
fn ca_path<'c>(
    ee: &X509Certificate<'_>,
    intermediates: &'c [CertificateDer<'_>],
    anchors: &'c [CertificateDer<'_>],
) -> Vec<&'c [u8]> {
    let parsed = |ders: &'c [CertificateDer<'_>]| -> Vec<(&'c [u8], X509Certificate<'c>)> {
        ders.iter().filter_map(|d| X509Certificate::from_der(d.as_ref()).ok().map(|(_, c)| (d.as_ref(), c))).collect()
    };
    let inter = parsed(intermediates);
    let roots = parsed(anchors);
    let mut out: Vec<&'c [u8]> = Vec::new();
    let mut child: &X509Certificate<'_> = ee;
    for _ in 0..MAX_PATH {
        let signed = |ca: &X509Certificate<'_>| {
            ca.subject().as_raw() == child.issuer().as_raw() && child.verify_signature(Some(ca.public_key())).is_ok()
        };
        if let Some((der, _)) = roots.iter().find(|(_, c)| signed(c)) {
            out.push(der);
            return out;
        }
        let Some((der, c)) = inter.iter().find(|(d, c)| !out.contains(d) && signed(c)) else {
            break;
        };
        out.push(der);
        child = c;
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pki {
        ca: rcgen::Certificate,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    fn ca(name: &str) -> Pki {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = p.self_signed(&key).unwrap();
        Pki { ca, issuer: rcgen::Issuer::new(p, key) }
    }

    fn leaf(pki: &Pki, cn: Option<&str>, sans: Vec<rcgen::SanType>) -> rcgen::Certificate {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.subject_alt_names = sans;
        p.signed_by(&key, &pki.issuer).unwrap()
    }

    fn entry(id: u32, der: &[u8], map: MapType) -> Entry {
        Entry { id, fingerprint: Fingerprint::parse(&Fingerprint::sha256_of(der)).unwrap(), map }
    }

    fn ders(c: &[&rcgen::Certificate]) -> Vec<CertificateDer<'static>> {
        c.iter().map(|c| c.der().clone()).collect()
    }

    #[test]
    fn rfc7589_fingerprints_parse_in_both_forms_and_weak_hashes_are_refused() {
        let bare = "AB".repeat(32);
        assert_eq!(Fingerprint::parse(&bare).unwrap().alg, HashAlg::Sha256);
        let tls = format!("04:{}", ["ab"; 32].join(":"));
        assert_eq!(Fingerprint::parse(&tls).unwrap(), Fingerprint::parse(&bare).unwrap());
        assert!(Fingerprint::parse(&format!("02:{}", ["ab"; 20].join(":"))).unwrap_err().contains("SHA-1"));
        assert!(Fingerprint::parse("04:ab").is_err());
        assert!(Fingerprint::parse("zz").is_err());
        assert!(Fingerprint::parse("").is_err());
    }

    #[test]
    fn rfc7589_each_map_type_derives_its_name() {
        let pki = ca("Test CA");
        let c = leaf(
            &pki,
            Some("sci-a"),
            vec![
                rcgen::SanType::IpAddress("192.0.2.7".parse().unwrap()),
                rcgen::SanType::DnsName("SCI-A.Example.NET".try_into().unwrap()),
                rcgen::SanType::Rfc822Name("Ops@Example.COM".try_into().unwrap()),
            ],
        );
        let chain = ders(&[&c]);
        let anchors = ders(&[&pki.ca]);
        let name =
            |m: MapType| CertToName::new(vec![entry(1, c.der(), m)]).unwrap().map(&chain, &anchors).map(|m| m.name);
        assert_eq!(name(MapType::Specified("x".into())).as_deref(), Some("x"));
        assert_eq!(name(MapType::SanRfc822Name).as_deref(), Some("Ops@example.com"));
        assert_eq!(name(MapType::SanDnsName).as_deref(), Some("sci-a.example.net"));
        assert_eq!(name(MapType::SanIpAddress).as_deref(), Some("192.0.2.7"));
        // san-any: the first SAN of the three kinds in certificate order.
        assert_eq!(name(MapType::SanAny).as_deref(), Some("192.0.2.7"));
        assert_eq!(name(MapType::CommonName).as_deref(), Some("sci-a"));
        let v6 = leaf(&pki, None, vec![rcgen::SanType::IpAddress("2001:db8::1".parse().unwrap())]);
        let m = CertToName::new(vec![entry(1, v6.der(), MapType::SanIpAddress)]).unwrap();
        assert_eq!(m.map(&ders(&[&v6]), &anchors).unwrap().name, "20010db8000000000000000000000001");
    }

    #[test]
    fn rfc7589_ca_fingerprint_matches_and_an_empty_mapping_falls_through() {
        let pki = ca("Test CA");
        let c = leaf(&pki, Some("sci-b"), vec![]);
        let anchors = ders(&[&pki.ca]);
        let list = CertToName::new(vec![
            // Matches (the CA is in the chain) but the certificate has no dNSName: next.
            entry(10, pki.ca.der(), MapType::SanDnsName),
            entry(20, pki.ca.der(), MapType::CommonName),
        ])
        .unwrap();
        let m = list.map(&ders(&[&c]), &anchors).unwrap();
        assert_eq!((m.name.as_str(), m.id, m.map_type), ("sci-b", 20, "common-name"));
        // Lower ids first, whatever the configured order.
        let list = CertToName::new(vec![
            entry(9, pki.ca.der(), MapType::Specified("late".into())),
            entry(2, c.der(), MapType::Specified("early".into())),
        ])
        .unwrap();
        assert_eq!(list.map(&ders(&[&c]), &anchors).unwrap().name, "early");
        assert!(
            CertToName::new(vec![entry(1, c.der(), MapType::CommonName), entry(1, c.der(), MapType::SanAny)]).is_err()
        );
    }

    #[test]
    fn rfc7589_a_ca_appended_to_the_chain_without_signing_it_selects_nothing() {
        let good = ca("Good CA");
        let other = ca("Other CA");
        let c = leaf(&other, Some("intruder"), vec![]);
        let list = CertToName::new(vec![entry(1, good.ca.der(), MapType::CommonName)]).unwrap();
        // The client sends Good CA's certificate along; it signed nothing in the path.
        let chain = ders(&[&c, &good.ca]);
        assert_eq!(list.map(&chain, &ders(&[&good.ca, &other.ca])), None);
        // Two CommonNames are ambiguous: no name.
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, "a");
        let one = p.signed_by(&key, &good.issuer).unwrap();
        let list = CertToName::new(vec![entry(1, good.ca.der(), MapType::CommonName)]).unwrap();
        assert_eq!(list.map(&ders(&[&one]), &ders(&[&good.ca])).unwrap().name, "a");
    }

    #[test]
    fn rfc7589_intermediate_ca_in_the_path_matches() {
        let root = ca("Root");
        let ikey = rcgen::KeyPair::generate().unwrap();
        let mut ip = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ip.distinguished_name.push(rcgen::DnType::CommonName, "Issuing");
        ip.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let inter = ip.clone().signed_by(&ikey, &root.issuer).unwrap();
        let issuing = Pki { ca: inter, issuer: rcgen::Issuer::new(ip, ikey) };
        let c = leaf(&issuing, Some("sci-c"), vec![]);
        let chain = ders(&[&c, &issuing.ca]);
        let anchors = ders(&[&root.ca]);
        for fp in [root.ca.der(), issuing.ca.der()] {
            let list = CertToName::new(vec![entry(1, fp, MapType::CommonName)]).unwrap();
            assert_eq!(list.map(&chain, &anchors).unwrap().name, "sci-c");
        }
        // Without the intermediate no anchor is reached: only the end entity's own entry.
        let list = CertToName::new(vec![entry(1, root.ca.der(), MapType::CommonName)]).unwrap();
        assert_eq!(list.map(&ders(&[&c]), &anchors), None);
    }
}
