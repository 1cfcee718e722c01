//! Wire: IPFIX (RFC 7011) and NetFlow v9 (RFC 3954) messages from the A-ERs, decoded with
//! NetGauze's `netgauze-flow-pkt` into what seed 000 needs of each flow record: its source
//! and destination addresses and its packet and octet counts.
//!
//! The codec parses one set at a time here, against the templates of the message's
//! exporter and observation domain (IPFIX) or source ID (v9) only: a data set whose
//! template is unknown is skipped and counted instead of failing the whole message, and
//! template withdrawals (RFC 7011 section 8.1, a template record with no field, which the
//! codec does not take) are applied here. Templates are bounded per domain and expire
//! when not refreshed (section 8.4). Pure: no I/O, fuzzed by `fuzz/fuzz_targets/flow_message.rs`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use netgauze_flow_pkt::ie::Field;
use netgauze_flow_pkt::{ipfix, netflow};
use netgauze_parse_utils::reader::SliceReader;
use netgauze_parse_utils::traits::ParseFromWithOneInput;

const IPFIX_HEADER: usize = 16;
const V9_HEADER: usize = 20;
const IPFIX_TEMPLATE_SET: u16 = 2;
const IPFIX_OPTIONS_SET: u16 = 3;
const V9_TEMPLATE_SET: u16 = 0;
const V9_OPTIONS_SET: u16 = 1;
/// Fields of one template (exporters use a few dozen; the codec would take 16 383).
pub const MAX_FIELDS: usize = 128;
/// Field values one data set may decode to: a set of many tiny records of a wide template
/// would otherwise allocate gigabytes from one datagram.
pub const MAX_VALUES: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Ipfix,
    NetflowV9,
}

impl Protocol {
    pub fn yang(self) -> &'static str {
        match self {
            Protocol::Ipfix => "ipfix",
            Protocol::NetflowV9 => "netflow-v9",
        }
    }
}

/// What a message's header says: its protocol and observation domain / source ID.
pub fn header(msg: &[u8]) -> Result<(Protocol, u32), String> {
    let version = u16::from_be_bytes([*msg.first().ok_or("empty message")?, *msg.get(1).ok_or("truncated header")?]);
    match version {
        10 if msg.len() >= IPFIX_HEADER => {
            Ok((Protocol::Ipfix, u32::from_be_bytes([msg[12], msg[13], msg[14], msg[15]])))
        }
        9 if msg.len() >= V9_HEADER => {
            Ok((Protocol::NetflowV9, u32::from_be_bytes([msg[16], msg[17], msg[18], msg[19]])))
        }
        10 | 9 => Err(format!("truncated version {version} header ({} octets)", msg.len())),
        v => Err(format!("version {v} is neither IPFIX (10) nor NetFlow v9")),
    }
}

/// One flow record's addresses and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowCount {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub packets: u64,
    pub octets: u64,
}

/// What one message held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub flows: Vec<FlowCount>,
    /// Data records decoded (with or without addresses and counts).
    pub records: u64,
    pub without_template: u64,
    pub withdrawn: u64,
    /// Withdrawals not applied (received over UDP).
    pub withdrawals_ignored: u64,
    pub refused: u64,
}

/// The templates of one exporter and observation domain (IPFIX) or source ID (v9).
#[derive(Default)]
pub struct Domain {
    ipfix: ipfix::TemplatesMap,
    v9: netflow::TemplatesMap,
    refreshed: HashMap<(bool, u16), Instant>,
}

impl Domain {
    pub fn templates(&self) -> usize {
        self.ipfix.len() + self.v9.len()
    }

    /// Forgets the templates not refreshed within `lifetime`; how many.
    pub fn expire(&mut self, now: Instant, lifetime: Duration) -> u64 {
        let old: Vec<(bool, u16)> =
            self.refreshed.iter().filter(|(_, t)| now.duration_since(**t) >= lifetime).map(|(k, _)| *k).collect();
        for k in &old {
            self.forget(*k);
        }
        old.len() as u64
    }

    fn forget(&mut self, (v9, id): (bool, u16)) {
        self.refreshed.remove(&(v9, id));
        if v9 {
            self.v9.remove(&id);
        } else {
            self.ipfix.remove(&id);
        }
    }

