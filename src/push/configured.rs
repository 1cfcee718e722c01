//! Configured subscriptions (RFC 8639 section 2.5, feature `configured`): subscriptions in
//! running, each with receivers that refer to receiver instances
//! (`cats-sma-notif-receivers`), sent over UDP-notif or HTTPS-notif. They are
//! configuration, so they survive restarts and are changed by any edit; NACM applies to
//! what each receiver is sent with the read rules of its instance's `access-as` user.
//!
//! A consumer of running reads the subscriptions, filters and receiver instances at each
//! commit that touches them (and refuses a commit whose subscriptions cannot run); one
//! task applies the changes in commit order. Every receiver has a driver task of its own:
//! it waits for its transport (HTTPS: connected, capabilities read), sends
//! subscription-started, runs the subscription (the same task a dynamic subscription
//! runs, so periodic, on-change, replay, NACM and flow control are the same) and forwards
//! its messages; a change of the terms sends subscription-modified, removing the receiver
//! or the subscription sends subscription-terminated, the stop-time
//! subscription-completed; suspension and resumption come from the subscription task.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use yang2::data::{Data, DataFormat, DataPrinterFlags, DataTree};

use super::encode::{self, Encoding};
use super::params::{self, Filters, Params};
use super::subscription::{Control, Counters, End};
use super::Push;
use crate::datastore::tree::{leaf, quote, set};
use crate::datastore::{ConfigConsumer, StateProvider, Transaction};
use crate::error::RpcError;
use crate::mgmt::Core;
use crate::notif::https_notif::{Client, ClientConfig, Link};
use crate::notif::udp_notif::{Sender, SenderConfig};
use crate::tls::client::ClientFiles;
use crate::yang::PrintText as _;

const SUBS: &str = "/ietf-subscribed-notifications:subscriptions";
const INSTANCES: &str =
    "/ietf-subscribed-notifications:subscriptions/cats-sma-notif-receivers:receiver-instances/receiver-instance";
pub const NS_CSNR: &str = "urn:cats-sma:yang:cats-sma-notif-receivers";
/// Messages between a receiver's subscription task and its transport.
const QUEUE: usize = 64;
/// Messages an HTTPS-notif receiver instance holds while its receiver is slow or away.
const HTTPS_QUEUE: usize = 256;
/// How often a receiver waiting for its transport looks again.
const WAIT_STEP: Duration = Duration::from_millis(50);

/// The transport of a receiver instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Udp,
    Https,
}

