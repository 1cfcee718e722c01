//! State out for the collectors: how each pull target and the MQTT connection fare
//! (`collection/pull/target/state`, `collection/mqtt/state`) and what the ingress rate
//! limits refused (`collection/rate-limit/state`), read from the collectors' shared status
//! when the operational datastore is read.

use std::sync::Arc;

use yang2::data::DataTree;

use super::mqtt::{Connection, MqttStatus};
use super::pull::PullStatus;
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::engine::rate_limit::{Ingress, Limit, TRANSPORTS};
use crate::error::RpcError;

const COLLECTION: &str = "/cats-sma:cats-sma/collection";

pub struct CollectorState {
    pub ingress: Arc<Ingress>,
    pub pull: PullStatus,
    pub mqtt: MqttStatus,
}

fn leaves(tree: &mut DataTree<'static>, base: &str, leaves: Vec<(&str, String)>) -> Result<(), RpcError> {
    for (name, v) in leaves {
        set(tree, &format!("{base}/{name}"), Some(&v))?;
    }
    Ok(())
}

/// The `collector-connection-state` leaves.
fn connection(
    out: &mut Vec<(&'static str, String)>,
    last_success: Option<chrono::DateTime<chrono::Utc>>,
    failures: u64,
    last_error: &Option<String>,
    last_error_time: Option<chrono::DateTime<chrono::Utc>>,
) {
    if let Some(t) = last_success {
        out.push(("last-success", yang_time(t)));
    }
    out.push(("failures", failures.to_string()));
    if let Some(e) = last_error {
        out.push(("last-error", e.clone()));
    }
    if let Some(t) = last_error_time {
        out.push(("last-error-time", yang_time(t)));
    }
}

impl StateProvider for CollectorState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        for (id, s) in self.pull.snapshot() {
            let mut out = Vec::new();
            if let Some(scheme) = s.scheme {
                out.push(("transport", scheme.yang().to_owned()));
            }
            out.push(("pulls", s.pulls.to_string()));
            out.push(("stale-pulls", s.stale_pulls.to_string()));
            out.push(("anomaly-pulls", s.anomaly_pulls.to_string()));
            connection(&mut out, s.last_success, s.failures, &s.last_error, s.last_error_time);
            if let Some(x) = &s.sse {
                out.push(("sse/status", x.connection.yang().to_owned()));
                if let Some(v) = x.http_version {
                    out.push(("sse/http-version", v.to_owned()));
                }
                if let Some(t) = x.connected_since {
                    out.push(("sse/connected-since", yang_time(t)));
                }
                out.push(("sse/events-received", x.events.to_string()));
                out.push(("sse/reconnects", x.reconnects.to_string()));
                out.push(("sse/last-event-id", crate::text::printable(&x.last_event_id, 256)));
            }
            leaves(tree, &format!("{COLLECTION}/pull/target[csci-id={}]/state", quote(&id)), out)?;
        }
        let m = self.mqtt.snapshot();
        if m.connection != Connection::Disabled || m.failures > 0 {
            let mut out = vec![("status", m.connection.yang().to_owned())];
            if let Some(tls) = m.tls {
                out.push(("transport", if tls { "tls" } else { "plaintext" }.to_owned()));
            }
            if let Some(t) = m.connected_since {
                out.push(("connected-since", yang_time(t)));
            }
            out.push(("messages-received", m.messages.to_string()));
            connection(&mut out, m.last_success, m.failures, &m.last_error, m.last_error_time);
            leaves(tree, &format!("{COLLECTION}/mqtt/state"), out)?;
        }
        let base = format!("{COLLECTION}/rate-limit/state");
        let c = &self.ingress.counters;
        leaves(
            tree,
            &base,
            vec![
                ("sources-tracked", self.ingress.sources().min(u32::MAX as usize).to_string()),
                ("sources-evicted", c.evicted.load(std::sync::atomic::Ordering::Relaxed).to_string()),
            ],
        )?;
        for limit in Limit::ALL {
            for t in TRANSPORTS {
                let (n, at) = c.refused(limit, t);
                if n == 0 {
                    continue;
                }
                let entry = format!("{base}/refused[limit='{}'][transport='{t}']", limit.yang());
                let mut out = vec![("count", n.to_string())];
                if let Some(at) = at {
                    out.push(("last-occurrence", yang_time(at)));
                }
                leaves(tree, &entry, out)?;
            }
        }
        Ok(())
    }
}
