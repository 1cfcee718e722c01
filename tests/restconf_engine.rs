//! The same change through both front ends (issue 7): an SCI and a policy configured over
//! RESTCONF drive the engine exactly as over NETCONF (reports accepted, the policy applied,
//! a bad rule refused with the same error), state read back through NETCONF and RESTCONF,
//! the agent's RPCs over RESTCONF, and the NETCONF event stream as server-sent events.

mod common;

use std::time::Duration;

use common::*;
use http_body_util::BodyExt;

fn report(csci: &str, cs: &str, seq: u64, gas: i64, health: &str) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{now}","gas":{gas},"computing-time":12,"health":"{health}"}}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn sci_and_policy_configured_by_restconf_drive_the_engine_like_netconf() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let c = Curl::new(&agent);

    let (status, body) =
        http_post(sci, "/reports", "application/json", report("10.9.0.1:80", "LLM1", 1, 1000, "HEALTHY").as_bytes())
            .await;
    assert_eq!(status, 422, "not registered yet: {body}");

    // Register the SCI over RESTCONF.
    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/scis",
        r#"{"cats-sma:sci":[{"csci-id":"10.9.0.1:80","cs-id":["LLM1"],"authentication":"none"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // A bad rule is refused by the engine at commit, with the rule and position, exactly as
    // over NETCONF (the consumer's veto is operation-failed → 500).
    let bad = r#"{"cats-sma-policy:policy":{"rule":[{"name":"r1","priority":1,"condition":"Site_GAS < 100","action":"SET Security_Label = 11"}]}}"#;
    let r = c.send_json("PUT", "/data/cats-sma:cats-sma/cats-sma-policy:policy", bad);
    assert_eq!((r.status, r.error_tag().as_str()), (500, "operation-failed"), "{}", r.body);
    assert!(r.body.contains("rule r1") && r.body.contains("column"), "{}", r.body);
    let good = r#"{"cats-sma-policy:policy":{"rule":[{"name":"halve-degraded","priority":1,
        "condition":"SCI_Health = DEGRADED","action":"REDUCE SCI_GAS BY 50%"}],
        "transforms":{"gas-safety-factor":"0.8"}}}"#;
    let r = c.send_json("PUT", "/data/cats-sma:cats-sma/cats-sma-policy:policy", good);
    // The policy container already existed (a non-presence container with defaults): 204.
    assert_eq!(r.status, 204, "{}", r.body);

    // The collector accepts the SCI's report now; the policy's safety factor applies.
    let (status, body) =
        http_post(sci, "/reports", "application/json", report("10.9.0.1:80", "LLM1", 1, 1000, "HEALTHY").as_bytes())
            .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\":1"), "{body}");

    // Read back over NETCONF: the engine state is the same whichever front end configured it.
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let get = "<get xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><filter type=\"subtree\">\
               <cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><services/><metric-cache/><scis/></cats-sma></filter></get>";
    let reply = nc.rpc11(&rpc(1, get)).await;
    assert!(reply.contains("<site-gas>1000</site-gas>") && reply.contains(">800</reported-gas>"), "{reply}");
    assert!(reply.contains("<csci-id>10.9.0.1:80</csci-id>") && reply.contains("<gas>1000</gas>"), "{reply}");

    // And over RESTCONF (operational state: the unified data view and the NMDA one).
    let r = c.get("/data/cats-sma:cats-sma/metric-cache/entry=10.9.0.1%3A80");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cats-sma:entry"][0]["gas"], 1000);
    assert_eq!(r.json()["cats-sma:entry"][0]["state"], "healthy");
    let r = c.get("/ds/ietf-datastores:operational/cats-sma:cats-sma/services");
    assert!(r.body.contains("\"site-gas\":1000"), "{}", r.body);
    let r = c.get("/data/cats-sma:cats-sma/services?content=config");
    assert_eq!(r.status, 404, "services is state only: {}", r.body);

    // A second SCI configured over NETCONF is visible to RESTCONF at once.
    let cfg = "<edit-config><target><running/></target><config><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><scis>\
               <sci><csci-id>10.9.0.2:80</csci-id><cs-id>LLM1</cs-id><authentication>none</authentication></sci></scis></cats-sma></config></edit-config>";
    assert!(nc.rpc11(&rpc(2, cfg)).await.contains("<ok/>"));
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=10.9.0.2%3A80").status, 200);

    // The agent's RPCs over RESTCONF: input in JSON and XML, output in the asked encoding.
    let r = c.send_json("POST", "/operations/cats-sma:clear-quarantine", r#"{"cats-sma:input":{"accept":true}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cats-sma:output"]["released"], 0);
    let r = c.send_xml(
        "POST",
        "/operations/cats-sma:clear-quarantine",
        "<input xmlns=\"urn:cats-sma:yang:cats-sma\"><csci-id>10.9.0.1:80</csci-id></input>",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("<output xmlns=\"urn:cats-sma:yang:cats-sma\"><released"), "{}", r.body);
    let r = c.call("POST", "/operations/cats-sma:resync", &[], None);
    assert_eq!(r.status, 204, "{}", r.body);
    let r = c.send_json("POST", "/operations/cats-sma:clear-quarantine", r#"{"cats-sma:input":{"accept":"maybe"}}"#);
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "{}", r.body);
    let r = c.call("POST", "/operations/cats-sma:nosuch", &[], None);
    assert_eq!(r.status, 404);
    let r = c.get("/operations/cats-sma:resync");
    assert_eq!(r.status, 405);
}

