//! NETCONF over SSH (RFC 6242) with russh: password and public-key authentication (never
//! "none"), the `netconf` subsystem on a session channel, one NETCONF session per channel.
//! Before authentication a connection is bounded by the SSH gate of
//! [`crate::mgmt::auth_limits`]: caps at accept, a deadline for the version exchange and one
//! for authentication; passwords are checked by the shared password pool.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;
use russh::server::{Auth, Msg, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, MethodKind, MethodSet};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use super::call_home::Hooks;
use crate::mgmt::auth_limits::{login_audit, Permit, Timeout, Verdict};
use crate::mgmt::Core;

fn methods() -> MethodSet {
    MethodSet::from(&[MethodKind::Password, MethodKind::PublicKey][..])
}

/// Builds the russh configuration: our host key, password + publickey only.
pub fn ssh_config(host_key: PrivateKey) -> russh::server::Config {
    russh::server::Config {
        methods: methods(),
        keys: vec![host_key],
        auth_rejection_time: Duration::from_millis(300),
        auth_rejection_time_initial: Some(Duration::from_millis(0)),
        inactivity_timeout: None,
        keepalive_interval: Some(Duration::from_secs(30)),
        nodelay: true,
        ..Default::default()
    }
}

struct Connection {
    server: Arc<Core>,
    permit: Arc<Permit>,
    peer: Option<SocketAddr>,
    user: Option<String>,
    channels: HashMap<ChannelId, Channel<Msg>>,
    hooks: Hooks,
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_password(&mut self, user: &str, password: &str) -> Result<Auth, Self::Error> {
        let verdict = self.server.limits.passwords.check(&self.server.users, user, password, self.peer, "ssh").await;
        if verdict == Verdict::Accepted {
            self.user = Some(user.to_owned());
            self.permit.establish();
            Ok(Auth::Accept)
        } else {
            // Keep offering both methods: a mistyped password may be retried (RFC 4252 8).
            Ok(Auth::Reject { proceed_with_methods: Some(methods()), partial_success: false })
        }
    }

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: russh::server::PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.server.users.accepts_key(user, offer.public_key) {
            Auth::Accept
        } else {
            Auth::Reject { proceed_with_methods: Some(methods()), partial_success: false }
        })
    }

    async fn auth_publickey(&mut self, user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        if self.server.users.accepts_key(user, key.public_key) {
            self.user = Some(user.to_owned());
            self.permit.establish();
            let source = self.peer.map(|p| p.ip().to_string()).unwrap_or_default();
            login_audit(Verdict::Accepted, user, &source, "ssh", "publickey");
            info!(transport = "ssh", user = ?user, source = %source, method = "publickey", "login succeeded");
            Ok(Auth::Accept)
        } else {
            self.server.limits.passwords.record_failure(self.peer);
            let source = self.peer.map(|p| p.ip().to_string()).unwrap_or_default();
            login_audit(Verdict::Rejected, user, &source, "ssh", "publickey");
            warn!(transport = "ssh", user = ?user, source = %source, method = "publickey", "login failed");
            Ok(Auth::Reject { proceed_with_methods: Some(methods()), partial_success: false })
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn subsystem_request(&mut self, id: ChannelId, name: &str, session: &mut Session) -> Result<(), Self::Error> {
        let (Some(channel), true) = (self.channels.remove(&id), name == "netconf") else {
            session.channel_failure(id)?;
            return Ok(());
        };
        let user = self.user.clone().unwrap_or_default();
        let Some((sid, info)) = self.server.open_session(&user, self.peer) else {
            warn!(user, "max-sessions reached, refusing a NETCONF session");
            self.server.stats.dropped_sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            session.channel_failure(id)?;
            return Ok(());
        };
        session.channel_success(id)?;
        let server = self.server.clone();
        let hooks = self.hooks.clone();
        tokio::spawn(async move {
            let stream = channel.into_stream();
            hooks.started(sid);
            super::session::run_with_idle(stream, server.clone(), sid, info, hooks.idle).await;
            server.close_session(sid);
            hooks.ended(sid);
            debug!(session = sid, "NETCONF session ended");
        });
        Ok(())
    }

    async fn channel_eof(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        session.close(channel)?;
        Ok(())
    }
}

/// Listens on every configured address until shutdown. Calls `ready` once all listeners
/// are bound, with the bound addresses (ports resolved when 0 was asked).
pub async fn serve(server: Arc<Core>, host_key: PrivateKey, ready: impl FnOnce(&[SocketAddr])) -> std::io::Result<()> {
    let config = Arc::new(ssh_config(host_key));
    let mut listeners = Vec::new();
    for addr in &server.settings.listen {
        let l =
            TcpListener::bind(addr).await.map_err(|e| std::io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
        listeners.push(l);
    }
    let bound: Vec<SocketAddr> = listeners.iter().filter_map(|l| l.local_addr().ok()).collect();
    ready(&bound);
    let mut tasks = Vec::new();
    for l in listeners {
        let server = server.clone();
        let config = config.clone();
        tasks.push(tokio::spawn(accept_loop(l, server, config)));
    }
    let mut shutdown = server.shutdown.subscribe();
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            break;
        }
    }
    for t in &tasks {
        t.abort();
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, server: Arc<Core>, config: Arc<russh::server::Config>) {
    let gate = server.limits.ssh.clone();
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over a cap: closed at once, before the SSH banner (counted and logged by the gate).
        let Ok(permit) = gate.admit(peer) else {
            drop(socket);
            continue;
        };
        let _ = socket.set_nodelay(true);
        tokio::spawn(serve_stream(server.clone(), config.clone(), socket, peer, permit, Hooks::default()));
        debug!(?peer, "SSH connection accepted");
    }
}

/// One SSH connection on any byte stream, the agent being the SSH server: an accepted
/// socket, or one the agent opened itself (Call Home, RFC 8071: the roles are reversed at
/// the TCP level only). Bounded by `permit`'s handshake and authentication deadlines; ends
/// with the connection or at shutdown.
pub async fn serve_stream<S>(
    server: Arc<Core>,
    config: Arc<russh::server::Config>,
    socket: S,
    peer: SocketAddr,
    permit: Arc<Permit>,
    hooks: Hooks,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let handler = Connection {
        server: server.clone(),
        permit: permit.clone(),
        peer: Some(peer),
        user: None,
        channels: HashMap::new(),
        hooks: hooks.clone(),
    };
    let mut shutdown = server.shutdown.subscribe();
    // run_stream returns after the version exchange, which an idle peer never ends.
    let handshake = permit.limits().handshake_timeout();
    let session = match tokio::time::timeout(handshake, russh::server::run_stream(config, socket, handler)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            debug!(?peer, "SSH setup failed: {e}");
            return;
        }
        Err(_) => {
            permit.gate().timed_out(peer, Timeout::Handshake);
            return;
        }
    };
    let handle = session.handle();
    tokio::select! {
        r = session => if let Err(e) = r { debug!(?peer, "SSH connection ended: {e}") },
        // Key exchange and user authentication not done in time: the connection (and the
        // session future holding it) is dropped.
        _ = permit.auth_deadline() => {}
        // A called-out connection is for its session: closed when that ends.
        _ = hooks.wait_session_ended() => {
            let _ = handle.disconnect(russh::Disconnect::ByApplication, "session ended".into(), "en".into()).await;
        }
        _ = shutdown.changed() => {
            // Give sessions a moment to flush replies in flight, then disconnect.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = handle.disconnect(russh::Disconnect::ByApplication, "server shutting down".into(), "en".into()).await;
        }
    }
}
