//! SCI reports over MQTT through a real mosquitto broker started by the test (seed 004, SCI
//! Collection Interface, push mode): the agent, configured over NETCONF, subscribes; a
//! published report is accepted; a report for another CSCI-ID than the topic's is refused;
//! after a broker restart the agent reconnects and resubscribes.

mod common;

use std::time::Duration;

use common::mosquitto::{broker, free_port, publish, publish_with};
use common::*;

const CATS: &str = "urn:cats-sma:yang:cats-sma";

fn report(csci: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

async fn cache_gas(nc: &mut RawSession, id: u32, csci: &str) -> Option<String> {
    let get = format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><metric-cache><entry><csci-id>{csci}</csci-id><gas/></entry></metric-cache></cats-sma></filter></get>");
    let reply = nc.rpc11(&rpc(id, &get)).await;
    reply.split("<gas>").nth(1).and_then(|r| r.split('<').next()).map(str::to_owned)
}

async fn wait_gas(nc: &mut RawSession, base_id: u32, csci: &str, want: &str) -> bool {
    for i in 0..100 {
        if cache_gas(nc, base_id + i, csci).await.as_deref() == Some(want) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_through_mosquitto_and_reconnect_after_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let b = broker(dir.path(), port);
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
         <collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port><allow-plaintext>true</allow-plaintext>\
         <shared-group>site-a</shared-group></mqtt></collection>\
         <scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis></cats-sma></config></edit-config>"
    );
    let r = nc.rpc11(&rpc(1, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");
    // The subscription is made asynchronously: publish until the report lands.
    let mut landed = false;
    for seq in 1..50u64 {
        publish(port, "cats/sci/sci-1/report", &report("sci-1", seq, 300));
        if wait_gas(&mut nc, 100 * seq as u32, "sci-1", "300").await {
            landed = true;
            break;
        }
    }
    assert!(landed, "a report published to the broker reaches the metric cache");

    // The topic names the publisher: a report for another SCI on it is refused.
    publish(port, "cats/sci/sci-1/report", &report("sci-2", 1, 5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = nc
        .rpc11(&rpc(
            9000,
            &format!(
                "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><statistics/></cats-sma></filter></get>"
            ),
        ))
        .await;
    assert!(stats.contains(":unauthenticated</reason>"), "{stats}");

    // Broker restart: the agent reconnects and resubscribes.
    drop(b);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _b2 = broker(dir.path(), port);
    let mut landed = false;
    for seq in 100..200u64 {
        publish(port, "cats/sci/sci-1/report", &report("sci-1", seq, 700));
        if wait_gas(&mut nc, 20_000 + 100 * seq as u32, "sci-1", "700").await {
            landed = true;
            break;
        }
    }
    assert!(landed, "reports flow again after the broker restarted");
}

async fn statistics(nc: &mut RawSession, id: u32) -> String {
    let get =
        format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><statistics/></cats-sma></filter></get>");
    nc.rpc11(&rpc(id, &get)).await
}

fn count_of(stats: &str, tag: &str) -> u64 {
    stats.split(&format!("<{tag}>")).nth(1).and_then(|r| r.split('<').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_reports_carry_their_proof_in_a_user_property() {
    // seed 004 SCI Authentication over MQTT v5: the authorization user property.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _b = broker(dir.path(), port);
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let key = b"mqtt-sci-shared-secret";
    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
         <collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port><allow-plaintext>true</allow-plaintext></mqtt>\
         <authentication><credential><name>k</name><type>hmac-sha256</type><key>{}</key></credential></authentication>\
         </collection><scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><credential-ref>k</credential-ref></sci></scis>\
         </cats-sma></config></edit-config>",
        {
            use base64ct::Encoding;
            base64ct::Base64::encode_string(key)
        }
    );
    let r = nc.rpc11(&rpc(1, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");
    let mut landed = false;
    for seq in 1..50u64 {
        let body = report("sci-1", seq, 300);
        let proof = cats_sma::engine::auth::sign_hmac(key, chrono::Utc::now().timestamp(), body.as_bytes());
        publish_with(port, "cats/sci/sci-1/report", &body, &proof);
        if wait_gas(&mut nc, 100 * seq as u32, "sci-1", "300").await {
            landed = true;
            break;
        }
    }
    assert!(landed, "a signed report published to the broker reaches the metric cache");
    let before = statistics(&mut nc, 9000).await;
    // Unsigned, and signed with another key: both refused, the cache keeps 300.
    publish(port, "cats/sci/sci-1/report", &report("sci-1", 500, 1));
    let body = report("sci-1", 501, 2);
    let forged =
        cats_sma::engine::auth::sign_hmac(b"another-key-entirely", chrono::Utc::now().timestamp(), body.as_bytes());
    publish_with(port, "cats/sci/sci-1/report", &body, &forged);
    let mut refused = false;
    for i in 0..100 {
        let stats = statistics(&mut nc, 9100 + i).await;
        if count_of(&stats, "reports-received") >= count_of(&before, "reports-received") + 2 {
            refused = stats.contains(":unauthenticated</reason><count>2</count>");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "{}", statistics(&mut nc, 9300).await);
    assert_eq!(cache_gas(&mut nc, 9400, "sci-1").await.as_deref(), Some("300"));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_agents_in_one_shared_group_split_the_reports() {
    // MQTT v5 shared subscriptions (section 4.8.2): each report reaches exactly one agent
    // of the group, so several agents split the load of one site.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _b = broker(dir.path(), port);
    let a1 = start_agent(&dir.path().join("state1"), &[]);
    let a2 = start_agent(&dir.path().join("state2"), &[]);
    let n = 40u64;
    let mut sessions = Vec::new();
    for (i, a) in [&a1, &a2].into_iter().enumerate() {
        let mut nc = connect(a.addr, "admin", PASSWORD).await.unwrap();
        nc.hello(true).await;
        let scis: String = (0..n)
            .map(|k| {
                format!("<sci><csci-id>sci-{k}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>")
            })
            .collect();
        let cfg = format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
             <collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port><allow-plaintext>true</allow-plaintext>\
             <shared-group>site-a</shared-group><client-id>agent-{i}</client-id></mqtt></collection>\
             <scis>{scis}</scis></cats-sma></config></edit-config>"
        );
        let r = nc.rpc11(&rpc(1, &cfg)).await;
        assert!(r.contains("<ok/>"), "{r}");
        sessions.push(nc);
    }
    // Wait until both agents are subscribed: a probe report lands at one of them each time;
    // keep probing until both have received one.
    let mut ready = false;
    for seq in 1..=100u64 {
        publish(port, "cats/sci/sci-0/report", &report("sci-0", seq, 1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r1 = count_of(&statistics(&mut sessions[0], 10).await, "reports-received");
        let r2 = count_of(&statistics(&mut sessions[1], 10).await, "reports-received");
        if r1 > 0 && r2 > 0 {
            ready = true;
            break;
        }
    }
    assert!(ready, "both agents joined the shared group");
    let base: Vec<u64> = {
        let mut v = Vec::new();
        for nc in sessions.iter_mut() {
            v.push(count_of(&statistics(nc, 20).await, "reports-received"));
        }
        v
    };
    for k in 0..n {
        publish(port, &format!("cats/sci/sci-{k}/report"), &report(&format!("sci-{k}"), 1000 + k, 100));
    }
    let mut got = (0, 0);
    for i in 0..100 {
        let r1 = count_of(&statistics(&mut sessions[0], 100 + i).await, "reports-received") - base[0];
        let r2 = count_of(&statistics(&mut sessions[1], 100 + i).await, "reports-received") - base[1];
        got = (r1, r2);
        if r1 + r2 >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got.0 + got.1, n, "every report reached exactly one agent: {got:?}");
    assert!(got.0 > 0 && got.1 > 0, "both agents took a share: {got:?}");
}
