//! What goes on the BGP wire, built with NetGauze's message types (pure): the OPEN we send,
//! the BGP-LS Prefix NLRI of a service, its attribute TLVs, and the UPDATEs that announce or
//! withdraw it. `decode_attribute` / `decode_tlvs` read the CATS TLVs back (the reference
//! C-PS's BGP-LS channel, the tests and the fuzz target).
//!
//! Layout (docs/routing-protocols.md):
//! - NLRI: IPv4 or IPv6 Topology Prefix NLRI (RFC 9552 section 5.2.3), Protocol-ID and
//!   Identifier as configured, Local Node Descriptors = Autonomous System (512) and IGP
//!   Router-ID (515, the 4-octet router-id), Prefix Descriptor = IP Reachability Information
//!   (265) with the service's prefix.
//! - Attribute: the CATS TLVs, ascending by type, either each at the top level of the BGP-LS
//!   attribute (`private-tlvs`) or all inside one Opaque Prefix Attribute TLV (1157).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use netgauze_bgp_pkt::capabilities::{BgpCapability, FourOctetAsCapability, MultiProtocolExtensionsCapability};
use netgauze_bgp_pkt::iana::BgpLsProtocolId;
use netgauze_bgp_pkt::nlri::{
    BgpLsLocalNodeDescriptors, BgpLsNlri, BgpLsNlriIpPrefix, BgpLsNlriValue, BgpLsNodeDescriptorSubTlv,
    BgpLsNodeDescriptors, BgpLsPrefixDescriptor, IpReachabilityInformationData,
};
use netgauze_bgp_pkt::notification::BgpNotificationMessage;
use netgauze_bgp_pkt::open::{BgpOpenMessage, BgpOpenMessageParameter};
use netgauze_bgp_pkt::path_attribute::{
    As4PathSegment, AsPath, AsPathSegmentType, BgpLsAttribute, BgpLsAttributeValue, LocalPreference, MpReach,
    MpUnreach, Origin, PathAttribute, PathAttributeValue,
};
use netgauze_bgp_pkt::update::BgpUpdateMessage;
use netgauze_bgp_pkt::BgpMessage;
use netgauze_iana::address_family::AddressType;

use crate::engine::model::{Health, SiteMetrics};

/// AS_TRANS (RFC 6793): the 2-octet "My AS" of a speaker whose AS does not fit.
pub const AS_TRANS: u16 = 23456;
/// The Opaque Prefix Attribute TLV (RFC 9552 section 5.3.3.6).
pub const OPAQUE_PREFIX_ATTRIBUTE: u16 = 1157;
/// At most this many NLRIs per withdrawal UPDATE: each is under 80 octets, so a message
/// stays well below the 4 096-octet limit of RFC 4271.
pub const WITHDRAW_BATCH: usize = 40;

/// The TLV types of the CATS metrics (YANG `code-points`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodePoints {
    pub gas: u16,
    pub computing_time: u16,
    pub cs_id: u16,
    pub health: u16,
    pub sci_count: u16,
    pub cost: u16,
    pub reputation: u16,
    pub security_label: u16,
    pub site_id: u16,
    pub generation: u16,
}

impl Default for CodePoints {
    /// The YANG defaults: the private-use range of RFC 9552 section 7.4.
    fn default() -> Self {
        CodePoints {
            gas: 65000,
            computing_time: 65001,
            cs_id: 65002,
            health: 65003,
            sci_count: 65004,
            cost: 65005,
            reputation: 65006,
            security_label: 65007,
            site_id: 65008,
            generation: 65009,
        }
    }
}

