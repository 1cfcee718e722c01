//! MQTT push through a real broker (seed 004: "MQTT publish/subscribe"): the agent
//! subscribes (MQTT v5) to the configured topic, as a member of a shared subscription
//! group when one is configured (`$share/<group>/<topic>`, so several agents split the
//! load), resubscribes after every (re)connection, and reconnects with backoff when the
//! broker goes away. The `+` level of the topic is the publishing SCI's CSCI-ID: a report
//! for another CSCI-ID is refused as unauthenticated. Payloads are JSON or CBOR (the MQTT v5
//! content type `application/cbor` selects CBOR).
//!
//! The broker is reached over TLS (rustls, `tls::client`: the configured trust anchors, an
//! optional client certificate) with an optional user name and password; plain TCP only
//! with `allow-plaintext`, warned about at every (re)start. Backpressure: the collector
//! polls the connection for the next PUBLISH only once the engine has a slot for the one
//! it holds (rumqttc reads at most 10 packets per poll and acknowledges them as it reads
//! them), and announces a Receive Maximum of `peer_limits.mqtt_inflight`, so the broker
//! has at most that many unacknowledged reports in flight to the agent; a flood waits in
//! the broker's queue (its own limits) and the TCP window, not in the agent's memory. The
//! connection, its errors and its counters are in `collection/mqtt/state`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rumqttc::v5::mqttbytes::v5::{Packet, Publish};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::engine::core::Sender;
use crate::engine::report::{self, check_id, Encoding, IdKind};
use crate::engine::validate::Rejection;
use crate::engine::{Engine, Slot};
use crate::overload::wire::{Supported, H_OC_OLR, H_OC_SUPPORTED, OLR_DEFAULT_ALGO};
use crate::tls::client::{ClientFiles, Loader};

/// A secret kept out of `Debug` output and logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

/// The collection/mqtt settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttSettings {
    pub enabled: bool,
    pub host: String,
    pub port: u16,
    pub topic: String,
    pub shared_group: Option<String>,
    pub client_id: String,
    pub keepalive: Duration,
    /// Plain TCP when no `tls` is configured.
    pub allow_plaintext: bool,
    /// TLS to the broker (the `tls` presence container).
    pub tls: Option<ClientFiles>,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

/// The collection/mqtt settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> MqttSettings {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let l = |p: &str| leaf(t, &format!("{ROOT}/collection/mqtt/{p}"));
    let tls = l("tls/trusted-ca-file").map(|ca| ClientFiles {
        trusted_ca_file: Some(ca),
        client_certificate_file: l("tls/client-certificate-file"),
        client_key_file: l("tls/client-key-file"),
    });
    MqttSettings {
        enabled: l("enabled").as_deref() == Some("true"),
        host: l("broker-host").unwrap_or_else(|| "127.0.0.1".into()),
        port: leaf_u64(t, &format!("{ROOT}/collection/mqtt/broker-port")).map(|p| p as u16).unwrap_or(1883),
        topic: l("topic").unwrap_or_else(|| "cats/sci/+/report".into()),
        shared_group: l("shared-group"),
        client_id: l("client-id").unwrap_or_else(|| format!("cats-sma-{}", std::process::id())),
        keepalive: Duration::from_secs(leaf_u64(t, &format!("{ROOT}/collection/mqtt/keepalive")).unwrap_or(60).max(5)),
        allow_plaintext: l("allow-plaintext").as_deref() == Some("true"),
        tls,
        username: l("username"),
        password: l("password").map(Secret),
    }
}

/// Commit check (the engine consumer's prepare): the TLS files of an enabled collector are
/// readable and usable, and its broker host is a valid TLS server name.
pub fn check(t: &yang2::data::DataTree<'static>) -> Result<(), String> {
    let s = settings(t);
    if let (true, Some(files)) = (s.enabled, &s.tls) {
        crate::tls::client::config(files, &[]).map_err(|e| format!("collection/mqtt/tls: {e}"))?;
        crate::tls::client::server_name(&s.host).map_err(|e| format!("collection/mqtt: {e}"))?;
    }
    Ok(())
}

/// The subscription filter: the topic, inside the shared-subscription namespace when a
/// group is configured (MQTT v5 section 4.8.2).
pub fn filter(s: &MqttSettings) -> String {
    match &s.shared_group {
        Some(g) => format!("$share/{g}/{}", s.topic),
        None => s.topic.clone(),
    }
}

