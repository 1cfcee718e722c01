//! Issue 15, configured-subscription transports (phase 1: the transports themselves, on
//! real sockets): what the UDP-notif sender puts on the wire is decoded by NetGauze's
//! `netgauze-udp-notif-pkt` (header, segment reassembly, payload) as a collector would,
//! and the HTTPS-notif client discovers a real HTTPS receiver's capabilities and POSTs to
//! it over TLS (hyper + rustls in the test, a test CA). Phase 2: configured subscriptions
//! of the real agent (RFC 8639 section 2.5), configured over NETCONF, delivered to a
//! UDP-notif collector (decoded by NetGauze) and to an HTTPS-notif receiver, surviving a
//! restart.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cats_sma::notif::https_notif::{Client, ClientConfig, Link};
use cats_sma::notif::json;
use cats_sma::notif::udp_notif::{Sender, SenderConfig};
use cats_sma::notif::{Encoding, Notification};
use cats_sma::push::params::EditOp;
use cats_sma::tls::client::ClientFiles;
use chrono::Utc;
use http_body_util::{BodyExt, Full};
use netgauze_udp_notif_pkt::codec::UdpPacketCodec;
use netgauze_udp_notif_pkt::notification::NotificationVariant;
use netgauze_udp_notif_pkt::raw::{MediaType, UdpNotifOptionCode, UdpNotifPacket};
use serde_json::{json, Value};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;

const DEADLINE: Duration = Duration::from_secs(10);

/// A push-update whose JSON is several kilobytes: 60 SCI entries.
fn big_push_update(id: u32) -> Notification {
    let entries: Vec<Value> = (0..60)
        .map(|i| json!({"csci-id": format!("192.0.2.{i}:8080"), "cs-id": "AR1", "gas": i * 10, "state": "active"}))
        .collect();
    let contents = json!({"cats-sma:cats-sma": {"metric-cache": {"entry": entries}}});
    let xml_entries: String = (0..60)
        .map(|i| format!("<entry><csci-id>192.0.2.{i}:8080</csci-id><cs-id>AR1</cs-id><gas>{}</gas></entry>", i * 10))
        .collect();
    let xml = cats_sma::push::encode::push_update(
        id,
        &format!(
            "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache>{xml_entries}</metric-cache></cats-sma>"
        ),
        false,
    );
    Notification { event_time: Utc::now(), xml: Some(xml), json: json::push_update(id, contents, false) }
}

fn change_update(id: u32) -> Notification {
    let edits = [json::Edit {
        target: "/cats-sma:cats-sma/metric-cache/entry=sci-1/gas".into(),
        op: EditOp::Replace,
        value: Some(json!({"cats-sma:gas": 42})),
    }];
    Notification { event_time: Utc::now(), xml: None, json: json::push_change_update(id, 5, &edits, false) }
}

/// Datagrams into NetGauze's codec until it hands back a whole (reassembled) message;
/// answers the message and how many datagrams it took.
async fn next_message(socket: &UdpSocket, codec: &mut UdpPacketCodec) -> (UdpNotifPacket, usize, usize) {
    let mut buf = vec![0u8; 65_536];
    let mut datagrams = 0;
    let mut largest = 0;
    let end = Instant::now() + DEADLINE;
    loop {
        let n = tokio::time::timeout_at(end.into(), socket.recv(&mut buf))
            .await
            .expect("a datagram before the deadline")
            .unwrap();
        datagrams += 1;
        largest = largest.max(n);
        let mut bytes = BytesMut::from(&buf[..n]);
        if let Some(pkt) = codec.decode(&mut bytes).expect("NetGauze decodes every datagram") {
            return (pkt, datagrams, largest);
        }
    }
}

/// The notification inside an RFC 8040 section 6.4 envelope, read by NetGauze's model.
fn netgauze_variant(message: &Value) -> NotificationVariant {
    let inner = message["ietf-restconf:notification"].as_object().expect("the RFC 8040 envelope");
    assert!(inner.contains_key("eventTime"));
    let (name, body) = inner.iter().find(|(k, _)| *k != "eventTime").expect("one notification");
    serde_json::from_value(json!({ name.clone(): body.clone() })).expect("NetGauze reads the notification")
}

