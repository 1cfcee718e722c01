//! Configuration in: `overload-control` (YANG `cats-sma-overload`) from datastore commits.

use std::sync::Arc;
use std::time::Duration;

use yang2::data::{Data, DataTree};

use super::report::{ReportingNode, ReportingSettings};
use super::wire::OLR_DEFAULT_ALGO;
use super::{Overload, Role, Settings};
use crate::datastore::tree::leaf;
use crate::datastore::{ConfigConsumer, Transaction};

pub const OVERLOAD: &str = "/cats-sma:cats-sma/cats-sma-overload:overload-control";

/// The settings in a configuration tree (the YANG defaults where nothing is configured).
pub fn settings(t: &DataTree<'static>) -> Settings {
    let l = |p: &str| leaf(t, &format!("{OVERLOAD}/{p}"));
    let d = Settings::default();
    let pct = |p: &str, dflt: u8| l(p).and_then(|v| v.parse::<u8>().ok()).map_or(dflt, |v| v.min(100));
    let mut algorithms = 0;
    let mut any = false;
    if let Ok(set) = t.find_xpath(&format!("{OVERLOAD}/algorithm")) {
        for n in set {
            any = true;
            if n.value_canonical().is_some_and(|v| v.ends_with(":loss") || v == "loss") {
                algorithms |= OLR_DEFAULT_ALGO;
            }
        }
    }
    Settings {
        enabled: l("enabled").map_or(d.enabled, |v| v == "true"),
        algorithms: if any { algorithms } else { d.algorithms },
        role: match l("role").as_deref() {
            Some("reacting-node") => Role::Reacting,
            Some("reporting-node") => Role::Reporting,
            Some(_) => Role::Both,
            None => d.role,
        },
        default_validity: l("default-validity-duration").and_then(|v| v.parse().ok()).unwrap_or(d.default_validity),
        min_reduction: pct("min-reduction-percentage", d.min_reduction),
        max_reduction: pct("max-reduction-percentage", d.max_reduction),
        divert: l("divert-before-throttle").map_or(d.divert, |v| v == "true"),
    }
}

/// `overload-control/reporting` (the YANG defaults where nothing is configured).
pub fn reporting(t: &DataTree<'static>) -> ReportingSettings {
    let l = |p: &str| leaf(t, &format!("{OVERLOAD}/reporting/{p}"));
    let n = |p: &str| l(p).and_then(|v| v.parse::<u64>().ok());
    let d = ReportingSettings::default();
    ReportingSettings {
        interval: n("evaluation-interval").map_or(d.interval, Duration::from_millis),
        rate_threshold: n("rate-threshold").map_or(d.rate_threshold, |v| v.min(u64::from(u32::MAX)) as u32),
        queue_threshold: n("queue-threshold").map_or(d.queue_threshold, |v| v.min(100) as u8),
        lag_threshold: n("lag-threshold").map_or(d.lag_threshold, Duration::from_millis),
        cpu_threshold: n("cpu-threshold").map_or(d.cpu_threshold, |v| v.min(100) as u8),
        reduction_limit: n("reduction-limit").map_or(d.reduction_limit, |v| v.min(100) as u8),
        validity: n("validity-duration").map_or(d.validity, |v| v.min(u64::from(super::wire::MAX_VALIDITY)) as u32),
        mqtt_control_topic: l("mqtt-control-topic").unwrap_or(d.mqtt_control_topic),
    }
}

/// Takes `overload-control` from every commit that touches it, for both roles.
pub struct OverloadConsumer {
    /// The reacting node's (the C-PS adapters').
    pub overload: Arc<Overload>,
    /// The reporting node's (the collectors').
    pub reporting: Arc<ReportingNode>,
}

impl OverloadConsumer {
    /// The consumer, with the settings of the running configuration applied.
    pub fn load(
        overload: Arc<Overload>,
        reporting: Arc<ReportingNode>,
        running: &DataTree<'static>,
    ) -> OverloadConsumer {
        let c = OverloadConsumer { overload, reporting };
        c.take(running);
        c
    }

    fn take(&self, t: &DataTree<'static>) {
        let s = settings(t);
        self.overload.set_settings(s.clone());
        self.reporting.set_settings(s, reporting(t));
        self.reporting.set_csma_id(&crate::cps::config::identity(t).csma_id);
    }
}

impl ConfigConsumer for OverloadConsumer {
    fn name(&self) -> &str {
        "overload control"
    }

    fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
        Ok(())
    }

    fn apply(&self, tx: &Transaction<'_>) {
        if tx.changes_under(OVERLOAD).next().is_some() || tx.changes_under("/cats-sma:cats-sma/agent").next().is_some()
        {
            self.take(tx.config);
        }
    }
}
