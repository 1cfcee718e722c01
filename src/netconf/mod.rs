//! The NETCONF front end (RFC 6241) over SSH (RFC 6242) and TLS (RFC 7589), listening or
//! calling home (RFC 8071): transports in `ssh.rs`, `tls.rs` and `call_home.rs`, framing in
//! `framing.rs`, the session state machine in `session.rs`, one file per operation under
//! `rpc/`, the RFC 6022 monitoring state in `monitoring.rs`. It depends on the management
//! core (`crate::mgmt`: datastores, sessions, NACM, events, subscriptions, filters,
//! rpc-error encoding) and on no other front end.

pub mod call_home;
pub mod framing;
pub mod inline;
pub mod monitoring;
pub mod rpc;
pub mod session;
pub mod ssh;
pub mod tls;

use std::sync::Arc;

pub use crate::mgmt::ns::*;
use crate::mgmt::Core;

/// Adds what the NETCONF front end contributes to the core: the RFC 6022 monitoring state
/// (sessions, schemas, statistics) in the operational view.
pub fn attach(core: &Arc<Core>) {
    core.datastores.register_state_provider(Arc::new(monitoring::Monitoring { server: Arc::downgrade(core) }));
}

pub const CAP_BASE_10: &str = "urn:ietf:params:netconf:base:1.0";
pub const CAP_BASE_11: &str = "urn:ietf:params:netconf:base:1.1";

/// The capabilities announced in the server hello (RFC 6241 section 8), besides the YANG
/// library ones.
pub fn server_capabilities() -> Vec<String> {
    let mut caps: Vec<String> = [
        CAP_BASE_10,
        CAP_BASE_11,
        "urn:ietf:params:netconf:capability:writable-running:1.0",
        "urn:ietf:params:netconf:capability:candidate:1.0",
        "urn:ietf:params:netconf:capability:confirmed-commit:1.1",
        "urn:ietf:params:netconf:capability:rollback-on-error:1.0",
        "urn:ietf:params:netconf:capability:validate:1.0",
        "urn:ietf:params:netconf:capability:validate:1.1",
        "urn:ietf:params:netconf:capability:startup:1.0",
        "urn:ietf:params:netconf:capability:xpath:1.0",
        "urn:ietf:params:netconf:capability:notification:1.0",
        "urn:ietf:params:netconf:capability:interleave:1.0",
        "urn:ietf:params:netconf:capability:with-defaults:1.0?basic-mode=explicit&also-supported=report-all,report-all-tagged,trim",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // RFC 8526 section 2 / RFC 8525 section 5: an NMDA server announces yang-library:1.1
    // with the content-id, and no per-module capabilities.
    let ctx = crate::yang::context();
    caps.extend(crate::yang::yang10_capabilities(ctx));
    caps.push(format!(
        "urn:ietf:params:netconf:capability:yang-library:1.1?revision=2019-01-04&content-id={}",
        ctx.get_module_set_id()
    ));
    caps
}
