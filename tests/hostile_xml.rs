//! Issue 11, classes 2 ("one message kills the process") and 9 ("RESTCONF routing"),
//! attacked against the real agent over SSH and HTTPS. Every hostile input is answered
//! with the standard error (RFC 6241 Appendix A malformed-message / too-big, RFC 8040
//! section 7 400 / 413), and afterwards the attacker's own session (where the RFC keeps it
//! open) and a bystander's session still get normal replies.
//!
//! The agent runs with the default structural limits except where a case needs a small
//! number to stay cheap: max_elements 50 000, max_attribute_size 4096 and a 4 MiB message.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::AsyncReadExt;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const LIMITS: &str =
    "[netconf]\nmax_message_size = 4194304\n\n[message_limits]\nmax_elements = 50000\nmax_attribute_size = 4096\n";

fn agent() -> (tempfile::TempDir, AgentProcess) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, LIMITS).unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    (dir, agent)
}

fn nest(tag: &str, levels: usize) -> String {
    format!("{}{}", format!("<{tag}>").repeat(levels), format!("</{tag}>").repeat(levels))
}

fn get_config(id: u32) -> String {
    rpc(id, "<get-config><source><running/></source></get-config>")
}

fn edit(config: &str) -> String {
    format!("<edit-config><target><running/></target><config>{config}</config></edit-config>")
}

/// The resident set of the agent in KiB.
fn rss_kib(agent: &AgentProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Waits for the server to close the session (EOF or error), returning what it sent.
async fn until_closed(s: &mut RawSession) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the server did not close the session: {}", String::from_utf8_lossy(&got));
    got
}

async fn still_serves(s: &mut RawSession, id: u32, who: &str) {
    let reply = s.rpc11(&get_config(id)).await;
    assert!(reply.contains(&format!("message-id=\"{id}\"")) && reply.contains("<data"), "{who}: {reply}");
}