impl CodePoints {
    pub fn named(&self) -> [(&'static str, u16); 10] {
        [
            ("gas", self.gas),
            ("computing-time", self.computing_time),
            ("cs-id", self.cs_id),
            ("health", self.health),
            ("sci-count", self.sci_count),
            ("cost", self.cost),
            ("reputation", self.reputation),
            ("security-label", self.security_label),
            ("site-id", self.site_id),
            ("generation", self.generation),
        ]
    }

    /// Two metrics on one type could not be told apart; a type that RFC 9552 or the
    /// encoding already uses would be misread by every receiver.
    pub fn check(&self, encoding: Encoding) -> Result<(), String> {
        let named = self.named();
        for (i, (a, x)) in named.iter().enumerate() {
            if let Some((b, _)) = named[i + 1..].iter().find(|(_, y)| y == x) {
                return Err(format!("routing/bgp-ls/code-points: '{a}' and '{b}' are both {x}"));
            }
            if encoding == Encoding::PrivateTlvs && (256..=1279).contains(x) {
                return Err(format!(
                    "routing/bgp-ls/code-points: '{a}' = {x} is in the range RFC 9552 assigns to node, link and \
                     prefix descriptors and attributes (256..1279)"
                ));
            }
        }
        Ok(())
    }
}

/// YANG `encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    PrivateTlvs,
    OpaquePrefix,
}

/// What every NLRI of this speaker shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NlriParams {
    pub protocol: BgpLsProtocolId,
    pub identifier: u64,
    pub local_as: u32,
    pub router_id: Ipv4Addr,
}

/// The Prefix NLRI of a service with prefix `prefix`.
pub fn nlri(p: &NlriParams, prefix: IpNet) -> BgpLsNlri {
    let local = BgpLsLocalNodeDescriptors::new(BgpLsNodeDescriptors::new(vec![
        BgpLsNodeDescriptorSubTlv::AutonomousSystem(p.local_as),
        BgpLsNodeDescriptorSubTlv::IgpRouterId(p.router_id.octets().to_vec().into_boxed_slice()),
    ]));
    let descriptors =
        vec![BgpLsPrefixDescriptor::IpReachabilityInformation(IpReachabilityInformationData::new(prefix.trunc()))];
    let value = BgpLsNlriIpPrefix::new(p.protocol, p.identifier, local, descriptors);
    BgpLsNlri::new(
        None,
        match prefix {
            IpNet::V4(_) => BgpLsNlriValue::Ipv4Prefix(value),
            IpNet::V6(_) => BgpLsNlriValue::Ipv6Prefix(value),
        },
    )
}

pub fn health_octet(h: Health) -> u8 {
    match h {
        Health::Healthy => 0,
        Health::Degraded => 1,
        Health::Unhealthy => 2,
    }
}

/// Which metrics a channel carries (YANG `metric`): one bit each, in this order.
pub const METRIC_NAMES: [&str; 7] =
    ["gas", "computing-time", "health", "sci-count", "cost", "reputation", "security-label"];
pub const ALL_METRICS: u8 = (1 << METRIC_NAMES.len()) - 1;

/// The bit of a metric name.
pub fn metric_bit(name: &str) -> Option<u8> {
    METRIC_NAMES.iter().position(|n| *n == name).map(|i| 1 << i)
}

/// Whether `a` and `b` agree on the metrics in `carried`.
pub fn same_carried(a: &SiteMetrics, b: &SiteMetrics, carried: u8) -> bool {
    let on = |i: u8| carried & (1 << i) != 0;
    a.cs_id == b.cs_id
        && (!on(0) || a.gas == b.gas)
        && (!on(1) || a.computing_time_ms == b.computing_time_ms)
        && (!on(2) || a.health == b.health)
        && (!on(3) || a.sci_count == b.sci_count)
        && (!on(4) || a.cost == b.cost)
        && (!on(5) || a.reputation == b.reputation)
        && (!on(6) || a.security_label == b.security_label)
}

