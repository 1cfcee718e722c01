//! SCI reports over MQTT through a real mosquitto broker started by the test (seed 004, SCI
//! Collection Interface, push mode): the agent, configured over NETCONF, subscribes; a
//! published report is accepted; a report for another CSCI-ID than the topic's is refused;
//! after a broker restart the agent reconnects and resubscribes.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

const CATS: &str = "urn:cats-sma:yang:cats-sma";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn mosquitto_bin() -> String {
    for p in ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    panic!("mosquitto is not installed: run scripts/setup.sh");
}

struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn broker(dir: &std::path::Path, port: u16) -> Broker {
    let conf = dir.join("mosquitto.conf");
    std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")).unwrap();
    // The guard kills and reaps the broker on every path, including the panic below.
    let guard = Broker(
        Command::new(mosquitto_bin()).arg("-c").arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return guard;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("mosquitto did not start on port {port}");
}

fn publish(port: u16, topic: &str, payload: &str) {
    let st = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "mqttv5", "-q", "1", "-t", topic, "-m", payload])
        .status()
        .expect("mosquitto_pub (mosquitto-clients) is installed by scripts/setup.sh");
    assert!(st.success());
}

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
         <collection><mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{port}</broker-port>\
         <shared-group>site-a</shared-group></mqtt></collection>\
         <scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma></config></edit-config>"
    );
    assert!(nc.rpc11(&rpc(1, &cfg)).await.contains("<ok/>"));
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
