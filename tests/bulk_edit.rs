//! Issue 22 / issue 14 goal 4: one NETCONF edit-config creating or deleting 100 000 list
//! entries, against the real agent over SSH. Correctness only (every entry there, every
//! entry gone, a rejected edit leaves nothing behind); the timing lives in
//! `examples/bulk_edit.rs` and `docs/performance.md`.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const CATS: &str = "urn:cats-sma:yang:cats-sma";
const N: usize = 100_000;

/// One rpc with chunked framing, waiting as long as a debug build needs for 100 000
/// entries (a deadline, not a timing assertion).
async fn call(s: &mut RawSession, id: u32, op: &str) -> String {
    let body = rpc(id, op);
    let frame = format!("\n#{}\n{}\n##\n", body.len(), body);
    s.stream.write_all(frame.as_bytes()).await.unwrap();
    s.stream.flush().await.unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    tokio::time::timeout(Duration::from_secs(300), async {
        while !got.ends_with(b"\n##\n") {
            let n = s.stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the agent closed the session");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("no reply within the deadline");
    decode_chunks(&got)
}

fn groups(range: std::ops::Range<usize>, op: &str) -> String {
    let mut s = format!("<config><nacm xmlns=\"{NACM}\" xmlns:nc=\"{NC}\"><groups>");
    for i in range {
        match op {
            "delete" => s.push_str(&format!("<group nc:operation=\"delete\"><name>g{i}</name></group>")),
            _ => s.push_str(&format!("<group><name>g{i}</name><user-name>u{i}</user-name></group>")),
        }
    }
    s.push_str("</groups></nacm></config>");
    s
}

fn edit(config: &str) -> String {
    format!("<edit-config><target><running/></target>{config}</edit-config>")
}

async fn group_count(s: &mut RawSession, id: u32) -> usize {
    let reply = call(
        s,
        id,
        &format!("<get-config><source><running/></source><filter type=\"subtree\"><nacm xmlns=\"{NACM}\"><groups/></nacm></filter></get-config>"),
    )
    .await;
    assert!(!reply.contains("rpc-error"), "{}", &reply[..reply.len().min(500)]);
    reply.matches("<group>").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue22_bulk_create_100k_nacm_groups_is_linear() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let reply = call(&mut s, 1, &edit(&groups(0..N, "create"))).await;
    assert!(reply.contains("<ok/>"), "{}", &reply[..reply.len().min(500)]);
    assert_eq!(group_count(&mut s, 2).await, N, "every entry is there");
    let probe = call(
        &mut s,
        3,
        &format!("<get-config><source><running/></source><filter type=\"subtree\"><nacm xmlns=\"{NACM}\"><groups><group><name>g{}</name></group></groups></nacm></filter></get-config>", N - 1),
    )
    .await;
    assert!(probe.contains(&format!("<user-name>u{}</user-name>", N - 1)), "{probe}");

    // Deleting every entry and one that does not exist fails whole (RFC 6241 7.2
    // data-missing, stop-on-error): nothing is removed.
    let mut bad = groups(0..N, "delete");
    bad = bad.replace("</groups>", "<group nc:operation=\"delete\"><name>absent</name></group></groups>");
    let reply = call(&mut s, 4, &edit(&bad)).await;
    assert!(reply.contains("data-missing"), "{}", &reply[..reply.len().min(500)]);
    assert_eq!(group_count(&mut s, 5).await, N, "a rejected delete removes nothing");

    // Creating 100 000 new ones and one that exists fails whole (data-exists).
    let mut bad = groups(N..2 * N, "create");
    bad = bad.replace("</groups>", "<group nc:operation=\"create\"><name>g7</name></group></groups>");
    let reply = call(&mut s, 6, &edit(&bad)).await;
    assert!(reply.contains("data-exists"), "{}", &reply[..reply.len().min(500)]);
    assert_eq!(group_count(&mut s, 7).await, N, "a rejected create adds nothing");

    let reply = call(&mut s, 8, &edit(&groups(0..N, "delete"))).await;
    assert!(reply.contains("<ok/>"), "{}", &reply[..reply.len().min(500)]);
    assert_eq!(group_count(&mut s, 9).await, 0, "every entry is gone");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue14_goal4_bulk_create_100k_scis_reaches_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let id = |i: usize| format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    let mut cfg = format!("<config><cats-sma xmlns=\"{CATS}\" xmlns:nc=\"{NC}\"><scis>");
    for i in 0..N {
        cfg.push_str(&format!("<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id></sci>", id(i), i % 100));
    }
    cfg.push_str("</scis></cats-sma></config>");
    let reply = call(&mut s, 1, &edit(&cfg)).await;
    assert!(reply.contains("<ok/>"), "{}", &reply[..reply.len().min(500)]);
    // The engine registered each SCI: its metric-cache entry (operational state the
    // engine renders) is there, first, middle and last.
    let cache_entry = |i: usize| {
        format!(
            "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><metric-cache><entry><csci-id>{}</csci-id></entry></metric-cache></cats-sma></filter></get>",
            id(i)
        )
    };
    for (n, i) in [0, N / 2, N - 1].into_iter().enumerate() {
        let reply = call(&mut s, 10 + n as u32, &cache_entry(i)).await;
        assert!(reply.contains(&format!("<csci-id>{}</csci-id>", id(i))), "{}", &reply[..reply.len().min(800)]);
    }
    let mut del = format!("<config><cats-sma xmlns=\"{CATS}\" xmlns:nc=\"{NC}\"><scis>");
    for i in 0..N {
        del.push_str(&format!("<sci nc:operation=\"delete\"><csci-id>{}</csci-id></sci>", id(i)));
    }
    del.push_str("</scis></cats-sma></config>");
    let reply = call(&mut s, 7, &edit(&del)).await;
    assert!(reply.contains("<ok/>"), "{}", &reply[..reply.len().min(500)]);
    let reply = call(
        &mut s,
        21,
        &format!("<get-config><source><running/></source><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><scis/></cats-sma></filter></get-config>"),
    )
    .await;
    assert!(!reply.contains("<sci>"), "{}", &reply[..reply.len().min(500)]);
    // And the engine dropped them.
    let reply = call(&mut s, 9, &cache_entry(N / 2)).await;
    assert!(!reply.contains(&format!("<csci-id>{}</csci-id>", id(N / 2))), "{}", &reply[..reply.len().min(800)]);
}

fn scis(entries: &str) -> String {
    edit(&format!("<config><cats-sma xmlns=\"{CATS}\" xmlns:nc=\"{NC}\"><scis>{entries}</scis></cats-sma></config>"))
}

fn sci_entries(range: std::ops::Range<usize>) -> String {
    range.map(|i| format!("<sci><csci-id>bulk-{i}</csci-id><cs-id>AR1</cs-id></sci>")).collect()
}

/// RFC 6241 7.2 / RFC 7950 8.3.1 and 9.4 on the bulk path: a value the schema's pattern or
/// range refuses, in the last of 5 000 new entries, in a leaf set alone, as a key on delete
/// or a leaf-list value added to an entry, is invalid-value; an edit refused for any reason
/// (a later edit error, test-only) keeps nothing of what it created; the entries created
/// whole get their defaults.
#[tokio::test(flavor = "multi_thread")]
async fn rfc7950_9_4_a_refused_bulk_edit_keeps_nothing_and_created_entries_get_their_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let count = |reply: &str| reply.matches("<sci>").count();
    let get = format!(
        "<get-config><source><running/></source><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><scis/></cats-sma></filter>\
         <with-defaults xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-with-defaults\">report-all</with-defaults></get-config>"
    );
    // One entry first: the bulk entries are then created whole beside it.
    let reply = call(&mut s, 1, &scis(&sci_entries(0..1))).await;
    assert!(reply.contains("<ok/>"), "{reply}");

    // A CSCI-ID holding a format character (U+200B), refused by the csci-id pattern, as
    // the last of 5000 new entries: the whole edit is refused and none of them is kept.
    let bad = format!("{}<sci><csci-id>bad\u{200b}id</csci-id><cs-id>AR1</cs-id></sci>", sci_entries(1..5000));
    let reply = call(&mut s, 2, &scis(&bad)).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{}", &reply[..reply.len().min(800)]);
    assert_eq!(count(&call(&mut s, 3, &get).await), 1);

    // A value out of range on a leaf of a new entry, and on a leaf set alone.
    let bad = format!(
        "{}<sci><csci-id>bulk-x</csci-id><cs-id>AR1</cs-id><expected-interval>0</expected-interval></sci>",
        sci_entries(1..5000)
    );
    let reply = call(&mut s, 4, &scis(&bad)).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{}", &reply[..reply.len().min(800)]);
    let reply =
        call(&mut s, 5, &scis("<sci><csci-id>bulk-0</csci-id><expected-interval>0</expected-interval></sci>")).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{reply}");
    let reply = call(&mut s, 6, &get).await;
    assert_eq!(count(&reply), 1);
    assert!(reply.contains("<expected-interval>5000</expected-interval>"), "{reply}");

    // A bad key on delete, a bad leaf-list value added to an existing entry.
    let reply = call(&mut s, 7, &scis("<sci nc:operation=\"delete\"><csci-id>bad\u{200b}id</csci-id></sci>")).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{reply}");
    let reply = call(&mut s, 8, &scis("<sci><csci-id>bulk-0</csci-id><cs-id>AR\u{200b}2</cs-id></sci>")).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{reply}");
    // A refused edit leaves nothing, whatever refuses it: a later edit error (create of an
    // entry that exists) after new entries, one with a bad cs-id; test-only.
    let bad = format!(
        "{}<sci><csci-id>bulk-y</csci-id><cs-id>AR\u{200b}3</cs-id></sci>\
         <sci nc:operation=\"create\"><csci-id>bulk-0</csci-id><cs-id>AR1</cs-id></sci>",
        sci_entries(1..100)
    );
    let reply = call(&mut s, 9, &scis(&bad)).await;
    assert!(reply.contains("<rpc-error>"), "{reply}");
    let test_only = format!(
        "<edit-config><target><running/></target><test-option>test-only</test-option>\
         <config><cats-sma xmlns=\"{CATS}\"><scis>{}<sci><csci-id>bulk-z</csci-id><cs-id>AR\u{200b}4</cs-id></sci></scis></cats-sma></config></edit-config>",
        sci_entries(1..100)
    );
    let reply = call(&mut s, 10, &test_only).await;
    assert!(reply.contains("<error-tag>invalid-value</error-tag>"), "{reply}");
    let reply = call(&mut s, 11, &get).await;
    assert_eq!(count(&reply), 1, "{}", &reply[..reply.len().min(800)]);
    assert!(reply.contains("<cs-id>AR1</cs-id>") && !reply.contains("AR\u{200b}"), "{reply}");

    // The same 5000 entries, valid: all there, each with its defaults.
    let reply = call(&mut s, 12, &scis(&sci_entries(1..5000))).await;
    assert!(reply.contains("<ok/>"), "{}", &reply[..reply.len().min(800)]);
    let reply = call(&mut s, 13, &get).await;
    assert_eq!(count(&reply), 5000);
    for entry in reply.split("<sci>").skip(1) {
        assert!(
            entry.contains("<expected-interval>5000</expected-interval>")
                && entry.contains("<authentication>required</authentication>"),
            "an entry without its defaults: {}",
            &entry[..entry.len().min(400)]
        );
    }
}
