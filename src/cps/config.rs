//! Configuration in: the `c-ps` peers (YANG `cats-sma-cps`) and the agent identity, from
//! datastore commits. `prepare` builds every peer's transport — parsing the URL and reading
//! the TLS files — so a bad URL or an unreadable certificate refuses the commit with the
//! reason; `apply` restarts only the peers whose settings changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use yang2::data::{Data, DataTree};

use super::auth::{unhex, Psk};
use super::codec::Encoding;
use super::grpc::{is_grpc_url, GrpcEndpoint, GrpcLink};
use super::session::{Channel, Identity, PeerSettings, Role};
use super::transport::{client_config, Endpoint, HttpTransport, TlsFiles};
use super::wire::Granularity;
use super::Adapters;
use crate::datastore::{ConfigConsumer, Transaction};
use crate::engine::northbound::{leaf, ROOT};

pub const C_PS: &str = "/cats-sma:cats-sma/cats-sma-cps:c-ps";
const PEER: &str = "/cats-sma:cats-sma/cats-sma-cps:c-ps/peer";
const AGENT: &str = "/cats-sma:cats-sma/agent";

/// Everything configured for one peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    pub settings: PeerSettings,
    pub tls: Option<TlsFiles>,
    pub timeout: Duration,
    /// The NACM user a gRPC peer's policy updates are applied as (YANG `policy-user`).
    pub policy_user: Option<String>,
    /// Whether `encoding` / `compression` were set to something a gRPC peer cannot honour.
    pub rest_only: Vec<&'static str>,
}

const POLICY_UC: &str = "/cats-sma:cats-sma/cats-sma-policy:policy/update-control";

/// The defaults every peer inherits from `policy/update-control` (seed 004, Update
/// Control: the backoff algorithm for repeated failures, and the buffer of C-PS Failure
/// Handling): `backoff/initial`, `backoff/max` (seconds) and `buffer-size`. A peer's own
/// `backoff-initial`, `backoff-max` (milliseconds) and `buffer-size` override them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyDefaults {
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub buffer_size: usize,
}

impl Default for PolicyDefaults {
    /// The YANG defaults of `policy/update-control`.
    fn default() -> Self {
        PolicyDefaults {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            buffer_size: 1024,
        }
    }
}

pub fn policy_defaults(t: &DataTree<'static>) -> PolicyDefaults {
    let d = PolicyDefaults::default();
    let num = |p: &str| leaf(t, &format!("{POLICY_UC}/{p}")).and_then(|v| v.parse::<u64>().ok());
    PolicyDefaults {
        backoff_initial: num("backoff/initial").map_or(d.backoff_initial, Duration::from_secs),
        backoff_max: num("backoff/max").map_or(d.backoff_max, Duration::from_secs),
        buffer_size: num("buffer-size").map_or(d.buffer_size, |v| v as usize),
    }
}

/// The identity in every request: `agent/csma-id` (default: the host name) and
/// `agent/site-id` (default: the csma-id).
pub fn identity(t: &DataTree<'static>) -> Identity {
    let csma_id = leaf(t, &format!("{ROOT}/agent/csma-id")).unwrap_or_else(host_name);
    let site_id = leaf(t, &format!("{ROOT}/agent/site-id")).unwrap_or_else(|| csma_id.clone());
    Identity { csma_id, site_id }
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "cats-sma".to_owned())
}

