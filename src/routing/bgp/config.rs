//! Configuration in: `routing/bgp-ls` (YANG `cats-sma-routing`) from datastore commits.
//! `prepare` checks what YANG cannot (distinct code points, reuse below suppress, retry
//! times in order) and binds the listener, so a commit the speaker cannot honour is refused
//! with the reason; `apply` hands the result to the speaker.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netgauze_bgp_pkt::iana::BgpLsProtocolId;
use yang2::data::{Data, DataNodeRef, DataTree};

use super::encode::{CodePoints, Encoding, NlriParams};
use super::rib::{Damping, RibParams};
use super::session::NeighborConfig;
use super::Speaker;
use crate::datastore::{ConfigConsumer, Transaction};

pub const BGP_LS: &str = "/cats-sma:cats-sma/cats-sma-routing:routing/bgp-ls";

/// What every session's OPEN and timers depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    pub local_as: u32,
    pub router_id: Ipv4Addr,
    pub hold_time: u16,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub listen: Option<SocketAddr>,
}

/// YANG `advertise`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advertise {
    Always,
    WhenCpsUnreachable,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpeakerConfig {
    pub advertise: Advertise,
    pub session: SessionConfig,
    pub rib: RibParams,
    pub neighbors: Vec<NeighborConfig>,
}

fn children(n: &DataNodeRef<'_, 'static>) -> BTreeMap<String, String> {
    n.children().map(|c| (c.schema().name().to_owned(), c.value_canonical().unwrap_or_default())).collect()
}

fn num<T: std::str::FromStr>(m: &BTreeMap<String, String>, k: &str, default: T) -> Result<T, String> {
    match m.get(k) {
        Some(v) => v.parse().map_err(|_| format!("routing/bgp-ls/{k}: '{v}' is not a number")),
        None => Ok(default),
    }
}

/// The speaker's configuration in `t` (None: not configured).
pub fn speaker_config(t: &DataTree<'static>) -> Result<Option<SpeakerConfig>, String> {
    let Some(root) = t.find_xpath(BGP_LS).ok().and_then(|mut s| s.next()) else { return Ok(None) };
    let top = children(&root);
    let local_as: u32 = num(&top, "local-as", 0)?;
    check_as("local-as", local_as)?;
    let router_id: Ipv4Addr = top
        .get("router-id")
        .ok_or("routing/bgp-ls/router-id is missing")?
        .parse()
        .map_err(|_| "routing/bgp-ls/router-id is not an IPv4 address".to_owned())?;
    if router_id.is_unspecified() {
        return Err("routing/bgp-ls/router-id: 0.0.0.0 is not a BGP Identifier (RFC 4271 section 4.2)".into());
    }
    let ms = |k: &str, d: u64| num(&top, k, d).map(Duration::from_millis);
    let listen = match top.get("listen-address") {
        Some(a) => Some(SocketAddr::new(
            a.parse::<IpAddr>().map_err(|_| format!("routing/bgp-ls/listen-address: '{a}'"))?,
            num(&top, "listen-port", 179u16)?,
        )),
        None => None,
    };
    let session = SessionConfig {
        local_as,
        router_id,
        hold_time: num(&top, "hold-time", 90u16)?,
        retry_initial: ms("connect-retry-initial", 1000)?,
        retry_max: ms("connect-retry-max", 60_000)?,
        listen,
    };
    if session.retry_max < session.retry_initial {
        return Err(format!(
            "routing/bgp-ls: connect-retry-max ({} ms) is below connect-retry-initial ({} ms)",
            session.retry_max.as_millis(),
            session.retry_initial.as_millis()
        ));
    }
    let encoding = match top.get("encoding").map(String::as_str) {
        Some("opaque-prefix-attribute") => Encoding::OpaquePrefix,
        _ => Encoding::PrivateTlvs,
    };
    let protocol = match top.get("protocol-id").map(String::as_str) {
        Some("direct") => BgpLsProtocolId::Direct,
        _ => BgpLsProtocolId::StaticConfiguration,
    };
    let mut cp = CodePoints::default();
    let mut damping_leaves = BTreeMap::new();
    let mut prefixes = BTreeMap::new();
    let mut neighbors = Vec::new();
    let mut carried = 0u8;
    for c in root.children() {
        match c.schema().name() {
            "metric" => {
                let v = c.value_canonical().unwrap_or_default();
                carried |= super::encode::metric_bit(&v).ok_or_else(|| format!("routing/bgp-ls/metric: '{v}'"))?;
            }
            "code-points" => {
                let m = children(&c);
                let d = CodePoints::default();
                cp = CodePoints {
                    gas: num(&m, "gas", d.gas)?,
                    computing_time: num(&m, "computing-time", d.computing_time)?,
                    cs_id: num(&m, "cs-id", d.cs_id)?,
                    health: num(&m, "health", d.health)?,
                    sci_count: num(&m, "sci-count", d.sci_count)?,
                    cost: num(&m, "cost", d.cost)?,
                    reputation: num(&m, "reputation", d.reputation)?,
                    security_label: num(&m, "security-label", d.security_label)?,
                    site_id: num(&m, "site-id", d.site_id)?,
                    generation: num(&m, "generation", d.generation)?,
                };
            }
            "damping" => damping_leaves = children(&c),
            "service" => {
                let m = children(&c);
                let cs = m.get("cs-id").cloned().unwrap_or_default();
                let p = m.get("prefix").cloned().unwrap_or_default();
                let net: ipnet::IpNet = p.parse().map_err(|_| format!("routing/bgp-ls/service[{cs}]/prefix: '{p}'"))?;
                if let Some((other, _)) =
                    prefixes.iter().find(|(_, q): &(&String, &ipnet::IpNet)| q.trunc() == net.trunc())
                {
                    return Err(format!(
                        "routing/bgp-ls/service: '{other}' and '{cs}' both have prefix {}: one NLRI cannot carry two \
                         services",
                        net.trunc()
                    ));
                }
                prefixes.insert(cs, net);
            }
            "neighbor" => {
                let m = children(&c);
                let a = m.get("address").cloned().unwrap_or_default();
                let remote_as = num(&m, "remote-as", 0)?;
                check_as(&format!("neighbor '{a}'/remote-as"), remote_as)?;
                neighbors.push(NeighborConfig {
                    address: a.parse().map_err(|_| format!("routing/bgp-ls/neighbor '{a}': not an address"))?,
                    remote_as,
                    port: num(&m, "port", 179)?,
                    passive: m.get("passive").is_some_and(|v| v == "true"),
                    md5_key: match m.get("tcp-md5-key") {
                        Some(k) if k.len() > 80 => {
                            return Err(format!(
                                "routing/bgp-ls/neighbor '{a}'/tcp-md5-key: {} octets in UTF-8, the kernel takes 80",
                                k.len()
                            ))
                        }
                        Some(k) => Some(super::session::Md5Key(k.clone().into_bytes())),
                        None => None,
                    },
                });
            }
            _ => {}
        }
    }
    cp.check(encoding)?;
    if listen.is_none() {
        if let Some(n) = neighbors.iter().find(|n| n.passive) {
            return Err(format!(
                "routing/bgp-ls/neighbor '{}' is passive, but no listen-address is set: it could never connect",
                n.address
            ));
        }
    }
    let d = &damping_leaves;
    let damping = if d.get("enabled").is_none_or(|v| v == "true") {
        let x = Damping {
            half_life: Duration::from_secs(num(d, "half-life", 900)?),
            reuse: num(d, "reuse-limit", 750u32)?.into(),
            suppress: num(d, "suppress-limit", 2000u32)?.into(),
            max_suppress: Duration::from_secs(num(d, "max-suppress-time", 3600)?),
            withdrawal_penalty: num(d, "withdrawal-penalty", 1000u32)?.into(),
            change_penalty: num(d, "attribute-change-penalty", 0u32)?.into(),
        };
        if !x.can_suppress() {
            return Err(format!(
                "routing/bgp-ls/damping: with half-life {} s and max-suppress-time {} s no penalty can exceed \
                 suppress-limit {} (the penalty is capped at reuse-limit x 2^(max-suppress-time / half-life))",
                x.half_life.as_secs(),
                x.max_suppress.as_secs(),
                x.suppress
            ));
        }
        if x.reuse >= x.suppress {
            return Err(format!(
                "routing/bgp-ls/damping: reuse-limit ({}) must be below suppress-limit ({})",
                x.reuse, x.suppress
            ));
        }
        Some(x)
    } else {
        None
    };
    let rib = RibParams {
        nlri: NlriParams { protocol, identifier: num(&top, "identifier", 0)?, local_as, router_id },
        code_points: cp,
        encoding,
        min_interval: ms("min-advertisement-interval", 5000)?,
        damping,
        prefixes,
        carried: if carried == 0 { super::encode::ALL_METRICS } else { carried },
    };
    let advertise = match top.get("advertise").map(String::as_str) {
        Some("when-c-ps-unreachable") => Advertise::WhenCpsUnreachable,
        _ => Advertise::Always,
    };
    Ok(Some(SpeakerConfig { advertise, session, rib, neighbors }))
}