/// The CATS TLVs of one service, ascending by type: the CS-ID, site-id and generation, and
/// the metrics in `carried` (an optional one only when the service has it).
pub fn metric_tlvs(
    cp: &CodePoints,
    site_id: &str,
    m: &SiteMetrics,
    generation: u64,
    carried: u8,
) -> Vec<(u16, Box<[u8]>)> {
    let on = |i: u8| carried & (1 << i) != 0;
    let mut v: Vec<(u16, Box<[u8]>)> = vec![
        (cp.cs_id, m.cs_id.as_bytes().into()),
        (cp.site_id, site_id.as_bytes().into()),
        (cp.generation, generation.to_be_bytes().into()),
    ];
    if on(0) {
        v.push((cp.gas, m.gas.to_be_bytes().into()));
    }
    if on(1) {
        v.push((cp.computing_time, m.computing_time_ms.to_be_bytes().into()));
    }
    if on(2) {
        v.push((cp.health, [health_octet(m.health)].into()));
    }
    if on(3) {
        v.push((cp.sci_count, m.sci_count.to_be_bytes().into()));
    }
    // A carried optional metric the service does not have goes as an empty TLV, so a
    // receiver clears a value it held rather than keeping it.
    if on(4) {
        v.push((cp.cost, m.cost.map_or(Box::default(), |c| c.to_be_bytes().into())));
    }
    if on(5) {
        v.push((cp.reputation, m.reputation.map_or(Box::default(), |r| [r].into())));
    }
    if on(6) {
        v.push((cp.security_label, m.security_label.map_or(Box::default(), |s| [s].into())));
    }
    v.sort_by_key(|(t, _)| *t);
    v
}

/// The BGP-LS attribute carrying `tlvs`.
pub fn attribute(encoding: Encoding, tlvs: Vec<(u16, Box<[u8]>)>) -> BgpLsAttribute {
    match encoding {
        Encoding::PrivateTlvs => BgpLsAttribute::new(
            tlvs.into_iter().map(|(code, value)| BgpLsAttributeValue::Unknown { code, value }).collect::<Vec<_>>(),
        ),
        Encoding::OpaquePrefix => {
            let mut bytes = Vec::new();
            for (t, v) in &tlvs {
                bytes.extend_from_slice(&t.to_be_bytes());
                bytes.extend_from_slice(&(v.len() as u16).to_be_bytes());
                bytes.extend_from_slice(v);
            }
            BgpLsAttribute::new(vec![BgpLsAttributeValue::OpaquePrefixAttribute(bytes.into_boxed_slice())])
        }
    }
}

/// The CATS metrics read back from TLVs (a C-PS's view).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedMetrics {
    pub gas: Option<u32>,
    pub computing_time_ms: Option<u32>,
    pub cs_id: Option<String>,
    pub health: Option<u8>,
    pub sci_count: Option<u32>,
    pub cost: Option<u32>,
    pub reputation: Option<u8>,
    pub security_label: Option<u8>,
    pub site_id: Option<String>,
    pub generation: Option<u64>,
    /// Optional metrics sent as empty TLVs: the service has none (bits of
    /// [`METRIC_NAMES`]: 4 cost, 5 reputation, 6 security-label).
    pub cleared: u8,
}

/// Reads the CATS TLVs of a BGP-LS attribute (either encoding). TLVs of other types are
/// skipped; a CATS TLV of the wrong length or not UTF-8 is an error.
pub fn decode_attribute(cp: &CodePoints, attr: &BgpLsAttribute) -> Result<DecodedMetrics, String> {
    let mut out = DecodedMetrics::default();
    for a in attr.attributes() {
        match a {
            BgpLsAttributeValue::Unknown { code, value } => put(cp, &mut out, *code, value)?,
            BgpLsAttributeValue::OpaquePrefixAttribute(bytes) => decode_tlvs(cp, bytes, &mut out)?,
            _ => {}
        }
    }
    Ok(out)
}

/// Reads a sequence of type-length-value triples (the Opaque Prefix Attribute's content).
pub fn decode_tlvs(cp: &CodePoints, mut bytes: &[u8], out: &mut DecodedMetrics) -> Result<(), String> {
    while !bytes.is_empty() {
        if bytes.len() < 4 {
            return Err(format!("truncated TLV header ({} octets)", bytes.len()));
        }
        let t = u16::from_be_bytes([bytes[0], bytes[1]]);
        let l = u16::from_be_bytes([bytes[2], bytes[3]]) as usize;
        let Some(v) = bytes.get(4..4 + l) else {
            return Err(format!("TLV {t} claims {l} octets, {} left", bytes.len() - 4));
        };
        put(cp, out, t, v)?;
        bytes = &bytes[4 + l..];
    }
    Ok(())
}

