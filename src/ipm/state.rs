//! State out: the collector's counters and exporters, and each application site's counters,
//! Load Index and Capacity Index, rendered into `ip-metrics` when operational is read.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use yang2::data::DataTree;

use super::{index_value, Ipm, ROOT};
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;

pub struct IpmState {
    pub ipm: Arc<Ipm>,
}

fn counts(tree: &mut DataTree<'static>, base: &str, c: &super::Counts) -> Result<(), RpcError> {
    for (leaf, v) in [
        ("to-packets", c.to_packets),
        ("from-packets", c.from_packets),
        ("to-bytes", c.to_bytes),
        ("from-bytes", c.from_bytes),
    ] {
        set(tree, &format!("{base}/{leaf}"), Some(&v.to_string()))?;
    }
    Ok(())
}

/// One `ranked-site` entry under `list` (a `site` list path without its key).
fn ranked(tree: &mut DataTree<'static>, list: &str, r: &super::select::Ranked) -> Result<(), RpcError> {
    let c = &r.candidate;
    let base = format!("{list}[site-id={}]", quote(&c.site_id));
    let mut leaves: Vec<(&str, String)> = vec![("rank", r.rank.to_string())];
    if let Some(v) = r.cost {
        leaves.push(("cost", super::decimal(v, 6)));
    }
    leaves.push(("wins", r.wins.to_string()));
    if let Some(v) = c.load {
        leaves.push(("load-index", index_value(v)));
    }
    if let Some(v) = c.capacity {
        leaves.push(("capacity-index", index_value(v)));
    }
    leaves.push(("preference-index", (c.preference.round() as u64).to_string()));
    if let Some(v) = c.delay {
        leaves.push(("delay", v.to_string()));
    }
    if let Some(i) = r.incomplete {
        leaves.push(("incomplete", i.yang().to_owned()));
    }
    for (leaf, v) in leaves {
        set(tree, &format!("{base}/{leaf}"), Some(&v))?;
    }
    Ok(())
}