/// AS 0 is reserved (RFC 7607) and AS_TRANS is never a speaker's own AS (RFC 6793).
fn check_as(what: &str, asn: u32) -> Result<(), String> {
    match asn {
        0 => Err(format!("routing/bgp-ls/{what}: AS 0 is reserved (RFC 7607)")),
        23456 => Err(format!("routing/bgp-ls/{what}: 23456 is AS_TRANS (RFC 6793), not an AS a speaker has")),
        _ => Ok(()),
    }
}

type Prepared = (Option<SpeakerConfig>, Option<std::net::TcpListener>);

/// Feeds commits to the speaker.
pub struct BgpConfig {
    pub speaker: Arc<Speaker>,
    pending: Mutex<Option<Prepared>>,
}

impl BgpConfig {
    /// Starts the speaker as configured in `t` (running at start-up); a configuration it
    /// cannot run is logged and left out.
    pub fn load(speaker: Arc<Speaker>, t: &DataTree<'static>) -> BgpConfig {
        match speaker_config(t).and_then(|c| {
            let l = c.as_ref().map(|c| speaker.bind(c)).transpose()?.flatten();
            Ok((c, l))
        }) {
            Ok((c, l)) => speaker.apply(c, l),
            Err(e) => tracing::error!("routing/bgp-ls in running is not usable, left out: {e}"),
        }
        BgpConfig { speaker, pending: Mutex::new(None) }
    }
}

impl ConfigConsumer for BgpConfig {
    fn name(&self) -> &str {
        "BGP-LS speaker"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if tx.changes_under(BGP_LS).next().is_none() {
            return Ok(());
        }
        let c = speaker_config(tx.config)?;
        let l = match &c {
            Some(c) => self.speaker.bind(c)?,
            None => None,
        };
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some((c, l));
        Ok(())
    }

    fn abort(&self, _tx: &Transaction<'_>) {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn apply(&self, _tx: &Transaction<'_>) {
        let Some((c, l)) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        self.speaker.apply(c, l);
    }
}
