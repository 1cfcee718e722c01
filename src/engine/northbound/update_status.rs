//! The Update Controller's state in the operational datastore
//! (`/cats-sma/policy/update-control/status`): the heartbeat interval in force (adaptive
//! heartbeat), the advertisement counters and high-load shedding. Read from the
//! controller's published statistics, not from the engine task.

use std::fmt::Write as _;

use crate::datastore::tree::yang_time;
use crate::engine::update::UpdateStats;

const NS_POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";

/// The `policy` subtree holding the status, as XML inside `<cats-sma>` (last: the policy
/// module's augment follows the base module's own nodes in schema order).
pub fn xml(out: &mut String, s: &UpdateStats) {
    let _ = write!(
        out,
        "<policy xmlns=\"{NS_POLICY}\"><update-control><status>\
         <effective-heartbeat-interval>{}</effective-heartbeat-interval>\
         <advertisements>{}</advertisements><heartbeats>{}</heartbeats>\
         <suppressed-updates>{}</suppressed-updates><load-shedding><active>{}</active>",
        u32::try_from(s.heartbeat_interval.as_millis()).unwrap_or(u32::MAX),
        s.advertisements,
        s.heartbeats,
        s.suppressed,
        s.load_shedding_since.is_some(),
    );
    if let Some(since) = s.load_shedding_since {
        let _ = write!(out, "<since>{}</since>", yang_time(since));
    }
    let _ = write!(
        out,
        "<report-rate>{}</report-rate><shed-advertisements>{}</shed-advertisements>\
         </load-shedding></status></update-control></policy>",
        s.report_rate, s.shed_advertisements
    );
}
