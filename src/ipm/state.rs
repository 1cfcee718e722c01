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
                ("templates-withdrawn", &s.templates_withdrawn),
                ("templates-expired", &s.templates_expired),
                ("templates-refused", &s.templates_refused),
            ] {
                set(tree, &format!("{st}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
            }
        }
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
                }
            }
            Ok(())
        })
    }
}