/// Class 2 over NETCONF: one attacker session sends every hostile message in turn on a
/// base:1.1 session (malformed-message and too-big keep the session open); after each the
/// attacker and a bystander are served normally.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_hostile_rpcs_get_the_standard_error_and_nobody_else_notices() {
    let (_d, agent) = agent();
    let mut bystander = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    bystander.hello(true).await;
    let mut attacker = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    attacker.hello(true).await;

    let deep = nest("a", 100_000);
    let deep_cats = format!("<cats-sma xmlns=\"{CATS}\">{deep}</cats-sma>");
    let ns_flood: String = (0..50_000).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
    let attr_flood: String = (0..100_000).map(|i| format!(" a{i}=\"1\"")).collect();
    let long_uri = format!("urn:x:{}", "u".repeat(4000));
    let cases: Vec<(&str, String, &str)> = vec![
        ("rpc nested 100 000 levels", rpc(1, &deep), "malformed-message"),
        ("edit-config config nested 100 000 levels", rpc(2, &edit(&deep_cats)), "malformed-message"),
        (
            "validate inline config nested 100 000 levels",
            rpc(3, &format!("<validate><source><config>{deep_cats}</config></source></validate>")),
            "malformed-message",
        ),
        (
            "get-config subtree filter nested 100 000 levels",
            rpc(4, &format!("<get-config><source><running/></source><filter type=\"subtree\">{deep_cats}</filter></get-config>")),
            "malformed-message",
        ),
        ("get subtree filter nested 100 000 levels", rpc(5, &format!("<get><filter>{deep_cats}</filter></get>")), "malformed-message"),
        (
            "copy-config config nested 100 000 levels",
            rpc(6, &format!("<copy-config><target><candidate/></target><source><config>{deep_cats}</config></source></copy-config>")),
            "malformed-message",
        ),
        (
            "edit-data config nested 100 000 levels",
            rpc(
                7,
                &format!(
                    "<edit-data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-nmda\" xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><datastore>ds:running</datastore><config>{deep_cats}</config></edit-data>"
                ),
            ),
            "malformed-message",
        ),
        (
            "establish-subscription datastore-subtree-filter nested 100 000 levels",
            rpc(
                8,
                &format!(
                    "<establish-subscription xmlns=\"urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications\" xmlns:yp=\"urn:ietf:params:xml:ns:yang:ietf-yang-push\" xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\"><yp:datastore>ds:running</yp:datastore><yp:datastore-subtree-filter>{deep_cats}</yp:datastore-subtree-filter><yp:periodic><yp:period>100</yp:period></yp:periodic></establish-subscription>"
                ),
            ),
            "malformed-message",
        ),
        ("application RPC input nested 100 000 levels", rpc(9, &format!("<resync xmlns=\"{CATS}\">{deep}</resync>")), "malformed-message"),
        ("one level over the default depth (257)", rpc(10, &nest("a", 256)), "malformed-message"),
        (
            "50 000 namespace declarations on <rpc> with 2 000 children",
            format!("<rpc xmlns=\"{NC}\" message-id=\"11\"{ns_flood}>{}</rpc>", "<get/>".repeat(2000)),
            "malformed-message",
        ),
        (
            "65 namespace declarations on one element",
            rpc(12, &format!("<get{}/>", (0..65).map(|i| format!(" xmlns:q{i}=\"urn:q:{i}\"")).collect::<String>())),
            "malformed-message",
        ),
        (
            "1 100 elements each declaring a new namespace",
            rpc(13, &edit(&(0..1100).map(|i| format!("<p:c xmlns:p=\"urn:c:{i}\"/>")).collect::<String>())),
            "malformed-message",
        ),
        ("100 000 attributes on one element", format!("<rpc xmlns=\"{NC}\" message-id=\"14\"{attr_flood}><get/></rpc>"), "malformed-message"),
        (
            "65 attributes on one element",
            rpc(15, &format!("<get{}/>", (0..65).map(|i| format!(" b{i}=\"1\"")).collect::<String>())),
            "malformed-message",
        ),
        ("50 001 elements (max_elements 50 000)", rpc(16, &format!("<get>{}</get>", "<x/>".repeat(50_001))), "malformed-message"),
        ("an attribute value of 5 000 bytes (max 4 096)", rpc(17, &format!("<get x=\"{}\"/>", "v".repeat(5000))), "malformed-message"),
        // The namespace is declared once on <config>; each child needs it re-declared to
        // stand alone for libyang: 40 MB of declarations from a 60 KB message.
        (
            "a 4 000-byte namespace used by 10 000 config children (declaration amplification)",
            format!(
                "<rpc xmlns=\"{NC}\" message-id=\"18\"><edit-config><target><running/></target><config xmlns:p=\"{long_uri}\">{}</config></edit-config></rpc>",
                "<p:a/>".repeat(10_000)
            ),
            "too-big",
        ),
        ("a message over max_message_size", rpc(19, &format!("<get><!--{}--></get>", "x".repeat(4 * 1024 * 1024))), "too-big"),
    ];
    let n = cases.len();
    for (i, (what, msg, tag)) in cases.into_iter().enumerate() {
        let reply = attacker.rpc11(&msg).await;
        assert!(reply.contains(&format!("<error-tag>{tag}</error-tag>")), "{what}: {}", &reply[..reply.len().min(600)]);
        still_serves(&mut attacker, 1000 + i as u32, what).await;
        still_serves(&mut bystander, 2000 + i as u32, what).await;
    }
    assert_eq!(n, 19);
    // The refusals are in the audit trail, folded per session (not one line per message).
    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    let refused: Vec<&str> = audit.lines().filter(|l| l.contains("\"category\":\"input-refused\"")).collect();
    assert!(!refused.is_empty() && refused.len() < n, "{audit}");
    assert!(
        refused[0].contains("\"transport\":\"ssh\"") && refused[0].contains("\"user\":\"admin\""),
        "{}",
        refused[0]
    );
}

