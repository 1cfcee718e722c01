//! State out: `hierarchy/subordinate/state`, rendered when the operational datastore is
//! read.

use std::sync::Arc;

use yang2::data::DataTree;

use super::config::HIERARCHY;
use super::Hierarchy;
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;

pub struct HierarchyState {
    pub hierarchy: Arc<Hierarchy>,
}

impl StateProvider for HierarchyState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let states = self.hierarchy.states();
        if states.is_empty() {
            return Ok(());
        }
        let counts = self.hierarchy.contributions_blocking();
        for (name, st) in states {
            let b = format!("{HIERARCHY}/subordinate[name={}]/state", quote(&name));
            let mut put = |leaf: &str, v: &str| set(tree, &format!("{b}/{leaf}"), Some(v));
            put("status", st.status.yang())?;
            if let Some(t) = st.connected_since {
                put("connected-since", &yang_time(t))?;
            }
            if let Some(v) = st.session_id {
                put("session-id", &v.to_string())?;
            }
            if let Some(v) = st.subscription_id {
                put("subscription-id", &v.to_string())?;
            }
            if let Some(v) = &st.host_key_fingerprint {
                put("host-key-fingerprint", v)?;
            }
            if let Some(t) = st.last_update {
                put("last-update", &yang_time(t))?;
            }
            for (leaf, v) in [
                ("updates-received", st.updates),
                ("resyncs", st.resyncs),
                ("sessions", st.sessions),
                ("connect-failures", st.connect_failures),
                ("host-key-mismatches", st.host_key_mismatches),
                ("scis-contributed", u64::from(counts.get(&name).copied().unwrap_or(0))),
                ("duplicates", st.duplicates),
                ("refused", st.refused),
                ("withdrawals", st.withdrawals),
                ("dampening-period", u64::from(st.dampening_cs)),
                ("dampening-changes", st.dampening_changes),
            ] {
                put(leaf, &v.to_string())?;
            }
            if let Some((e, t)) = &st.last_error {
                put("last-error", e)?;
                put("last-error-time", &yang_time(*t))?;
            }
            for (id, holder) in &st.duplicate {
                let d = format!("{b}/duplicate[csci-id={}]/held-by", quote(id));
                set(tree, &d, Some(holder))?;
            }
        }
        Ok(())
    }
}
