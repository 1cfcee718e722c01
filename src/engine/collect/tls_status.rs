//! What an SCI listener's TLS runs with now (HTTP push, gRPC push), rendered into its
//! `tls-state` container of the operational datastore.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, warn};

use crate::tls::server::Listener;
use crate::tls::{ServerTls, TlsSettings};

/// collection/http/tls-state.
pub const HTTP: &str = "/cats-sma:cats-sma/collection/http/tls-state";
/// collection/grpc/tls-state.
pub const GRPC: &str = "/cats-sma:cats-sma/collection/grpc/tls-state";

/// What the listener runs with now, for the operational state (`tls-state` of
/// collection/http or collection/grpc) and the ready line.
pub struct TlsStatus {
    /// The `tls-state` container's data path.
    base: &'static str,
    now: Mutex<TlsNow>,
}

#[derive(Clone, Default)]
pub(super) enum TlsNow {
    /// Not listening.
    #[default]
    Off,
    Plain,
    Tls(Arc<ServerTls>),
    /// TLS is configured but could not start: the listener stays closed (fail closed).
    Failed(String),
}

impl TlsStatus {
    /// For the listener whose `tls-state` is at `base`.
    pub fn new(base: &'static str) -> TlsStatus {
        TlsStatus { base, now: Mutex::new(TlsNow::Off) }
    }

    pub(super) fn set(&self, n: TlsNow) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }

    fn get(&self) -> TlsNow {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the listener speaks TLS now.
    pub fn is_tls(&self) -> bool {
        matches!(self.get(), TlsNow::Tls(_))
    }

    /// `https` or `http` (what the listener speaks now).
    pub fn scheme(&self) -> &'static str {
        match self.get() {
            TlsNow::Tls(_) => "https",
            _ => "http",
        }
    }

    /// The server certificate in use, for clients to trust (the generated one, say).
    pub fn cert_file(&self) -> Option<PathBuf> {
        match self.get() {
            TlsNow::Tls(t) => Some(t.cert_file().to_owned()),
            _ => None,
        }
    }
}

/// One (re)bind of an SCI listener (HTTP push, gRPC push) for one set of its settings:
/// TLS started when configured, then the socket bound. `None` when it stays closed
/// (disabled, TLS configured but unable to start — fail closed —, or the address taken),
/// with the status set, the reason logged and `bound` told; the caller then waits for the
/// next settings.
pub(super) async fn open(
    which: Listener,
    enabled: bool,
    listen: SocketAddr,
    (tls, tls_error): (&Option<TlsSettings>, &Option<String>),
    state_dir: &Path,
    status: &TlsStatus,
    bound: &watch::Sender<Option<SocketAddr>>,
) -> Option<(Option<Arc<ServerTls>>, TcpListener)> {
    let tls = if !enabled {
        Err(None)
    } else {
        match (tls, tls_error) {
            (_, Some(e)) => Err(Some(e.clone())),
            (None, None) => Ok(None),
            (Some(t), None) => {
                let (t, dir) = (t.clone(), state_dir.to_owned());
                match tokio::task::spawn_blocking(move || ServerTls::start(which, t, &dir)).await {
                    Ok(Ok(t)) => Ok(Some(t)),
                    Ok(Err(e)) => Err(Some(e)),
                    Err(e) => Err(Some(e.to_string())),
                }
            }
        }
    };
    let tls = match tls {
        Ok(t) => t,
        Err(why) => {
            match why {
                Some(e) => {
                    error!("{}: TLS cannot start, the listener stays closed: {e}", which.label);
                    status.set(TlsNow::Failed(e));
                }
                None => status.set(TlsNow::Off),
            }
            let _ = bound.send(None);
            return None;
        }
    };
    match TcpListener::bind(listen).await {
        Ok(l) => Some((tls, l)),
        Err(e) => {
            warn!("{}: cannot listen on {listen}: {e}", which.label);
            status.set(TlsNow::Off);
            let _ = bound.send(None);
            None
        }
    }
}

impl crate::datastore::StateProvider for TlsStatus {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(
        &self,
        tree: &mut yang2::data::DataTree<'static>,
        xpath: Option<&str>,
    ) -> Result<(), crate::error::RpcError> {
        use crate::datastore::tree::set;
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let base = self.base;
        let t = match self.get() {
            TlsNow::Off => return Ok(()),
            TlsNow::Plain => return set(tree, &format!("{base}/enabled"), Some("false")).map(|_| ()),
            TlsNow::Failed(e) => {
                set(tree, &format!("{base}/enabled"), Some("false"))?;
                set(tree, &format!("{base}/last-reload-error"), Some(&e))?;
                return Ok(());
            }
            TlsNow::Tls(t) => t,
        };
        let st = t.status();
        let time = |d: chrono::DateTime<chrono::Utc>| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        set(tree, &format!("{base}/enabled"), Some("true"))?;
        set(tree, &format!("{base}/certificate-file"), Some(&st.certificate_file.display().to_string()))?;
        set(tree, &format!("{base}/generated-certificate"), Some(if st.generated { "true" } else { "false" }))?;
        let auth = if st.client_ca.is_some() { st.client_auth.as_str() } else { "none" };
        set(tree, &format!("{base}/client-auth"), Some(auth))?;
        set(tree, &format!("{base}/loaded-at"), Some(&time(st.loaded_at)))?;
        set(tree, &format!("{base}/reloads"), Some(&st.reloads.to_string()))?;
        set(tree, &format!("{base}/reload-failures"), Some(&st.reload_failures.to_string()))?;
        if let Some(e) = &st.last_reload_error {
            set(tree, &format!("{base}/last-reload-error"), Some(e))?;
        }
        set(tree, &format!("{base}/mapped-connections"), Some(&st.mapped.to_string()))?;
        for (i, c) in st.crls.iter().enumerate() {
            let e = format!("{base}/crl[index='{i}']");
            set(tree, &format!("{e}/file"), Some(&c.file.display().to_string()))?;
            set(tree, &format!("{e}/issuer"), Some(&c.issuer))?;
            if let Some(d) = c.this_update {
                set(tree, &format!("{e}/this-update"), Some(&time(d)))?;
            }
            if let Some(d) = c.next_update {
                set(tree, &format!("{e}/next-update"), Some(&time(d)))?;
            }
            set(tree, &format!("{e}/revoked-certificates"), Some(&c.revoked.min(u32::MAX as usize).to_string()))?;
        }
        for (reason, n) in st.failures {
            set(tree, &format!("{base}/handshake-failures[reason='{reason}']/count"), Some(&n.to_string()))?;
        }
        Ok(())
    }
}