/// The CSCI-ID a topic claims: the level matched by the first `+` of the configured topic.
pub fn claimed_csci(pattern: &str, topic: &str) -> Option<String> {
    let levels: Vec<&str> = topic.split('/').collect();
    let pos = pattern.split('/').position(|l| l == "+")?;
    levels.get(pos).map(|s| s.to_string())
}

/// The collector's connection (YANG `collection/mqtt/state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connection {
    #[default]
    Disabled,
    Connecting,
    Connected,
}

impl Connection {
    pub fn yang(self) -> &'static str {
        match self {
            Connection::Disabled => "disabled",
            Connection::Connecting => "connecting",
            Connection::Connected => "connected",
        }
    }
}

/// How the collector fares, shared with the operational state.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub connection: Connection,
    /// Whether the broker is reached over TLS (None while disabled).
    pub tls: Option<bool>,
    pub connected_since: Option<DateTime<Utc>>,
    pub messages: u64,
    pub failures: u64,
    pub last_success: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub last_error_time: Option<DateTime<Utc>>,
}

#[derive(Clone, Default)]
pub struct MqttStatus(Arc<Mutex<Status>>);

impl MqttStatus {
    fn with<R>(&self, f: impl FnOnce(&mut Status) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn failed(&self, connection: Connection, error: String) {
        self.with(|s| {
            s.connection = connection;
            s.connected_since = None;
            s.failures += 1;
            s.last_error = Some(crate::text::printable(&error, 500));
            s.last_error_time = Some(Utc::now());
        });
    }

    pub fn snapshot(&self) -> Status {
        self.with(|s| s.clone())
    }
}

/// The rumqttc options for these settings, with the TLS configuration `tls`.
fn options(s: &MqttSettings, tls: Option<Arc<rustls::ClientConfig>>, inflight: u16) -> MqttOptions {
    let mut opts = MqttOptions::new(s.client_id.clone(), s.host.clone(), s.port);
    opts.set_keep_alive(s.keepalive);
    opts.set_clean_start(true);
    opts.set_max_packet_size(Some(1024 * 1024));
    // At most `inflight` unacknowledged reports in flight from the broker. Acknowledgements
    // stay rumqttc's (sent as packets are read): the collector reads only when the engine
    // has room, and manual acknowledgements would have to pass the request channel that
    // only this same task drains.
    opts.set_receive_maximum(Some(inflight.max(1)));
    if let Some(cfg) = tls {
        opts.set_transport(rumqttc::Transport::Tls(rumqttc::TlsConfiguration::Rustls(cfg)));
    }
    if let Some(u) = &s.username {
        opts.set_credentials(u.clone(), s.password.as_ref().map(|p| p.0.clone()).unwrap_or_default());
    }
    opts
}

/// Waits for a settings change (true) or the sender's end (false), at most `limit`.
async fn wait_change(settings: &mut watch::Receiver<MqttSettings>, limit: Option<Duration>) -> bool {
    match limit {
        Some(d) => tokio::time::timeout(d, settings.changed()).await.map(|r| r.is_ok()).unwrap_or(true),
        None => settings.changed().await.is_ok(),
    }
}

/// Runs the MQTT collector, following setting changes, until the sender is dropped.
pub async fn serve(engine: Engine, mut settings: watch::Receiver<MqttSettings>, status: MqttStatus) {
    loop {
        let current = settings.borrow_and_update().clone();
        if !current.enabled {
            status.with(|s| *s = Status { failures: s.failures, ..Status::default() });
            if !wait_change(&mut settings, None).await {
                return;
            }
            continue;
        }
        // TLS unless plaintext was chosen explicitly (the schema's must says as much; a
        // start-up file is checked here again).
        let mut loader = current.tls.clone().map(|f| Loader::new(f, &[]));
        let tls = match loader.as_mut().map(|l| l.get()) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                error!("MQTT collector not started: its TLS settings are not usable: {e}");
                status.failed(Connection::Disabled, format!("not started: {e}"));
                // Retried now and then: a fixed file is picked up without a commit.
                if !wait_change(&mut settings, Some(Duration::from_secs(30))).await {
                    return;
                }
                continue;
            }
            None if !current.allow_plaintext => {
                error!("MQTT collector not started: no tls and allow-plaintext is not set");
                status.failed(Connection::Disabled, "not started: no tls and allow-plaintext is not set".into());
                if !wait_change(&mut settings, None).await {
                    return;
                }
                continue;
            }
            None => None,
        };
        let broker_at = format!("{}:{}", current.host, current.port);
        if tls.is_none() {
            warn!(
                broker = %broker_at,
                password = current.password.is_some(),
                "SCI collection over MQTT in plaintext (allow-plaintext): reports, proofs and any password travel in clear"
            );
        }
        status.with(|s| {
            s.connection = Connection::Connecting;
            s.tls = Some(tls.is_some());
        });
        let restart = run(&engine, &current, &mut settings, tls, loader.as_mut(), &status).await;
        if !restart {
            return;
        }
    }
}

