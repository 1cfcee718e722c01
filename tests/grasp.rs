//! RFC 8990 (GRASP) with seed 004, Protocol Adapter: "uses GRASP to negotiate and
//! distribute CATS metrics among autonomic nodes: objective 'CATS:ServiceMetrics', payload a
//! CBOR-encoded metric set". The GRASP peer here is written from RFC 8990: it takes the
//! agent's M_FLOOD over UDP and checks each against the message format of section 2.5.6.2
//! and the CDDL of section 4 (flood-message, objective, ipv4-locator-option), and asks for
//! the objective with M_REQ_SYN over TCP (section 2.5.6.1), expecting M_SYNCH, M_END with
//! O_DECLINE for an objective the agent does not have, and M_INVALID for anything else.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use ciborium::Value;
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "urn:cats-sma:yang:cats-sma";

fn int(v: &Value) -> u64 {
    match v {
        Value::Integer(i) => u64::try_from(*i).expect("a CBOR uint"),
        other => panic!("not a uint: {other:?}"),
    }
}

fn get<'a>(m: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(m) = m else { panic!("not a map: {m:?}") };
    m.iter().find(|(k, _)| k == &Value::Text(key.into())).map(|(_, v)| v)
}

/// RFC 8990 section 2.10 / CDDL `objective`: [objective-name, objective-flags, loop-count,
/// ?objective-value]; flags with F_SYNCH (bit 2); the value is the metric set. Returns the
/// services as (cs-id, gas, health).
fn check_objective(o: &Value) -> (u64, Vec<(String, u64, String)>) {
    let Value::Array(o) = o else { panic!("objective is not an array: {o:?}") };
    assert_eq!(o.len(), 4, "objective with a value: {o:?}");
    assert_eq!(o[0], Value::Text("CATS:ServiceMetrics".into()));
    assert_eq!(int(&o[1]) & 0b100, 0b100, "F_SYNCH set");
    assert!(int(&o[1]) < 16, "only the four flags of section 2.10");
    assert!((1..=255).contains(&int(&o[2])), "loop-count 0..255");
    let v = &o[3];
    assert_eq!(get(v, "site-id"), Some(&Value::Text("site-g".into())));
    let generation = int(get(v, "generation").expect("generation"));
    let Some(Value::Array(part)) = get(v, "part") else { panic!("part") };
    assert_eq!((int(&part[0]), int(&part[1])), (1, 1));
    let Some(Value::Array(services)) = get(v, "services") else { panic!("services") };
    let services = services
        .iter()
        .map(|s| {
            let Some(Value::Text(cs)) = get(s, "cs-id") else { panic!("cs-id") };
            let Some(Value::Text(h)) = get(s, "health") else { panic!("health") };
            (cs.clone(), int(get(s, "gas").expect("gas")), h.clone())
        })
        .collect();
    (generation, services)
}

/// RFC 8990 section 2.5.6.2 / CDDL `flood-message`: [M_FLOOD, session-id, initiator, ttl,
/// +[objective, (locator-option / [])]].
fn check_flood(bytes: &[u8], listener: SocketAddr) -> (u64, Vec<(String, u64, String)>) {
    let v: Value = ciborium::from_reader(bytes).expect("a CBOR item");
    let Value::Array(m) = v else { panic!("a GRASP message is an array") };
    assert_eq!(int(&m[0]), 9, "M_FLOOD");
    assert!(int(&m[1]) <= u32::MAX as u64, "session-id is 32 bits");
    assert_eq!(m[2], Value::Bytes(vec![127, 0, 0, 1]), "initiator: the listener's IPv4 address, 4 octets");
    assert_eq!(int(&m[3]), 5000, "ttl in milliseconds, as configured");
    assert_eq!(m.len(), 5, "one objective");
    let Value::Array(pair) = &m[4] else { panic!("[objective, locator]") };
    let Value::Array(loc) = &pair[1] else { panic!("locator-option") };
    // ipv4-locator-option = [O_IPv4_LOCATOR, ipv4-address, transport-proto, port-number]
    assert_eq!(int(&loc[0]), 104);
    assert_eq!(loc[1], Value::Bytes(vec![127, 0, 0, 1]));
    assert_eq!(int(&loc[2]), 6, "IPPROTO_TCP");
    assert_eq!(int(&loc[3]), listener.port() as u64);
    check_objective(&pair[0])
}

async fn next_flood(u: &tokio::net::UdpSocket, listener: SocketAddr) -> (u64, Vec<(String, u64, String)>) {
    let mut buf = vec![0u8; 65536];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), u.recv_from(&mut buf)).await.expect("a flood").unwrap();
    assert!(n <= 2048, "GRASP_DEF_MAX_SIZE");
    check_flood(&buf[..n], listener)
}

/// Floods until one satisfies `ok`.
async fn flood_until(
    u: &tokio::net::UdpSocket,
    listener: SocketAddr,
    what: &str,
    ok: impl Fn(&[(String, u64, String)]) -> bool,
) -> u64 {
    for _ in 0..30 {
        let (g, s) = next_flood(u, listener).await;
        if ok(&s) {
            return g;
        }
    }
    panic!("{what}: no such flood");
}

fn cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(v, &mut out).unwrap();
    out
}

fn req_syn(sid: u64, name: &str) -> Vec<u8> {
    cbor(&Value::Array(vec![
        Value::Integer(4.into()),
        Value::Integer(sid.into()),
        Value::Array(vec![Value::Text(name.into()), Value::Integer(4.into()), Value::Integer(6.into())]),
    ]))
}

