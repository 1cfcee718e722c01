//! NETCONF over real SSH with a raw Rust client, for what the Python clients cannot express:
//! RFC 6242 framing edge cases, the rpc envelope (RFC 6241 section 4), hello rules (8.1).

mod common;

use common::*;

fn agent_with(toml: &str) -> (tempfile::TempDir, AgentProcess) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, toml).unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    (dir, agent)
}

#[tokio::test(flavor = "multi_thread")]
async fn chunked_framing_multi_chunk_and_envelope_errors() {
    let (_d, agent) = agent_with("");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    // RFC 6242 4.2: one message split over several chunks.
    let body = rpc(7, "<get-config><source><running/></source></get-config>");
    let (a, b) = body.split_at(10);
    s.send(format!("\n#{}\n{a}\n#{}\n{b}\n##\n", a.len(), b.len()).as_bytes()).await;
    let reply = decode_chunks(&s.read_until(b"\n##\n").await);
    assert!(reply.contains("message-id=\"7\"") && reply.contains("<data"), "{reply}");

    // RFC 6241 4.2: every <rpc> attribute comes back on <rpc-reply>.
    let reply = s
        .rpc11(&format!(
            "<rpc xmlns=\"{NC}\" xmlns:ex=\"urn:example\" message-id=\"8\" ex:tag=\"x&amp;y\"><get-config><source><running/></source></get-config></rpc>"
        ))
        .await;
    assert!(reply.contains("ex:tag=\"x&amp;y\"") && reply.contains("xmlns:ex=\"urn:example\""), "{reply}");

    // RFC 6241 4.1: no message-id → missing-attribute naming message-id.
    let reply =
        s.rpc11(&format!("<rpc xmlns=\"{NC}\"><get-config><source><running/></source></get-config></rpc>")).await;
    assert!(reply.contains("<error-tag>missing-attribute</error-tag>"), "{reply}");
    assert!(reply.contains("<bad-attribute>message-id</bad-attribute>"), "{reply}");

    // Malformed XML: malformed-message (base:1.1), and the session keeps serving.
    let reply = s.rpc11("<rpc message-id='9'><get-config>").await;
    assert!(reply.contains("<error-tag>malformed-message</error-tag>"), "{reply}");
    let reply = s.rpc11(&rpc(10, "<frobnicate/>")).await;
    assert!(reply.contains("<error-tag>operation-not-supported</error-tag>"), "{reply}");
    let reply = s.rpc11(&rpc(11, "<x xmlns=\"urn:example:unknown\"/>")).await;
    assert!(reply.contains("<error-tag>unknown-namespace</error-tag>"), "{reply}");
    let reply = s.rpc11(&rpc(12, "<get-config><source><running/></source></get-config>")).await;
    assert!(reply.contains("message-id=\"12\""), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_message_is_answered_and_the_session_goes_on() {
    let (_d, agent) = agent_with("[netconf]\nmax_message_size = 4096\n");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(false).await;
    let big = rpc(1, &format!("<get-config><source><running/></source><!--{}--></get-config>", "x".repeat(10_000)));
    let reply = s.rpc10(&big).await;
    assert!(reply.contains("<error-tag>too-big</error-tag>"), "{reply}");
    let reply = s.rpc10(&rpc(2, "<get-config><source><running/></source></get-config>")).await;
    assert!(reply.contains("message-id=\"2\"") && reply.contains("<data"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_chunk_header_closes_only_that_session() {
    let (_d, agent) = agent_with("");
    let mut bad = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    bad.hello(true).await;
    bad.send(b"\n#abc\n<rpc/>").await;
    let rest = bad.read_until(b"never").await;
    assert!(rest.is_empty(), "the session is closed without a reply");
    let mut good = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    good.hello(true).await;
    assert!(good.rpc11(&rpc(1, "<get-config><source><running/></source></get-config>")).await.contains("<data"));
}

#[tokio::test(flavor = "multi_thread")]
async fn client_hello_with_session_id_is_refused() {
    // RFC 6241 8.1: the server terminates a session whose client hello has a session-id.
    let (_d, agent) = agent_with("");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.read_until(b"]]>]]>").await;
    s.send(format!("<hello xmlns=\"{NC}\"><capabilities><capability>urn:ietf:params:netconf:base:1.0</capability></capabilities><session-id>5</session-id></hello>]]>]]>").as_bytes()).await;
    assert!(s.read_until(b"never").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn hundred_concurrent_sessions() {
    let (_d, agent) = agent_with("");
    let mut tasks = Vec::new();
    for i in 0..100u32 {
        let addr = agent.addr;
        tasks.push(tokio::spawn(async move {
            let mut s = connect(addr, "admin", PASSWORD).await.unwrap();
            s.hello(i % 2 == 0).await;
            let body = rpc(i, "<get-config><source><running/></source></get-config>");
            let reply = if i % 2 == 0 { s.rpc11(&body).await } else { s.rpc10(&body).await };
            assert!(reply.contains(&format!("message-id=\"{i}\"")), "{reply}");
            s
        }));
    }
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    assert_eq!(sessions.len(), 100);
}
