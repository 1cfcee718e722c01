//! ietf-netconf-monitoring state (RFC 6022 section 2): capabilities, datastores and their
//! locks, schemas (retrievable with get-schema), sessions and statistics, rendered into the
//! operational datastore on demand.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use yang2::data::DataTree;

use crate::datastore::{Datastore, StateProvider};
use crate::error::RpcError;
use crate::mgmt::Core;

const ROOT: &str = "/ietf-netconf-monitoring:netconf-state";

pub struct Monitoring {
    pub server: Weak<Core>,
}

use crate::datastore::tree::{quote, set, yang_time as time};

impl StateProvider for Monitoring {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("ietf-netconf-monitoring", "netconf-state")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if xpath.is_some_and(|x| !x.contains("netconf-state") && !x.starts_with("/*") && x != "/") {
            return Ok(());
        }
        let Some(server) = self.server.upgrade() else { return Ok(()) };
        for c in super::server_capabilities() {
            set(tree, &format!("{ROOT}/capabilities/capability[.={}]", quote(&c)), None)?;
        }
        let locks = server.datastores.locks();
        for ds in [Datastore::Running, Datastore::Candidate, Datastore::Startup] {
            let name = ds.identity().rsplit(':').next().unwrap_or("");
            let base = format!("{ROOT}/datastores/datastore[name='{name}']");
            set(tree, &base, None)?;
            if let Some((_, session, at)) = locks.iter().find(|(d, _, _)| *d == ds) {
                set(tree, &format!("{base}/locks/global-lock/locked-by-session"), Some(&session.to_string()))?;
                set(tree, &format!("{base}/locks/global-lock/locked-time"), Some(&time(*at)))?;
            }
        }
        let ctx = crate::yang::context();
        for m in ctx.modules(true) {
            if crate::yang::module_source(m.name(), None).is_none() {
                continue;
            }
            let version = m.revision().unwrap_or("");
            let base = format!(
                "{ROOT}/schemas/schema[identifier='{}'][version='{version}'][format='ietf-netconf-monitoring:yang']",
                m.name()
            );
            set(tree, &format!("{base}/namespace"), Some(m.namespace()))?;
            set(tree, &format!("{base}/location"), Some("NETCONF"))?;
        }
        let sessions: Vec<_> =
            server.sessions.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(id, s)| (*id, s.clone())).collect();
        for (id, s) in sessions {
            let base = format!("{ROOT}/sessions/session[session-id='{id}']");
            let transport = *s.transport.lock().unwrap_or_else(|e| e.into_inner());
            set(tree, &format!("{base}/transport"), Some(&format!("ietf-netconf-monitoring:{transport}")))?;
            set(tree, &format!("{base}/username"), Some(&s.username))?;
            if let Some(src) = s.source {
                set(tree, &format!("{base}/source-host"), Some(&src.ip().to_string()))?;
            }
            set(tree, &format!("{base}/login-time"), Some(&time(s.login_time)))?;
            for (leaf, v) in [
                ("in-rpcs", &s.in_rpcs),
                ("in-bad-rpcs", &s.in_bad_rpcs),
                ("out-rpc-errors", &s.out_rpc_errors),
                ("out-notifications", &s.out_notifications),
            ] {
                set(tree, &format!("{base}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
            }
        }
        let st = &server.stats;
        set(tree, &format!("{ROOT}/statistics/netconf-start-time"), Some(&time(server.start_time)))?;
        for (leaf, v) in [
            ("in-bad-hellos", &st.in_bad_hellos),
            ("in-sessions", &st.in_sessions),
            ("dropped-sessions", &st.dropped_sessions),
            ("in-rpcs", &st.in_rpcs),
            ("in-bad-rpcs", &st.in_bad_rpcs),
            ("out-rpc-errors", &st.out_rpc_errors),
            ("out-notifications", &st.out_notifications),
        ] {
            set(tree, &format!("{ROOT}/statistics/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
        }
        Ok(())
    }
}