#[tokio::test]
async fn udp_notif_draft_3_2_and_4_1_netgauze_decodes_header_segments_and_each_payload_encoding() {
    let receiver = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let sender = Sender::bind(SenderConfig {
        remote: receiver.local_addr().unwrap(),
        local: None,
        generator_id: 0x00c0_ffee,
        segmentation: true,
        max_segment_size: Some(512),
    })
    .await
    .unwrap();
    let mut codec = UdpPacketCodec::default();
    let n = big_push_update(7);

    // JSON, segmented: NetGauze reassembles it into the message we rendered.
    sender.send_notification(&n, Encoding::Json).await.unwrap();
    let (pkt, datagrams, largest) = next_message(&receiver, &mut codec).await;
    assert!(datagrams > 1, "a {}-octet message in 512-octet segments", pkt.payload().len());
    assert!(largest <= 512, "every segment within max-segment-size, saw {largest}");
    assert_eq!(pkt.media_type(), MediaType::YangDataJson);
    assert_eq!(pkt.publisher_id(), 0x00c0_ffee);
    assert_eq!(pkt.message_id(), 1, "section 3.2: the first message id is 1");
    assert!(!pkt.options().contains_key(&UdpNotifOptionCode::Segment), "the reassembled message");
    let v: Value = serde_json::from_slice(&pkt.payload()).unwrap();
    match netgauze_variant(&v) {
        NotificationVariant::YangPushUpdate(u) => assert_eq!(u.id(), 7),
        other => panic!("not a push-update: {other:?}"),
    }
    assert_eq!(
        v["ietf-restconf:notification"]["ietf-yang-push:push-update"]["datastore-contents"]["cats-sma:cats-sma"]
            ["metric-cache"]["entry"][59]["gas"],
        590
    );

    // XML, segmented.
    sender.send_notification(&n, Encoding::Xml).await.unwrap();
    let (pkt, datagrams, _) = next_message(&receiver, &mut codec).await;
    assert!(datagrams > 1);
    assert_eq!((pkt.media_type(), pkt.message_id()), (MediaType::YangDataXml, 2));
    let xml = String::from_utf8(pkt.payload().to_vec()).unwrap();
    assert!(xml.starts_with("<notification xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\"><eventTime>"));
    assert!(xml.contains("<push-update xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\"><id>7</id>"));
    assert!(xml.ends_with("</notification>"));

    // CBOR (names as identifiers): the same tree as the JSON.
    sender.send_notification(&n, Encoding::Cbor).await.unwrap();
    let (pkt, _, _) = next_message(&receiver, &mut codec).await;
    assert_eq!((pkt.media_type(), pkt.message_id()), (MediaType::YangDataCbor, 3));
    let c: Value = ciborium::from_reader(&pkt.payload()[..]).unwrap();
    assert_eq!(
        c["ietf-restconf:notification"]["ietf-yang-push:push-update"],
        v["ietf-restconf:notification"]["ietf-yang-push:push-update"]
    );

    // A small push-change-update goes in one datagram, without the segmentation option.
    sender.send_notification(&change_update(7), Encoding::Json).await.unwrap();
    let (pkt, datagrams, _) = next_message(&receiver, &mut codec).await;
    assert_eq!((datagrams, pkt.message_id()), (1, 4));
    match netgauze_variant(&serde_json::from_slice(&pkt.payload()).unwrap()) {
        NotificationVariant::YangPushChangeUpdate(u) => assert_eq!(u.id(), 7),
        other => panic!("not a push-change-update: {other:?}"),
    }
    assert_eq!(sender.counters.messages.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn udp_notif_segmentation_disabled_refuses_what_one_message_cannot_hold() {
    let receiver = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let sender = Sender::bind(SenderConfig {
        remote: receiver.local_addr().unwrap(),
        local: None,
        generator_id: 1,
        segmentation: false,
        max_segment_size: None,
    })
    .await
    .unwrap();
    // Unsegmented, a large message goes whole (IP may fragment it: the draft's warning).
    let n = big_push_update(1);
    sender.send_notification(&n, Encoding::Json).await.unwrap();
    let mut codec = UdpPacketCodec::default();
    let (pkt, datagrams, _) = next_message(&receiver, &mut codec).await;
    assert_eq!(datagrams, 1);
    assert!(pkt.payload().len() > 1232);
    // Beyond the 16-bit message length: an error and a counter, nothing sent.
    let huge = vec![b' '; 70_000];
    assert!(sender.send(cats_sma::notif::udp_notif::MediaType::Json, &huge).await.is_err());
    assert_eq!(sender.counters.too_large.load(Ordering::Relaxed), 1);
}

// ---------------------------------------------------------------- HTTPS-notif ---

struct Pki {
    _dir: tempfile::TempDir,
    ca_file: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let srv_key = rcgen::KeyPair::generate().unwrap();
    let srv = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&srv_key, &issuer)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![srv.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(srv_key.serialize_der().into()),
        )
        .unwrap();
    Pki { _dir: dir, ca_file: ca_file.to_string_lossy().into_owned(), server: Arc::new(server) }
}

/// What the test receiver got: method, path, content type, body.
type Got = (String, String, String, String);

/// An HTTPS-notif receiver: answers GET <prefix>/capabilities with `capabilities`
/// (content type, body) and POST <prefix>/relay-notification with `status`.
async fn receiver(
    pki: &Pki,
    capabilities: (&'static str, String),
    status: u16,
) -> (SocketAddr, mpsc::UnboundedReceiver<Got>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    let caps = Arc::new(capabilities);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, tx, caps) = (acceptor.clone(), tx.clone(), caps.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (tx, caps) = (tx.clone(), caps.clone());
                    async move {
                        let method = req.method().to_string();
                        let path = req.uri().path().to_owned();
                        let ct = req
                            .headers()
                            .get(hyper::header::CONTENT_TYPE)
                            .map(|v| v.to_str().unwrap_or("").to_owned())
                            .unwrap_or_default();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let _ =
                            tx.send((method.clone(), path.clone(), ct, String::from_utf8_lossy(&body).into_owned()));
                        let resp = match (method.as_str(), path.as_str()) {
                            ("GET", "/notif/capabilities") => hyper::Response::builder()
                                .status(200)
                                .header(hyper::header::CONTENT_TYPE, caps.0)
                                .body(Full::new(Bytes::from(caps.1.clone()))),
                            ("POST", "/notif/relay-notification") => {
                                hyper::Response::builder().status(status).body(Full::new(Bytes::new()))
                            }
                            _ => hyper::Response::builder().status(404).body(Full::new(Bytes::new())),
                        };
                        Ok::<_, Infallible>(resp.unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, rx)
}

fn client(pki: &Pki, addr: SocketAddr, encoding: Option<Encoding>, queue: usize) -> Client {
    Client::spawn(ClientConfig {
        host: "127.0.0.1".into(),
        port: addr.port(),
        path: "/notif/".into(),
        tls: ClientFiles { trusted_ca_file: Some(pki.ca_file.clone()), ..Default::default() },
        encoding,
        queue,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
    })
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Got>) -> Got {
    tokio::time::timeout(DEADLINE, rx.recv()).await.expect("a request before the deadline").expect("receiver running")
}

const ALL_CAPS: &str = r#"{"receiver-capabilities": {"receiver-capability": [
    "urn:ietf:capability:https-notif-receiver:encoding:json",
    "urn:ietf:capability:https-notif-receiver:encoding:xml",
    "urn:ietf:capability:https-notif-receiver:sub-notif"]}}"#;