impl StateProvider for IpmState {
    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let collector = format!("{ROOT}/collector");
        if let Some(bound) = self.ipm.listening() {
            let st = format!("{collector}/statistics");
            set(tree, &format!("{st}/listening-port"), Some(&bound.port().to_string()))?;
            let s = &self.ipm.stats;
            for (leaf, v) in [
                ("messages", &s.messages),
                ("malformed", &s.malformed),
                ("unknown-exporter", &s.unknown_exporter),
                ("without-template", &s.without_template),
                ("records", &s.records),
                ("matched-records", &s.matched_records),
                ("withdrawals-ignored", &s.withdrawals_ignored),
                ("templates-expired", &s.templates_expired),
                ("templates-refused", &s.templates_refused),
            ] {
                set(tree, &format!("{st}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
            }
        }
        if let Some(bound) = self.ipm.reflecting() {
            let st = format!("{ROOT}/stamp/reflector/statistics");
            set(tree, &format!("{st}/listening-port"), Some(&bound.port().to_string()))?;
            let s = &self.ipm.reflector_stats;
            for (leaf, v) in [
                ("reflected", &s.reflected),
                ("too-short", &s.too_short),
                ("not-allowed", &s.not_allowed),
                ("rate-limited", &s.rate_limited),
            ] {
                set(tree, &format!("{st}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
            }
        }
        let (fit, samples, in_use) = self.ipm.learning();
        if self.ipm.with(|c, _, _| c.learning.is_some()) || samples > 0 {
            let f = format!("{ROOT}/load-index/learning/fit");
            set(tree, &format!("{f}/samples"), Some(&samples.to_string()))?;
            if let Some(fit) = fit {
                for (k, w) in fit.weights.iter().enumerate() {
                    set(tree, &format!("{f}/w{}", k + 1), Some(&super::decimal(*w, 6)))?;
                }
                let r2 = if fit.r_squared < 0.0 {
                    format!("-{}", super::decimal(-fit.r_squared, 6))
                } else {
                    super::decimal(fit.r_squared, 6)
                };
                set(tree, &format!("{f}/r-squared"), Some(&r2))?;
            }
            set(tree, &format!("{f}/in-use"), Some(if in_use { "true" } else { "false" }))?;
        }
        let apps: Vec<std::net::IpAddr> = self.ipm.with(|c, _, _| c.applications.iter().map(|a| a.id).collect());
        let members: std::collections::HashMap<_, _> = apps.iter().map(|a| (*a, self.ipm.members(*a))).collect();
        self.ipm.with(|c, meters, exporters| {
            if c.collector.is_some() {
                for ((from, domain), e) in exporters {
                    let base = format!(
                        "{collector}/exporter[address={}][port='{}'][observation-domain='{domain}']",
                        quote(&from.ip().to_string()),
                        from.port()
                    );
                    set(tree, &format!("{base}/protocol"), Some(e.protocol.yang()))?;
                    set(tree, &format!("{base}/templates"), Some(&e.domain.templates().to_string()))?;
                    set(tree, &format!("{base}/messages"), Some(&e.messages.to_string()))?;
                    set(tree, &format!("{base}/last-message"), Some(&yang_time(e.last)))?;
                }
            }
            for app in &c.applications {
                for site in &app.sites {
                    let m = meters.get(&(app.id, site.id.clone()));
                    let base = format!(
                        "{ROOT}/application[application-id={}]/site[site-id={}]/measurement",
                        quote(&app.id.to_string()),
                        quote(&site.id)
                    );
                    if let Some(m) = m {
                        counts(tree, &format!("{base}/total"), &m.total)?;
                        if let Some(l) = &m.last {
                            let li = format!("{base}/last-interval");
                            set(tree, &format!("{li}/start"), Some(&yang_time(l.start)))?;
                            counts(tree, &li, &l.counts)?;
                            set(tree, &format!("{li}/load-index"), Some(&index_value(l.load)))?;
                        }
                        set(tree, &format!("{base}/history-intervals"), Some(&m.history_len().to_string()))?;
                    }
                    let cap = Ipm::capacity(c, site.capacity, m);
                    if let Some(v) = cap.value() {
                        set(tree, &format!("{base}/capacity-index"), Some(&index_value(v)))?;
                    }
                    set(tree, &format!("{base}/capacity-source"), Some(cap.yang()))?;
                    for a in &site.a_ers {
                        let Some(r) = self.ipm.rtt(*a) else { continue };
                        let rb = format!("{base}/rtt[a-er={}]", quote(&a.to_string()));
                        let mut leaves = vec![
                            ("sent", r.sent.to_string()),
                            ("received", r.received.to_string()),
                            ("lost", r.lost.to_string()),
                        ];
                        if let (Some(l), Some(min), Some(mean)) = (r.latest, r.min(), r.mean()) {
                            leaves.push(("latest", l.to_string()));
                            leaves.push(("min", min.to_string()));
                            leaves.push(("mean", mean.to_string()));
                        }
                        if let Some(t) = r.at {
                            leaves.push(("measured-at", yang_time(t)));
                        }
                        for (leaf, v) in leaves {
                            set(tree, &format!("{rb}/{leaf}"), Some(&v))?;
                        }
                    }
                    if let Some(d) = self.ipm.measured_delay(&site.a_ers) {
                        set(tree, &format!("{base}/delay"), Some(&d.to_string()))?;
                    }
                }
                let app_base = format!("{ROOT}/application[application-id={}]", quote(&app.id.to_string()));
                let prefs = super::preferences(c, app.id, None);
                let none = std::collections::HashMap::new();
                let sites = super::rpc::candidates(&self.ipm, c, meters, app, &prefs, &none);
                for r in super::select::rank(c.w, &sites) {
                    ranked(tree, &format!("{app_base}/selection/site"), &r)?;
                }
                for (ingress, m, left) in members.get(&app.id).map(Vec::as_slice).unwrap_or_default() {
                    let mb = format!("{app_base}/group/member[ingress={}]", quote(ingress));
                    set(tree, &format!("{mb}/joined"), Some(&yang_time(m.joined)))?;
                    set(tree, &format!("{mb}/last-request"), Some(&yang_time(m.last)))?;
                    set(tree, &format!("{mb}/expires-in"), Some(&left.as_secs().to_string()))?;
                    set(tree, &format!("{mb}/requests"), Some(&m.requests.to_string()))?;
                    let sites = super::rpc::candidates(&self.ipm, c, meters, app, &prefs, &m.rtt);
                    for r in super::select::rank(c.w, &sites) {
                        ranked(tree, &format!("{mb}/site"), &r)?;
                    }
                }
            }
            Ok(())
        })
    }
}