fn put(cp: &CodePoints, out: &mut DecodedMetrics, t: u16, v: &[u8]) -> Result<(), String> {
    let n32 =
        || <[u8; 4]>::try_from(v).map(u32::from_be_bytes).map_err(|_| format!("TLV {t}: {} octets, not 4", v.len()));
    let n8 = || match v {
        [b] => Ok(*b),
        _ => Err(format!("TLV {t}: {} octets, not 1", v.len())),
    };
    let text = || std::str::from_utf8(v).map(str::to_owned).map_err(|_| format!("TLV {t}: not UTF-8"));
    if t == cp.gas {
        out.gas = Some(n32()?);
    } else if t == cp.computing_time {
        out.computing_time_ms = Some(n32()?);
    } else if t == cp.cs_id {
        out.cs_id = Some(text()?);
    } else if t == cp.health {
        out.health = Some(n8()?);
    } else if t == cp.sci_count {
        out.sci_count = Some(n32()?);
    } else if t == cp.cost && v.is_empty() {
        out.cleared |= 1 << 4;
    } else if t == cp.cost {
        out.cost = Some(n32()?);
    } else if t == cp.reputation && v.is_empty() {
        out.cleared |= 1 << 5;
    } else if t == cp.reputation {
        out.reputation = Some(n8()?);
    } else if t == cp.security_label && v.is_empty() {
        out.cleared |= 1 << 6;
    } else if t == cp.security_label {
        out.security_label = Some(n8()?);
    } else if t == cp.site_id {
        out.site_id = Some(text()?);
    } else if t == cp.generation {
        let g = <[u8; 8]>::try_from(v).map_err(|_| format!("TLV {t}: {} octets, not 8", v.len()))?;
        out.generation = Some(u64::from_be_bytes(g));
    }
    Ok(())
}

/// Our OPEN: BGP-4, the 2-octet AS (AS_TRANS above 65535), the hold time, the router-id,
/// and the capabilities multiprotocol BGP-LS (AFI 16388 / SAFI 71), route refresh and
/// 4-octet AS.
pub fn open(local_as: u32, hold_time: u16, router_id: Ipv4Addr) -> BgpMessage {
    let my_as = u16::try_from(local_as).unwrap_or(AS_TRANS);
    BgpMessage::Open(BgpOpenMessage::new(
        my_as,
        hold_time,
        router_id,
        vec![BgpOpenMessageParameter::new_capabilities(vec![
            BgpCapability::MultiProtocolExtensions(MultiProtocolExtensionsCapability::new(AddressType::BgpLs)),
            BgpCapability::RouteRefresh,
            BgpCapability::FourOctetAs(FourOctetAsCapability::new(local_as)),
        ])],
    ))
}

/// How the UPDATEs to one neighbor are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerParams {
    pub local_as: u32,
    /// iBGP: LOCAL_PREF and an empty AS_PATH; eBGP: our AS in the AS_PATH.
    pub ebgp: bool,
    /// The MP_REACH next hop: our end of the TCP connection.
    pub next_hop: IpAddr,
}

fn attr(optional: bool, transitive: bool, v: PathAttributeValue) -> PathAttribute {
    // The flags follow the attribute's definition (RFC 4271 section 5, RFC 4760, RFC 9552),
    // so NetGauze's flag check cannot fail; extended length for the ones that may exceed
    // 255 octets.
    let extended = optional;
    match PathAttribute::from(optional, transitive, false, extended, v) {
        Ok(a) => a,
        Err((v, e)) => unreachable!("path attribute flags of {v:?}: {e:?}"),
    }
}

/// An UPDATE announcing one NLRI with its attribute. The AS_PATH is written with 4-octet
/// AS numbers: the session requires the 4-octet AS capability of the neighbor.
pub fn announce(peer: &PeerParams, nlri: BgpLsNlri, ls: BgpLsAttribute) -> BgpMessage {
    let segments = if peer.ebgp {
        vec![As4PathSegment::new(AsPathSegmentType::AsSequence, vec![peer.local_as])]
    } else {
        Vec::new()
    };
    let mut attrs = vec![
        attr(false, true, PathAttributeValue::Origin(Origin::IGP)),
        attr(false, true, PathAttributeValue::AsPath(AsPath::As4PathSegments(segments.into()))),
    ];
    if !peer.ebgp {
        attrs.push(attr(false, true, PathAttributeValue::LocalPreference(LocalPreference::new(100))));
    }
    attrs.push(attr(
        true,
        false,
        PathAttributeValue::MpReach(MpReach::BgpLs { next_hop: peer.next_hop, nlri: vec![nlri].into() }),
    ));
    attrs.push(attr(true, false, PathAttributeValue::BgpLs(ls)));
    BgpMessage::Update(BgpUpdateMessage::new(vec![], attrs, vec![]))
}