    /// (fields, smallest record length) of template `id`: a variable-length field counts 1.
    fn shape(&self, v9: bool, id: u16) -> Option<(usize, usize, bool)> {
        let len = |l: u16| if l == 65535 { 1 } else { usize::from(l) };
        if v9 {
            let t = self.v9.get(&id)?;
            let lens: Vec<u16> = t
                .scope_fields_specs
                .iter()
                .map(|f| f.length())
                .chain(t.fields_specs.iter().map(|f| f.length()))
                .collect();
            Some((lens.len(), lens.iter().map(|l| len(*l)).sum(), lens.contains(&0)))
        } else {
            let t = self.ipfix.get(&id)?;
            let lens: Vec<u16> = t.scope_fields_specs.iter().chain(t.fields_specs.iter()).map(|f| f.length()).collect();
            Some((lens.len(), lens.iter().map(|l| len(*l)).sum(), lens.contains(&0)))
        }
    }

    /// Refuses a template with too many fields or a field of length 0.
    fn check_template(&self, v9: bool, id: u16) -> Result<(), String> {
        let Some((fields, _, zero)) = self.shape(v9, id) else { return Ok(()) };
        if fields > MAX_FIELDS {
            return Err(format!("{fields} fields, more than {MAX_FIELDS}"));
        }
        if zero {
            return Err("a field of length 0".into());
        }
        Ok(())
    }

    fn has(&self, v9: bool, id: u16) -> bool {
        if v9 {
            self.v9.contains_key(&id)
        } else {
            self.ipfix.contains_key(&id)
        }
    }

    /// After the codec parsed template `id`: refreshes it, or refuses it when it is new and
    /// the domain is full.
    fn learned(&mut self, v9: bool, id: u16, existed: bool, now: Instant, max: usize, out: &mut Decoded) {
        if !existed && self.templates() > max {
            if v9 {
                self.v9.remove(&id);
            } else {
                self.ipfix.remove(&id);
            }
            out.refused += 1;
        } else {
            self.refreshed.insert((v9, id), now);
        }
    }

    /// Decodes one message (a whole UDP datagram) against this domain's templates.
    /// Template withdrawals are applied only when `withdrawals` (a reliable transport);
    /// over UDP an exporter does not send them (RFC 7011 section 8.4: templates end by
    /// expiry there), and one with a spoofed source would suppress a real A-ER's counts.
    pub fn decode(&mut self, msg: &[u8], now: Instant, max_templates: usize) -> Result<Decoded, String> {
        self.decode_with(msg, now, max_templates, false)
    }

