//! HTTP pull (seed 004, pull mode): a target configured over NETCONF is fetched on its
//! interval and its report accepted for that CSCI-ID; probe-sci GETs it and reports the
//! round trip.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CATS: &str = "urn:cats-sma:yang:cats-sma";

/// A minimal SCI answering every GET with a fresh report.
async fn sci_server() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { return };
            let seq = h.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = format!(
                    r#"{{"csci-id":"sci-p","cs-id":"AR1","seq":{seq},"timestamp":"{}","gas":250,"computing-time":7,"health":"HEALTHY"}}"#,
                    chrono::Utc::now().to_rfc3339()
                );
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (addr, hits)
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_targets_are_fetched_and_probed() {
    let (sci, hits) = sci_server().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    let cfg = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\">\
         <scis><sci><csci-id>sci-p</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>\
         <collection><pull><target><csci-id>sci-p</csci-id><url>http://{sci}/metrics</url><interval>1</interval><allow-plaintext>true</allow-plaintext></target></pull></collection>\
         </cats-sma></config></edit-config>"
    );
    let reply = nc.rpc11(&rpc(1, &cfg)).await;
    assert!(reply.contains("<ok/>"), "{reply}");
    let get =
        format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><metric-cache/></cats-sma></filter></get>");
    let mut seen = false;
    for i in 0..60 {
        let reply = nc.rpc11(&rpc(10 + i, &get)).await;
        if reply.contains("<csci-id>sci-p</csci-id>") && reply.contains("<gas>250</gas>") {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen, "the pulled report reached the cache");
    assert!(hits.load(Ordering::SeqCst) >= 1);
    let probe = format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-p</csci-id></probe-sci>");
    let reply = nc.rpc11(&rpc(100, &probe)).await;
    assert!(
        reply.contains(">true</reachable>") && reply.contains("</rtt>") && reply.contains(">healthy</state>"),
        "{reply}"
    );
}
