//! NETCONF over TLS (RFC 7589): mutual TLS with the shared server TLS of [`crate::tls`]
//! (trust anchors, CRLs, reload), the client's NETCONF username from cert-to-name (RFC 7589
//! section 7, the same mapping as RESTCONF and the SCI listener), then the same session
//! as over SSH ([`super::session::run`]: hello, framing, RPCs). Used by the listener
//! configured in `netconf-server/listen/tls` and by TLS Call Home ([`super::call_home`]).
//!
//! Configuration lives in the datastore (module cats-sma-netconf-server); a consumer takes
//! each commit to a task that rebuilds the TLS identity when `netconf-server/tls` changes,
//! rebinds the listener when its address changes, and hands Call Home its client list.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};
use yang2::data::DataTree;

use super::call_home::{self, CallHome, Hooks};
use crate::datastore::{ConfigConsumer, Transaction};
use crate::mgmt::auth_limits::{login_audit, Permit, Timeout, Verdict};
use crate::mgmt::Core;
use crate::tls::{ClientAuth, Refused, ServerTls, TlsSettings};

/// The data path of the module's container.
pub const BASE: &str = "/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server";

/// Everything of `netconf-server` the agent acts on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// `netconf-server/tls`; `None` without a client-ca-file (then nothing TLS can run).
    pub tls: Option<TlsSettings>,
    /// Where the TLS listener binds, when enabled.
    pub listen: Option<SocketAddr>,
    pub call_home: Vec<call_home::Client>,
}

impl Settings {
    /// Whether anything needs the TLS identity.
    fn uses_tls(&self) -> bool {
        self.listen.is_some() || self.call_home.iter().any(|c| c.endpoints.iter().any(|e| e.transport.is_tls()))
    }
}

/// Reads `netconf-server` from a configuration tree.
pub fn settings(t: &DataTree<'static>) -> Result<Settings, String> {
    use crate::tls::yang::leaf;
    let tls_base = format!("{BASE}/tls");
    let mut tls = crate::tls::yang::settings(t, &tls_base).map_err(|e| format!("netconf-server/tls: {e}"))?;
    // RFC 7589 section 5: the server MUST verify the client's certificate.
    tls.client_auth = ClientAuth::Required;
    let tls = if tls.client_ca.is_some() {
        tls.check().map_err(|e| format!("netconf-server/tls: {e}"))?;
        Some(tls)
    } else {
        None
    };
    let l = format!("{BASE}/listen/tls");
    let listen = (leaf(t, &format!("{l}/enabled")).as_deref() == Some("true")).then(|| {
        let ip = leaf(t, &format!("{l}/local-address"))
            .and_then(|a| a.parse().ok())
            .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
        let port = leaf(t, &format!("{l}/local-port")).and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_PORT);
        SocketAddr::new(ip, port)
    });
    let call_home = call_home::clients(t)?;
    let s = Settings { tls, listen, call_home };
    if s.uses_tls() && s.tls.is_none() {
        return Err("NETCONF over TLS needs netconf-server/tls/client-ca-file".into());
    }
    Ok(s)
}

/// IANA's netconf-tls port (RFC 7589 section 8).
pub const DEFAULT_PORT: u16 = 6513;

/// Takes commits of `netconf-server` to the running transports.
pub struct NetconfServerConfig {
    tx: watch::Sender<Settings>,
}

impl ConfigConsumer for NetconfServerConfig {
    fn name(&self) -> &str {
        "netconf-server"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if tx.changes_under("/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server").next().is_none() {
            return Ok(());
        }
        let s = settings(tx.config)?;
        // Files that cannot be used refuse the commit, as at start (fail closed).
        match &s.tls {
            Some(t) if s.uses_tls() => {
                crate::tls::server::check_files(t).map_err(|e| format!("netconf-server/tls: {e}"))
            }
            _ => Ok(()),
        }
    }

