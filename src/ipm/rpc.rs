//! The `select-site` RPC (cats-ip-metrics): ranks an application's sites for the caller by
//! the section 4 algorithm, with the caller's RTT-ANYCAST (its RTT to each A-ER, section 3.5)
//! and the preferences of the caller's flow group (section 3.4).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use yang2::data::{Data, DataTree};

use super::config::AppConfig;
use super::select::{rank, Candidate, Ranked};
use super::{decimal, index_value, Ipm, Meter, SiteKey, NS};
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::AppRpc;
use crate::text::xml;

pub struct IpmRpcs {
    pub ipm: Arc<Ipm>,
}

fn invalid(leaf: &str, msg: String) -> RpcError {
    RpcError::application(ErrorTag::InvalidValue, msg).with_bad_element(leaf)
}

/// The input of select-site, parsed.
struct Input {
    app: IpAddr,
    source: Option<IpAddr>,
    group: Option<String>,
    ingress: Option<String>,
    rtt: HashMap<IpAddr, u32>,
}

fn input(t: &DataTree<'static>) -> Result<Input, RpcError> {
    let leaf = |name: &str| {
        t.find_path(&format!("/cats-ip-metrics:select-site/{name}")).ok().and_then(|n| n.value_canonical())
    };
    let ip = |name: &str, v: String| {
        v.parse::<IpAddr>().map(|a| a.to_canonical()).map_err(|_| invalid(name, format!("'{v}'")))
    };
    let app = ip("application-id", leaf("application-id").unwrap_or_default())?;
    let source = leaf("source-address").map(|v| ip("source-address", v)).transpose()?;
    let mut rtt = HashMap::new();
    if let Ok(set) = t.find_xpath("/cats-ip-metrics:select-site/rtt") {
        for n in set {
            let (mut a, mut v) = (None, None);
            for c in n.children() {
                match c.schema().name() {
                    "a-er" => a = c.value_canonical(),
                    "value" => v = c.value_canonical(),
                    _ => {}
                }
            }
            if let (Some(a), Some(v)) = (a, v) {
                let a = ip("a-er", a)?;
                let v: u32 = v.parse().map_err(|_| invalid("value", format!("'{v}'")))?;
                rtt.insert(a, v);
            }
        }
    }
    Ok(Input { app, source, group: leaf("flow-group"), ingress: leaf("ingress"), rtt })
}

/// The candidates of application `a` with the preferences `prefs` and, per A-ER, the RTTs
/// in `rtt`, or the ones the agent measured when `rtt` is empty.
pub fn candidates(
    ipm: &Ipm,
    meters: &HashMap<SiteKey, Meter>,
    a: &AppConfig,
    prefs: &BTreeMap<String, u32>,
    rtt: &HashMap<IpAddr, u32>,
) -> Vec<Candidate> {
    a.sites
        .iter()
        .map(|s| {
            let m = meters.get(&(a.id, s.id.clone()));
            Candidate {
                site_id: s.id.clone(),
                // An idle site's Load Index of 0 counts as 1 (one packet's worth), so that its
                // ratios stay finite while it still wins the load term.
                load: m.and_then(|m| m.last.map(|l| l.load.max(1.0))),
                capacity: Ipm::capacity(s.capacity, m).value(),
                preference: f64::from(prefs.get(&s.id).copied().unwrap_or(s.preference)),
                delay: if rtt.is_empty() {
                    ipm.measured_delay(&s.a_ers)
                } else {
                    s.a_ers.iter().filter_map(|e| rtt.get(e).copied()).min()
                },
            }
        })
        .collect()
}