    pub fn decode_with(
        &mut self,
        msg: &[u8],
        now: Instant,
        max_templates: usize,
        withdrawals: bool,
    ) -> Result<Decoded, String> {
        let (protocol, _) = header(msg)?;
        let mut out = Decoded::default();
        let body = match protocol {
            Protocol::Ipfix => {
                let len = u16::from_be_bytes([msg[2], msg[3]]) as usize;
                if len < IPFIX_HEADER || len > msg.len() {
                    return Err(format!("IPFIX message length {len} with {} octets received", msg.len()));
                }
                &msg[IPFIX_HEADER..len]
            }
            Protocol::NetflowV9 => &msg[V9_HEADER..],
        };
        let v9 = protocol == Protocol::NetflowV9;
        let mut rest = body;
        while rest.len() >= 4 {
            let id = u16::from_be_bytes([rest[0], rest[1]]);
            let len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
            if len < 4 || len > rest.len() {
                return Err(format!("set {id}: length {len} with {} octets left", rest.len()));
            }
            let (set, next) = rest.split_at(len);
            rest = next;
            self.set(v9, id, set, now, max_templates, withdrawals, &mut out)?;
        }
        // A v9 export may end in padding; an IPFIX message may not end inside a set header.
        if !rest.is_empty() && (!v9 || rest.iter().any(|b| *b != 0)) {
            return Err(format!("{} octets after the last set", rest.len()));
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn set(
        &mut self,
        v9: bool,
        id: u16,
        set: &[u8],
        now: Instant,
        max: usize,
        withdrawals: bool,
        out: &mut Decoded,
    ) -> Result<(), String> {
        let template_set = if v9 { V9_TEMPLATE_SET } else { IPFIX_TEMPLATE_SET };
        let options_set = if v9 { V9_OPTIONS_SET } else { IPFIX_OPTIONS_SET };
        if id == template_set {
            return self.templates_in(v9, false, &set[4..], now, max, withdrawals, out);
        }
        if id == options_set {
            // Options templates describe exporter metadata (sampling, statistics); they are
            // kept so that their data sets decode, within the same bound.
            return self.templates_in(v9, true, &set[4..], now, max, withdrawals, out);
        }
        if id < 256 {
            return Err(format!("set ID {id} is reserved"));
        }
        let Some((fields, min_len, _)) = self.shape(v9, id) else {
            out.without_template += 1;
            return Ok(());
        };
        if min_len > 0 && (set.len() - 4) / min_len * fields > MAX_VALUES {
            return Err(format!(
                "data set {id}: {} octets of {fields}-field records exceed {MAX_VALUES} values",
                set.len()
            ));
        }
        let mut r = SliceReader::new(set);
        if v9 {
            let s = netflow::Set::parse(&mut r, &mut self.v9).map_err(|e| format!("data set {id}: {e}"))?;
            if let netflow::Set::Data { records, .. } = s {
                for rec in records.iter() {
                    out.records += 1;
                    out.flows.extend(count(rec.fields()));
                }
            }
        } else {
            let s = ipfix::Set::parse(&mut r, &mut self.ipfix).map_err(|e| format!("data set {id}: {e}"))?;
            if let ipfix::Set::Data { records, .. } = s {
                for rec in records.iter() {
                    out.records += 1;
                    out.flows.extend(count(rec.fields()));
                }
            }
        }
        Ok(())
    }

    /// The records of a (options) template set, one at a time: a record with a field count
    /// of 0 is a withdrawal (IPFIX only; the set's own ID withdraws every template of its
    /// kind), the others go to the codec.
    #[allow(clippy::too_many_arguments)]
    fn templates_in(
        &mut self,
        v9: bool,
        options: bool,
        mut rest: &[u8],
        now: Instant,
        max: usize,
        withdrawals: bool,
        out: &mut Decoded,
    ) -> Result<(), String> {
        while rest.len() >= 4 {
            let id = u16::from_be_bytes([rest[0], rest[1]]);
            let fields = u16::from_be_bytes([rest[2], rest[3]]);
            // No template has ID 0: zeros from here are the set's padding (checked once, so
            // a long set costs one pass).
            if id == 0 && rest.iter().all(|b| *b == 0) {
                rest = &[];
                break;
            }
            if fields == 0 && !(v9 && options) {
                if v9 {
                    return Err(format!("template {id} has no field"));
                }
                if !withdrawals {
                    out.withdrawals_ignored += 1;
                } else if id == IPFIX_TEMPLATE_SET || id == IPFIX_OPTIONS_SET {
                    let all: Vec<u16> = self
                        .ipfix
                        .iter()
                        .filter(|(_, t)| t.scope_fields_specs.is_empty() != options)
                        .map(|(k, _)| *k)
                        .collect();
                    out.withdrawn += all.len() as u64;
                    for t in all {
                        self.forget((false, t));
                    }
                } else if self.ipfix.contains_key(&id) {
                    self.forget((false, id));
                    out.withdrawn += 1;
                }
                rest = &rest[4..];
                continue;
            }
            let existed = self.has(v9, id);
            let mut r = SliceReader::new(rest);
            let parsed = match (v9, options) {
                (true, false) => {
                    netflow::TemplateRecord::parse(&mut r, &mut self.v9).map(|_| ()).map_err(|e| e.to_string())
                }
                (true, true) => {
                    netflow::OptionsTemplateRecord::parse(&mut r, &mut self.v9).map(|_| ()).map_err(|e| e.to_string())
                }
                (false, false) => {
                    ipfix::TemplateRecord::parse(&mut r, &mut self.ipfix).map(|_| ()).map_err(|e| e.to_string())
                }
                (false, true) => {
                    ipfix::OptionsTemplateRecord::parse(&mut r, &mut self.ipfix).map(|_| ()).map_err(|e| e.to_string())
                }
            };
            parsed.map_err(|e| format!("template {id}: {e}"))?;
            rest = &rest[r.offset()..];
            if let Err(e) = self.check_template(v9, id) {
                self.forget((v9, id));
                return Err(format!("template {id}: {e}"));
            }
            self.learned(v9, id, existed, now, max, out);
        }
        // RFC 7011 section 3.3.1: a set may end in padding.
        if rest.iter().any(|b| *b != 0) {
            return Err(format!("{} octets after the last template record", rest.len()));
        }
        Ok(())
    }
}

/// The addresses and delta counts of a data record; None for records without them (options
/// data, layer-2 flows).
fn count(fields: &[Field]) -> Option<FlowCount> {
    let (mut src, mut dst, mut packets, mut octets) = (None, None, None, None);
    for f in fields {
        match f {
            Field::sourceIPv4Address(a) => src = Some(IpAddr::V4(*a)),
            Field::destinationIPv4Address(a) => dst = Some(IpAddr::V4(*a)),
            Field::sourceIPv6Address(a) => src = Some(IpAddr::V6(*a)),
            Field::destinationIPv6Address(a) => dst = Some(IpAddr::V6(*a)),
            Field::packetDeltaCount(n) => packets = Some(*n),
            Field::octetDeltaCount(n) => octets = Some(*n),
            _ => {}
        }
    }
    Some(FlowCount { src: src?, dst: dst?, packets: packets.unwrap_or(0), octets: octets.unwrap_or(0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipfix(domain: u32, sets: &[u8]) -> Vec<u8> {
        let mut m = vec![0, 10, 0, 0, 0x60, 0, 0, 0, 0, 0, 0, 1];
        m.extend(domain.to_be_bytes());
        m.extend(sets);
        let n = m.len() as u16;
        m[2..4].copy_from_slice(&n.to_be_bytes());
        m
    }

    /// Template 300: sourceIPv4Address, destinationIPv4Address, packetDeltaCount (8),
    /// octetDeltaCount (8).
    fn template_300() -> Vec<u8> {
        vec![0, 2, 0, 24, 1, 44, 0, 4, 0, 8, 0, 4, 0, 12, 0, 4, 0, 2, 0, 8, 0, 1, 0, 8]
    }

    fn data_300(src: [u8; 4], dst: [u8; 4], packets: u64, octets: u64) -> Vec<u8> {
        let mut s = vec![1, 44, 0, 28];
        s.extend(src);
        s.extend(dst);
        s.extend(packets.to_be_bytes());
        s.extend(octets.to_be_bytes());
        s
    }

    #[test]
    fn rfc7011_template_then_data_in_one_message() {
        let mut d = Domain::default();
        let mut sets = template_300();
        sets.extend(data_300([192, 0, 2, 1], [198, 51, 100, 7], 3, 180));
        let out = d.decode(&ipfix(7, &sets), Instant::now(), 16).unwrap();
        assert_eq!(out.records, 1);
        assert_eq!(
            out.flows,
            vec![FlowCount {
                src: "192.0.2.1".parse().unwrap(),
                dst: "198.51.100.7".parse().unwrap(),
                packets: 3,
                octets: 180
            }]
        );
        assert_eq!(header(&ipfix(7, &[])).unwrap(), (Protocol::Ipfix, 7));
    }

    #[test]
    fn rfc7011_data_without_template_is_skipped_and_the_rest_decodes() {
        let mut d = Domain::default();
        let mut sets = data_300([192, 0, 2, 1], [198, 51, 100, 7], 3, 180);
        sets.extend(template_300());
        sets.extend(data_300([192, 0, 2, 2], [198, 51, 100, 7], 1, 60));
        let out = d.decode(&ipfix(0, &sets), Instant::now(), 16).unwrap();
        assert_eq!(out.without_template, 1);
        assert_eq!(out.flows.len(), 1);
        assert_eq!(out.flows[0].octets, 60);
    }

    #[test]
    fn rfc7011_8_1_withdrawal_one_and_all() {
        let mut d = Domain::default();
        d.decode(&ipfix(0, &template_300()), Instant::now(), 16).unwrap();
        assert_eq!(d.templates(), 1);
        // Over UDP, ignored.
        let out = d.decode(&ipfix(0, &[0, 2, 0, 8, 1, 44, 0, 0]), Instant::now(), 16).unwrap();
        assert_eq!((out.withdrawn, out.withdrawals_ignored, d.templates()), (0, 1, 1));
        let out = d.decode_with(&ipfix(0, &[0, 2, 0, 8, 1, 44, 0, 0]), Instant::now(), 16, true).unwrap();
        assert_eq!((out.withdrawn, d.templates()), (1, 0));
        let out = d.decode(&ipfix(0, &data_300([1, 1, 1, 1], [2, 2, 2, 2], 1, 1)), Instant::now(), 16).unwrap();
        assert_eq!(out.without_template, 1);
        d.decode(&ipfix(0, &template_300()), Instant::now(), 16).unwrap();
        let out = d.decode_with(&ipfix(0, &[0, 2, 0, 8, 0, 2, 0, 0]), Instant::now(), 16, true).unwrap();
        assert_eq!((out.withdrawn, d.templates()), (1, 0));
    }

    #[test]
    fn rfc7011_8_4_templates_expire_unless_refreshed_and_are_bounded() {
        let mut d = Domain::default();
        let t0 = Instant::now();
        d.decode(&ipfix(0, &template_300()), t0, 16).unwrap();
        assert_eq!(d.expire(t0 + Duration::from_secs(5), Duration::from_secs(10)), 0);
        d.decode(&ipfix(0, &template_300()), t0 + Duration::from_secs(8), 16).unwrap();
        assert_eq!(d.expire(t0 + Duration::from_secs(12), Duration::from_secs(10)), 0);
        assert_eq!(d.expire(t0 + Duration::from_secs(19), Duration::from_secs(10)), 1);
        assert_eq!(d.templates(), 0);
        // A second template beyond a bound of one is refused; the first one stays.
        d.decode(&ipfix(0, &template_300()), t0, 1).unwrap();
        let mut other = template_300();
        other[4..6].copy_from_slice(&301u16.to_be_bytes());
        let out = d.decode(&ipfix(0, &other), t0, 1).unwrap();
        assert_eq!((out.refused, d.templates()), (1, 1));
        assert!(d.has(false, 300));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let mut d = Domain::default();
        for m in [
            vec![],
            vec![0, 10],
            vec![0, 5, 0, 0],
            ipfix(0, &[0, 2, 0, 3]),
            ipfix(0, &[0, 2, 0, 200]),
            ipfix(0, &[0, 7, 0, 4]),
            ipfix(0, &[0, 2, 0, 8, 0, 1, 0, 5]),
        ] {
            assert!(d.decode(&m, Instant::now(), 16).is_err(), "{m:?}");
        }
        let mut long = ipfix(0, &[]);
        long[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert!(d.decode(&long, Instant::now(), 16).is_err());
    }

    #[test]
    fn hostile_templates_and_sets_are_refused_before_they_cost() {
        let mut d = Domain::default();
        // A template of 200 fields.
        let mut t = vec![0, 2, 0, 0, 1, 44, 0, 200];
        for _ in 0..200 {
            t.extend([0, 8, 0, 4]);
        }
        let n = t.len() as u16;
        t[2..4].copy_from_slice(&n.to_be_bytes());
        assert!(d.decode(&ipfix(0, &t), Instant::now(), 16).is_err());
        assert_eq!(d.templates(), 0);
        // A field of length 0 (interfaceName, a string).
        let t0 = [0, 2, 0, 12, 1, 44, 0, 2, 0, 82, 0, 0, 0, 8, 0, 4];
        assert!(d.decode(&ipfix(0, &t0[..]), Instant::now(), 16).is_err());
        assert_eq!(d.templates(), 0);
        // Padding after a template, and a long run of zeros, cost one pass.
        let mut padded = template_300();
        padded[2..4].copy_from_slice(&(24u16 + 4000).to_be_bytes());
        padded.extend(std::iter::repeat_n(0u8, 4000));
        assert!(d.decode(&ipfix(0, &padded), Instant::now(), 16).is_ok());
        assert_eq!(d.templates(), 1);
    }

    #[test]
    fn rfc3954_netflow_v9_template_and_data() {
        let mut m = vec![0, 9, 0, 2, 0, 0, 0, 1, 0x60, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 42];
        // Template flowset (ID 0): template 260, IPV4_SRC_ADDR, IPV4_DST_ADDR, IN_PKTS (4),
        // IN_BYTES (4).
        m.extend([0, 0, 0, 24, 1, 4, 0, 4, 0, 8, 0, 4, 0, 12, 0, 4, 0, 2, 0, 4, 0, 1, 0, 4]);
        m.extend([1, 4, 0, 20, 10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 5, 0, 0, 1, 0]);
        assert_eq!(header(&m).unwrap(), (Protocol::NetflowV9, 42));
        let mut d = Domain::default();
        let out = d.decode(&m, Instant::now(), 16).unwrap();
        assert_eq!(out.flows[0].packets, 5);
        assert_eq!(out.flows[0].octets, 256);
    }
}