/// At the limit, deep content reaches the filter and libyang and is answered normally:
/// the limit, not luck, is what keeps the stack bounded.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_depth_at_the_limit_is_served() {
    let (_d, agent) = agent();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    // <rpc> <get-config> <filter> <cats-sma> + 252 = 256 levels.
    let filter = format!("<cats-sma xmlns=\"{CATS}\"><scis>{}</scis></cats-sma>", nest("a", 251));
    let reply = s
        .rpc11(&rpc(
            1,
            &format!("<get-config><source><running/></source><filter type=\"subtree\">{filter}</filter></get-config>"),
        ))
        .await;
    assert!(reply.contains("<data"), "{reply}");
    // <rpc> <validate> <source> <config> <cats-sma> + 251 = 256 levels, handed to libyang.
    let config = format!("<cats-sma xmlns=\"{CATS}\">{}</cats-sma>", nest("a", 251));
    let reply = s.rpc11(&rpc(2, &format!("<validate><source><config>{config}</config></source></validate>"))).await;
    assert!(reply.contains("<rpc-error>") && !reply.contains("malformed-message"), "libyang answers: {reply}");
    still_serves(&mut s, 3, "after libyang saw 256 levels").await;
}

/// Appendix A: malformed-message is base:1.1 only; a base:1.0 session gets
/// operation-failed for the same over-limit message, and stays open.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_base_1_0_sessions_get_operation_failed() {
    let (_d, agent) = agent();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(false).await;
    let reply = s.rpc10(&rpc(1, &nest("a", 100_000))).await;
    assert!(reply.contains("<error-tag>operation-failed</error-tag>"), "{reply}");
    let reply = s.rpc10(&get_config(2)).await;
    assert!(reply.contains("<data"), "{reply}");
}

/// A hello that exceeds the limits ends that session only (RFC 6241 8.1: a bad hello
/// closes the session).
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_hostile_hellos_close_only_their_session() {
    let (_d, agent) = agent();
    let mut bystander = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    bystander.hello(true).await;
    let caps = "<capabilities><capability>urn:ietf:params:netconf:base:1.1</capability></capabilities>";
    let flood: String = (0..50_000).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
    for (i, hello) in [
        format!("<hello xmlns=\"{NC}\">{caps}{}</hello>", nest("a", 100_000)),
        format!("<hello xmlns=\"{NC}\"{flood}>{caps}</hello>"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
        s.read_until(b"]]>]]>").await;
        s.send(format!("{hello}]]>]]>").as_bytes()).await;
        until_closed(&mut s).await;
        still_serves(&mut bystander, 10 + i as u32, "bystander after a hostile hello").await;
    }
}

/// RFC 6242 4.2 chunk sizes: the largest legal size announces 4 GiB the decoder never
/// allocates (it discards past max_message_size); a size above 4294967295 or with 11
/// digits is malformed framing and closes that session only.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_huge_chunk_sizes_allocate_nothing_and_close_only_their_session() {
    let (_d, agent) = agent();
    let mut bystander = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    bystander.hello(true).await;
    still_serves(&mut bystander, 1, "warm-up").await;
    let before = rss_kib(&agent);

    // 4294967295 announced, 8 MiB sent: nothing is buffered past the 4 MiB message cap.
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    s.send(b"\n#4294967295\n").await;
    let mib = vec![b'x'; 1024 * 1024];
    for _ in 0..8 {
        s.send(&mib).await;
    }
    still_serves(&mut bystander, 2, "bystander during a 4 GiB chunk").await;
    let grown = rss_kib(&agent).saturating_sub(before);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB for an 8 MiB chunk");
    drop(s);

    // A chunk over max_message_size, completed: too-big, and the session goes on.
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let big = 4 * 1024 * 1024 + 1;
    s.send(format!("\n#{big}\n").as_bytes()).await;
    for _ in 0..4 {
        s.send(&mib).await;
    }
    s.send(b"x\n##\n").await;
    let reply = decode_chunks(&s.read_until(b"\n##\n").await);
    assert!(reply.contains("<error-tag>too-big</error-tag>"), "{reply}");
    still_serves(&mut s, 3, "after too-big").await;

    for header in [&b"\n#4294967296\n"[..], b"\n#99999999999\n"] {
        let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
        s.hello(true).await;
        s.send(header).await;
        s.send(b"<rpc/>").await;
        until_closed(&mut s).await;
        still_serves(&mut bystander, 4, "bystander after malformed framing").await;
    }
}

fn json_status(r: &HttpReply) -> (u16, String) {
    (r.status, r.error_tag())
}