/// An UPDATE withdrawing `nlri` (at most [`WITHDRAW_BATCH`]).
pub fn withdraw(nlri: Vec<BgpLsNlri>) -> BgpMessage {
    BgpMessage::Update(BgpUpdateMessage::new(
        vec![],
        vec![attr(true, false, PathAttributeValue::MpUnreach(MpUnreach::BgpLs { nlri: nlri.into() }))],
        vec![],
    ))
}

/// What an UPDATE carries for BGP-LS: its BGP-LS attribute, the NLRIs it announces and
/// those it withdraws (a C-PS's view; the reference C-PS and the tests read UPDATEs so).
pub fn ls_contents(u: &BgpUpdateMessage) -> (Option<BgpLsAttribute>, Vec<BgpLsNlri>, Vec<BgpLsNlri>) {
    let (mut ls, mut reach, mut unreach) = (None, vec![], vec![]);
    for a in u.path_attributes() {
        match a.value() {
            PathAttributeValue::BgpLs(x) => ls = Some(x.clone()),
            PathAttributeValue::MpReach(MpReach::BgpLs { nlri, .. }) => reach = nlri.to_vec(),
            PathAttributeValue::MpUnreach(MpUnreach::BgpLs { nlri }) => unreach = nlri.to_vec(),
            _ => {}
        }
    }
    (ls, reach, unreach)
}

/// The wire bytes of `msg`.
pub fn to_bytes(msg: &BgpMessage) -> Result<Vec<u8>, String> {
    use netgauze_parse_utils::WritablePdu;
    let mut out = Vec::with_capacity(msg.len());
    msg.write(&mut out).map_err(|e| format!("encoding BGP {:?}: {e:?}", msg.get_type()))?;
    Ok(out)
}