    fn apply(&self, tx: &Transaction<'_>) {
        if tx.changes_under("/cats-sma:cats-sma/cats-sma-netconf-server:netconf-server").next().is_none() {
            return;
        }
        match settings(tx.config) {
            Ok(s) => {
                self.tx.send_if_modified(|cur| {
                    let changed = *cur != s;
                    *cur = s;
                    changed
                });
            }
            Err(e) => error!("netconf-server: a committed configuration cannot be read: {e}"),
        }
    }
}

/// What the TLS identity and the listener run with now (the operational state).
#[derive(Default)]
pub struct Status {
    now: Mutex<Now>,
}

#[derive(Clone, Default)]
struct Now {
    tls: Option<Arc<ServerTls>>,
    error: Option<String>,
    bound: Option<SocketAddr>,
}

impl Status {
    fn update(&self, f: impl FnOnce(&mut Now)) {
        f(&mut self.now.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn get(&self) -> Now {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Where the listener is bound, when it is.
    pub fn bound(&self) -> Option<SocketAddr> {
        self.get().bound
    }
}

impl crate::datastore::StateProvider for Status {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), crate::error::RpcError> {
        use crate::datastore::tree::set;
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let base = format!("{BASE}/tls-state");
        let now = self.get();
        let Some(t) = now.tls else {
            if let Some(e) = now.error {
                set(tree, &format!("{base}/enabled"), Some("false"))?;
                set(tree, &format!("{base}/last-reload-error"), Some(&e))?;
            }
            return Ok(());
        };
        let st = t.status();
        let time = |d: chrono::DateTime<chrono::Utc>| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        set(tree, &format!("{base}/enabled"), Some("true"))?;
        if let Some(a) = now.bound {
            set(tree, &format!("{base}/local-address"), Some(&a.ip().to_string()))?;
            set(tree, &format!("{base}/local-port"), Some(&a.port().to_string()))?;
        }
        set(tree, &format!("{base}/certificate-file"), Some(&st.certificate_file.display().to_string()))?;
        set(tree, &format!("{base}/generated-certificate"), Some(if st.generated { "true" } else { "false" }))?;
        set(tree, &format!("{base}/loaded-at"), Some(&time(st.loaded_at)))?;
        set(tree, &format!("{base}/reloads"), Some(&st.reloads.to_string()))?;
        set(tree, &format!("{base}/reload-failures"), Some(&st.reload_failures.to_string()))?;
        if let Some(e) = &st.last_reload_error {
            set(tree, &format!("{base}/last-reload-error"), Some(e))?;
        }
        set(tree, &format!("{base}/mapped-connections"), Some(&st.mapped.to_string()))?;
        for (reason, n) in st.failures {
            set(tree, &format!("{base}/handshake-failures[reason='{reason}']/count"), Some(&n.to_string()))?;
        }
        Ok(())
    }
}

/// Starts NETCONF over TLS and Call Home from the running configuration, and registers
/// the consumer of later commits and the operational state.
pub fn start(
    server: &Arc<Core>,
    ssh: Arc<russh::server::Config>,
    state_dir: PathBuf,
) -> Result<(Arc<Status>, Arc<CallHome>), String> {
    let initial = server
        .datastores
        .with_tree(crate::datastore::Datastore::Running, settings)
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("netconf-server in the startup configuration: {e}"))?;
    let (tx, rx) = watch::channel(initial);
    let status = Arc::new(Status::default());
    let (identity_tx, identity_rx) = watch::channel(None);
    let call_home = CallHome::new(server.clone(), ssh, identity_rx.clone());
    server.datastores.register_consumer(Arc::new(NetconfServerConfig { tx }));
    server.datastores.register_state_provider(status.clone());
    server.datastores.register_state_provider(call_home.clone());
    tokio::spawn(manage(server.clone(), rx, identity_tx, identity_rx, state_dir, status.clone(), call_home.clone()));
    Ok((status, call_home))
}

/// Follows the settings: the TLS identity, the listener, the Call Home clients.
async fn manage(
    server: Arc<Core>,
    mut settings: watch::Receiver<Settings>,
    identity: watch::Sender<Option<Arc<ServerTls>>>,
    identity_rx: watch::Receiver<Option<Arc<ServerTls>>>,
    state_dir: PathBuf,
    status: Arc<Status>,
    call_home: Arc<CallHome>,
) {
    let mut built_for: Option<TlsSettings> = None;
    let mut reloader: Option<tokio::task::JoinHandle<()>> = None;
    let mut listener: Option<(SocketAddr, tokio::task::JoinHandle<()>)> = None;
    let mut shutdown = server.shutdown.subscribe();
    loop {
        let current = settings.borrow_and_update().clone();
        let wanted = current.tls.clone().filter(|_| current.uses_tls());
        if wanted != built_for {
            if let Some(r) = reloader.take() {
                r.abort();
            }
            // Live sessions re-check themselves against what is sent next (serve_connection):
            // no transient None between the old identity and the new one.
            status.update(|n| (n.tls, n.error) = (None, None));
            if wanted.is_none() {
                identity.send_replace(None);
            }
            if let Some(t) = wanted.clone() {
                let dir = state_dir.clone();
                let built =
                    tokio::task::spawn_blocking(move || ServerTls::start(crate::tls::server::NETCONF_TLS, t, &dir))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r);
                match built {
                    Ok(t) => {
                        reloader = Some(t.spawn_reloader());
                        status.update(|n| n.tls = Some(t.clone()));
                        identity.send_replace(Some(t));
                    }
                    Err(e) => {
                        error!("NETCONF over TLS cannot start; the listener and TLS Call Home stay closed: {e}");
                        identity.send_replace(None);
                        status.update(|n| n.error = Some(e));
                    }
                }
            }
            built_for = wanted;
            // A new identity: the listener is bound again (or closed) below.
            if let Some((_, task)) = listener.take() {
                task.abort();
            }
        }
        let want_listen = current.listen.filter(|_| identity.borrow().is_some());
        if listener.as_ref().map(|(a, _)| *a) != want_listen {
            if let Some((_, task)) = listener.take() {
                task.abort();
                status.update(|n| n.bound = None);
            }
            if let Some(addr) = want_listen {
                match TcpListener::bind(addr).await {
                    Ok(l) => {
                        let bound = l.local_addr().ok();
                        status.update(|n| n.bound = bound);
                        info!(
                            "NETCONF over TLS listening on {}",
                            bound.map(|a| a.to_string()).unwrap_or_else(|| addr.to_string())
                        );
                        listener = Some((addr, tokio::spawn(accept_loop(server.clone(), l, identity_rx.clone()))));
                    }
                    Err(e) => error!("NETCONF over TLS: cannot listen on {addr}: {e}"),
                }
            }
        }
        call_home.reconcile(current.call_home.clone());
        tokio::select! {
            r = settings.changed() => if r.is_err() { break },
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    if let Some((_, task)) = listener.take() {
        task.abort();
    }
    if let Some(r) = reloader {
        r.abort();
    }
    call_home.reconcile(Vec::new());
}

async fn accept_loop(server: Arc<Core>, listener: TcpListener, identity: watch::Receiver<Option<Arc<ServerTls>>>) {
    let gate = server.limits.netconf_tls.clone();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("NETCONF over TLS accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over a cap: closed at once, before the TLS handshake (counted and logged).
        let Ok(permit) = gate.admit(peer) else { continue };
        let Some(tls) = identity.borrow().clone() else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(server.clone(), tls, identity.clone(), stream, peer, permit, Hooks::default()));
    }
}

/// One NETCONF over TLS connection, accepted or called out (Call Home): the handshake
/// within the permit's deadline, the username from cert-to-name, a NETCONF session until
/// it ends (or a reload or a new TLS configuration makes the certificate unacceptable, or
/// maps it to another user: the session is then ended as killed by the agent, session 0).
/// `Err` when no session came up.
pub async fn serve_connection(
    server: Arc<Core>,
    tls: Arc<ServerTls>,
    mut identity: watch::Receiver<Option<Arc<ServerTls>>>,
    stream: TcpStream,
    peer: SocketAddr,
    permit: Arc<Permit>,
    hooks: Hooks,
) -> Result<(), String> {
    let (stream, p) = match tls.accept(stream, permit.limits().handshake_timeout()).await {
        Ok(x) => x,
        Err(r) => {
            refused(&tls, &permit, &r);
            return Err(format!("TLS: {}", r.detail));
        }
    };
    // Client authentication is required: the accept refused every certificate without a name.
    let Some(mapped) = p.mapped else {
        return Err("TLS: the client certificate maps to no name".into());
    };
    let user = mapped.name;
    permit.establish();
    let source = peer.ip().to_string();
    login_audit(Verdict::Accepted, &user, &source, "netconf-tls", "certificate");
    info!(transport = "tls", user = %user, %source, cert_to_name = mapped.id, "login succeeded");
    let Some((sid, info)) = server.open_session(&user, Some(peer)) else {
        warn!(user, "max-sessions reached, refusing a NETCONF over TLS session");
        server.stats.dropped_sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err("max-sessions reached".into());
    };
    *info.transport.lock().unwrap_or_else(|e| e.into_inner()) = "netconf-tls";
    hooks.started(sid);
    let session = super::session::run_with_idle(stream, server.clone(), sid, info.clone(), hooks.idle);
    tokio::pin!(session);
    identity.mark_unchanged();
    let mut tls = tls;
    loop {
        // Ok: the identity to follow; Err: why the session ends, counted by the identity
        // that refused it.
        let verdict = tokio::select! {
            _ = &mut session => break,
            r = tls.invalidated(&p.chain) => Err((r, tls.clone())),
            changed = identity.changed() => {
                let now = if changed.is_ok() { identity.borrow_and_update().clone() } else { None };
                match now {
                    // The same identity announced again: nothing changed for this session.
                    Some(t) if Arc::ptr_eq(&t, &tls) => continue,
                    Some(t) => match t.admits_as(&p.chain, &user) {
                        Ok(()) => Ok(t),
                        Err(r) => Err((r, t)),
                    },
                    None => Err((
                        Refused {
                            failure: crate::tls::Failure::UnknownCa,
                            detail: "NETCONF over TLS was switched off or its configuration cannot start".into(),
                        },
                        tls.clone(),
                    )),
                }
            }
        };
        match verdict {
            // Re-checked under the new configuration: followed from now on.
            Ok(t) => tls = t,
            Err((r, by)) => {
                refused(&by, &permit, &r);
                warn!(session = sid, user = %user, "NETCONF over TLS session ended: {}", r.detail);
                info.kill.send_replace(Some(crate::datastore::SYSTEM_SESSION));
                session.await;
                break;
            }
        }
    }
    server.close_session(sid);
    hooks.ended(sid);
    debug!(session = sid, "NETCONF over TLS session ended");
    Ok(())
}

/// A connection refused at (or after) the handshake: counted by reason; a certificate
/// problem is logged and audited as a failed certificate login, a slow handshake counts as
/// the gate's handshake timeout.
fn refused(tls: &ServerTls, permit: &Permit, r: &Refused) {
    tls.record(r.failure);
    if r.failure == crate::tls::Failure::Timeout {
        permit.gate().timed_out(permit.peer, Timeout::Handshake);
        return;
    }
    if !r.failure.is_authentication() {
        debug!(peer = %permit.peer, "NETCONF over TLS handshake failed: {}", r.detail);
        return;
    }
    warn!(peer = %permit.peer, reason = r.failure.as_str(), "NETCONF over TLS client certificate refused: {}", r.detail);
    crate::mgmt::audit::event(crate::mgmt::audit::Category::Login)
        .outcome("failure")
        .source(permit.peer.ip().to_string())
        .transport("netconf-tls")
        .field("method", "certificate")
        .field("reason", r.failure.as_str())
        .field("detail", r.detail.as_str())
        .emit_aggregated(format!("netconf-tls/{}", permit.peer.ip()));
}