/// Class 2 over RESTCONF: deep and flooded JSON and XML bodies are refused before libyang
/// parses them (400 malformed-message), deep `fields` before anything is selected (400
/// invalid-value); another client is served after each.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_2_hostile_restconf_bodies_and_fields() {
    let (_d, agent) = agent();
    let c = Curl::new(&agent);
    let deep_json_arrays =
        format!("{{\"cats-sma:cats-sma\":{{\"scis\":{}{}}}}}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_json_objects = format!("{{\"cats-sma:cats-sma\":{}1{}}}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    let deep_xml = format!("<cats-sma xmlns=\"{CATS}\">{}</cats-sma>", nest("a", 100_000));
    let flood: String = (0..50_000).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
    let patch_xml = format!(
        "<yang-patch xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-patch\"><patch-id>p</patch-id><edit><edit-id>e</edit-id><operation>merge</operation><target>/scis</target><value>{}</value></edit></yang-patch>",
        nest("a", 100_000)
    );
    let patch_json = format!(
        "{{\"ietf-yang-patch:yang-patch\":{{\"patch-id\":\"p\",\"edit\":[{{\"edit-id\":\"e\",\"operation\":\"merge\",\"target\":\"/scis\",\"value\":{}1{}}}]}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let json = "Content-Type: application/yang-data+json";
    let xml = "Content-Type: application/yang-data+xml";
    let cases: Vec<(&str, &str, &str, &str, String, u16, &str)> = vec![
        (
            "JSON arrays nested 100 000 levels",
            "POST",
            "/data",
            json,
            deep_json_arrays.clone(),
            400,
            "malformed-message",
        ),
        (
            "JSON objects nested 100 000 levels",
            "POST",
            "/data",
            json,
            deep_json_objects.clone(),
            400,
            "malformed-message",
        ),
        (
            "JSON body nested 100 000 levels on PUT",
            "PUT",
            "/data/cats-sma:cats-sma",
            json,
            deep_json_objects,
            400,
            "malformed-message",
        ),
        (
            "XML body nested 100 000 levels",
            "PUT",
            "/data/cats-sma:cats-sma",
            xml,
            deep_xml.clone(),
            400,
            "malformed-message",
        ),
        (
            "XML body with 50 000 namespace declarations",
            "POST",
            "/data",
            xml,
            format!("<cats-sma xmlns=\"{CATS}\"{flood}/>"),
            400,
            "malformed-message",
        ),
        (
            "YANG Patch XML value nested 100 000 levels",
            "PATCH",
            "/data/cats-sma:cats-sma",
            "Content-Type: application/yang-patch+xml",
            patch_xml,
            400,
            "malformed-message",
        ),
        (
            "YANG Patch JSON value nested 100 000 levels",
            "PATCH",
            "/data/cats-sma:cats-sma",
            "Content-Type: application/yang-patch+json",
            patch_json,
            400,
            "malformed-message",
        ),
        (
            "operation input JSON nested 100 000 levels",
            "POST",
            "/operations/cats-sma:resync",
            json,
            format!("{{\"cats-sma:input\":{{\"x\":{}{}}}}}", "[".repeat(100_000), "]".repeat(100_000)),
            400,
            "malformed-message",
        ),
        (
            "NMDA datastore XML body nested 100 000 levels",
            "PUT",
            "/ds/ietf-datastores:running/cats-sma:cats-sma",
            xml,
            deep_xml,
            400,
            "malformed-message",
        ),
    ];
    let n = cases.len();
    for (what, method, path, ct, body, status, tag) in cases {
        let r = c.call(method, path, &[ct], Some(&body));
        assert_eq!(json_status(&r), (status, tag.to_owned()), "{what}: {}", &r.body[..r.body.len().min(400)]);
        let ok = c.get("/data/cats-sma:cats-sma/cache?with-defaults=report-all");
        assert_eq!(ok.status, 200, "after {what}: {}", ok.body);
    }
    assert_eq!(n, 9);

    // fields nested by 2 000 path steps (within HTTP/2's header list limit), by
    // 300 parentheses, and depth values outside 1..65535.
    let steps = vec!["a"; 2000].join("/");
    for (what, query) in [
        ("fields nested by 2 000 path steps", format!("fields={steps}")),
        (
            "fields nested by 300 parentheses",
            format!("fields={}{}", "a(".repeat(300).replace('(', "%28"), "%29".repeat(300)),
        ),
        ("depth=0", "depth=0".to_owned()),
        ("depth=65536", "depth=65536".to_owned()),
        ("depth=+3", "depth=%2B3".to_owned()),
        ("depth=abc", "depth=abc".to_owned()),
    ] {
        let r = c.get(&format!("/data/cats-sma:cats-sma?{query}"));
        assert_eq!(json_status(&r), (400, "invalid-value".to_owned()), "{what}: {}", r.body);
        assert_eq!(c.get("/data/cats-sma:cats-sma/cache").status, 200, "after {what}");
    }

    let audit = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    assert!(
        audit.lines().any(|l| l.contains("\"category\":\"input-refused\"") && l.contains("\"transport\":\"https\"")),
        "{audit}"
    );

    // A NETCONF session is served after all of it too.
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    still_serves(&mut s, 1, "NETCONF after the RESTCONF attacks").await;
}

/// Class 9: resources are matched by whole path segments, and `fields` names must exist.
#[tokio::test(flavor = "multi_thread")]
async fn issue_11_class_9_exact_path_segments_and_fields_that_exist() {
    let (_d, agent) = agent();
    let c = Curl::new(&agent);
    // Every prefix the router checks, with the segment extended or doubled.
    for path in [
        "Xdata/cats-sma:cats-sma",
        "X",
        "Xoperations",
        "/dataX/cats-sma:cats-sma",
        "/dsX/ietf-datastores:running",
        "/operationsX",
        "/streamsX/NETCONF/json",
        "/subscriptionsX/1",
        "/yang-library-versionX",
        "//.well-known/host-metaX",
        "//restconfXdata/cats-sma:cats-sma",
    ] {
        let r = c.get(path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(r.error_tag(), "invalid-value", "{path}: {}", r.body);
    }
    for path in
        ["/data//cats-sma:cats-sma", "/data/cats-sma:cats-sma//scis", "/ds/ietf-datastores:running//cats-sma:cats-sma"]
    {
        let r = c.get(path);
        assert_eq!(json_status(&r), (400, "invalid-value".to_owned()), "{path}: {}", r.body);
    }
    // The real resources still answer.
    assert_eq!(c.get("/data/cats-sma:cats-sma/cache").status, 200);
    assert_eq!(c.get("/yang-library-version").status, 200);
    assert_eq!(c.get("/operations").status, 200);
    assert_eq!(c.get("//.well-known/host-meta").status, 200);

    // RFC 8040 4.8.3: fields selects data nodes of the target; a name that is none is 400.
    let r = c.send_json(
        "PUT",
        "/data/cats-sma:cats-sma/scis/sci=10.0.0.1%3A80",
        r#"{"cats-sma:sci":[{"csci-id":"10.0.0.1:80","cs-id":["AR1"],"description":"d"}]}"#,
    );
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let one = "/data/cats-sma:cats-sma/scis/sci=10.0.0.1%3A80";
    for fields in ["nosuch", "description;nosuch", "cs-id(nosuch)", "nosuch-module:description", "scis"] {
        let r = c.get(&format!("{one}?fields={}", fields.replace('(', "%28").replace(')', "%29").replace(';', "%3B")));
        assert_eq!(json_status(&r), (400, "invalid-value".to_owned()), "fields={fields}: {}", r.body);
    }
    for (target, fields) in [
        (one, "description"),
        (one, "cats-sma:description;cs-id"),
        ("/data/cats-sma:cats-sma", "scis/sci(csci-id;description)"),
        ("/data", "cats-sma:cats-sma/scis"),
    ] {
        let r =
            c.get(&format!("{target}?fields={}", fields.replace('(', "%28").replace(')', "%29").replace(';', "%3B")));
        assert_eq!(r.status, 200, "{target}?fields={fields}: {}", r.body);
    }
    let r = c.get("/data?fields=nosuch");
    assert_eq!(json_status(&r), (400, "invalid-value".to_owned()), "{}", r.body);
}