/// Opens an SSE stream with a Rust HTTP client (hyper over rustls) and returns the body.
async fn open_stream(agent: &AgentProcess, path_and_query: &str) -> (u16, String, hyper::body::Incoming) {
    let root = agent.restconf.clone().unwrap();
    let addr: std::net::SocketAddr = root.trim_start_matches("https://").trim_end_matches("/restconf").parse().unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tls_connector(&agent.state_dir.join("restconf-cert.pem")).connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    use base64ct::Encoding as _;
    let auth = base64ct::Base64::encode_string(format!("admin:{PASSWORD}").as_bytes());
    let req = hyper::Request::get(format!("/restconf{path_and_query}"))
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

/// Reads SSE data until `want` appears (or 15 s pass).
async fn read_until(body: &mut hyper::body::Incoming, seen: &mut String, want: &str) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !seen.contains(want) {
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

#[tokio::test(flavor = "multi_thread")]
async fn netconf_stream_as_server_sent_events() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);

    // Live delivery in JSON: a configuration change raises netconf-config-change.
    let (status, ct, mut body) = open_stream(&agent, "/streams/NETCONF/json").await;
    assert_eq!((status, ct.as_str()), (200, "text/event-stream"));
    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/scis",
        r#"{"cats-sma:sci":[{"csci-id":"10.8.0.1:80","cs-id":["AR1"],"authentication":"none"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let mut seen = String::new();
    assert!(read_until(&mut body, &mut seen, "netconf-config-change").await, "{seen}");
    let data: String = seen.lines().filter_map(|l| l.strip_prefix("data: ")).collect::<Vec<_>>().join("\n");
    let first = data.split("\n\n").next().unwrap();
    let v: serde_json::Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {seen}"));
    assert!(v["ietf-restconf:notification"]["eventTime"].is_string(), "{seen}");
    let change = &v["ietf-restconf:notification"]["ietf-netconf-notifications:netconf-config-change"];
    assert_eq!(change["changed-by"]["username"], "admin", "the RESTCONF user made the change: {seen}");
    drop(body);

    // Replay in XML from start-time, then replayComplete; a filter keeps only what matches.
    let start = (chrono::Utc::now() - chrono::Duration::minutes(5)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let q = format!("/streams/NETCONF/xml?start-time={}", start.replace('+', "%2B"));
    let (status, _, mut body) = open_stream(&agent, &q).await;
    assert_eq!(status, 200);
    let mut seen = String::new();
    assert!(read_until(&mut body, &mut seen, "replayComplete").await, "{seen}");
    assert!(seen.contains("data: <notification xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\">"), "{seen}");
    assert!(seen.find("netconf-config-change").unwrap() < seen.find("replayComplete").unwrap(), "{seen}");
    drop(body);
    let q = format!(
        "/streams/NETCONF/json?start-time={}&filter=%2Fietf-netconf-notifications%3Anetconf-session-start",
        start.replace('+', "%2B")
    );
    let (_, _, mut body) = open_stream(&agent, &q).await;
    let mut seen = String::new();
    assert!(read_until(&mut body, &mut seen, "replayComplete").await, "{seen}");
    assert!(!seen.contains("netconf-config-change"), "filtered out: {seen}");

    // stop-time in the past: the replay, replayComplete, notificationComplete, then the end.
    let stop = (chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let q =
        format!("/streams/NETCONF/xml?start-time={}&stop-time={}", start.replace('+', "%2B"), stop.replace('+', "%2B"));
    let (_, _, mut body) = open_stream(&agent, &q).await;
    let mut seen = String::new();
    assert!(read_until(&mut body, &mut seen, "notificationComplete").await, "{seen}");
    let ended = tokio::time::timeout(Duration::from_secs(10), body.frame()).await;
    assert!(matches!(ended, Ok(None)), "the stream ends after notificationComplete");

    // Bad parameters are 400s before any stream opens.
    let (status, _, _) = open_stream(&agent, "/streams/NETCONF/json?start-time=yesterday").await;
    assert_eq!(status, 400);
    let (status, _, _) = open_stream(&agent, "/streams/NETCONF/json?depth=1").await;
    assert_eq!(status, 400);
    let (status, _, _) = open_stream(&agent, "/streams/NOSUCH/json").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificate_mapped_to_a_user() {
    // RFC 7589-style cert-to-name: a certificate issued by the configured CA, with the
    // fingerprint listed, authenticates as its user without a password.
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client =
        rcgen::CertificateParams::new(vec!["operator".to_owned()]).unwrap().signed_by(&client_key, &issuer).unwrap();
    use sha2::Digest;
    let fp: String =
        sha2::Sha256::digest(client.der()).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":");
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(p("client.pem"), client.pem()).unwrap();
    std::fs::write(p("client.key"), client_key.serialize_pem()).unwrap();
    std::fs::write(
        p("boot.toml"),
        format!(
            "[restconf]\nclient_ca = \"{}\"\n[[restconf.cert_to_name]]\nfingerprint = \"{fp}\"\nname = \"admin\"\n",
            p("ca.pem").display()
        ),
    )
    .unwrap();
    let agent = start_agent(&p("state"), &["--config", p("boot.toml").to_str().unwrap()]);
    let with_cert = Curl {
        user: None,
        extra: vec![
            "--cert".into(),
            p("client.pem").display().to_string(),
            "--key".into(),
            p("client.key").display().to_string(),
        ],
        ..Curl::new(&agent)
    };
    let r = with_cert.get("/yang-library-version");
    assert_eq!(r.status, 200, "{}", r.body);
    // Without the certificate (and without a password) the same request is refused.
    let r = Curl { user: None, ..Curl::new(&agent) }.get("/yang-library-version");
    assert_eq!(r.status, 401);
}
