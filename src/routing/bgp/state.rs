//! State out: the listener's port, each neighbor's session and each service's NLRI, rendered
//! into `routing/bgp-ls` when the operational datastore is read.

use std::sync::Arc;

use yang2::data::DataTree;

use super::config::BGP_LS;
use super::Speaker;
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;

pub struct BgpState {
    pub speaker: Arc<Speaker>,
}

impl StateProvider for BgpState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let Some(s) = self.speaker.snapshot() else { return Ok(()) };
        set(tree, &format!("{BGP_LS}/advertising"), Some(if s.advertising { "true" } else { "false" }))?;
        if let Some(a) = s.listening {
            set(tree, &format!("{BGP_LS}/listening-port"), Some(&a.port().to_string()))?;
        }
        for (cfg, st) in &s.neighbors {
            let base = format!("{BGP_LS}/neighbor[address={}]/session", quote(&cfg.address.to_string()));
            let mut leaves: Vec<(&str, String)> = vec![
                ("state", st.state.yang().into()),
                ("established-transitions", st.transitions.to_string()),
                ("messages-received", st.messages_in.to_string()),
                ("messages-sent", st.messages_out.to_string()),
                ("updates-received", st.updates_in.to_string()),
                ("updates-sent", st.updates_out.to_string()),
                ("route-refreshes-received", st.refreshes_in.to_string()),
                ("advertised-nlri", st.advertised.to_string()),
                ("withdrawals-sent", st.withdrawals.to_string()),
            ];
            if let Some(t) = st.established_since {
                leaves.push(("established-since", yang_time(t)));
            }
            if let Some(h) = st.hold_time {
                leaves.push(("negotiated-hold-time", h.to_string()));
            }
            if let Some(id) = st.peer_id {
                leaves.push(("peer-router-id", id.to_string()));
            }
            if let Some(e) = &st.last_error {
                leaves.push(("last-error", e.clone()));
            }
            for (name, v) in leaves {
                set(tree, &format!("{base}/{name}"), Some(&v))?;
            }
        }
        let adv = format!("{BGP_LS}/advertisements");
        set(tree, &format!("{adv}/unmapped-services"), Some(&s.unmapped.to_string()))?;
        for n in &s.nlri {
            let base = format!("{adv}/nlri[cs-id={}]", quote(&n.cs_id));
            set(tree, &format!("{base}/prefix"), Some(&n.prefix.to_string()))?;
            set(tree, &format!("{base}/status"), Some(n.status.yang()))?;
            set(tree, &format!("{base}/penalty"), Some(&n.penalty.to_string()))?;
            set(tree, &format!("{base}/flaps"), Some(&n.flaps.to_string()))?;
            if let Some(g) = n.generation {
                set(tree, &format!("{base}/generation"), Some(&g.to_string()))?;
            }
        }
        Ok(())
    }
}