/// One collector run with fixed settings: true to restart (settings or TLS files changed),
/// false when the settings sender is gone.
async fn run(
    engine: &Engine,
    current: &MqttSettings,
    settings: &mut watch::Receiver<MqttSettings>,
    tls: Option<Arc<rustls::ClientConfig>>,
    mut loader: Option<&mut Loader>,
    status: &MqttStatus,
) -> bool {
    let inflight = engine.limits.mqtt_inflight.max(1);
    let using = tls.clone();
    // The collector's requests are the subscription, the disconnect and the control topic
    // publishes (seed 003). The publishes come from their own task, which may wait for room
    // in the request queue; this task, which drains it by polling, never waits: it
    // subscribes and disconnects with the try_ calls and retries a subscription that found
    // the queue full.
    let (client, mut events) = AsyncClient::new(options(current, tls, inflight), 256);
    let (control_tx, control_rx) = tokio::sync::mpsc::channel::<String>(CONTROL_QUEUE);
    let all = Arc::new(tokio::sync::Notify::new());
    let publisher =
        AbortOnDrop(tokio::spawn(control_publisher(client.clone(), engine.clone(), control_rx, all.clone())));
    let mut doic_changed = engine.doic.changed.subscribe();
    let mut retry = tokio::time::interval(Duration::from_secs(1));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut subscribe_pending = false;
    let filter = filter(current);
    let mut backlog: usize = 0;
    let broker = broker_ip(&current.host).await;
    let mut backoff = Duration::from_secs(1);
    info!(broker = %format!("{}:{}", current.host, current.port), filter, tls = using.is_some(), "SCI collection over MQTT starting");
    loop {
        tokio::select! {
            // A new report, a renewal or an end: every SCI that announced over MQTT (the
            // publisher walks them all; a notification it has not taken yet is kept).
            r = doic_changed.changed() => {
                if r.is_ok() {
                    all.notify_one();
                }
            }
            _ = retry.tick(), if subscribe_pending => {
                subscribe_pending = client.try_subscribe(filter.clone(), QoS::AtLeastOnce).is_err();
            }
            changed = settings.changed() => {
                if changed.is_err() {
                    let _ = client.try_disconnect();
                    drop(publisher);
                    return false;
                }
                if *settings.borrow() != *current {
                    let _ = client.try_disconnect();
                    drop(publisher);
                    return true;
                }
            }
            ev = events.poll() => match ev {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    backoff = Duration::from_secs(1);
                    info!(filter, "MQTT connected; subscribing");
                    status.with(|s| {
                        s.connection = Connection::Connected;
                        s.connected_since = Some(Utc::now());
                        s.last_success = s.connected_since;
                    });
                    // The request queue may be full of control publishes: retried then.
                    subscribe_pending = client.try_subscribe(filter.clone(), QoS::AtLeastOnce).is_err();
                }
                Ok(Event::Incoming(Packet::SubAck(ack))) => {
                    use rumqttc::v5::mqttbytes::v5::SubscribeReasonCode as C;
                    if let Some(code) = ack.return_codes.iter().find(|c| !matches!(c, C::Success(_))) {
                        warn!(filter, "MQTT subscription refused by the broker: {code:?}");
                        status.failed(Connection::Connected, format!("subscription to {filter} refused: {code:?}"));
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    status.with(|s| s.messages += 1);
                    // Backpressure: the next publish is read from the broker only once
                    // the engine has a slot for this one.
                    let Some(slot) = engine.slot().await else { return false };
                    backlog += p.payload.len() + p.topic.len();
                    ingest(engine, &current.topic, &p, broker, slot, &control_tx);
                    // The slots bound the messages queued for the engine; this bounds their
                    // bytes (peer_limits.mqtt_backlog_bytes).
                    if backlog >= engine.limits.mqtt_backlog_bytes {
                        let _ = engine.query(|_| ()).await;
                        backlog = 0;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    // Polling again reconnects; wait first so a dead broker is not hammered.
                    warn!("MQTT connection to {}:{} failed: {e}; retrying in {}s", current.host, current.port, backoff.as_secs());
                    status.failed(Connection::Connecting, e.to_string());
                    // Renewed TLS files: reconnect with them.
                    if let (Some(l), Some(cfg)) = (loader.as_deref_mut(), &using) {
                        if l.get().is_ok_and(|c| !Arc::ptr_eq(&c, cfg)) {
                            return true;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        changed = settings.changed() => {
                            if changed.is_err() {
                                return false;
                            }
                            if *settings.borrow() != *current {
                                return true;
                            }
                        }
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
            }
        }
    }
}

/// The broker's address: MQTT messages have no SCI address, so auth-failure
/// notifications name the broker they came through.
async fn broker_ip(host: &str) -> Option<std::net::IpAddr> {
    if let Ok(ip) = host.parse() {
        return Some(ip);
    }
    tokio::net::lookup_host((host, 0)).await.ok()?.next().map(|a| a.ip())
}

/// Hands one publish to the engine (its job holds `slot` until it has run).
fn ingest(
    engine: &Engine,
    pattern: &str,
    p: &Publish,
    broker: Option<std::net::IpAddr>,
    slot: Slot,
    control: &tokio::sync::mpsc::Sender<String>,
) {
    let topic = String::from_utf8_lossy(&p.topic);
    let props = p.properties.as_ref();
    let cbor = props.and_then(|pr| pr.content_type.as_deref()) == Some("application/cbor");
    let proof = props.and_then(|pr| {
        pr.user_properties.iter().find(|(k, _)| k.eq_ignore_ascii_case("authorization")).map(|(_, v)| v.as_str())
    });
    // Seed 003: an SCI that takes the C-SMA's peer overload reports announces it.
    let announced = props
        .and_then(|pr| pr.user_properties.iter().find(|(k, _)| k.eq_ignore_ascii_case(H_OC_SUPPORTED)))
        .and_then(|(_, v)| Supported::decode(v).ok());
    let payload = &p.payload[..];
    // The topic is the broker's and the publisher's text: logged escaped, never raw.
    let shown = crate::text::printable(&topic, 300);
    // The CSCI-ID the topic level claims is an identifier like any other: of its YANG type
    // before anything keeps it.
    let claimed = claimed_csci(pattern, &topic);
    if let Some(Err(e)) = claimed.as_deref().map(|c| check_id(IdKind::CsciId, c)) {
        warn!(topic = %shown, "MQTT message refused: the topic's {e}");
        engine.submit(move |core| {
            core.count_rejection(Rejection::Malformed, "mqtt", "mqtt");
            drop(slot);
        });
        return;
    }
    let enc = if cbor { Encoding::Cbor } else { Encoding::Json };
    let raws = match report::decode(payload, enc) {
        Ok(r) => r,
        Err(e) => {
            warn!(topic = %shown, "MQTT report refused: {:?}", e.to_string());
            engine.submit(move |core| {
                core.count_rejection(Rejection::Malformed, "mqtt", "mqtt");
                drop(slot);
            });
            return;
        }
    };
    let sender = Sender { csci_id: claimed, transport: "mqtt", address: broker, ..Sender::default() };
    let sender = match engine.authenticate(&raws, proof, payload, sender) {
        Ok(s) => s,
        Err(f) => {
            debug!(topic = %shown, "MQTT message refused: {:?}", f.detail);
            // Released behind the failure's own job (one queue, in order).
            engine.submit(move |_| drop(slot));
            return;
        }
    };
    let (doic, control) = (engine.doic.clone(), control.clone());
    engine.submit(move |core| {
        let results = core.ingest_batch(&raws, &sender);
        if let Some(a) = announced {
            // Answered only for a CSCI-ID a report of this message was accepted for, and
            // published only when it is news to the SCI (the publisher sends the rest).
            let accepted = raws.iter().zip(&results).any(|(r, res)| res.is_ok() && r.csci_id == a.source_id);
            if accepted && doic.answer_news(&a.source_id, &a, "mqtt").is_some_and(|(_, _, news)| news) {
                let _ = control.try_send(a.source_id.clone());
            }
        }
        for (reason, detail) in results.into_iter().filter_map(Result::err) {
            debug!(topic = %shown, reason = reason.identity(), "MQTT report refused: {detail:?}");
        }
        drop(slot);
    });
}

/// SCIs waiting for the control topic publisher.
const CONTROL_QUEUE: usize = 1024;

/// Publishes the C-SMA's answer and report in force on one SCI's control topic (seed 003):
/// MQTT v5 user properties `x-cats-oc-supported-features` and `x-cats-oc-olr`, the same in
/// a JSON payload, retained (an SCI that subscribes later gets it). Runs in the control
/// publisher's task: it may wait for room in the request queue.
async fn control_publisher(
    client: AsyncClient,
    engine: Engine,
    mut rx: tokio::sync::mpsc::Receiver<String>,
    all: Arc<tokio::sync::Notify>,
) {
    loop {
        tokio::select! {
            one = rx.recv() => match one {
                Some(csci) => publish_control(&client, &engine, &csci).await,
                None => break,
            },
            _ = all.notified() => {
                for csci in engine.doic.announced_over("mqtt") {
                    publish_control(&client, &engine, &csci).await;
                }
            }
        }
    }
}

/// Aborts a task when dropped (the control publisher ends with its collector run).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn publish_control(client: &AsyncClient, engine: &Engine, csci: &str) {
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    let (settings, r) = engine.doic.settings();
    let olr = engine.doic.current();
    // Turned off during an overload, the node still publishes its end while it lasts.
    if !(settings.reporting() || olr.is_some()) || csci.contains(['+', '#', '/', '\0']) {
        return;
    }
    let topic = r.mqtt_control_topic.replacen('+', csci, 1);
    let answer = Supported {
        feature_vector: crate::overload::wire::OLR_PEER_REPORT | OLR_DEFAULT_ALGO,
        peer_algo: OLR_DEFAULT_ALGO,
        source_id: engine.doic.csma_id(),
    }
    .to_string();
    let olr = olr.map(|o| o.to_string());
    let mut user = vec![(H_OC_SUPPORTED.to_owned(), answer.clone())];
    if let Some(o) = &olr {
        user.push((H_OC_OLR.to_owned(), o.clone()));
    }
    let body = serde_json::json!({ H_OC_SUPPORTED: answer, H_OC_OLR: olr }).to_string();
    let props = PublishProperties {
        user_properties: user,
        content_type: Some("application/json".into()),
        message_expiry_interval: Some(r.validity),
        ..PublishProperties::default()
    };
    if let Err(e) = client.publish_with_properties(topic, QoS::AtLeastOnce, true, body, props).await {
        debug!(csci, "MQTT control publish failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_levels_and_shared_filter() {
        assert_eq!(
            claimed_csci("cats/sci/+/report", "cats/sci/188.3.67.3:67/report").as_deref(),
            Some("188.3.67.3:67")
        );
        assert_eq!(claimed_csci("cats/reports", "cats/reports"), None);
        // A topic level is an identifier like any other (issue 11): checked before use.
        for bad in ["a\rb", "a\nb", "a\u{202e}b", &"x".repeat(256)] {
            let id = claimed_csci("cats/sci/+/report", &format!("cats/sci/{bad}/report")).unwrap();
            assert!(check_id(IdKind::CsciId, &id).is_err(), "{bad:?}");
        }
        let s = MqttSettings {
            enabled: true,
            host: "h".into(),
            port: 1,
            topic: "cats/sci/+/report".into(),
            shared_group: Some("site-a".into()),
            client_id: "c".into(),
            keepalive: Duration::from_secs(60),
            allow_plaintext: false,
            tls: None,
            username: None,
            password: Some(Secret("pw".into())),
        };
        assert!(!format!("{s:?}").contains("pw"), "the password is not in Debug output");
        assert_eq!(filter(&s), "$share/site-a/cats/sci/+/report");
    }
}
