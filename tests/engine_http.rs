//! The metric engine end to end: an SCI registered over NETCONF (edit-config + commit) is
//! accepted on its next HTTP report; its metrics, the site aggregate and the rejection
//! counters appear in the operational datastore; bad reports get their reason (seed 004,
//! SCI Collection Interface and Validator & Sanitizer).

mod common;

use common::*;

fn report(csci: &str, cs: &str, seq: u64, gas: i64, ct: i64, health: &str) -> String {
    let now = chrono::Utc::now().to_rfc3339();
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{now}","gas":{gas},"computing-time":{ct},"health":"{health}"}}"#
    )
}

const CATS: &str = "urn:cats-sma:yang:cats-sma";

#[tokio::test(flavor = "multi_thread")]
async fn sci_registered_by_netconf_is_accepted_and_shown_in_operational_state() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("the ready line names the SCI collector");
    let json = "application/json";

    // Not registered yet: refused with the reason.
    let (status, body) =
        http_post(sci, "/reports", json, report("188.3.67.3:67", "AR1", 1, 400, 5, "HEALTHY").as_bytes()).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("unknown-sci"), "{body}");

    // Register over NETCONF: edit-config on the candidate + commit.
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = format!(
        "<edit-config><target><candidate/></target><config><cats-sma xmlns=\"{CATS}\"><scis>\
         <sci><csci-id>188.3.67.3:67</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>\
         <sci><csci-id>188.3.67.4:69</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis></cats-sma></config></edit-config>"
    );
    assert!(nc.rpc11(&rpc(1, &cfg)).await.contains("<ok/>"));
    assert!(nc.rpc11(&rpc(2, "<commit/>")).await.contains("<ok/>"));

    // The next reports are accepted (seed 004 Metric Cache table rows for AR1).
    let first = report("188.3.67.3:67", "AR1", 1, 400, 5, "HEALTHY");
    let (status, body) = http_post(sci, "/reports", json, first.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\":1"), "{body}");
    let batch = format!(
        "[{},{}]",
        report("188.3.67.4:69", "AR1", 1, 600, 6, "HEALTHY"),
        report("188.3.67.4:69", "AR2", 2, 1, 1, "HEALTHY")
    );
    let (status, body) = http_post(sci, "/reports", json, batch.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("unauthorized-cs-id"), "an SCI may only report for its CS-IDs: {body}");

    // Bad reports: each reason, none crashes anything.
    for (payload, reason) in [
        // The same report again (a retransmission): same sequence number, same time.
        (first.clone(), "duplicate"),
        (report("188.3.67.3:67", "AR1", 9, -1, 5, "HEALTHY"), "out-of-range"),
        (report("188.3.67.3:67", "AR1", 10, 400, 3_600_001, "HEALTHY"), "out-of-range"),
    ] {
        let (status, body) = http_post(sci, "/reports", json, payload.as_bytes()).await;
        assert_eq!(status, 422, "{body}");
        assert!(body.contains(reason), "{reason}: {body}");
    }
    let (status, _) = http_post(sci, "/reports", json, b"{not json").await;
    assert_eq!(status, 400);
    let (status, _) = http_post(sci, "/reports", "text/plain", b"x").await;
    assert_eq!(status, 415);

    // Operational state through NETCONF get-data.
    let get = "<get-data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-nmda\" \
               xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><datastore>ds:operational</datastore>\
               <xpath-filter xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma</xpath-filter></get-data>";
    let reply = nc.rpc11(&rpc(3, get)).await;
    assert!(reply.contains("<csci-id>188.3.67.3:67</csci-id>") && reply.contains("<gas>400</gas>"), "{reply}");
    assert!(reply.contains("<state>healthy</state>"), "{reply}");
    assert!(reply.contains("<site-gas>1000</site-gas>"), "AR1 = 400 + 600: {reply}");
    assert!(reply.contains(":out-of-range</reason><count>2</count>"), "{reply}");
    assert!(reply.contains(":unknown-sci</reason><count>1</count>"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_rules_are_checked_at_commit_and_change_what_is_reported() {
    // seed 004 Policy Engine: rules configured over NETCONF, a bad rule refused with its
    // position, the safety factor (Reported_GAS = Site_GAS * 0.8) and a REDUCE rule applied.
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    const POL: &str = "urn:cats-sma:yang:cats-sma-policy";
    let edit = |body: &str| {
        format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">{body}</cats-sma></config></edit-config>"
        )
    };
    let reg = "<scis><sci><csci-id>188.3.67.4:70</csci-id><cs-id>LLM1</cs-id><authentication>none</authentication></sci></scis>";
    assert!(nc.rpc11(&rpc(1, &edit(reg))).await.contains("<ok/>"));
    let bad = format!(
        "<policy xmlns=\"{POL}\"><rule><name>r1</name><priority>1</priority><condition>Site_GAS &lt; 100</condition>\
         <action>SET Security_Label = 11</action></rule></policy>"
    );
    let reply = nc.rpc11(&rpc(2, &edit(&bad))).await;
    assert!(reply.contains("<error-tag>operation-failed</error-tag>"), "{reply}");
    assert!(reply.contains("rule r1") && reply.contains("column"), "the error names the rule and position: {reply}");
    let good = format!(
        "<policy xmlns=\"{POL}\"><rule><name>halve-degraded</name><priority>1</priority>\
         <condition>SCI_Health = DEGRADED</condition><action>REDUCE SCI_GAS BY 50%</action></rule>\
         <transforms><gas-safety-factor>0.8</gas-safety-factor></transforms></policy>"
    );
    let reply = nc.rpc11(&rpc(3, &edit(&good))).await;
    assert!(reply.contains("<ok/>"), "{reply}");
    // A HEALTHY SCI with 1000 slots: reported 800 (safety factor 0.8).
    let (status, body) = http_post(
        sci,
        "/reports",
        "application/json",
        report("188.3.67.4:70", "LLM1", 1, 1000, 12, "HEALTHY").as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let get = "<get xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><filter type=\"subtree\">\
               <cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><services/></cats-sma></filter></get>";
    let reply = nc.rpc11(&rpc(4, get)).await;
    assert!(reply.contains("<site-gas>1000</site-gas>") && reply.contains(">800</reported-gas>"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn anomalies_are_quarantined_and_released_by_rpc() {
    // seed 004 Validator & Sanitizer: GAS > 50 % within 1 s without a health change is
    // quarantined (the default action); clear-quarantine releases it; resync is accepted.
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    // seed 004 V&S and SCI state machine: anomalies and state transitions are notified.
    let mut events = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    events.hello(true).await;
    let sub = "<create-subscription xmlns=\"urn:ietf:params:xml:ns:netconf:notification:1.0\"/>";
    assert!(events.rpc11(&rpc(1, sub)).await.contains("<ok/>"));
    let reg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\"><scis><sci>\
         <csci-id>188.3.67.3:68</csci-id><cs-id>AR2</cs-id><authentication>none</authentication></sci></scis></cats-sma></config></edit-config>"
    );
    assert!(nc.rpc11(&rpc(1, &reg)).await.contains("<ok/>"));
    let json = "application/json";
    let (s1, _) =
        http_post(sci, "/reports", json, report("188.3.67.3:68", "AR2", 1, 100, 15, "HEALTHY").as_bytes()).await;
    assert_eq!(s1, 200);
    let (s2, body) =
        http_post(sci, "/reports", json, report("188.3.67.3:68", "AR2", 2, 400, 15, "HEALTHY").as_bytes()).await;
    assert_eq!(s2, 422, "{body}");
    assert!(body.contains("quarantined"), "{body}");
    let get =
        format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><quarantine/></cats-sma></filter></get>");
    let reply = nc.rpc11(&rpc(2, &get)).await;
    assert!(
        reply.contains("<csci-id>188.3.67.3:68</csci-id>") && reply.contains("<sequence-number>2</sequence-number>"),
        "{reply}"
    );
    let got = String::from_utf8_lossy(&events.read_until(b"</metric-anomaly>").await).to_string();
    assert!(
        got.contains("<sci-state-change")
            && got.contains("<old-state>active</old-state>")
            && got.contains("<new-state>healthy</new-state>"),
        "ACTIVE -> HEALTHY on the first good report: {got}"
    );
    assert!(
        got.contains(
            "<metric>gas</metric><old-value>100</old-value><new-value>400</new-value><action>quarantine</action>"
        ),
        "{got}"
    );
    let bad = format!("<clear-quarantine xmlns=\"{CATS}\"><accept>maybe</accept></clear-quarantine>");
    assert!(nc.rpc11(&rpc(3, &bad)).await.contains("<error-tag>invalid-value</error-tag>"));
    let clear = format!(
        "<clear-quarantine xmlns=\"{CATS}\"><csci-id>188.3.67.3:68</csci-id><accept>true</accept></clear-quarantine>"
    );
    let reply = nc.rpc11(&rpc(4, &clear)).await;
    assert!(reply.contains(">1</released>"), "{reply}");
    let reply = nc.rpc11(&rpc(5, &get)).await;
    assert!(!reply.contains("<sequence-number>2</sequence-number>"), "released: {reply}");
    let services =
        format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><services/></cats-sma></filter></get>");
    assert!(nc.rpc11(&rpc(6, &services)).await.contains("<site-gas>400</site-gas>"), "accepted on release");
    assert!(nc.rpc11(&rpc(7, &format!("<resync xmlns=\"{CATS}\"/>"))).await.contains("<ok/>"));
    let probe = format!("<probe-sci xmlns=\"{CATS}\"><csci-id>188.3.67.3:68</csci-id></probe-sci>");
    // Without a pull URL there is nothing to probe with: not reachable, with the state.
    let reply = nc.rpc11(&rpc(8, &probe)).await;
    assert!(reply.contains(">false</reachable>") && reply.contains(">healthy</state>"), "{reply}");
}