/// The peers in a configuration tree.
pub fn peers(t: &DataTree<'static>) -> Result<Vec<PeerConfig>, String> {
    let d = policy_defaults(t);
    let mut out = Vec::new();
    let Ok(set) = t.find_xpath(PEER) else { return Ok(out) };
    for n in set {
        let mut s = PeerSettings {
            name: String::new(),
            url: String::new(),
            role: Role::Primary,
            priority: 100,
            allowed: BTreeSet::new(),
            psk: None,
            gzip: false,
            buffer_size: d.buffer_size,
            batch_size: 100,
            backoff_initial: d.backoff_initial,
            backoff_max: d.backoff_max,
            encoding: Encoding::Json,
            granularity: Granularity::Site,
            source_id: None,
        };
        let mut tls = None;
        let mut timeout = Duration::from_millis(5000);
        let mut policy_user = None;
        let mut rest_only = Vec::new();
        for c in n.children() {
            let v = c.value_canonical().unwrap_or_default();
            let ms = || v.parse::<u64>().map(Duration::from_millis).map_err(|e| format!("{}: {e}", c.path()));
            match c.schema().name() {
                "name" => s.name = v.clone(),
                "url" => s.url = v.clone(),
                "role" => s.role = if v == "fallback" { Role::Fallback } else { Role::Primary },
                "priority" => s.priority = v.parse().unwrap_or(100),
                "policy-user" => policy_user = Some(v.clone()),
                "encoding" => {
                    if v != "json" {
                        rest_only.push("encoding");
                    }
                    s.encoding = Encoding::parse(&v).ok_or_else(|| format!("{}: unknown encoding {v}", c.path()))?
                }
                "granularity" => {
                    s.granularity =
                        Granularity::parse(&v).ok_or_else(|| format!("{}: unknown granularity {v}", c.path()))?
                }
                "compression" => {
                    s.gzip = v == "gzip";
                    if s.gzip {
                        rest_only.push("compression");
                    }
                }
                "allowed-cs-id" => {
                    s.allowed.insert(v.clone());
                }
                "buffer-size" => s.buffer_size = v.parse().unwrap_or(d.buffer_size),
                "batch-size" => s.batch_size = v.parse().unwrap_or(100),
                "request-timeout" => timeout = ms()?,
                "backoff-initial" => s.backoff_initial = ms()?,
                "backoff-max" => s.backoff_max = ms()?,
                "tls" => {
                    let mut f = BTreeMap::new();
                    for x in c.children() {
                        f.insert(x.schema().name().to_owned(), x.value_canonical().unwrap_or_default());
                    }
                    tls = Some(TlsFiles {
                        trusted_ca_file: f.get("trusted-ca-file").cloned().unwrap_or_default(),
                        server_name: f.get("server-name").cloned(),
                        client_certificate_file: f.get("client-certificate-file").cloned(),
                        client_key_file: f.get("client-key-file").cloned(),
                    });
                }
                "psk" => {
                    let mut f = BTreeMap::new();
                    for x in c.children() {
                        f.insert(x.schema().name().to_owned(), x.value_canonical().unwrap_or_default());
                    }
                    let key_id = f.get("key-id").cloned().unwrap_or_default();
                    let secret = f
                        .get("key")
                        .and_then(|k| unhex(k))
                        .ok_or_else(|| format!("c-ps peer '{}': psk/key is not hexadecimal", s.name))?;
                    s.psk = Some(Psk { key_id, secret });
                }
                _ => {}
            }
        }
        if s.backoff_max < s.backoff_initial {
            return Err(format!(
                "c-ps peer '{}': the effective backoff-max ({} ms) is below the effective backoff-initial ({} ms) \
                 (a peer leaf unset inherits policy/update-control/backoff)",
                s.name,
                s.backoff_max.as_millis(),
                s.backoff_initial.as_millis()
            ));
        }
        // Seed 003: the C-PS's reports are believed from the identity TLS verified.
        s.source_id = tls.as_ref().and_then(|t: &TlsFiles| t.server_name.clone());
        out.push(PeerConfig { settings: s, tls, timeout, policy_user, rest_only });
    }
    Ok(out)
}

