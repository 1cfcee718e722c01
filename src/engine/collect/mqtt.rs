//! MQTT push through a real broker (seed 004: "MQTT publish/subscribe"): the agent
//! subscribes (MQTT v5) to the configured topic, as a member of a shared subscription
//! group when one is configured (`$share/<group>/<topic>`, so several agents split the
//! load), resubscribes after every (re)connection, and reconnects with backoff when the
//! broker goes away. The `+` level of the topic is the publishing SCI's CSCI-ID: a report
//! for another CSCI-ID is refused as unauthenticated. Payloads are JSON or CBOR (the MQTT v5
//! content type `application/cbor` selects CBOR).

use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::engine::core::Sender;
use crate::engine::report::{self, check_id, Encoding, IdKind};
use crate::engine::validate::Rejection;
use crate::engine::Engine;

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
}

/// The collection/mqtt settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> MqttSettings {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let l = |p: &str| leaf(t, &format!("{ROOT}/collection/mqtt/{p}"));
    MqttSettings {
        enabled: l("enabled").as_deref() == Some("true"),
        host: l("broker-host").unwrap_or_else(|| "127.0.0.1".into()),
        port: leaf_u64(t, &format!("{ROOT}/collection/mqtt/broker-port")).map(|p| p as u16).unwrap_or(1883),
        topic: l("topic").unwrap_or_else(|| "cats/sci/+/report".into()),
        shared_group: l("shared-group"),
        client_id: l("client-id").unwrap_or_else(|| format!("cats-sma-{}", std::process::id())),
        keepalive: Duration::from_secs(leaf_u64(t, &format!("{ROOT}/collection/mqtt/keepalive")).unwrap_or(60).max(5)),
    }
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

/// Runs the MQTT collector, following setting changes, until the sender is dropped.
pub async fn serve(engine: Engine, mut settings: watch::Receiver<MqttSettings>) {
    loop {
        let current = settings.borrow_and_update().clone();
        if !current.enabled {
            if settings.changed().await.is_err() {
                return;
            }
            continue;
        }
        let mut opts = MqttOptions::new(current.client_id.clone(), current.host.clone(), current.port);
        opts.set_keep_alive(current.keepalive);
        opts.set_clean_start(true);
        opts.set_max_packet_size(Some(1024 * 1024));
        let (client, mut events) = AsyncClient::new(opts, 256);
        let filter = filter(&current);
        let mut submitted: u32 = 0;
        let mut backlog: usize = 0;
        let broker = broker_ip(&current.host).await;
        let mut backoff = Duration::from_secs(1);
        info!(broker = %format!("{}:{}", current.host, current.port), filter, "SCI collection over MQTT starting");
        loop {
            tokio::select! {
                changed = settings.changed() => {
                    if changed.is_err() {
                        let _ = client.disconnect().await;
                        return;
                    }
                    if *settings.borrow() != current {
                        let _ = client.disconnect().await;
                        break;
                    }
                }
                ev = events.poll() => match ev {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        backoff = Duration::from_secs(1);
                        info!(filter, "MQTT connected; subscribing");
                        if let Err(e) = client.subscribe(filter.clone(), QoS::AtLeastOnce).await {
                            warn!("MQTT subscribe failed: {e}");
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let topic = String::from_utf8_lossy(&p.topic).to_string();
                        let props = p.properties.as_ref();
                        let cbor = props.and_then(|pr| pr.content_type.as_deref()) == Some("application/cbor");
                        let proof = props.and_then(|pr| {
                            pr.user_properties.iter().find(|(k, _)| k.eq_ignore_ascii_case("authorization")).map(|(_, v)| v.as_str())
                        });
                        ingest(&engine, &current.topic, &topic, &p.payload, cbor, proof, broker);
                        // Reports are handed to the engine without waiting for each verdict
                        // (in order: one job queue); every WINDOW messages, or once the
                        // payloads handed over reach peer_limits.mqtt_backlog_bytes, the
                        // collector waits for the engine to catch up, which bounds the
                        // backlog in messages and in bytes.
                        submitted += 1;
                        backlog += p.payload.len() + p.topic.len();
                        if submitted % WINDOW == 0 || backlog >= engine.limits.mqtt_backlog_bytes {
                            let _ = engine.query(|_| ()).await;
                            backlog = 0;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        // Polling again reconnects; wait first so a dead broker is not hammered.
                        warn!("MQTT connection to {}:{} lost: {e}; retrying in {}s", current.host, current.port, backoff.as_secs());
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(60));
                    }
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

/// Messages handed to the engine before the collector waits for it to catch up.
const WINDOW: u32 = 256;

fn ingest(
    engine: &Engine,
    pattern: &str,
    topic: &str,
    payload: &[u8],
    cbor: bool,
    proof: Option<&str>,
    broker: Option<std::net::IpAddr>,
) {
    // The topic is the broker's and the publisher's text: logged escaped, never raw.
    let shown = crate::text::printable(topic, 300);
    // The CSCI-ID the topic level claims is an identifier like any other: of its YANG type
    // before anything keeps it.
    let claimed = claimed_csci(pattern, topic);
    if let Some(Err(e)) = claimed.as_deref().map(|c| check_id(IdKind::CsciId, c)) {
        warn!(topic = %shown, "MQTT message refused: the topic's {e}");
        engine.submit(move |core| core.count_rejection(Rejection::Malformed, "mqtt"));
        return;
    }
    let enc = if cbor { Encoding::Cbor } else { Encoding::Json };
    let raws = match report::decode(payload, enc) {
        Ok(r) => r,
        Err(e) => {
            warn!(topic = %shown, "MQTT report refused: {:?}", e.to_string());
            engine.submit(move |core| core.count_rejection(Rejection::Malformed, "mqtt"));
            return;
        }
    };
    let sender = Sender { csci_id: claimed, transport: "mqtt", address: broker, ..Sender::default() };
    let sender = match engine.authenticate(&raws, proof, payload, sender) {
        Ok(s) => s,
        Err(f) => {
            debug!(topic = %shown, "MQTT message refused: {:?}", f.detail);
            return;
        }
    };
    engine.submit(move |core| {
        for r in &raws {
            if let Err((reason, detail)) = core.ingest_from(r, &sender) {
                debug!(topic = %shown, reason = reason.identity(), "MQTT report refused: {detail:?}");
            }
        }
    });
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
        };
        assert_eq!(filter(&s), "$share/site-a/cats/sci/+/report");
    }
}