/// The ranking for `app` with the caller's RTTs and flow group.
pub fn select(
    ipm: &Ipm,
    app: IpAddr,
    source: Option<IpAddr>,
    group: Option<&str>,
    rtt: &HashMap<IpAddr, u32>,
) -> Result<(f64, Option<String>, Vec<Ranked>), RpcError> {
    ipm.with(|c, meters, _| {
        let a =
            c.applications.iter().find(|a| a.id == app).ok_or_else(|| {
                invalid("application-id", format!("application {app} is not configured in ip-metrics"))
            })?;
        let group = match group {
            Some(g) => Some(
                a.groups
                    .iter()
                    .find(|x| x.name == g)
                    .ok_or_else(|| invalid("flow-group", format!("application {app} has no flow-group '{g}'")))?,
            ),
            None => source.and_then(|s| a.group_of(s)),
        };
        let prefs = super::preferences(c, app, group.map(|g| g.name.as_str()));
        let sites = candidates(ipm, meters, a, &prefs, rtt);
        Ok((c.w, group.map(|g| g.name.clone()), rank(c.w, &sites)))
    })
}

/// The output of select-site as XML children, in schema order.
pub fn output(w: f64, group: Option<&str>, ranked: &[Ranked]) -> String {
    let mut out = format!("<w xmlns=\"{NS}\">{}</w>", decimal(w, 3));
    if let Some(g) = group {
        out.push_str(&format!("<flow-group xmlns=\"{NS}\">{}</flow-group>", xml(g)));
    }
    for r in ranked {
        out.push_str(&format!("<site xmlns=\"{NS}\">"));
        out.push_str(&ranked_site(r));
        out.push_str("</site>");
    }
    out
}

/// The leaves of a `ranked-site` as XML, in schema order.
pub fn ranked_site(r: &Ranked) -> String {
    let mut out = String::new();
    {
        let c = &r.candidate;
        out.push_str(&format!("<site-id>{}</site-id><rank>{}</rank>", xml(&c.site_id), r.rank));
        if let Some(cost) = r.cost {
            out.push_str(&format!("<cost>{}</cost>", decimal(cost, 6)));
        }
        out.push_str(&format!("<wins>{}</wins>", r.wins));
        if let Some(l) = c.load {
            out.push_str(&format!("<load-index>{}</load-index>", index_value(l)));
        }
        if let Some(cp) = c.capacity {
            out.push_str(&format!("<capacity-index>{}</capacity-index>", index_value(cp)));
        }
        out.push_str(&format!("<preference-index>{}</preference-index>", c.preference.round() as u64));
        if let Some(d) = c.delay {
            out.push_str(&format!("<delay>{d}</delay>"));
        }
        if let Some(i) = r.incomplete {
            out.push_str(&format!("<incomplete>{}</incomplete>", i.yang()));
        }
    }
    out
}

impl AppRpc for IpmRpcs {
    fn call(&self, module: &str, name: &str, t: &DataTree<'static>) -> Result<String, RpcError> {
        match (module, name) {
            ("cats-ip-metrics", "select-site") => {
                let i = input(t)?;
                let (w, group, ranked) = select(&self.ipm, i.app, i.source, i.group.as_deref(), &i.rtt)?;
                if let Some(ingress) = &i.ingress {
                    self.ipm.join(i.app, ingress, &i.rtt)?;
                    self.ipm.publish();
                }
                Ok(output(w, group.as_deref(), &ranked))
            }
            ("cats-ip-metrics", "load-feedback") => {
                let leaf = |name: &str| {
                    t.find_path(&format!("/cats-ip-metrics:load-feedback/{name}"))
                        .ok()
                        .and_then(|n| n.value_canonical())
                };
                let a = leaf("application-id").unwrap_or_default();
                let app = a.parse::<IpAddr>().map_err(|_| invalid("application-id", format!("'{a}'")))?.to_canonical();
                let v = leaf("value").unwrap_or_default();
                let value: f64 = v.parse().map_err(|_| invalid("value", format!("'{v}'")))?;
                self.ipm.feedback(
                    app,
                    &leaf("site-id").unwrap_or_default(),
                    value,
                    leaf("interval-start").as_deref(),
                )?;
                Ok(String::new())
            }
            _ => Err(RpcError::protocol(ErrorTag::OperationNotSupported, format!("{module}:{name} is not served"))
                .with_bad_element(name)),
        }
    }
}
