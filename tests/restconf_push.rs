//! RFC 8650: dynamic subscriptions (RFC 8639) and YANG-Push (RFC 8641) over RESTCONF,
//! against the real HTTPS server. establish-subscription by POST answers the id and the
//! subscription URI; a GET of the URI by the same user receives the notifications as
//! server-sent events; another user is refused; delete-subscription ends the stream;
//! closing the stream ends the subscription; errors carry the RFC 8639 identities.

mod common;

use std::time::Duration;

use common::*;
use http_body_util::BodyExt;

const ESTABLISH: &str = "/operations/ietf-subscribed-notifications:establish-subscription";
const DELETE: &str = "/operations/ietf-subscribed-notifications:delete-subscription";

fn report(csci: &str, seq: u64, gas: i64) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"LLM1","seq":{seq},"timestamp":"{now}","gas":{gas},"computing-time":12,"health":"HEALTHY"}}"#
    )
}

/// GET `uri` (a path under the server root) as `user`, asking for an event stream.
async fn open_sse(agent: &AgentProcess, uri: &str, user: &str, password: &str) -> (u16, String, hyper::body::Incoming) {
    let root = agent.restconf.clone().unwrap();
    let addr: std::net::SocketAddr = root.trim_start_matches("https://").trim_end_matches("/restconf").parse().unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tls_connector(&agent.state_dir.join("restconf-cert.pem")).connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    use base64ct::Encoding as _;
    let auth = base64ct::Base64::encode_string(format!("{user}:{password}").as_bytes());
    let req = hyper::Request::get(uri)
        .header("host", addr.to_string())
        .header("authorization", format!("Basic {auth}"))
        .header("accept", "text/event-stream")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, ct, resp.into_body())
}

/// Reads SSE data until `want` has appeared `times` times (or 15 s pass).
async fn read_until(body: &mut hyper::body::Incoming, seen: &mut String, want: &str, times: usize) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while seen.matches(want).count() < times {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => f,
            _ => return false,
        };
        if let Some(d) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    true
}

/// True once the stream has ended (within 15 s), whatever it still delivered.
async fn ends(body: &mut hyper::body::Incoming) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(None) | Ok(Some(Err(_))) => return true,
            Ok(Some(Ok(_))) => continue,
            Err(_) => return false,
        }
    }
}

