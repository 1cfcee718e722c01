//! Confirmed commit (RFC 6241 section 8.4, :confirmed-commit:1.1): a commit that rolls
//! back unless confirmed within a timeout, with persist / persist-id so another session can
//! confirm or cancel it, and rollback when the issuing session ends (without persist).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{events as notifications, Core};
use crate::datastore::SessionId;
use crate::error::{ErrorTag, RpcError};

/// The default confirm-timeout (RFC 6241 8.4.5.1: 600 seconds).
pub const DEFAULT_TIMEOUT: u32 = 600;

struct Pending {
    session: SessionId,
    persist: Option<String>,
    timer: JoinHandle<()>,
}

/// The (at most one) confirmed commit in progress.
#[derive(Default)]
pub struct ConfirmedCommit {
    pending: Mutex<Option<Pending>>,
}

/// What a `<commit>` asked for.
pub struct CommitRequest {
    pub confirmed: bool,
    pub timeout: u32,
    pub persist: Option<String>,
    pub persist_id: Option<String>,
}

impl ConfirmedCommit {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_pending(&self) -> bool {
        self.lock().is_some()
    }

    /// Checks that `session` (with `persist_id`) may act on the pending commit.
    fn authorised(p: &Pending, session: SessionId, persist_id: Option<&str>) -> Result<(), RpcError> {
        match (&p.persist, persist_id) {
            (Some(id), Some(given)) if id == given => Ok(()),
            (Some(_), Some(_)) => Err(RpcError::protocol(
                ErrorTag::InvalidValue,
                "persist-id does not match the pending confirmed commit",
            )
            .with_bad_element("persist-id")),
            (Some(_), None) => Err(RpcError::protocol(
                ErrorTag::OperationFailed,
                "a confirmed commit with persist is pending: give its persist-id",
            )),
            (None, Some(_)) => {
                Err(RpcError::protocol(ErrorTag::InvalidValue, "the pending confirmed commit has no persist-id")
                    .with_bad_element("persist-id"))
            }
            (None, None) if p.session == session => Ok(()),
            (None, None) => Err(RpcError::protocol(
                ErrorTag::InUse,
                format!("a confirmed commit of session {} is pending", p.session),
            )
            .with_session_id(p.session)),
        }
    }

    /// Handles `<commit>` (confirmed or confirming).
    pub fn commit(&self, server: &Arc<Core>, session: SessionId, req: CommitRequest) -> Result<(), RpcError> {
        let ds = &server.datastores;
        let mut pending = self.lock();
        if let Some(p) = pending.as_ref() {
            Self::authorised(p, session, req.persist_id.as_deref())?;
        } else if req.persist_id.is_some() {
            return Err(RpcError::protocol(
                ErrorTag::InvalidValue,
                "no confirmed commit is pending for this persist-id",
            )
            .with_bad_element("persist-id"));
        }
        if req.confirmed {
            // A first or follow-up confirmed commit: the rollback point stays the
            // configuration before the first one.
            ds.commit(session, true)?;
            let event = if let Some(p) = pending.take() {
                p.timer.abort();
                "extend"
            } else {
                "start"
            };
            notifications::confirmed_commit(server, Some(session), event, Some(req.timeout));
            let timer = spawn_timer(Arc::downgrade(server), req.timeout);
            *pending = Some(Pending { session, persist: req.persist, timer });
            info!(session, timeout = req.timeout, "confirmed commit: rollback unless confirmed");
        } else {
            ds.commit(session, false)?;
            if let Some(p) = pending.take() {
                p.timer.abort();
                ds.confirm();
                notifications::confirmed_commit(server, Some(session), "complete", None);
                info!(session, "confirmed commit confirmed");
            }
        }
        Ok(())
    }

    /// `<cancel-commit>` (RFC 6241 8.4.9): roll back now.
    pub fn cancel(&self, server: &Core, session: SessionId, persist_id: Option<&str>) -> Result<(), RpcError> {
        let mut pending = self.lock();
        let Some(p) = pending.as_ref() else {
            return Err(RpcError::protocol(ErrorTag::OperationFailed, "no confirmed commit is pending"));
        };
        Self::authorised(p, session, persist_id)?;
        let p = pending.take().expect("checked above");
        p.timer.abort();
        server.datastores.rollback()?;
        notifications::confirmed_commit(server, Some(session), "cancel", None);
        info!(session, "confirmed commit cancelled, configuration rolled back");
        Ok(())
    }

    /// A session ended: its pending confirmed commit (without persist) is rolled back.
    pub fn session_ended(&self, server: &Core, session: SessionId) {
        let mut pending = self.lock();
        if pending.as_ref().is_some_and(|p| p.session == session && p.persist.is_none()) {
            let p = pending.take().expect("checked above");
            p.timer.abort();
            match server.datastores.rollback() {
                Ok(_) => {
                    notifications::confirmed_commit(server, None, "cancel", None);
                    info!(session, "session ended before confirming its commit: rolled back")
                }
                Err(e) => warn!(session, "rollback after session end failed: {e}"),
            }
        }
    }

    fn expired(&self, server: &Core) {
        let mut pending = self.lock();
        if pending.take().is_some() {
            match server.datastores.rollback() {
                Ok(_) => {
                    notifications::confirmed_commit(server, None, "timeout", None);
                    info!("confirm-timeout expired: configuration rolled back")
                }
                Err(e) => warn!("rollback after confirm-timeout failed: {e}"),
            }
        }
    }
}

fn spawn_timer(server: Weak<Core>, timeout: u32) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(u64::from(timeout))).await;
        if let Some(server) = server.upgrade() {
            server.confirmed_commit.expired(&server);
        }
    })
}
