//! The ietf-subscribed-notifications operational state (RFC 8639 section 3.3): the event
//! streams with their replay log, and every dynamic subscription with its terms and its
//! receiver's counters (sent-event-records, excluded-event-records) and state.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use yang2::data::DataTree;

use super::params::{Filter, Target, Trigger, STREAMS};
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;
use crate::mgmt::Core;

const SN: &str = "/ietf-subscribed-notifications";

pub struct PushState {
    pub server: Weak<Core>,
}

impl StateProvider for PushState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("ietf-subscribed-notifications", "streams"), ("ietf-subscribed-notifications", "subscriptions")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if xpath.is_some_and(|x| !x.contains("subscribed-notifications") && !x.starts_with("/*") && x != "/") {
            return Ok(());
        }
        let Some(server) = self.server.upgrade() else { return Ok(()) };
        let oldest = server.events.oldest();
        for (name, description) in STREAMS {
            let base = format!("{SN}:streams/stream[name={}]", quote(name));
            set(tree, &format!("{base}/description"), Some(description))?;
            set(tree, &format!("{base}/replay-support"), None)?;
            set(tree, &format!("{base}/replay-log-creation-time"), Some(&yang_time(server.events.created)))?;
            if oldest > server.events.created {
                set(tree, &format!("{base}/replay-log-aged-time"), Some(&yang_time(oldest)))?;
            }
        }
        for e in server.push.entries() {
            let base = format!("{SN}:subscriptions/subscription[id='{}']", e.id);
            let p = e.params.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match &p.target {
                Target::Stream { stream, filter, replay_start } => {
                    set(tree, &format!("{base}/stream"), Some(stream))?;
                    if let Some(Filter::XPath(x)) = filter {
                        set(tree, &format!("{base}/stream-xpath-filter"), Some(x))?;
                    }
                    if let Some(t) = replay_start {
                        set(tree, &format!("{base}/replay-start-time"), Some(&yang_time(*t)))?;
                    }
                }
                Target::Datastore { datastore, selection, trigger } => {
                    set(tree, &format!("{base}/ietf-yang-push:datastore"), Some(datastore.identity()))?;
                    if let Some(Filter::XPath(x)) = selection {
                        set(tree, &format!("{base}/ietf-yang-push:datastore-xpath-filter"), Some(x))?;
                    }
                    match trigger {
                        Trigger::Periodic { period_cs, anchor } => {
                            set(tree, &format!("{base}/ietf-yang-push:periodic/period"), Some(&period_cs.to_string()))?;
                            if let Some(a) = anchor {
                                set(
                                    tree,
                                    &format!("{base}/ietf-yang-push:periodic/anchor-time"),
                                    Some(&yang_time(*a)),
                                )?;
                            }
                        }
                        Trigger::OnChange { dampening_cs, sync_on_start, excluded } => {
                            let oc = format!("{base}/ietf-yang-push:on-change");
                            set(tree, &format!("{oc}/dampening-period"), Some(&dampening_cs.to_string()))?;
                            set(tree, &format!("{oc}/sync-on-start"), Some(&sync_on_start.to_string()))?;
                            for x in excluded {
                                set(tree, &format!("{oc}/excluded-change"), Some(x.yang()))?;
                            }
                        }
                    }
                }
            }
            if let Some(t) = p.stop_time {
                set(tree, &format!("{base}/stop-time"), Some(&yang_time(t)))?;
            }
            let encoding = p.encoding.unwrap_or(crate::notif::Encoding::Xml);
            set(tree, &format!("{base}/encoding"), Some(encoding.identity()))?;
            // A dynamic subscription's receiver is its session (RFC 8639 section 2.4).
            let r = format!("{base}/receivers/receiver[name='session-{}']", e.session);
            let c = &e.counters;
            set(tree, &format!("{r}/sent-event-records"), Some(&c.sent.load(Ordering::Relaxed).to_string()))?;
            set(tree, &format!("{r}/excluded-event-records"), Some(&c.excluded.load(Ordering::Relaxed).to_string()))?;
            let state = if c.suspended.load(Ordering::Relaxed) { "suspended" } else { "active" };
            set(tree, &format!("{r}/state"), Some(state))?;
        }
        Ok(())
    }
}