impl Kind {
    fn identity(self) -> &'static str {
        match self {
            Kind::Udp => "cats-sma-notif-receivers:udp-notif",
            Kind::Https => "cats-sma-notif-receivers:https",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum TransportSpec {
    Udp(SenderConfig),
    Https(ClientConfig),
}

impl TransportSpec {
    fn kind(&self) -> Kind {
        match self {
            TransportSpec::Udp(_) => Kind::Udp,
            TransportSpec::Https(_) => Kind::Https,
        }
    }
}

/// One receiver instance as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
struct InstanceSpec {
    access_as: String,
    transport: TransportSpec,
}

/// One configured subscription as configured.
#[derive(Clone, Debug)]
struct SubSpec {
    params: Params,
    /// The subscription's XML without its receivers: a change of it is a change of terms.
    terms: String,
    kind: Option<Kind>,
    purpose: Option<String>,
    /// Receiver name → receiver instance name.
    receivers: BTreeMap<String, String>,
    /// Why the subscription cannot run (configured-subscription-state `invalid`).
    problem: Option<String>,
}

/// What running asks for.
#[derive(Clone, Debug, Default)]
struct Desired {
    filters: Filters,
    instances: BTreeMap<String, InstanceSpec>,
    subs: BTreeMap<u32, SubSpec>,
}

fn print_xml(t: &DataTree<'static>) -> String {
    t.print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::SHRINK)
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn read_instance(t: &DataTree<'static>, base: &str) -> Result<InstanceSpec, String> {
    let l = |p: &str| leaf(t, &format!("{base}/{p}"));
    let access_as = l("access-as").ok_or("access-as is missing")?;
    let udp = format!("{base}/udp-notif-receiver");
    let https = format!("{base}/https-receiver");
    let transport = if t.find_path(&udp).is_ok() {
        let ip = |p: &str| -> Result<Option<IpAddr>, String> {
            l(&format!("udp-notif-receiver/{p}"))
                .map(|v| v.parse::<IpAddr>().map_err(|_| format!("{p} \"{v}\" is not an IP address")))
                .transpose()
        };
        let remote = ip("remote-address")?.ok_or("udp-notif-receiver needs remote-address")?;
        let port = l("udp-notif-receiver/remote-port")
            .and_then(|v| v.parse::<u16>().ok())
            .ok_or("udp-notif-receiver needs remote-port")?;
        let local = ip("local-address")?;
        if local.is_some_and(|a| a.is_ipv4() != remote.is_ipv4()) {
            return Err("local-address and remote-address are of different IP versions".into());
        }
        TransportSpec::Udp(SenderConfig {
            remote: SocketAddr::new(remote, port),
            local: local.map(|a| SocketAddr::new(a, 0)),
            generator_id: l("udp-notif-receiver/message-generator-id").and_then(|v| v.parse().ok()).unwrap_or(0),
            segmentation: l("udp-notif-receiver/enable-segmentation").as_deref() != Some("false"),
            max_segment_size: l("udp-notif-receiver/max-segment-size").and_then(|v| v.parse().ok()),
        })
    } else if t.find_path(&https).is_ok() {
        let h = |p: &str| l(&format!("https-receiver/{p}"));
        TransportSpec::Https(ClientConfig {
            host: h("remote-address").ok_or("https-receiver needs remote-address")?,
            port: h("remote-port").and_then(|v| v.parse().ok()).unwrap_or(443),
            path: h("path").unwrap_or_else(|| "/".into()),
            tls: ClientFiles {
                trusted_ca_file: h("trusted-ca-file"),
                client_certificate_file: h("client-certificate-file"),
                client_key_file: h("client-key-file"),
            },
            encoding: None,
            queue: HTTPS_QUEUE,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        })
    } else {
        return Err("no transport (udp-notif-receiver or https-receiver)".into());
    };
    Ok(InstanceSpec { access_as, transport })
}

/// Reads the configured subscriptions, filters and receiver instances of `t`.
fn read(t: &DataTree<'static>) -> Result<Desired, String> {
    let mut d = Desired::default();
    if let Ok(node) = t.find_path("/ietf-subscribed-notifications:filters") {
        let text = node.duplicate(false).map(|t| print_xml(&t)).unwrap_or_default();
        if !text.is_empty() {
            let el = crate::xml::parse(&text).map_err(|e| format!("filters: {}", e.0))?;
            d.filters = Filters::parse(&el, &text).map_err(|e| format!("filters: {}", e.message))?;
        }
    }
    if let Ok(set) = t.find_xpath(INSTANCES) {
        for n in set {
            let Some(name) = n.children().find(|c| c.schema().name() == "name").and_then(|c| c.value_canonical())
            else {
                continue;
            };
            if name.contains('\'') && name.contains('"') {
                return Err(format!("receiver-instance name {name:?} holds both quote characters"));
            }
            let base = format!("{INSTANCES}[name={}]", quote(&name));
            let spec = read_instance(t, &base).map_err(|e| format!("receiver-instance {name}: {e}"))?;
            d.instances.insert(name, spec);
        }
    }
    let Ok(set) = t.find_xpath(&format!("{SUBS}/subscription")) else { return Ok(d) };
    for n in set {
        let Some(id) = n
            .children()
            .find(|c| c.schema().name() == "id")
            .and_then(|c| c.value_canonical())
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        let base = format!("{SUBS}/subscription[id='{id}']");
        let mut receivers = BTreeMap::new();
        let mut problem = None;
        if let Ok(rs) = t.find_xpath(&format!("{base}/receivers/receiver")) {
            for r in rs {
                let mut name = None;
                let mut instance = None;
                for c in r.children() {
                    match c.schema().name() {
                        "name" => name = c.value_canonical(),
                        "receiver-instance-ref" => instance = c.value_canonical(),
                        _ => {}
                    }
                }
                let Some(name) = name else { continue };
                if name.contains('\'') && name.contains('"') {
                    problem.get_or_insert(format!("receiver name {name:?} holds both quote characters"));
                    continue;
                }
                match instance {
                    Some(i) => {
                        receivers.insert(name, i);
                    }
                    None => {
                        problem.get_or_insert(format!("receiver {name} has no receiver-instance-ref"));
                    }
                }
            }
        }
        let sub_tree = n.duplicate(false).map_err(|e| e.to_string())?;
        // The copy has no parents (paths from the schema root do not resolve in it): its
        // receivers are the child of its own root.
        if let Some(mut receivers) =
            sub_tree.reference().and_then(|root| root.children().find(|c| c.schema().name() == "receivers"))
        {
            // Not the root itself, so unlinking it leaves the tree whole.
            receivers.remove();
        }
        let terms = print_xml(&sub_tree);
        let params = match crate::xml::parse(&terms)
            .map_err(|e| e.0)
            .and_then(|el| params::configured(&el, &terms, &d.filters).map_err(|e| e.message))
        {
            Ok(p) => Some(p),
            Err(e) => {
                problem.get_or_insert(e);
                None
            }
        };
        let transport = leaf(t, &format!("{base}/transport"));
        let mut kind = match transport.as_deref().and_then(|v| v.rsplit(':').next()) {
            None => None,
            Some("udp-notif") => Some(Kind::Udp),
            Some("https") => Some(Kind::Https),
            Some(other) => {
                problem.get_or_insert(format!("transport {other} is not supported; udp-notif and https are"));
                None
            }
        };
        for (r, i) in &receivers {
            let Some(inst) = d.instances.get(i) else {
                problem.get_or_insert(format!("receiver {r}: no receiver-instance {i}"));
                continue;
            };
            match kind {
                None if transport.is_none() => kind = Some(inst.transport.kind()),
                Some(k) if k != inst.transport.kind() => {
                    problem.get_or_insert(format!(
                        "receiver {r}: receiver-instance {i} is {}, not the subscription's transport {}",
                        inst.transport.kind().identity(),
                        k.identity()
                    ));
                }
                _ => {}
            }
        }
        let params = params.unwrap_or(Params {
            target: params::Target::Stream { stream: "NETCONF".into(), filter: None, replay_start: None },
            stop_time: None,
            encoding: None,
        });
        if params.encoding == Some(Encoding::Cbor) && kind == Some(Kind::Https) {
            problem.get_or_insert("encode-cbor is for UDP-notif receivers; HTTPS-notif sends XML or JSON".into());
        }
        let purpose = leaf(t, &format!("{base}/purpose"));
        // A change of a named filter's content is a change of terms too.
        let terms = format!("{terms}\n{:?}", params.target);
        d.subs.insert(id, SubSpec { params, terms, kind, purpose, receivers, problem });
    }
    Ok(d)
}

/// A receiver instance's transport, shared by the drivers of its receivers.
enum Sink {
    Udp(Sender),
    Https(Client),
    /// Could not be set up (why).
    Failed(String),
}

impl Sink {
    async fn open(spec: &TransportSpec) -> Sink {
        match spec {
            TransportSpec::Udp(cfg) => match Sender::bind(cfg.clone()).await {
                Ok(s) => Sink::Udp(s),
                Err(e) => Sink::Failed(format!("UDP socket towards {}: {e}", cfg.remote)),
            },
            TransportSpec::Https(cfg) => Sink::Https(Client::spawn_eager(cfg.clone())),
        }
    }

    /// The encoding to send in, once the transport can take messages.
    fn ready(&self, configured: Option<Encoding>) -> Option<Encoding> {
        match self {
            Sink::Udp(_) => Some(configured.unwrap_or(Encoding::Json)),
            // The subscription's encoding if the receiver takes it (else it waits, shown
            // connecting), or what the capabilities chose.
            Sink::Https(c) => match c.link() {
                Link::Up { encoding, capabilities } => match configured {
                    None => Some(encoding),
                    Some(e) => capabilities.choose(Some(e)).ok(),
                },
                _ => None,
            },
            Sink::Failed(_) => None,
        }
    }

    /// `link`, `last-error` of the instance state.
    fn link(&self) -> (&'static str, Option<String>) {
        match self {
            Sink::Udp(_) => ("up", None),
            Sink::Https(c) => match c.link() {
                Link::Up { .. } => ("up", None),
                Link::Connecting => ("connecting", None),
                Link::Down(e) => ("down", Some(e)),
            },
            Sink::Failed(e) => ("down", Some(e.clone())),
        }
    }

    /// Sends one message written in `enc` (XML or JSON; CBOR: the JSON converted).
    async fn send(&self, enc: Encoding, text: String) {
        match self {
            Sink::Udp(s) => {
                let payload = if enc == Encoding::Cbor {
                    let Ok(tree) = serde_json::from_str::<serde_json::Value>(&text) else { return };
                    let mut out = Vec::with_capacity(text.len());
                    if ciborium::into_writer(&tree, &mut out).is_err() {
                        return;
                    }
                    out
                } else {
                    text.into_bytes()
                };
                if let Err(e) = s.send(enc.into(), &payload).await {
                    tracing::debug!("UDP-notif message not sent: {e}");
                }
            }
            Sink::Https(c) => {
                let state = is_state_notification(&text);
                c.send_encoded(enc, Arc::from(text), state);
            }
            Sink::Failed(_) => {}
        }
    }
}

/// Whether a message is a subscription state notification (RFC 8639 section 2.7): its
/// content element (XML) or member (JSON), the first after eventTime, is of
/// ietf-subscribed-notifications.
fn is_state_notification(text: &str) -> bool {
    const SN_NS: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\"";
    if let Some((_, rest)) = text.split_once("</eventTime>") {
        // `<name xmlns="...">`: the namespace of the content element itself.
        let tag = rest.split_once('>').map_or(rest, |(t, _)| t);
        return tag.starts_with('<') && tag.contains(SN_NS);
    }
    let Some((_, rest)) = text.split_once("\"eventTime\":\"") else { return false };
    let Some((_, rest)) = rest.split_once('"') else { return false };
    rest.trim_start_matches([',', ' ']).starts_with("\"ietf-subscribed-notifications:")
}

/// What the operational state shows of one receiver.
struct ReceiverStatus {
    counters: Arc<Counters>,
    sink: Arc<Sink>,
    /// Waiting for its transport (not yet started).
    connecting: AtomicBool,
    /// The encoding sent, once started.
    encoding: Mutex<Option<Encoding>>,
    /// The stop-time passed (subscription-completed sent).
    completed: AtomicBool,
}

impl ReceiverStatus {
    fn state(&self) -> &'static str {
        if self.connecting.load(Ordering::Relaxed) {
            return "connecting";
        }
        if self.counters.suspended.load(Ordering::Relaxed) {
            return "suspended";
        }
        match self.sink.link().0 {
            "up" => "active",
            _ => "disconnected",
        }
    }
}

#[derive(Default)]
struct SubStatus {
    /// valid, invalid or concluded.
    state: Arc<Mutex<&'static str>>,
    receivers: BTreeMap<String, Arc<ReceiverStatus>>,
}

#[derive(Default)]
struct Status {
    subs: BTreeMap<u32, SubStatus>,
    instances: BTreeMap<String, (Arc<Sink>, Kind)>,
}

/// What the applier tells a receiver's driver.
enum Cmd {
    /// New terms: subscription-modified, then on with them.
    Modify(Arc<SubSpec>),
    /// End with subscription-terminated and this reason.
    Stop(&'static str),
}

/// The configured-subscription consumer and its operational state.
pub struct Configured {
    tx: mpsc::UnboundedSender<Desired>,
    status: Arc<Mutex<Status>>,
    push: Weak<Push>,
    core: Weak<Core>,
    /// The receiver instances of the last applied commit.
    instances: Mutex<BTreeMap<String, InstanceSpec>>,
    /// The subscription ids of the last applied commit.
    ids: Mutex<HashSet<u32>>,
}

impl Configured {
    /// Starts configured subscriptions from `running` (at start-up; invalid ones are shown
    /// as such, not refused) and returns the consumer for later commits.
    pub fn start(core: &Arc<Core>, running: &DataTree<'static>) -> Arc<Configured> {
        let status = Arc::new(Mutex::new(Status::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(apply_loop(Arc::downgrade(core), rx, status.clone()));
        let c = Arc::new(Configured {
            tx,
            status,
            push: Arc::downgrade(&core.push),
            core: Arc::downgrade(core),
            instances: Mutex::new(BTreeMap::new()),
            ids: Mutex::new(HashSet::new()),
        });
        match read(running) {
            Ok(d) => c.send(d),
            Err(e) => tracing::warn!("configured subscriptions in running not started: {e}"),
        }
        c
    }

    fn send(&self, d: Desired) {
        *self.instances.lock().unwrap_or_else(|e| e.into_inner()) = d.instances.clone();
        let ids: HashSet<u32> = d.subs.keys().copied().collect();
        *self.ids.lock().unwrap_or_else(|e| e.into_inner()) = ids.clone();
        if let Some(p) = self.push.upgrade() {
            p.set_filters(d.filters.clone());
            p.set_configured_ids(ids);
        }
        let _ = self.tx.send(d);
    }
}

fn touched(tx: &Transaction<'_>) -> bool {
    tx.changes_under("/ietf-subscribed-notifications:").next().is_some()
}

impl ConfigConsumer for Configured {
    fn name(&self) -> &str {
        "configured-subscriptions"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if !touched(tx) {
            return Ok(());
        }
        let d = read(tx.config)?;
        for (id, s) in &d.subs {
            if let Some(p) = &s.problem {
                return Err(format!("configured subscription {id}: {p}"));
            }
        }
        // A receiver instance sends with the read rights of its access-as user: only that
        // user, or one NACM does not restrict, may name it (else a writer could read as
        // anybody). Instances already in running as they are stay.
        if let (Some(core), true) = (self.core.upgrade(), tx.session != crate::datastore::SYSTEM_SESSION) {
            let writer = core.nacm.user_of(tx.session).unwrap_or_default();
            if !core.nacm.is_unrestricted(&writer) {
                let before = self.instances.lock().unwrap_or_else(|e| e.into_inner()).clone();
                for (name, inst) in &d.instances {
                    if inst.access_as != writer && before.get(name) != Some(inst) {
                        return Err(format!(
                            "receiver-instance {name}: access-as {} is not the writer ({writer}); only an unrestricted user may send data with another user's rights",
                            inst.access_as
                        ));
                    }
                }
            }
        }
        if let Some(push) = self.push.upgrade() {
            // Reserved now, so no establish-subscription takes one of them before apply
            // (an abort puts back the ids of the last applied commit).
            if let Some(id) = push.reserve_configured_ids(d.subs.keys().copied()) {
                return Err(format!("subscription id {id} is held by a dynamic subscription; choose another"));
            }
        }
        Ok(())
    }

    fn abort(&self, tx: &Transaction<'_>) {
        if !touched(tx) {
            return;
        }
        if let Some(push) = self.push.upgrade() {
            push.set_configured_ids(self.ids.lock().unwrap_or_else(|e| e.into_inner()).clone());
        }
    }

    fn apply(&self, tx: &Transaction<'_>) {
        if !touched(tx) {
            return;
        }
        match read(tx.config) {
            Ok(d) => self.send(d),
            Err(e) => tracing::warn!("configured subscriptions not applied: {e}"),
        }
    }
}

/// A receiver's driver as the applier holds it.
struct Running {
    instance: String,
    cmd: mpsc::UnboundedSender<Cmd>,
}

/// Applies each desired configuration in commit order.
async fn apply_loop(core: Weak<Core>, mut rx: mpsc::UnboundedReceiver<Desired>, status: Arc<Mutex<Status>>) {
    let mut instances: BTreeMap<String, (InstanceSpec, Arc<Sink>)> = BTreeMap::new();
    let mut subs: BTreeMap<u32, (Arc<SubSpec>, BTreeMap<String, Running>)> = BTreeMap::new();
    while let Some(mut d) = rx.recv().await {
        // Commits that came meanwhile: only the last one matters.
        while let Ok(next) = rx.try_recv() {
            d = next;
        }
        // Receivers whose instance went or changed are stopped first.
        let changed: HashSet<String> = instances
            .iter()
            .filter(|(name, (spec, _))| d.instances.get(*name) != Some(spec))
            .map(|(n, _)| n.clone())
            .collect();
        let mut ids: Vec<u32> = subs.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some((old, mut receivers)) = subs.remove(&id) else { continue };
            let new = d.subs.get(&id).filter(|s| s.problem.is_none());
            let mut kept = BTreeMap::new();
            for (name, r) in std::mem::take(&mut receivers) {
                let stays =
                    new.is_some_and(|n| n.receivers.get(&name) == Some(&r.instance)) && !changed.contains(&r.instance);
                if stays {
                    kept.insert(name, r);
                } else {
                    let _ = r.cmd.send(Cmd::Stop("no-such-subscription"));
                    if let Some(st) = status.lock().unwrap_or_else(|e| e.into_inner()).subs.get_mut(&id) {
                        st.receivers.remove(&name);
                    }
                }
            }
            if let Some(new) = new {
                let new = Arc::new(new.clone());
                if new.terms != old.terms || new.kind != old.kind || new.purpose != old.purpose {
                    // A driver that has ended (stop-time passed, terminated) starts again
                    // with the new terms below.
                    kept.retain(|_, r| r.cmd.send(Cmd::Modify(new.clone())).is_ok());
                }
                subs.insert(id, (new, kept));
            }
        }
        // Receiver instances: open the new and changed ones, drop the gone.
        instances.retain(|name, _| d.instances.contains_key(name) && !changed.contains(name));
        for (name, spec) in &d.instances {
            if !instances.contains_key(name) {
                let sink = Arc::new(Sink::open(&spec.transport).await);
                instances.insert(name.clone(), (spec.clone(), sink));
            }
        }
        // New receivers start.
        for (id, spec) in &d.subs {
            if spec.problem.is_some() {
                continue;
            }
            let entry = subs.entry(*id).or_insert_with(|| (Arc::new(spec.clone()), BTreeMap::new()));
            for (name, inst) in &spec.receivers {
                if entry.1.contains_key(name) {
                    continue;
                }
                let Some((ispec, sink)) = instances.get(inst) else { continue };
                let rs = Arc::new(ReceiverStatus {
                    counters: Arc::new(Counters::default()),
                    sink: sink.clone(),
                    connecting: AtomicBool::new(true),
                    encoding: Mutex::new(None),
                    completed: AtomicBool::new(false),
                });
                let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
                tokio::spawn(drive(core.clone(), *id, entry.0.clone(), ispec.access_as.clone(), rs.clone(), cmd_rx));
                status
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .subs
                    .entry(*id)
                    .or_default()
                    .receivers
                    .insert(name.clone(), rs);
                entry.1.insert(name.clone(), Running { instance: inst.clone(), cmd: cmd_tx });
            }
        }
        // The state shown.
        let mut st = status.lock().unwrap_or_else(|e| e.into_inner());
        st.subs.retain(|id, _| d.subs.contains_key(id));
        for (id, spec) in &d.subs {
            let s = st.subs.entry(*id).or_default();
            let mut state = s.state.lock().unwrap_or_else(|e| e.into_inner());
            *state = if spec.problem.is_some() { "invalid" } else { "valid" };
        }
        st.instances =
            instances.iter().map(|(n, (spec, sink))| (n.clone(), (sink.clone(), spec.transport.kind()))).collect();
    }
}

/// subscription-started / subscription-modified of a configured subscription: its terms,
/// with transport and purpose (RFC 8639 section 2.7.1).
fn terms_notification(name: &str, id: u32, spec: &SubSpec) -> String {
    let mut body = super::policy_xml(name, id, &spec.params);
    let close = format!("</{name}>");
    if body.ends_with(&close) {
        body.truncate(body.len() - close.len());
    }
    if let Some(k) = spec.kind {
        let (_, ident) = k.identity().split_once(':').unwrap_or(("", ""));
        body.push_str(&format!("<transport xmlns:csnr=\"{NS_CSNR}\">csnr:{ident}</transport>"));
    }
    if let Some(p) = &spec.purpose {
        body.push_str(&format!("<purpose>{}</purpose>", crate::xml::escape_text(p)));
    }
    body.push_str(&close);
    body
}

/// The life of one receiver of one configured subscription.
async fn drive(
    core: Weak<Core>,
    id: u32,
    mut spec: Arc<SubSpec>,
    user: String,
    status: Arc<ReceiverStatus>,
    mut cmd: mpsc::UnboundedReceiver<Cmd>,
) {
    let sink = status.sink.clone();
    // Wait for the transport (HTTPS: connected and its capabilities read).
    let mut enc = loop {
        if let Some(e) = sink.ready(spec.params.encoding) {
            break e;
        }
        tokio::select! {
            c = cmd.recv() => match c {
                None | Some(Cmd::Stop(_)) => return,
                Some(Cmd::Modify(s)) => spec = s,
            },
            _ = tokio::time::sleep(WAIT_STEP) => {}
        }
    };
    *status.encoding.lock().unwrap_or_else(|e| e.into_inner()) = Some(enc);
    status.connecting.store(false, Ordering::Relaxed);
    let mut first = "subscription-started";
    loop {
        let Some(server) = core.upgrade() else { return };
        let mut params = spec.params.clone();
        params.encoding = Some(enc);
        // Built (subscribed to its event stream and change feeds) before subscription-started
        // goes out, so nothing the receiver causes after seeing it is missed.
        let (out_tx, mut out_rx) = mpsc::channel(QUEUE);
        let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel();
        let built = server.push.build(&server, id, &user, &params, out_tx, status.counters.clone(), ctrl_rx, || {});
        drop(server);
        let notice = encode::message(enc, Utc::now(), &terms_notification(first, id, &spec))
            .unwrap_or_else(|| encode::state_in(enc, first, id));
        sink.send(enc, notice).await;
        let task = tokio::spawn(built.task);
        let _ = ctrl_tx.send(Control::Start);
        let next = loop {
            tokio::select! {
                m = out_rx.recv() => match m {
                    Some(m) => sink.send(enc, m).await,
                    None => {
                        let end = task.await.unwrap_or(End::ReceiverGone);
                        if end == End::StopTime {
                            sink.send(enc, encode::state_in(enc, "subscription-completed", id)).await;
                            status.completed.store(true, Ordering::Relaxed);
                        }
                        return;
                    }
                },
                c = cmd.recv() => match c {
                    None | Some(Cmd::Stop(_)) => {
                        let reason = match c { Some(Cmd::Stop(r)) => r, _ => "no-such-subscription" };
                        let _ = ctrl_tx.send(Control::Delete);
                        // What the task queued before it stopped goes out first.
                        while let Some(m) = out_rx.recv().await {
                            sink.send(enc, m).await;
                        }
                        sink.send(enc, encode::state_with_reason_in(enc, "subscription-terminated", id, reason)).await;
                        return;
                    }
                    Some(Cmd::Modify(s)) => {
                        let _ = ctrl_tx.send(Control::Delete);
                        while let Some(m) = out_rx.recv().await {
                            sink.send(enc, m).await;
                        }
                        // The new terms may name another encoding.
                        if let Some(e) = sink.ready(s.params.encoding) {
                            enc = e;
                            *status.encoding.lock().unwrap_or_else(|e| e.into_inner()) = Some(enc);
                        }
                        break s;
                    }
                },
            }
        };
        spec = next;
        first = "subscription-modified";
    }
}

/// The state of configured subscriptions, their receivers and the receiver instances.
pub struct ConfiguredState {
    pub configured: Arc<Configured>,
}

impl StateProvider for ConfiguredState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("ietf-subscribed-notifications", "subscriptions")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if xpath.is_some_and(|x| !x.contains("subscribed-notifications") && !x.starts_with("/*") && x != "/") {
            return Ok(());
        }
        let st = self.configured.status.lock().unwrap_or_else(|e| e.into_inner());
        for (id, s) in &st.subs {
            let base = format!("{SUBS}/subscription[id='{id}']");
            let mut state = *s.state.lock().unwrap_or_else(|e| e.into_inner());
            if state == "valid"
                && !s.receivers.is_empty()
                && s.receivers.values().all(|r| r.completed.load(Ordering::Relaxed))
            {
                state = "concluded";
            }
            set(tree, &format!("{base}/configured-subscription-state"), Some(state))?;
            for (name, r) in &s.receivers {
                let rb = format!("{base}/receivers/receiver[name={}]", quote(name));
                let c = &r.counters;
                set(tree, &format!("{rb}/sent-event-records"), Some(&c.sent.load(Ordering::Relaxed).to_string()))?;
                set(
                    tree,
                    &format!("{rb}/excluded-event-records"),
                    Some(&c.excluded.load(Ordering::Relaxed).to_string()),
                )?;
                set(tree, &format!("{rb}/state"), Some(r.state()))?;
            }
        }
        for (name, (sink, _kind)) in &st.instances {
            let base = format!("{INSTANCES}[name={}]/state", quote(name));
            let (link, err) = sink.link();
            set(tree, &format!("{base}/link"), Some(link))?;
            if let Some(e) = err {
                set(tree, &format!("{base}/last-error"), Some(&e))?;
            }
            let encoding = st
                .subs
                .values()
                .flat_map(|s| s.receivers.values())
                .filter(|r| Arc::ptr_eq(&r.sink, sink))
                .find_map(|r| *r.encoding.lock().unwrap_or_else(|e| e.into_inner()));
            if let Some(e) = encoding {
                set(tree, &format!("{base}/encoding"), Some(e.identity()))?;
            }
            let (sent, datagrams, dropped) = match sink.as_ref() {
                Sink::Udp(s) => {
                    let c = &s.counters;
                    (
                        c.messages.load(Ordering::Relaxed),
                        Some(c.datagrams.load(Ordering::Relaxed)),
                        c.too_large.load(Ordering::Relaxed) + c.send_errors.load(Ordering::Relaxed),
                    )
                }
                Sink::Https(h) => {
                    let c = &h.counters;
                    (
                        c.sent.load(Ordering::Relaxed),
                        None,
                        c.dropped.load(Ordering::Relaxed)
                            + c.rejected.load(Ordering::Relaxed)
                            + c.unencodable.load(Ordering::Relaxed),
                    )
                }
                Sink::Failed(_) => (0, None, 0),
            };
            set(tree, &format!("{base}/messages-sent"), Some(&sent.to_string()))?;
            if let Some(d) = datagrams {
                set(tree, &format!("{base}/datagrams-sent"), Some(&d.to_string()))?;
            }
            set(tree, &format!("{base}/messages-dropped"), Some(&dropped.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8639_2_7_state_notifications_are_told_apart_from_data() {
        let started = encode::state_in(Encoding::Json, "subscription-resumed", 3);
        assert!(is_state_notification(&started));
        assert!(is_state_notification(&encode::state("subscription-terminated", 3)));
        let update = encode::push_update_in(Encoding::Json, 3, "{\"ietf-subscribed-notifications:streams\":{}}", false);
        assert!(!is_state_notification(&update));
        assert!(!is_state_notification(&encode::push_update(
            3,
            "<streams xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\"/>",
            false
        )));
        let change = encode::message(
            Encoding::Xml,
            Utc::now(),
            "<netconf-config-change xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-notifications\"><edit><target xmlns:sn=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\">/sn:subscriptions</target></edit></netconf-config-change>",
        )
        .unwrap();
        assert!(!is_state_notification(&change));
        assert!(is_state_notification(&encode::state_with_reason_in(
            Encoding::Json,
            "subscription-suspended",
            1,
            "insufficient-resources"
        )));
        // Multi-byte text anywhere is no problem.
        assert!(!is_state_notification(
            "{\"ietf-restconf:notification\":{\"eventTime\":\"t\",\"m:n\":\"\u{00e9}\u{00e9}\"}}"
        ));
    }
}