/// Polls the operational subscriptions list until subscription `id` is gone.
async fn gone(c: &Curl, id: u64) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        let r = c.get(&format!("/data/ietf-subscribed-notifications:subscriptions/subscription={id}"));
        if r.status == 404 {
            return true;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn yang_push_over_restconf() {
    let dir = tempfile::tempdir().unwrap();
    let hash = cats_sma::mgmt::users::hash_password("bob-pw").unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, format!("[[users]]\nname = \"bob\"\npassword_hash = \"{hash}\"\n")).unwrap();
    let agent =
        start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap(), "--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let c = Curl::new(&agent);
    let bob = c.as_user("bob", "bob-pw");

    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/scis",
        r#"{"cats-sma:sci":[{"csci-id":"10.7.0.1:80","cs-id":["LLM1"],"authentication":"none"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);

    // The operations resource lists the subscription RPCs.
    let r = c.get("/operations");
    assert!(
        r.json()["ietf-restconf:operations"]["ietf-subscribed-notifications:establish-subscription"].is_array(),
        "{}",
        r.body
    );

    // On-change on operational, established in JSON: the id and the URI come back.
    let on_change = r#"{"ietf-subscribed-notifications:input":{
        "ietf-yang-push:datastore":"ietf-datastores:operational",
        "ietf-yang-push:datastore-xpath-filter":"/cats-sma:cats-sma/metric-cache",
        "ietf-yang-push:on-change":{"dampening-period":0},
        "encoding":"encode-xml"}}"#;
    let r = c.send_json("POST", ESTABLISH, on_change);
    assert_eq!(r.status, 200, "{}", r.body);
    let out = &r.json()["ietf-subscribed-notifications:output"];
    let id = out["id"].as_u64().unwrap();
    let full = out["ietf-restconf-subscribed-notifications:uri"].as_str().unwrap();
    assert_eq!(full, format!("{}/subscriptions/{id}", agent.restconf.as_deref().unwrap()));
    let uri = format!("/restconf/subscriptions/{id}");

    // Another user neither reads nor deletes it.
    let (status, _, _) = open_sse(&agent, &uri, "bob", "bob-pw").await;
    assert_eq!(status, 404);
    let r = bob.send_json("POST", DELETE, &format!(r#"{{"ietf-subscribed-notifications:input":{{"id":{id}}}}}"#));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["ietf-restconf:errors"]["error"][0]["error-app-tag"],
        "ietf-subscribed-notifications:no-such-subscription"
    );

    // The owner receives the sync, then the engine's change as a push-change-update.
    let (status, ct, mut on_change_body) = open_sse(&agent, &uri, "admin", PASSWORD).await;
    assert_eq!((status, ct.as_str()), (200, "text/event-stream"));
    let mut seen = String::new();
    assert!(read_until(&mut on_change_body, &mut seen, "<push-update ", 1).await, "{seen}");
    assert!(seen.contains(&format!("<id>{id}</id>")), "{seen}");
    let (status, body) =
        http_post(sci, "/reports", "application/json", report("10.7.0.1:80", 1, 4321).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    assert!(read_until(&mut on_change_body, &mut seen, "<gas>4321</gas>", 1).await, "{seen}");
    let change = &seen[seen.find("<push-change-update ").expect(&seen)..];
    assert!(change.find("<gas>4321</gas>").is_some(), "{seen}");
    assert!(change.contains("<target>/cats-sma:cats-sma/metric-cache/entry=10.7.0.1%3A80"), "{seen}");
    // resync-subscription (RFC 8641) over RESTCONF: a fresh push-update of the selection.
    let resync = format!(r#"{{"ietf-yang-push:input":{{"id":{id}}}}}"#);
    let r = c.send_json("POST", "/operations/ietf-yang-push:resync-subscription", &resync);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(read_until(&mut on_change_body, &mut seen, "<push-update ", 2).await, "{seen}");
    let r = bob.send_json("POST", "/operations/ietf-yang-push:resync-subscription", &resync);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["ietf-restconf:errors"]["error"][0]["error-app-tag"],
        "ietf-yang-push:no-such-subscription-resync"
    );
    // A second GET of a stream already being received is refused.
    let (status, _, _) = open_sse(&agent, &uri, "admin", PASSWORD).await;
    assert_eq!(status, 409);

    // Periodic, established in XML with an XML reply.
    let periodic = "<input xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\">\
        <datastore xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\" \
        xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\">ds:operational</datastore>\
        <datastore-xpath-filter xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\" \
        xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:metric-cache</datastore-xpath-filter>\
        <periodic xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\"><period>10</period></periodic></input>";
    let r = c.send_xml("POST", ESTABLISH, periodic);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("<uri xmlns=\"urn:ietf:params:xml:ns:yang:ietf-restconf-subscribed-notifications\">"),
        "{}",
        r.body
    );
    let pid: u64 = r.body.split("<id>").nth(1).and_then(|s| s.split("</id>").next()).unwrap().parse().unwrap();
    let (status, _, mut periodic_body) =
        open_sse(&agent, &format!("/restconf/subscriptions/{pid}"), "admin", PASSWORD).await;
    assert_eq!(status, 200);
    let mut pseen = String::new();
    assert!(read_until(&mut periodic_body, &mut pseen, "<push-update ", 2).await, "{pseen}");
    assert!(pseen.contains("<gas>4321</gas>") && pseen.contains(&format!("<id>{pid}</id>")), "{pseen}");

    // modify-subscription by the owner: the receiver gets subscription-modified; another
    // user's modify is refused with the RFC 8639 identity.
    let modify = format!(
        r#"{{"ietf-subscribed-notifications:input":{{"id":{pid},"ietf-yang-push:periodic":{{"period":20}}}}}}"#
    );
    let r = bob.send_json("POST", "/operations/ietf-subscribed-notifications:modify-subscription", &modify);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["ietf-restconf:errors"]["error"][0]["error-app-tag"],
        "ietf-subscribed-notifications:no-such-subscription"
    );
    let r = c.send_json("POST", "/operations/ietf-subscribed-notifications:modify-subscription", &modify);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(read_until(&mut periodic_body, &mut pseen, "<subscription-modified ", 1).await, "{pseen}");
    assert!(pseen.contains("<period>20</period>"), "{pseen}");

    // delete-subscription by the owner ends its event stream.
    let r = c.send_json("POST", DELETE, &format!(r#"{{"ietf-subscribed-notifications:input":{{"id":{pid}}}}}"#));
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(ends(&mut periodic_body).await, "the stream ends with the subscription");
    assert!(gone(&c, pid).await);

    // Closing the on-change stream ends that subscription (bound to its transport).
    drop(on_change_body);
    assert!(gone(&c, id).await, "subscription {id} still listed after its stream closed");

    // An event stream subscription carries the stream's notifications; kill-subscription
    // (an operator's RPC) ends it with subscription-terminated, then the stream ends.
    let r = c.send_json(
        "POST",
        ESTABLISH,
        r#"{"ietf-subscribed-notifications:input":{"stream":"NETCONF","encoding":"encode-xml"}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let sid = r.json()["ietf-subscribed-notifications:output"]["id"].as_u64().unwrap();
    let (status, _, mut stream_body) =
        open_sse(&agent, &format!("/restconf/subscriptions/{sid}"), "admin", PASSWORD).await;
    assert_eq!(status, 200);
    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/scis",
        r#"{"cats-sma:sci":[{"csci-id":"10.7.0.2:80","cs-id":["LLM1"],"authentication":"none"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let mut sseen = String::new();
    assert!(read_until(&mut stream_body, &mut sseen, "netconf-config-change", 1).await, "{sseen}");
    let kill = format!(r#"{{"ietf-subscribed-notifications:input":{{"id":{sid}}}}}"#);
    // kill-subscription is default-deny-all (RFC 8639): NACM refuses it to bob.
    let r = bob.send_json("POST", "/operations/ietf-subscribed-notifications:kill-subscription", &kill);
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    let r = c.send_json("POST", "/operations/ietf-subscribed-notifications:kill-subscription", &kill);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(read_until(&mut stream_body, &mut sseen, "<subscription-terminated ", 1).await, "{sseen}");
    assert!(ends(&mut stream_body).await, "the stream ends after subscription-terminated");

    // Bad establish requests: the RFC 8639 identities in error-app-tag.
    let r = c.send_json("POST", ESTABLISH, r#"{"ietf-subscribed-notifications:input":{"stream":"NOSUCH"}}"#);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["ietf-restconf:errors"]["error"][0]["error-app-tag"],
        "ietf-subscribed-notifications:stream-unavailable"
    );
    let r = c.send_json(
        "POST",
        ESTABLISH,
        r#"{"ietf-subscribed-notifications:input":{"stream":"NETCONF","encoding":"cats-sma-notif-receivers:encode-cbor"}}"#,
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let v = r.json();
    assert_eq!(
        v["ietf-restconf:errors"]["error"][0]["error-app-tag"], "ietf-subscribed-notifications:encoding-unsupported",
        "{v}"
    );
    let r = c.send_json("POST", DELETE, r#"{"ietf-subscribed-notifications:input":{"id":999999}}"#);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["ietf-restconf:errors"]["error"][0]["error-app-tag"],
        "ietf-subscribed-notifications:no-such-subscription"
    );
    // A URI that names no subscription.
    let (status, _, _) = open_sse(&agent, "/restconf/subscriptions/424242", "admin", PASSWORD).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_nobody_attaches_to_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, "[restconf]\nsubscription_attach_timeout_secs = 1\n").unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    let c = Curl::new(&agent);
    let r = c.send_json("POST", ESTABLISH, r#"{"ietf-subscribed-notifications:input":{"stream":"NETCONF"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.json()["ietf-subscribed-notifications:output"]["id"].as_u64().unwrap();
    let listed = c.get(&format!("/data/ietf-subscribed-notifications:subscriptions/subscription={id}"));
    assert_eq!(listed.status, 200, "listed while it waits: {}", listed.body);
    assert!(gone(&c, id).await, "subscription {id} outlived its attach timeout");
    let (status, _, _) = open_sse(&agent, &format!("/restconf/subscriptions/{id}"), "admin", PASSWORD).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8650_encode_json_subscription_sends_rfc7951_notifications_over_sse() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let c = Curl::new(&agent);
    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/scis",
        r#"{"cats-sma:sci":[{"csci-id":"10.7.0.9:80","cs-id":["LLM1"],"authentication":"none"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // No encoding: RFC 8639's `encoding` is then that of the RPC, here JSON.
    let on_change = r#"{"ietf-subscribed-notifications:input":{
        "ietf-yang-push:datastore":"ietf-datastores:operational",
        "ietf-yang-push:datastore-xpath-filter":"/cats-sma:cats-sma/metric-cache",
        "ietf-yang-push:on-change":{"dampening-period":0}}}"#;
    let r = c.send_json("POST", ESTABLISH, on_change);
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.json()["ietf-subscribed-notifications:output"]["id"].as_u64().unwrap();
    // The leaf itself: a config-true node of an entry only operational holds.
    let listed = c.get(&format!("/data/ietf-subscribed-notifications:subscriptions/subscription={id}/encoding"));
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("encode-json"), "{}", listed.body);
    let (status, _, mut body) = open_sse(&agent, &format!("/restconf/subscriptions/{id}"), "admin", PASSWORD).await;
    assert_eq!(status, 200);
    let mut seen = String::new();
    assert!(read_until(&mut body, &mut seen, "\"ietf-yang-push:push-update\"", 1).await, "{seen}");
    let (status, reply) =
        http_post(sci, "/reports", "application/json", report("10.7.0.9:80", 1, 4321).as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    assert!(read_until(&mut body, &mut seen, "\"ietf-yang-push:push-change-update\"", 1).await, "{seen}");
    // Every SSE data line is one RFC 7951 notification in the RFC 8040 6.4 envelope.
    let messages: Vec<serde_json::Value> = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).expect("each event is JSON"))
        .collect();
    let change = messages
        .iter()
        .find_map(|m| m["ietf-restconf:notification"].get("ietf-yang-push:push-change-update"))
        .expect("a push-change-update");
    assert_eq!(change["id"], id);
    let edit = &change["datastore-changes"]["yang-patch"]["edit"][0];
    assert_eq!(edit["operation"], "replace");
    assert_eq!(edit["target"], "/cats-sma:cats-sma/metric-cache/entry=10.7.0.9%3A80");
    let entry = &edit["value"]["cats-sma:entry"][0];
    // uint32 leaves are JSON numbers (RFC 7951 section 6.1), as libyang would print them.
    assert_eq!(entry["gas"], 4321, "{edit}");
    assert_eq!(entry["csci-id"], "10.7.0.9:80");
    assert!(change["datastore-changes"]["yang-patch"]["patch-id"].is_string());
}