/// A peer's transport (REST for http/https urls, the gRPC stream for grpc/grpcs); reads
/// the TLS files. The error says which peer and why.
pub fn transport(p: &PeerConfig) -> Result<Channel, String> {
    let name = &p.settings.name;
    if is_grpc_url(&p.settings.url) {
        if let Some(leaf) = p.rest_only.first() {
            return Err(format!(
                "c-ps peer '{name}': '{leaf}' applies to REST peers only: a grpc url carries protobuf, uncompressed \
                 (gRPC compression is not supported)"
            ));
        }
        let endpoint = GrpcEndpoint::parse(&p.settings.url).map_err(|e| format!("c-ps peer '{name}': {e}"))?;
        let tls = match &p.tls {
            Some(t) => {
                Some((client_config(t).map_err(|e| format!("c-ps peer '{name}': tls: {e}"))?, t.server_name.clone()))
            }
            None => None,
        };
        let link = GrpcLink::new(endpoint, tls, p.timeout, p.policy_user.clone())
            .map_err(|e| format!("c-ps peer '{name}': {e}"))?;
        return Ok(Channel::Grpc(Arc::new(link)));
    }
    if p.policy_user.is_some() {
        return Err(format!(
            "c-ps peer '{name}': 'policy-user' applies to gRPC peers only: a REST C-PS sends no policy updates"
        ));
    }
    let endpoint = Endpoint::parse(&p.settings.url).map_err(|e| format!("c-ps peer '{name}': {e}"))?;
    let tls = match &p.tls {
        Some(t) => {
            Some((client_config(t).map_err(|e| format!("c-ps peer '{name}': tls: {e}"))?, t.server_name.clone()))
        }
        None => None,
    };
    let t = HttpTransport::new(endpoint, tls, p.timeout).map_err(|e| format!("c-ps peer '{name}': {e}"))?;
    Ok(Channel::Rest(Arc::new(t)))
}

type Prepared = (Identity, Vec<(PeerConfig, Channel)>);

/// Feeds commits to the adapters.
pub struct CpsConfig {
    pub adapters: Arc<Adapters>,
    current: Mutex<BTreeMap<String, PeerConfig>>,
    pending: Mutex<Option<Prepared>>,
}

impl CpsConfig {
    /// Starts the peers configured in `t` (running at start-up); a peer that cannot be
    /// built is logged and left out.
    pub fn load(adapters: Arc<Adapters>, t: &DataTree<'static>) -> CpsConfig {
        adapters.set_identity(identity(t));
        let mut current = BTreeMap::new();
        match peers(t) {
            Ok(list) => {
                for p in list {
                    match transport(&p) {
                        Ok(tr) => {
                            adapters.start_peer(p.settings.clone(), tr);
                            current.insert(p.settings.name.clone(), p);
                        }
                        Err(e) => tracing::error!("C-PS peer in running is not usable, left out: {e}"),
                    }
                }
            }
            Err(e) => tracing::error!("C-PS peers in running are not usable: {e}"),
        }
        CpsConfig { adapters, current: Mutex::new(current), pending: Mutex::new(None) }
    }
}

impl ConfigConsumer for CpsConfig {
    fn name(&self) -> &str {
        "C-PS adapters"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if tx.changes_under(C_PS).next().is_none()
            && tx.changes_under(AGENT).next().is_none()
            && tx.changes_under(POLICY_UC).next().is_none()
        {
            return Ok(());
        }
        let mut built = Vec::new();
        for p in peers(tx.config)? {
            let t = transport(&p)?;
            built.push((p, t));
        }
        *super::session::lock(&self.pending) = Some((identity(tx.config), built));
        Ok(())
    }

    fn abort(&self, _tx: &Transaction<'_>) {
        super::session::lock(&self.pending).take();
    }

    fn apply(&self, _tx: &Transaction<'_>) {
        let Some((id, built)) = super::session::lock(&self.pending).take() else { return };
        self.adapters.set_identity(id);
        let mut current = super::session::lock(&self.current);
        let names: BTreeSet<String> = built.iter().map(|(p, _)| p.settings.name.clone()).collect();
        for gone in current.keys().filter(|n| !names.contains(*n)).cloned().collect::<Vec<_>>() {
            tracing::info!(c_ps = %gone, "C-PS peer removed");
            self.adapters.stop_peer(&gone);
            current.remove(&gone);
        }
        for (p, t) in built {
            if current.get(&p.settings.name) == Some(&p) {
                continue;
            }
            tracing::info!(c_ps = %p.settings.name, url = %p.settings.url, "C-PS peer (re)started");
            self.adapters.start_peer(p.settings.clone(), t);
            current.insert(p.settings.name.clone(), p);
        }
    }
}
