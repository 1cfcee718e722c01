//! State out: each C-PS session (state, backoff, buffer, counters, last acknowledged
//! sequence) rendered into `c-ps/peer/session` when the operational datastore is read.

use std::sync::Arc;

use yang2::data::DataTree;

use super::config::C_PS;
use super::session::lock;
use super::Adapters;
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;

/// The leaves of `session/grpc`.
const GRPC: [&str; 9] = [
    "streams-opened",
    "full-sync-requests",
    "queries-answered",
    "policy-updates-applied",
    "policy-updates-refused",
    "rejected-malformed",
    "rejected-unauthenticated",
    "rejected-replayed",
    "rejected-unsolicited",
];

pub struct CpsState {
    pub adapters: Arc<Adapters>,
}

impl StateProvider for CpsState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        if let Some(k) = self.adapters.keys().signing {
            use base64ct::{Base64, Encoding};
            let base = format!("{C_PS}/signing-key");
            set(tree, &format!("{base}/algorithm"), Some(k.algorithm().jws_alg()))?;
            set(tree, &format!("{base}/key-id"), Some(k.key_id()))?;
            set(tree, &format!("{base}/public-key"), Some(&Base64::encode_string(k.public_key())))?;
            set(tree, &format!("{base}/jwk"), Some(&k.jwk()))?;
        }
        let now = tokio::time::Instant::now();
        for peer in self.adapters.registry.peers() {
            let st = lock(&peer.status).clone();
            let (buffered, dropped, superseded) = {
                let q = lock(&peer.queue);
                (q.len(), q.dropped, q.superseded)
            };
            let base = format!("{C_PS}/peer[name={}]/session", quote(&peer.settings.name));
            let mut leaves: Vec<(&str, String)> = vec![
                ("state", st.state.yang().into()),
                ("buffered-updates", buffered.to_string()),
                ("dropped-updates", dropped.to_string()),
                ("superseded-updates", superseded.to_string()),
                ("sent-updates", st.sent.to_string()),
                ("full-syncs", st.full_syncs.to_string()),
                ("failed-requests", st.failed.to_string()),
                ("rejected-requests", st.rejected.to_string()),
                ("keepalives-sent", st.keepalives_sent.to_string()),
                ("keepalive-supported", st.keepalive_supported.to_string()),
                ("effective-buffer-size", peer.settings.buffer_size.to_string()),
                ("effective-backoff-initial", peer.settings.backoff_initial.as_millis().to_string()),
                ("effective-backoff-max", peer.settings.backoff_max.as_millis().to_string()),
            ];
            if let Some(t) = st.entry_ttl {
                leaves.push(("entry-ttl", t.as_secs().to_string()));
            }
            if let Some(t) = st.refresh_interval {
                leaves.push(("refresh-interval", t.as_secs().to_string()));
            }
            if let Some(until) = st.backoff_until {
                let ms = until.saturating_duration_since(now).as_millis().min(u32::MAX as u128);
                leaves.push(("backoff-remaining", ms.to_string()));
            }
            if let Some(a) = st.last_acked {
                leaves.push(("last-acked-sequence", a.to_string()));
            }
            if let Some(s) = st.last_sent {
                leaves.push(("last-sequence-sent", s.to_string()));
            }
            if let Some(e) = st.last_error {
                leaves.push(("last-error", e));
            }
            if let Some(t) = st.connected_since {
                leaves.push(("connected-since", yang_time(t)));
            }
            if let Some(c) = peer.grpc.get() {
                use crate::cps::grpc::Counters as C;
                let counters = [
                    ("streams-opened", &c.streams_opened),
                    ("full-sync-requests", &c.full_sync_requests),
                    ("queries-answered", &c.queries_answered),
                    ("policy-updates-applied", &c.policy_applied),
                    ("policy-updates-refused", &c.policy_refused),
                    ("rejected-malformed", &c.rejected_malformed),
                    ("rejected-unauthenticated", &c.rejected_unauthenticated),
                    ("rejected-replayed", &c.rejected_replayed),
                    ("rejected-unsolicited", &c.rejected_unsolicited),
                ];
                for (name, v) in counters {
                    leaves.push((name, C::get(v).to_string()));
                }
            }
            for (name, v) in leaves {
                set(
                    tree,
                    &if GRPC.contains(&name) { format!("{base}/grpc/{name}") } else { format!("{base}/{name}") },
                    Some(&v),
                )?;
            }
        }
        Ok(())
    }
}

/// The C-PS sessions in `/metrics`: advertisements sent, queue depth, drops, per peer.
pub struct CpsMetrics {
    pub adapters: Arc<Adapters>,
}

impl crate::mgmt::metrics::Source for CpsMetrics {
    fn reads(&self) -> &'static [(&'static str, &'static str)] {
        &[("cats-sma", "/cats-sma:cats-sma"), ("cats-sma-cps", C_PS)]
    }

    fn collect(&self, out: &mut crate::mgmt::metrics::Exposition) {
        let mut rows = Vec::new();
        for peer in self.adapters.registry.peers() {
            let st = lock(&peer.status).clone();
            let q = lock(&peer.queue);
            rows.push((peer.settings.name.clone(), st, q.len(), q.dropped, q.superseded));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let f = out.gauge("cps_session_state", "Each C-PS session's state (1 for the current value)");
        for (name, st, ..) in &rows {
            f.set(&[("peer", name), ("state", st.state.yang())], 1);
        }
        let f = out.counter("cps_advertisements_sent", "Advertisements the C-PS acknowledged, per peer");
        for (name, st, ..) in &rows {
            f.count(&[("peer", name)], st.sent);
        }
        let f = out.counter("cps_full_syncs", "Full snapshots sent, per peer");
        for (name, st, ..) in &rows {
            f.count(&[("peer", name)], st.full_syncs);
        }
        let f = out.counter("cps_failed_requests", "Requests to the C-PS that failed (transport or 5xx), per peer");
        for (name, st, ..) in &rows {
            f.count(&[("peer", name)], st.failed);
        }
        let f = out.gauge("cps_queue_depth", "Advertisements buffered for the peer (YANG buffered-updates)");
        for (name, _, len, ..) in &rows {
            f.set(&[("peer", name)], *len as i64);
        }
        let f = out.counter("cps_advertisements_dropped", "Advertisements dropped from a full buffer, per peer");
        for (name, _, _, dropped, _) in &rows {
            f.count(&[("peer", name)], *dropped);
        }
        let f =
            out.counter("cps_advertisements_superseded", "Buffered advertisements replaced by a newer one, per peer");
        for (name, _, _, _, superseded) in &rows {
            f.count(&[("peer", name)], *superseded);
        }
    }
}
