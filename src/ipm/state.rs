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

/// The leaves of one `ranked-site` entry, relative to the list's parent.
fn ranked(out: &mut Vec<(String, String)>, list: &str, r: &super::select::Ranked) {
    let c = &r.candidate;
    let base = format!("{list}[site-id={}]", quote(&c.site_id));
    let mut push = |leaf: &str, v: String| out.push((format!("{base}/{leaf}"), v));
    push("rank", r.rank.to_string());
    if let Some(v) = r.cost {
        push("cost", super::decimal(v, 6));
    }
    push("wins", r.wins.to_string());
    if let Some(v) = c.load {
        push("load-index", index_value(v));
    }
    if let Some(v) = c.capacity {
        push("capacity-index", index_value(v));
    }
    push("preference-index", (c.preference.round() as u64).to_string());
    if let Some(v) = c.delay {
        push("delay", v.to_string());
    }
    if let Some(i) = r.incomplete {
        push("incomplete", i.yang().to_owned());
    }
}

fn counts_into(out: &mut Vec<(String, String)>, base: &str, c: &super::Counts) {
    for (leaf, v) in [
        ("to-packets", c.to_packets),
        ("from-packets", c.from_packets),
        ("to-bytes", c.to_bytes),
        ("from-bytes", c.from_bytes),
    ] {
        out.push((format!("{base}{leaf}"), v.to_string()));
    }
}

/// The on-change objects of the IP-layer metrics (RFC 8641): each as its path and its
/// leaves (relative paths, canonical values). The state renders them, and `Ipm::publish`
/// pushes those that changed.
pub fn objects(ipm: &Ipm) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let (fit, samples, in_use) = ipm.learning();
    if ipm.with(|c, _, _| c.learning.is_some()) || samples > 0 {
        let mut l = vec![("samples".to_owned(), samples.to_string())];
        if let Some(fit) = fit {
            for (k, w) in fit.weights.iter().enumerate() {
                l.push((format!("w{}", k + 1), super::decimal(*w, 6)));
            }
            let r2 = if fit.r_squared < 0.0 {
                format!("-{}", super::decimal(-fit.r_squared, 6))
            } else {
                super::decimal(fit.r_squared, 6)
            };
            l.push(("r-squared".into(), r2));
        }
        l.push(("in-use".into(), in_use.to_string()));
        out.push((format!("{ROOT}/load-index/learning/fit"), l));
    }
    let apps: Vec<std::net::IpAddr> = ipm.with(|c, _, _| c.applications.iter().map(|a| a.id).collect());
    let members: std::collections::HashMap<_, _> = apps.iter().map(|a| (*a, ipm.members(*a))).collect();
    ipm.with(|c, meters, _| {
        for app in &c.applications {
            let app_base = format!("{ROOT}/application[application-id={}]", quote(&app.id.to_string()));
            for site in &app.sites {
                let m = meters.get(&(app.id, site.id.clone()));
                let mut l = Vec::new();
                if let Some(m) = m {
                    counts_into(&mut l, "total/", &m.total);
                    if let Some(li) = &m.last {
                        l.push(("last-interval/start".into(), yang_time(li.start)));
                        counts_into(&mut l, "last-interval/", &li.counts);
                        l.push(("last-interval/load-index".into(), index_value(li.load)));
                    }
                }
                let cap = Ipm::capacity(site.capacity, m);
                if let Some(v) = cap.value() {
                    l.push(("capacity-index".into(), index_value(v)));
                }
                l.push(("capacity-source".into(), cap.yang().into()));
                if let Some(m) = m {
                    l.push(("history-intervals".into(), m.history_len().to_string()));
                }
                for a in &site.a_ers {
                    let Some(r) = ipm.rtt(*a) else { continue };
                    let rb = format!("rtt[a-er={}]", quote(&a.to_string()));
                    if let (Some(v), Some(min), Some(mean)) = (r.latest, r.min(), r.mean()) {
                        l.push((format!("{rb}/latest"), v.to_string()));
                        l.push((format!("{rb}/min"), min.to_string()));
                        l.push((format!("{rb}/mean"), mean.to_string()));
                    }
                    if let Some(t) = r.at {
                        l.push((format!("{rb}/measured-at"), yang_time(t)));
                    }
                    l.push((format!("{rb}/sent"), r.sent.to_string()));
                    l.push((format!("{rb}/received"), r.received.to_string()));
                    l.push((format!("{rb}/lost"), r.lost.to_string()));
                }
                if let Some(d) = ipm.measured_delay(&site.a_ers) {
                    l.push(("delay".into(), d.to_string()));
                }
                out.push((format!("{app_base}/site[site-id={}]/measurement", quote(&site.id)), l));
            }
            let prefs = super::preferences(c, app.id, None);
            let none = std::collections::HashMap::new();
            let sites = super::rpc::candidates(ipm, meters, app, &prefs, &none);
            let mut l = Vec::new();
            for r in super::select::rank(c.w, &sites) {
                ranked(&mut l, "site", &r);
            }
            out.push((format!("{app_base}/selection"), l));
            for (ingress, m, left) in members.get(&app.id).map(Vec::as_slice).unwrap_or_default() {
                let mut l = vec![
                    ("joined".to_owned(), yang_time(m.joined)),
                    ("last-request".to_owned(), yang_time(m.last)),
                    ("expires-in".to_owned(), left.as_secs().to_string()),
                    ("requests".to_owned(), m.requests.to_string()),
                ];
                let sites = super::rpc::candidates(ipm, meters, app, &prefs, &m.rtt);
                for r in super::select::rank(c.w, &sites) {
                    ranked(&mut l, "site", &r);
                }
                out.push((format!("{app_base}/group/member[ingress={}]", quote(ingress)), l));
            }
        }
    });
    out
}

impl StateProvider for IpmState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

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
        self.ipm.with(|c, _, exporters| {
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
            Ok::<(), RpcError>(())
        })?;
        for (path, leaves) in objects(&self.ipm) {
            set(tree, &path, None)?;
            for (leaf, v) in leaves {
                set(tree, &format!("{path}/{leaf}"), Some(&v))?;
            }
        }
        Ok(())
    }
}
