//! Configuration in: `overload-control` (YANG `cats-sma-overload`) from datastore commits.

use std::sync::Arc;

use yang2::data::{Data, DataTree};

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

/// Takes `overload-control` from every commit that touches it.
pub struct OverloadConsumer {
    pub overload: Arc<Overload>,
}

impl OverloadConsumer {
    /// The consumer, with the settings of the running configuration applied.
    pub fn load(overload: Arc<Overload>, running: &DataTree<'static>) -> OverloadConsumer {
        overload.set_settings(settings(running));
        OverloadConsumer { overload }
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
        if tx.changes_under(OVERLOAD).next().is_some() {
            self.overload.set_settings(settings(tx.config));
        }
    }
}
