//! Configuration in: `ip-metrics` (YANG `cats-ip-metrics`) from datastore commits. `prepare`
//! binds the collector's socket so that a port in use refuses the commit with the reason.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use yang2::data::{Data, DataNodeRef, DataTree};

use super::{lock, Ipm, ROOT};
use crate::datastore::{ConfigConsumer, Transaction};

#[derive(Clone, Debug, PartialEq)]
pub struct CollectorConfig {
    pub listen: SocketAddr,
    pub template_lifetime: Duration,
    pub max_templates: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SiteConfig {
    pub id: String,
    pub a_ers: Vec<IpAddr>,
    pub servers: Vec<IpAddr>,
    pub capacity: Option<u32>,
    pub preference: u32,
}

impl SiteConfig {
    /// The server addresses whose traffic counts: the configured ones, else the
    /// application-id.
    pub fn servers_or(&self, app: IpAddr) -> Vec<IpAddr> {
        if self.servers.is_empty() {
            vec![app]
        } else {
            self.servers.clone()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlowGroup {
    pub name: String,
    pub prefixes: Vec<ipnet::IpNet>,
    pub preferences: BTreeMap<String, u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AppConfig {
    pub id: IpAddr,
    pub sites: Vec<SiteConfig>,
    pub groups: Vec<FlowGroup>,
}

impl AppConfig {
    /// The flow group of `source`: the longest matching source-prefix over all groups.
    pub fn group_of(&self, source: IpAddr) -> Option<&FlowGroup> {
        let source = source.to_canonical();
        self.groups
            .iter()
            .flat_map(|g| g.prefixes.iter().filter(|p| p.contains(&source)).map(move |p| (p.prefix_len(), g)))
            .max_by_key(|(len, _)| *len)
            .map(|(_, g)| g)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EstimateConfig {
    pub window: Duration,
    pub percentile: u8,
    pub min_intervals: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IpmConfig {
    pub collector: Option<CollectorConfig>,
    pub sender: Option<super::stamp::SenderConfig>,
    pub reflector: Option<super::stamp::ReflectorConfig>,
    pub group_timeout: Duration,
    pub max_members: usize,
    pub weights: [f64; 4],
    /// Learned weights (load-index/weights 'learned'): min-samples and forgetting.
    pub learning: Option<(u64, f64)>,
    pub interval: Duration,
    pub w: f64,
    pub estimate: EstimateConfig,
    pub applications: Vec<AppConfig>,
}

impl Default for IpmConfig {
    fn default() -> Self {
        IpmConfig {
            collector: None,
            sender: None,
            reflector: None,
            group_timeout: Duration::from_secs(300),
            max_members: 1024,
            weights: [0.25; 4],
            learning: None,
            interval: Duration::from_secs(10),
            w: 0.5,
            estimate: EstimateConfig { window: Duration::from_secs(86_400), percentile: 90, min_intervals: 6 },
            applications: Vec::new(),
        }
    }
}

fn leaves(n: &DataNodeRef<'_, 'static>) -> BTreeMap<String, String> {
    n.children()
        .filter(|c| c.schema().kind() == yang2::schema::SchemaNodeKind::Leaf)
        .map(|c| (c.schema().name().to_owned(), c.value_canonical().unwrap_or_default()))
        .collect()
}

fn values(n: &DataNodeRef<'_, 'static>, name: &str) -> Vec<String> {
    n.children().filter(|c| c.schema().name() == name).filter_map(|c| c.value_canonical()).collect()
}

fn num<T: std::str::FromStr>(m: &BTreeMap<String, String>, path: &str, k: &str, default: T) -> Result<T, String> {
    match m.get(k) {
        Some(v) => v.parse().map_err(|_| format!("{path}/{k}: '{v}' is not a number")),
        None => Ok(default),
    }
}

fn addr(path: &str, v: &str) -> Result<IpAddr, String> {
    v.parse::<IpAddr>().map(|a| a.to_canonical()).map_err(|_| format!("{path}: '{v}' is not an IP address"))
}

/// The configuration in `t` (defaults when `ip-metrics` is absent).
pub fn ipm_config(t: &DataTree<'static>) -> Result<IpmConfig, String> {
    let mut c = IpmConfig::default();
    let Some(root) = t.find_xpath(ROOT).ok().and_then(|mut s| s.next()) else { return Ok(c) };
    let top = leaves(&root);
    c.w = num(&top, "ip-metrics", "w", 0.5)?;
    c.group_timeout = Duration::from_secs(num(&top, "ip-metrics", "group-timeout", 300u64)?);
    c.max_members = num(&top, "ip-metrics", "max-group-members", 1024usize)?;
    for n in root.children() {
        match n.schema().name() {
            "collector" => {
                let m = leaves(&n);
                if m.get("enabled").map(String::as_str) == Some("true") {
                    let a = m.get("listen-address").map(String::as_str).unwrap_or("::");
                    c.collector = Some(CollectorConfig {
                        listen: SocketAddr::new(
                            addr("ip-metrics/collector/listen-address", a)?,
                            num(&m, "ip-metrics/collector", "listen-port", 4739u16)?,
                        ),
                        template_lifetime: Duration::from_secs(num(
                            &m,
                            "ip-metrics/collector",
                            "template-lifetime",
                            1800u64,
                        )?),
                        max_templates: num(&m, "ip-metrics/collector", "max-templates", 1024usize)?,
                    });
                }
            }
            "load-index" => {
                let m = leaves(&n);
                let p = "ip-metrics/load-index";
                c.weights = [
                    num(&m, p, "w1", 0.25)?,
                    num(&m, p, "w2", 0.25)?,
                    num(&m, p, "w3", 0.25)?,
                    num(&m, p, "w4", 0.25)?,
                ];
                c.interval = Duration::from_secs(num(&m, p, "measurement-interval", 10u64)?);
                if m.get("weights").map(String::as_str) == Some("learned") {
                    let l =
                        n.children().find(|x| x.schema().name() == "learning").map(|x| leaves(&x)).unwrap_or_default();
                    let lp = "ip-metrics/load-index/learning";
                    c.learning = Some((num(&l, lp, "min-samples", 20u64)?, num(&l, lp, "forgetting", 0.99f64)?));
                }
            }
            "capacity-estimate" => {
                let m = leaves(&n);
                let p = "ip-metrics/capacity-estimate";
                c.estimate = EstimateConfig {
                    window: Duration::from_secs(num(&m, p, "window", 86_400u64)?),
                    percentile: num(&m, p, "percentile", 90u8)?,
                    min_intervals: num(&m, p, "min-intervals", 6u32)?,
                };
            }
            "stamp" => stamp(&n, &mut c)?,
            "application" => c.applications.push(application(&n)?),
            _ => {}
        }
    }
    Ok(c)
}

fn stamp(n: &DataNodeRef<'_, 'static>, c: &mut IpmConfig) -> Result<(), String> {
    for part in n.children() {
        let m = leaves(&part);
        if m.get("enabled").map(String::as_str) != Some("true") {
            continue;
        }
        match part.schema().name() {
            "sender" => {
                let p = "ip-metrics/stamp/sender";
                c.sender = Some(super::stamp::SenderConfig {
                    interval: Duration::from_millis(num(&m, p, "interval", 10_000u64)?),
                    timeout: Duration::from_millis(num(&m, p, "timeout", 1000u64)?),
                    port: num(&m, p, "reflector-port", 862u16)?,
                    window: num(&m, p, "window", 16usize)?,
                });
            }
            "reflector" => {
                let p = "ip-metrics/stamp/reflector";
                let a = m.get("listen-address").map(String::as_str).unwrap_or("::");
                let clients = values(&part, "client-prefix")
                    .iter()
                    .map(|v| {
                        v.parse::<ipnet::IpNet>().map(|p| p.trunc()).map_err(|_| format!("{p}/client-prefix: '{v}'"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                c.reflector = Some(super::stamp::ReflectorConfig {
                    listen: SocketAddr::new(
                        addr(&format!("{p}/listen-address"), a)?,
                        num(&m, p, "listen-port", 862u16)?,
                    ),
                    clients,
                    max_rate: num(&m, p, "max-rate", 1000u32)?,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn application(n: &DataNodeRef<'_, 'static>) -> Result<AppConfig, String> {
    let m = leaves(n);
    let id_text = m.get("application-id").cloned().unwrap_or_default();
    let path = format!("ip-metrics/application[{id_text}]");
    let id = addr(&path, &id_text)?;
    if matches!(id_text.parse::<IpAddr>(), Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some()) {
        return Err(format!("{path}: write an IPv4-mapped IPv6 application-id in its IPv4 form, {id}"));
    }
    let mut app = AppConfig { id, sites: Vec::new(), groups: Vec::new() };
    for c in n.children() {
        match c.schema().name() {
            "site" => {
                let s = leaves(&c);
                let sid = s.get("site-id").cloned().unwrap_or_default();
                let sp = format!("{path}/site[{sid}]");
                let a_ers = values(&c, "a-er").iter().map(|v| addr(&sp, v)).collect::<Result<Vec<_>, _>>()?;
                let servers =
                    values(&c, "server-address").iter().map(|v| addr(&sp, v)).collect::<Result<Vec<_>, _>>()?;
                app.sites.push(SiteConfig {
                    capacity: s
                        .get("capacity-index")
                        .map(|v| v.parse())
                        .transpose()
                        .map_err(|_| format!("{sp}/capacity-index"))?,
                    preference: num(&s, &sp, "preference-index", 1u32)?,
                    id: sid,
                    a_ers,
                    servers,
                });
            }
            "flow-group" => {
                let name = leaves(&c).get("name").cloned().unwrap_or_default();
                let gp = format!("{path}/flow-group[{name}]");
                let prefixes = values(&c, "source-prefix")
                    .iter()
                    .map(|v| v.parse::<ipnet::IpNet>().map(|p| p.trunc()).map_err(|_| format!("{gp}: '{v}'")))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut preferences = BTreeMap::new();
                for s in c.children().filter(|x| x.schema().name() == "site") {
                    let l = leaves(&s);
                    let sid = l.get("site-id").cloned().unwrap_or_default();
                    preferences.insert(sid, num(&l, &gp, "preference-index", 1u32)?);
                }
                app.groups.push(FlowGroup { name, prefixes, preferences });
            }
            _ => {}
        }
    }
    // One A-ER and server address pair counts for one site of an application only: the
    // collector could not tell which of the two sites a flow belongs to.
    let mut seen: BTreeMap<(IpAddr, IpAddr), &str> = BTreeMap::new();
    for s in &app.sites {
        for a in &s.a_ers {
            for srv in s.servers_or(id) {
                if let Some(other) = seen.insert((*a, srv), &s.id) {
                    return Err(format!(
                        "{path}: sites '{other}' and '{}' both count the traffic of {srv} at A-ER {a}; give them \
                         different a-er or server-address",
                        s.id
                    ));
                }
            }
        }
    }
    Ok(app)
}

/// Feeds commits to the IP-layer metrics.
pub struct IpmConsumer {
    pub ipm: Arc<Ipm>,
    pending: Mutex<Option<(IpmConfig, super::Sockets)>>,
}

impl IpmConsumer {
    pub fn load(ipm: Arc<Ipm>, t: &DataTree<'static>) -> IpmConsumer {
        match ipm_config(t).and_then(|c| Ok((c.clone(), ipm.bind(&c)?))) {
            Ok((c, s)) => ipm.apply(c, s),
            Err(e) => tracing::error!("ip-metrics in running is not usable, left out: {e}"),
        }
        IpmConsumer { ipm, pending: Mutex::new(None) }
    }
}

impl ConfigConsumer for IpmConsumer {
    fn name(&self) -> &str {
        "IP-layer metrics"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if tx.changes_under(ROOT).next().is_none() {
            return Ok(());
        }
        let c = ipm_config(tx.config)?;
        let s = self.ipm.bind(&c)?;
        *lock(&self.pending) = Some((c, s));
        Ok(())
    }

    fn abort(&self, _tx: &Transaction<'_>) {
        lock(&self.pending).take();
    }

    fn apply(&self, _tx: &Transaction<'_>) {
        let Some((c, s)) = lock(&self.pending).take() else { return };
        self.ipm.apply(c, s);
    }
}
