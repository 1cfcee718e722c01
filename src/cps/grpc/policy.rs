//! Policy updates from a C-PS (seed 004: "streaming policy updates or queries from C-PS to
//! C-SMA"), applied through the datastore like any management edit: parsed and validated by
//! libyang, NACM-checked as the peer's configured `policy-user` (a NACM identity of its
//! own for the one edit), merged into running (the engine hears of it as of any commit),
//! recorded in the audit trail (the datastore's config-change record names the user; an
//! `rpc` record names the operation and its outcome). Never behind the datastore.

use std::sync::Weak;

use yang2::data::DataFormat;

use super::wire::{EditFormat, PolicyUpdate};
use crate::datastore::{Datastore, EditOptions};
use crate::error::RpcError;
use crate::mgmt::Core;
use crate::text;

/// The transport name in audit records.
pub const AUDIT_TRANSPORT: &str = "c-ps-grpc";
/// The operation name in audit records.
pub const AUDIT_OPERATION: &str = "c-ps-policy-update";

/// What became of one policy update (the `PolicyResult` sent back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyOutcome {
    pub applied: bool,
    /// RFC 6241 error-tag; empty when applied.
    pub error_tag: String,
    pub message: String,
    /// Configuration nodes changed.
    pub changes: u32,
}

impl PolicyOutcome {
    pub fn refused(tag: &str, message: impl Into<String>) -> PolicyOutcome {
        PolicyOutcome { applied: false, error_tag: tag.into(), message: message.into(), changes: 0 }
    }
}

/// Where policy updates go: the management core in the agent.
pub trait Northbound: Send + Sync {
    /// Applies `u` as NACM user `user` on behalf of C-PS peer `peer`. Blocking (the
    /// datastore, libyang and the commit consumers run on the caller's thread).
    fn apply_policy(&self, peer: &str, user: &str, u: &PolicyUpdate) -> PolicyOutcome;
}

/// The agent's: edits go to running through [`crate::datastore::Datastores::edit_owned`],
/// the call NETCONF edit-config and RESTCONF PATCH make.
pub struct MgmtNorthbound {
    pub core: Weak<Core>,
}

fn first(errors: &[RpcError]) -> PolicyOutcome {
    match errors.first() {
        Some(e) => {
            let mut m = e.message.clone();
            if let Some(p) = e.path.as_ref().filter(|p| !m.contains(p.as_str())) {
                m = format!("{m} ({p})");
            }
            PolicyOutcome::refused(e.tag.as_str(), crate::text::printable(&m, 500))
        }
        None => PolicyOutcome::refused("operation-failed", "refused"),
    }
}

impl Northbound for MgmtNorthbound {
    fn apply_policy(&self, peer: &str, user: &str, u: &PolicyUpdate) -> PolicyOutcome {
        let Some(core) = self.core.upgrade() else {
            return PolicyOutcome::refused("operation-failed", "the agent is shutting down");
        };
        // The recovery user is outside NACM (RFC 8341 section 3.2): a C-PS acting as it could
        // write anything, NACM included. Refused, whatever the configuration says.
        if core.nacm.is_recovery_user(user) {
            let o = PolicyOutcome::refused(
                "access-denied",
                format!(
                    "policy-user '{}' is the NACM recovery user: a C-PS never acts as it",
                    text::printable(user, 64)
                ),
            );
            crate::mgmt::audit::operation(AUDIT_TRANSPORT, user, 0, AUDIT_OPERATION, Some(o.error_tag.as_str()));
            tracing::warn!(c_ps = %peer, %user, update_id = u.update_id, "policy update refused: policy-user is the recovery user");
            return o;
        }
        // A NACM identity of its own for this one edit: the datastore's write guard checks
        // the edit against the rules of `user`, and the audit names `user`.
        let Some(session) = core.nacm.open_identity(&crate::nacm::RESTCONF_IDS, user) else {
            return PolicyOutcome::refused("resource-denied", "no management identity is free");
        };
        let format = match u.format {
            EditFormat::Xml => DataFormat::XML,
            EditFormat::Json => DataFormat::JSON,
        };
        let ds = &core.datastores;
        let result = ds
            .parse_edit(u.config.as_bytes(), format)
            .map_err(|e| vec![e])
            .and_then(|edit| ds.edit_owned(session, Datastore::Running, edit, EditOptions::default()));
        core.nacm.session_closed(session);
        let outcome = match result {
            Ok(changes) => PolicyOutcome {
                applied: true,
                error_tag: String::new(),
                message: String::new(),
                changes: changes.iter().filter(|c| !c.is_key).count().min(u32::MAX as usize) as u32,
            },
            Err(errors) => first(&errors),
        };
        crate::mgmt::audit::operation(
            AUDIT_TRANSPORT,
            user,
            session,
            AUDIT_OPERATION,
            (!outcome.applied).then_some(outcome.error_tag.as_str()),
        );
        tracing::info!(c_ps = %peer, %user, update_id = u.update_id, applied = outcome.applied,
            error_tag = %outcome.error_tag, "policy update from the C-PS");
        outcome
    }
}