async fn ask(c: &mut tokio::net::TcpStream, msg: &[u8]) -> Vec<Value> {
    c.write_all(msg).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut chunk)).await.expect("an answer").unwrap();
        assert!(n > 0, "closed without an answer");
        buf.extend_from_slice(&chunk[..n]);
        if let Ok(Value::Array(a)) = ciborium::from_reader::<Value, _>(&buf[..]) {
            return a;
        }
    }
}

async fn ok(s: &mut RawSession, body: &str) {
    let r = s.rpc11(&rpc(7, body)).await;
    assert!(r.contains("<ok/>"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc8990_flood_and_synchronization_of_cats_service_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci_addr = agent.sci_addr.expect("SCI listener");
    let u = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let sci = |cs: &str| {
        format!(
            "<sci><csci-id>10.0.0.1:80</csci-id><cs-id>{cs}</cs-id><authentication>none</authentication>\
             <expected-interval>60000</expected-interval></sci>"
        )
    };
    ok(
        &mut s,
        &format!(
            r#"<edit-config><target><running/></target><config><cats-sma xmlns="{NS}">
            <agent><site-id>site-g</site-id></agent><scis>{}</scis>
            <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><min-interval>0</min-interval></update-control></policy>
            <routing xmlns="urn:cats-sma:yang:cats-sma-routing"><grasp>
              <listen-address>127.0.0.1</listen-address><listen-port>0</listen-port>
              <peer><address>127.0.0.1</address><port>{}</port></peer>
              <flood-interval>1000</flood-interval><min-flood-interval>0</min-flood-interval><flood-ttl>5000</flood-ttl>
            </grasp></routing></cats-sma></config></edit-config>"#,
            sci("AR1"),
            u.local_addr().unwrap().port()
        ),
    )
    .await;
    let st = s
        .rpc11(&rpc(
            8,
            r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma"><routing xmlns="urn:cats-sma:yang:cats-sma-routing"><grasp/></routing></cats-sma></filter></get>"#,
        ))
        .await;
    let port: u16 = st.split("<listening-port>").nth(1).and_then(|r| r.split('<').next()).unwrap().parse().unwrap();
    let listener: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let report = |seq: u64, gas: u32| {
        format!(
            r#"{{"csci-id":"10.0.0.1:80","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
            chrono::Utc::now().to_rfc3339()
        )
    };
    let (status, text) = http_post(sci_addr, "/reports", "application/json", report(1, 500).as_bytes()).await;
    assert!(status < 300, "{status} {text}");
    // Flooded on change, with the metric set.
    let g1 = flood_until(&u, listener, "AR1 flooded", |s| s == [("AR1".to_owned(), 500, "healthy".to_owned())]).await;
    // And on the heartbeat, unchanged.
    let (_, again) = next_flood(&u, listener).await;
    assert_eq!(again, [("AR1".to_owned(), 500, "healthy".to_owned())]);

    // Section 2.5.6.1: M_REQ_SYN for the objective -> M_SYNCH with the same session-id.
    let mut c = tokio::net::TcpStream::connect(listener).await.unwrap();
    let a = ask(&mut c, &req_syn(4242, "CATS:ServiceMetrics")).await;
    assert_eq!((int(&a[0]), int(&a[1]), a.len()), (8, 4242, 3), "synch-message = [M_SYNCH, session-id, objective]");
    let (g, services) = check_objective(&a[2]);
    assert!(g >= g1);
    assert_eq!(services, [("AR1".to_owned(), 500, "healthy".to_owned())]);
    // Another objective: M_END with O_DECLINE, on the same connection.
    let a = ask(&mut c, &req_syn(7, "EX1:Other")).await;
    assert_eq!((int(&a[0]), int(&a[1])), (6, 7), "end-message");
    let Value::Array(decline) = &a[2] else { panic!("decline-option") };
    assert_eq!(int(&decline[0]), 102, "O_DECLINE");
    // A negotiation request (not offered): M_INVALID.
    let neg = cbor(&Value::Array(vec![
        Value::Integer(3.into()),
        Value::Integer(9.into()),
        Value::Array(vec![
            Value::Text("CATS:ServiceMetrics".into()),
            Value::Integer(2.into()),
            Value::Integer(6.into()),
        ]),
    ]));
    let a = ask(&mut c, &neg).await;
    assert_eq!((int(&a[0]), int(&a[1])), (99, 9), "invalid-message");
    // Not CBOR at all: M_INVALID.
    let mut c2 = tokio::net::TcpStream::connect(listener).await.unwrap();
    let a = ask(&mut c2, &[0xff, 0xff, 0x00]).await;
    assert_eq!(int(&a[0]), 99);

    // The service loses its SCI: the next flood no longer carries it.
    ok(
        &mut s,
        &format!(
            r#"<edit-config><target><running/></target><config><cats-sma xmlns="{NS}"><scis>
            <sci xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:operation="delete"><csci-id>10.0.0.1:80</csci-id></sci>
            </scis></cats-sma></config></edit-config>"#
        ),
    )
    .await;
    flood_until(&u, listener, "AR1 withdrawn from the flood", |s| s.is_empty()).await;
    let st = s
        .rpc11(&rpc(
            9,
            r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma"><routing xmlns="urn:cats-sma:yang:cats-sma-routing"><grasp/></routing></cats-sma></filter></get>"#,
        ))
        .await;
    for (leaf, want) in [("synch-answered", "1"), ("declined", "1"), ("invalid", "2")] {
        assert!(st.contains(&format!("<{leaf}>{want}</{leaf}>")), "{leaf}: {st}");
    }
}