/// "code/subcode name" of a NOTIFICATION (RFC 4271 section 4.5).
pub fn describe_notification(n: &BgpNotificationMessage) -> String {
    let bytes = to_bytes(&BgpMessage::Notification(n.clone())).unwrap_or_default();
    let (code, sub) = (bytes.get(19).copied().unwrap_or(0), bytes.get(20).copied().unwrap_or(0));
    let name = format!("{n:?}");
    let name = name.split(" {").next().unwrap_or(&name).replace('(', " ").replace(')', "");
    format!("{code}/{sub} {name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use netgauze_bgp_pkt::codec::BgpCodec;
    use tokio_util::codec::Decoder;

    fn site() -> SiteMetrics {
        SiteMetrics {
            cs_id: "AR1".into(),
            gas: 500,
            computing_time_ms: 12,
            health: Health::Degraded,
            cost: Some(7),
            reputation: None,
            security_label: Some(3),
            sci_count: 2,
        }
    }

    fn params() -> NlriParams {
        NlriParams {
            protocol: BgpLsProtocolId::StaticConfiguration,
            identifier: 0,
            local_as: 65000,
            router_id: Ipv4Addr::new(192, 0, 2, 1),
        }
    }

    fn roundtrip(msg: &BgpMessage) -> BgpMessage {
        let bytes = to_bytes(msg).unwrap();
        assert!(bytes.len() <= 4096);
        let mut buf = bytes::BytesMut::from(&bytes[..]);
        let (m, _) = BgpCodec::new(true).decode(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        m
    }

    fn ls_attribute(m: &BgpMessage) -> BgpLsAttribute {
        let BgpMessage::Update(u) = m else { panic!("not an UPDATE") };
        u.path_attributes()
            .iter()
            .find_map(|a| match a.value() {
                PathAttributeValue::BgpLs(ls) => Some(ls.clone()),
                _ => None,
            })
            .expect("a BGP-LS attribute")
    }

    #[test]
    fn rfc9552_prefix_nlri_with_cats_tlvs_round_trips_in_both_encodings() {
        let cp = CodePoints::default();
        for enc in [Encoding::PrivateTlvs, Encoding::OpaquePrefix] {
            for prefix in ["203.0.113.10/32", "2001:db8::/48"] {
                let n = nlri(&params(), prefix.parse().unwrap());
                let a = attribute(enc, metric_tlvs(&cp, "site-1", &site(), 42, ALL_METRICS));
                let peer = PeerParams { local_as: 65000, ebgp: true, next_hop: "127.0.0.1".parse().unwrap() };
                let msg = announce(&peer, n.clone(), a);
                let back = roundtrip(&msg);
                assert_eq!(back, msg, "{enc:?} {prefix}");
                let d = decode_attribute(&cp, &ls_attribute(&back)).unwrap();
                assert_eq!(d.gas, Some(500));
                assert_eq!(d.computing_time_ms, Some(12));
                assert_eq!(d.cs_id.as_deref(), Some("AR1"));
                assert_eq!(d.health, Some(1));
                assert_eq!(d.cost, Some(7));
                assert_eq!((d.reputation, d.cleared), (None, 1 << 5), "an empty TLV: no reputation");
                assert_eq!(d.security_label, Some(3));
                assert_eq!(d.site_id.as_deref(), Some("site-1"));
                assert_eq!(d.generation, Some(42));
                let w = withdraw(vec![n; WITHDRAW_BATCH]);
                assert_eq!(roundtrip(&w), w);
            }
        }
    }

    #[test]
    fn rfc4271_open_carries_bgp_ls_route_refresh_and_four_octet_as() {
        let m = open(4_200_000_000, 90, Ipv4Addr::new(192, 0, 2, 1));
        let BgpMessage::Open(o) = roundtrip(&m) else { panic!() };
        assert_eq!(o.my_as(), AS_TRANS);
        let caps = o.capabilities();
        assert!(caps.iter().any(|c| matches!(c, BgpCapability::FourOctetAs(a) if a.asn4() == 4_200_000_000)));
        assert!(caps
            .iter()
            .any(|c| matches!(c, BgpCapability::MultiProtocolExtensions(m) if m.address_type() == AddressType::BgpLs)));
    }

    #[test]
    fn seed004_hybrid_only_the_carried_metrics_are_encoded() {
        let cp = CodePoints::default();
        let carried = metric_bit("security-label").unwrap() | metric_bit("cost").unwrap();
        let tlvs = metric_tlvs(&cp, "s", &site(), 1, carried);
        let types: Vec<u16> = tlvs.iter().map(|(t, _)| *t).collect();
        assert_eq!(types, [cp.cs_id, cp.cost, cp.security_label, cp.site_id, cp.generation]);
        let mut other = site();
        other.gas += 1;
        assert!(same_carried(&site(), &other, carried));
        assert!(!same_carried(&site(), &other, ALL_METRICS));
    }

    #[test]
    fn code_points_must_be_distinct_and_outside_rfc9552_types() {
        let mut cp = CodePoints::default();
        assert!(cp.check(Encoding::PrivateTlvs).is_ok());
        cp.cost = cp.gas;
        assert!(cp.check(Encoding::PrivateTlvs).unwrap_err().contains("'gas' and 'cost'"));
        cp.cost = 1157;
        assert!(cp.check(Encoding::PrivateTlvs).is_err());
        assert!(cp.check(Encoding::OpaquePrefix).is_ok());
    }

    #[test]
    fn hostile_tlvs_are_errors_not_panics() {
        let cp = CodePoints::default();
        let mut out = DecodedMetrics::default();
        assert!(decode_tlvs(&cp, &[0xfd, 0xe8, 0, 9, 1], &mut out).is_err());
        assert!(decode_tlvs(&cp, &[0xfd, 0xe8, 0, 2, 1, 2], &mut out).is_err());
        assert!(decode_tlvs(&cp, &[0xfd], &mut out).is_err());
        assert!(decode_tlvs(&cp, &[0xfd, 0xea, 0, 1, 0xff], &mut out).is_err());
        assert!(decode_tlvs(&cp, &[0, 1, 0, 0], &mut out).is_ok());
    }
}