#[tokio::test]
async fn https_notif_discovers_capabilities_then_posts_json_notifications_over_tls() {
    let pki = pki();
    let (addr, mut got) = receiver(&pki, ("application/json", ALL_CAPS.into()), 204).await;
    let c = client(&pki, addr, None, 16);
    let started = Notification {
        event_time: Utc::now(),
        xml: None,
        json: json::subscription_policy("subscription-started", 9, {
            let mut m = serde_json::Map::new();
            m.insert("ietf-yang-push:datastore".into(), "ietf-datastores:operational".into());
            m
        }),
    };
    assert!(c.send(Arc::new(started), true));
    assert!(c.send(Arc::new(big_push_update(9)), false));

    let (method, path, _, _) = next(&mut got).await;
    assert_eq!((method.as_str(), path.as_str()), ("GET", "/notif/capabilities"), "discovery comes first");
    let (method, path, ct, body) = next(&mut got).await;
    assert_eq!(
        (method.as_str(), path.as_str(), ct.as_str()),
        ("POST", "/notif/relay-notification", "application/json")
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ietf-https-notif:notification"]["ietf-subscribed-notifications:subscription-started"]["id"], 9);
    let (_, _, _, body) = next(&mut got).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    let update = &v["ietf-https-notif:notification"]["ietf-yang-push:push-update"];
    assert_eq!(update["id"], 9);
    assert!(v["ietf-https-notif:notification"]["eventTime"].is_string());
    let deadline = Instant::now() + DEADLINE;
    while c.counters.sent.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "both notifications accepted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match c.link() {
        Link::Up { capabilities, encoding } => {
            assert!(capabilities.json && capabilities.xml && capabilities.sub_notif);
            assert_eq!(encoding, Encoding::Json);
        }
        other => panic!("link {other:?}"),
    }
}

#[tokio::test]
async fn https_notif_xml_only_receiver_gets_rfc5277_xml_and_no_state_notifications_without_sub_notif() {
    let pki = pki();
    let caps = "<receiver-capabilities><receiver-capability>urn:ietf:capability:https-notif-receiver:encoding:xml</receiver-capability></receiver-capabilities>";
    let (addr, mut got) = receiver(&pki, ("application/xml", caps.into()), 204).await;
    let c = client(&pki, addr, None, 16);
    let terminated = Notification {
        event_time: Utc::now(),
        xml: Some(cats_sma::push::encode::state_with_reason("subscription-terminated", 3, "no-such-subscription")),
        json: json::state_with_reason("subscription-terminated", 3, "no-such-subscription"),
    };
    assert!(c.send(Arc::new(terminated), true));
    assert!(c.send(Arc::new(big_push_update(3)), false));
    let (method, _, _, _) = next(&mut got).await;
    assert_eq!(method, "GET");
    let (method, _, ct, body) = next(&mut got).await;
    assert_eq!((method.as_str(), ct.as_str()), ("POST", "application/xml"));
    assert!(body.starts_with("<notification xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\">"));
    assert!(body.contains("<push-update"), "the state notification was skipped, the push-update sent: {body:.120}");
    assert_eq!(c.counters.state_skipped.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn https_notif_refusals_are_counted_and_an_unreachable_receiver_fills_a_bounded_queue() {
    let pki = pki();
    let (addr, mut got) = receiver(&pki, ("application/json", ALL_CAPS.into()), 400).await;
    let c = client(&pki, addr, Some(Encoding::Json), 16);
    assert!(c.send(Arc::new(change_update(1)), false));
    let _ = next(&mut got).await;
    let _ = next(&mut got).await;
    let deadline = Instant::now() + DEADLINE;
    while c.counters.rejected.load(Ordering::Relaxed) < 1 {
        assert!(Instant::now() < deadline, "the 400 is counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.counters.sent.load(Ordering::Relaxed), 0);

    // Nobody listens: the client backs off, the queue (2) fills, the rest is dropped.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let c = client(&pki, closed, None, 2);
    let accepted = (0..6).filter(|_| c.send(Arc::new(change_update(1)), false)).count();
    assert!(accepted <= 3, "at most the queue and the one in hand, {accepted}");
    assert_eq!(c.counters.dropped.load(Ordering::Relaxed), 6 - accepted as u64);
    let deadline = Instant::now() + DEADLINE;
    while !matches!(c.link(), Link::Down(_)) || c.counters.failures.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "retried with backoff: {:?}", c.link());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------- configured subscriptions (agent) ---

const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
const YP: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
const CSNR: &str = "urn:cats-sma:yang:cats-sma-notif-receivers";
const NCM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring";

async fn nc_rpc(s: &mut common::RawSession, id: u32, op: &str) -> String {
    s.rpc11(&common::rpc(id, op)).await
}

/// A configured periodic subscription of the agent's schema list (about 20 kB: it takes
/// many segments at the instance's max-segment-size).
fn udp_subscription(port: u16, encoding: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
<subscriptions xmlns="{SN}">
 <receiver-instances xmlns="{CSNR}"><receiver-instance><name>collector</name><access-as>admin</access-as>
  <udp-notif-receiver><remote-address>127.0.0.1</remote-address><remote-port>{port}</remote-port>
   <message-generator-id>77</message-generator-id><max-segment-size>600</max-segment-size></udp-notif-receiver>
 </receiver-instance></receiver-instances>
 <subscription><id>100</id>
  <datastore xmlns="{YP}" xmlns:ds="urn:ietf:params:xml:ns:yang:ietf-datastores">ds:operational</datastore>
  <datastore-xpath-filter xmlns="{YP}" xmlns:ncm="{NCM}">/ncm:netconf-state/ncm:schemas</datastore-xpath-filter>
  <periodic xmlns="{YP}"><period>50</period></periodic>
  <transport xmlns:csnr="{CSNR}">csnr:udp-notif</transport>
  <encoding>{encoding}</encoding>
  <purpose>telemetry collector</purpose>
  <receivers><receiver><name>r1</name><receiver-instance-ref xmlns="{CSNR}">collector</receiver-instance-ref></receiver></receivers>
 </subscription>
</subscriptions></config></edit-config>"#
    )
}

/// The next whole UDP-notif message as JSON, with how many datagrams it took.
async fn next_json(socket: &UdpSocket, codec: &mut UdpPacketCodec) -> (Value, usize, UdpNotifPacket) {
    let (pkt, datagrams, _) = next_message(socket, codec).await;
    let v: Value = serde_json::from_slice(&pkt.payload()).expect("a JSON payload");
    (v, datagrams, pkt)
}

/// The notification's name inside the RFC 8040 envelope.
fn name_of(v: &Value) -> String {
    v["ietf-restconf:notification"]
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "eventTime").cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn rfc8639_2_5_configured_subscription_over_udp_notif_started_segmented_push_update_terminated_netgauze() {
    let collector = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = collector.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let agent = common::start_agent(&dir.path().join("state"), &[]);
    let mut s = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
    s.hello(true).await;
    let r = nc_rpc(&mut s, 1, &udp_subscription(port, "encode-json")).await;
    assert!(r.contains("<ok/>"), "{r}");

    let mut codec = UdpPacketCodec::default();
    // RFC 8639 section 2.7.1: subscription-started first, with the terms.
    let (started, _, pkt) = next_json(&collector, &mut codec).await;
    assert_eq!(name_of(&started), "ietf-subscribed-notifications:subscription-started", "{started}");
    let body = &started["ietf-restconf:notification"]["ietf-subscribed-notifications:subscription-started"];
    assert_eq!(body["id"], 100);
    assert_eq!(body["transport"], "cats-sma-notif-receivers:udp-notif");
    assert_eq!(body["purpose"], "telemetry collector");
    assert_eq!(pkt.media_type(), MediaType::YangDataJson);
    assert_eq!(pkt.publisher_id(), 77);
    // Then periodic push-updates, each split into segments and reassembled by NetGauze.
    let (update, datagrams, _) = next_json(&collector, &mut codec).await;
    assert_eq!(name_of(&update), "ietf-yang-push:push-update", "{update}");
    assert!(datagrams > 5, "a 20 kB push-update in 600-octet segments took {datagrams} datagrams");
    let contents = &update["ietf-restconf:notification"]["ietf-yang-push:push-update"]["datastore-contents"];
    let schemas = contents["ietf-netconf-monitoring:netconf-state"]["schemas"]["schema"].as_array().expect("schemas");
    assert!(schemas.len() > 10, "{} schemas", schemas.len());
    let _ = netgauze_variant(&update);

    // The receiver's state (RFC 8639 section 3.3) and the instance's counters.
    let r = nc_rpc(
        &mut s,
        2,
        &format!(
            r#"<get><filter type="subtree"><subscriptions xmlns="{SN}"><subscription><id>100</id><configured-subscription-state/><receivers/></subscription><receiver-instances xmlns="{CSNR}"/></subscriptions></filter></get>"#
        ),
    )
    .await;
    assert!(r.contains("<configured-subscription-state>valid</configured-subscription-state>"), "{r}");
    assert!(r.contains("<state>active</state>"), "{r}");
    assert!(r.contains("<link>up</link>"), "{r}");
    assert!(r.contains("<encoding xmlns:sn=") || r.contains("encode-json</encoding>"), "{r}");

    // Deleting the subscription ends it for the receiver with subscription-terminated.
    let r = nc_rpc(
        &mut s,
        3,
        &format!(
            r#"<edit-config><target><running/></target><config><subscriptions xmlns="{SN}"><subscription xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:operation="delete"><id>100</id></subscription></subscriptions></config></edit-config>"#
        ),
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "no subscription-terminated");
        let (m, _, _) = next_json(&collector, &mut codec).await;
        if name_of(&m) == "ietf-subscribed-notifications:subscription-terminated" {
            let body = &m["ietf-restconf:notification"]["ietf-subscribed-notifications:subscription-terminated"];
            assert_eq!(body["id"], 100);
            assert_eq!(body["reason"], "ietf-subscribed-notifications:no-such-subscription");
            break;
        }
    }
}

#[tokio::test]
async fn rfc8639_2_5_configured_subscriptions_survive_a_restart_and_cbor_and_bad_ones_are_refused() {
    let collector = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = collector.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    {
        let agent = common::start_agent(&state, &[]);
        let mut s = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
        s.hello(true).await;
        // A receiver without its instance reference cannot run: refused, nothing kept.
        let bad = udp_subscription(port, "encode-json")
            .replace(&format!(r#"<receiver-instance-ref xmlns="{CSNR}">collector</receiver-instance-ref>"#), "");
        let r = nc_rpc(&mut s, 1, &bad).await;
        assert!(r.contains("<rpc-error>") && r.contains("receiver-instance-ref"), "{r}");
        let r = nc_rpc(
            &mut s,
            2,
            &udp_subscription(port, "csnr:encode-cbor")
                .replace("<encoding>", &format!("<encoding xmlns:csnr=\"{CSNR}\">")),
        )
        .await;
        assert!(r.contains("<ok/>"), "{r}");
        let r = nc_rpc(&mut s, 3, "<copy-config><target><startup/></target><source><running/></source></copy-config>")
            .await;
        assert!(r.contains("<ok/>"), "{r}");
        let mut codec = UdpPacketCodec::default();
        let (pkt, _, _) = next_message(&collector, &mut codec).await;
        assert_eq!(pkt.media_type(), MediaType::YangDataCbor);
    }
    // Drain what the first agent sent, then restart: the subscription is configuration.
    let mut buf = vec![0u8; 65_536];
    while tokio::time::timeout(Duration::from_millis(300), collector.recv(&mut buf)).await.is_ok() {}
    let _agent = common::start_agent(&state, &[]);
    let mut codec = UdpPacketCodec::default();
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "no subscription-started after the restart");
        let (pkt, _, _) = next_message(&collector, &mut codec).await;
        assert_eq!(pkt.media_type(), MediaType::YangDataCbor);
        let v: Value = ciborium::from_reader(pkt.payload().as_ref()).expect("a CBOR payload");
        if name_of(&v) == "ietf-subscribed-notifications:subscription-started" {
            break;
        }
    }
}

#[tokio::test]
async fn rfc8639_2_5_configured_subscription_over_https_notif_posts_json_over_tls_after_capabilities() {
    let pki = pki();
    let (addr, mut got) = receiver(&pki, ("application/json", ALL_CAPS.into()), 204).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = common::start_agent(&dir.path().join("state"), &[]);
    let mut s = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
    s.hello(true).await;
    let edit = format!(
        r#"<edit-config><target><running/></target><config>
<subscriptions xmlns="{SN}">
 <receiver-instances xmlns="{CSNR}"><receiver-instance><name>rx</name><access-as>admin</access-as>
  <https-receiver><remote-address>127.0.0.1</remote-address><remote-port>{}</remote-port><path>/notif</path>
   <trusted-ca-file>{}</trusted-ca-file></https-receiver>
 </receiver-instance></receiver-instances>
 <subscription><id>7</id><stream>NETCONF</stream>
  <receivers><receiver><name>r</name><receiver-instance-ref xmlns="{CSNR}">rx</receiver-instance-ref></receiver></receivers>
 </subscription>
</subscriptions></config></edit-config>"#,
        addr.port(),
        pki.ca_file
    );
    let r = nc_rpc(&mut s, 1, &edit).await;
    assert!(r.contains("<ok/>"), "{r}");
    // Capabilities first, then subscription-started in JSON under the HTTPS-notif envelope.
    let (method, path, _, _) = next(&mut got).await;
    assert_eq!((method.as_str(), path.as_str()), ("GET", "/notif/capabilities"));
    let (method, path, ct, body) = next(&mut got).await;
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/notif/relay-notification"));
    assert!(ct.starts_with("application/json"), "{ct}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["ietf-https-notif:notification"]["ietf-subscribed-notifications:subscription-started"]["id"] == 7, "{v}");
    // An event on the NETCONF stream reaches the receiver: a configuration change.
    let r = nc_rpc(
        &mut s,
        2,
        r#"<edit-config><target><running/></target><config><cats-sma xmlns="urn:cats-sma:yang:cats-sma"><agent><site-id>site-z</site-id></agent></cats-sma></config></edit-config>"#,
    )
    .await;
    assert!(r.contains("<ok/>"), "{r}");
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "no netconf-config-change");
        let (_, _, _, body) = next(&mut got).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        if v["ietf-https-notif:notification"].get("ietf-netconf-notifications:netconf-config-change").is_some() {
            break;
        }
    }
}

#[tokio::test]
async fn rfc8639_2_7_adding_a_receiver_starts_it_alone_and_new_terms_send_subscription_modified() {
    let first = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let second = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = common::start_agent(&dir.path().join("state"), &[]);
    let mut s = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
    s.hello(true).await;
    let r = nc_rpc(&mut s, 1, &udp_subscription(first.local_addr().unwrap().port(), "encode-json")).await;
    assert!(r.contains("<ok/>"), "{r}");
    let mut c1 = UdpPacketCodec::default();
    let (m, _, _) = next_json(&first, &mut c1).await;
    assert_eq!(name_of(&m), "ietf-subscribed-notifications:subscription-started");
    // A second receiver on its own instance.
    let add = format!(
        r#"<edit-config><target><running/></target><config><subscriptions xmlns="{SN}">
 <receiver-instances xmlns="{CSNR}"><receiver-instance><name>second</name><access-as>admin</access-as>
  <udp-notif-receiver><remote-address>127.0.0.1</remote-address><remote-port>{}</remote-port></udp-notif-receiver>
 </receiver-instance></receiver-instances>
 <subscription><id>100</id><receivers><receiver><name>r2</name>
  <receiver-instance-ref xmlns="{CSNR}">second</receiver-instance-ref></receiver></receivers></subscription>
</subscriptions></config></edit-config>"#,
        second.local_addr().unwrap().port()
    );
    let r = nc_rpc(&mut s, 2, &add).await;
    assert!(r.contains("<ok/>"), "{r}");
    let mut c2 = UdpPacketCodec::default();
    let (m, _, _) = next_json(&second, &mut c2).await;
    assert_eq!(name_of(&m), "ietf-subscribed-notifications:subscription-started", "{m}");
    // New terms (the period): both receivers get subscription-modified with them; the
    // first receiver never saw one for the receiver that was added.
    let period = format!(
        r#"<edit-config><target><running/></target><config><subscriptions xmlns="{SN}"><subscription><id>100</id>
 <periodic xmlns="{YP}"><period>70</period></periodic></subscription></subscriptions></config></edit-config>"#
    );
    let r = nc_rpc(&mut s, 3, &period).await;
    assert!(r.contains("<ok/>"), "{r}");
    for (socket, codec) in [(&first, &mut c1), (&second, &mut c2)] {
        let end = Instant::now() + DEADLINE;
        let mut names = Vec::new();
        loop {
            assert!(Instant::now() < end, "no subscription-modified: {names:?}");
            let (m, _, _) = next_json(socket, codec).await;
            let name = name_of(&m);
            if name == "ietf-subscribed-notifications:subscription-modified" {
                let body = &m["ietf-restconf:notification"][name.as_str()];
                assert_eq!(body["ietf-yang-push:periodic"]["period"], 70, "{m}");
                break;
            }
            names.push(name);
        }
        assert!(names.iter().all(|n| n == "ietf-yang-push:push-update"), "{names:?}");
    }
}

#[tokio::test]
async fn rfc8639_2_5_a_configured_subscription_cannot_take_the_id_of_a_live_dynamic_one() {
    let dir = tempfile::tempdir().unwrap();
    let agent = common::start_agent(&dir.path().join("state"), &[]);
    let mut dynamic = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
    dynamic.hello(true).await;
    let r = nc_rpc(
        &mut dynamic,
        1,
        &format!(r#"<establish-subscription xmlns="{SN}"><stream>NETCONF</stream></establish-subscription>"#),
    )
    .await;
    let id: u32 = r
        .split_once("<id xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\">")
        .and_then(|(_, rest)| rest.split_once('<'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("{r}"));
    let mut s = common::connect(agent.addr, "admin", common::PASSWORD).await.expect("login");
    s.hello(true).await;
    let edit = udp_subscription(9, "encode-json").replace("<id>100</id>", &format!("<id>{id}</id>"));
    let r = nc_rpc(&mut s, 1, &edit).await;
    assert!(r.contains("<rpc-error>") && r.contains("dynamic subscription"), "{r}");
    // Another id is fine.
    let r = nc_rpc(&mut s, 2, &udp_subscription(9, "encode-json")).await;
    assert!(r.contains("<ok/>"), "{r}");
}
