//! Issue 11, classes 1, 3 and 4, against the real agent over SSH and HTTPS: filters that
//! try to read through NACM (RFC 8341 section 3.4.5), filters that try to stall the
//! agent, and the access-control gaps (augmented modules, predicate rule paths,
//! default-deny RPCs, request identities). Every attack is followed by a check that the
//! agent still serves the admin.

mod common;

use common::*;
use tokio::io::AsyncReadExt;

const CATS: &str = "urn:cats-sma:yang:cats-sma";
const CPS: &str = "urn:cats-sma:yang:cats-sma-cps";
const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const NMDA: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-nmda";
const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
const YP: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
const NOTIF: &str = "urn:ietf:params:xml:ns:netconf:notification:1.0";
const BASE_NOTIF: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-notifications";
const DS: &str = "urn:ietf:params:xml:ns:yang:ietf-datastores";
/// The SCI credential key, base64 of "secret-key-0123456789": starts with 'c'.
const CRED_KEY: &str = "c2VjcmV0LWtleS0wMTIzNDU2Nzg5";
/// The C-PS pre-shared key: starts with 'c'.
const PSK: &str = "c0ffee00c0ffee00c0ffee00c0ffee00";
const BOB_PW: &str = "bob-pw";

/// A NETCONF session that keeps what it read past one message (notifications follow
/// replies back to back).
struct Nc {
    s: RawSession,
    buf: Vec<u8>,
}

impl Nc {
    async fn open(agent: &AgentProcess, user: &str, pw: &str) -> Nc {
        let mut s = connect(agent.addr, user, pw).await.expect("login");
        s.hello(true).await;
        Nc { s, buf: Vec::new() }
    }

    /// The next message (chunked framing).
    async fn next(&mut self) -> String {
        let mut tmp = [0u8; 65536];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\n##\n") {
                let msg: Vec<u8> = self.buf.drain(..end + 4).collect();
                return decode_chunks(&msg);
            }
            let n = tokio::time::timeout(std::time::Duration::from_secs(60), self.s.stream.read(&mut tmp))
                .await
                .expect("a message from the agent")
                .expect("read");
            assert!(n > 0, "the agent closed the session");
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Sends one rpc (message-id 1) and returns its reply, skipping notifications.
    async fn call(&mut self, op: &str) -> String {
        let body = rpc(1, op);
        self.s.send(format!("\n#{}\n{}\n##\n", body.len(), body).as_bytes()).await;
        loop {
            let m = self.next().await;
            if m.contains("<rpc-reply") {
                return m;
            }
        }
    }

    /// The next notification other than push-update/-change (or of the named kind).
    async fn notification(&mut self, name: &str) -> String {
        loop {
            let m = self.next().await;
            if m.contains("<notification") && m.contains(&format!("<{name} ")) || m.contains(&format!("<{name}>")) {
                return m;
            }
        }
    }
}

fn ok(r: &str) -> bool {
    r.contains("<ok/>")
}

fn tag(r: &str) -> &str {
    r.split("<error-tag>").nth(1).and_then(|x| x.split('<').next()).unwrap_or("")
}

/// Removes what differs between two notifications of different subscriptions or times.
fn normalize(m: &str) -> String {
    let mut out = m.to_owned();
    for (open, close) in [("<eventTime>", "</eventTime>"), ("<id>", "</id>")] {
        while let Some(a) = out.find(open) {
            let Some(b) = out[a..].find(close) else { break };
            out.replace_range(a..a + b + close.len(), "");
        }
    }
    out
}

fn edit(config: &str) -> String {
    format!("<edit-config><target><running/></target><config>{config}</config></edit-config>")
}

fn nacm_config(write_default: &str, extra_rules: &str) -> String {
    format!(
        r#"<nacm xmlns="{NACM}"><enable-nacm>true</enable-nacm><write-default>{write_default}</write-default>
        <groups><group><name>ops</name><user-name>bob</user-name></group></groups>
        <rule-list><name>ops</name><group>ops</group>
          <rule><name>no-cps-writes</name><module-name>cats-sma-cps</module-name>
            <access-operations>create update delete</access-operations><action>deny</action></rule>
          <rule><name>hide-sci-b</name><module-name>cats-sma</module-name>
            <path xmlns:c="{CATS}">/c:cats-sma/c:scis/c:sci[c:csci-id="sci-b"]</path>
            <access-operations>*</access-operations><action>deny</action></rule>
          <rule><name>no-edit-lists</name><module-name>ietf-netconf-notifications</module-name>
            <path xmlns:n="{BASE_NOTIF}">/n:netconf-config-change/n:edit</path>
            <access-operations>read</access-operations><action>deny</action></rule>
          {extra_rules}
        </rule-list></nacm>"#
    )
}

fn seed_config() -> String {
    format!(
        r#"<cats-sma xmlns="{CATS}"><agent><csma-id>c1</csma-id><site-id>s1</site-id></agent>
          <collection><authentication><credential><name>cred</name><type>hmac-sha256</type>
            <key>{CRED_KEY}</key></credential></authentication></collection>
          <scis><sci><csci-id>sci-a</csci-id><cs-id>AR1</cs-id><credential-ref>cred</credential-ref></sci>
            <sci><csci-id>sci-b</csci-id><cs-id>AR1</cs-id></sci></scis>
          <c-ps xmlns="{CPS}"><peer><name>p1</name><url>http://127.0.0.1:9/</url><allowed-cs-id>AR1</allowed-cs-id>
            <psk><key-id>k1</key-id><key>{PSK}</key></psk></peer></c-ps></cats-sma>"#
    )
}

/// An agent with user bob (NACM group ops) and the secrets configured.
async fn agent(write_default: &str, extra_rules: &str, toml: &str) -> (tempfile::TempDir, AgentProcess) {
    let dir = tempfile::tempdir().unwrap();
    let hash = cats_sma::mgmt::users::hash_password(BOB_PW).unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, format!("{toml}\n[[users]]\nname = \"bob\"\npassword_hash = \"{hash}\"\n")).unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let r = admin.call(&edit(&seed_config())).await;
    assert!(ok(&r), "{r}");
    let r = admin.call(&edit(&nacm_config(write_default, extra_rules))).await;
    assert!(ok(&r), "{r}");
    (dir, agent)
}

/// The audit trail's records (JSON lines, written before the reply goes out).
fn audit(agent: &AgentProcess) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(agent.state_dir.join("audit.log")).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The admin is still served (and sees the secrets bob cannot).
async fn admin_still_served(agent: &AgentProcess) {
    let mut admin = Nc::open(agent, "admin", PASSWORD).await;
    let r = admin.call("<get-config><source><running/></source></get-config>").await;
    assert!(r.contains(PSK) && r.contains(CRED_KEY), "{r}");
}

fn xpath_get_config(x: &str) -> String {
    format!(
        "<get-config><source><running/></source><filter type=\"xpath\" xmlns:c=\"{CATS}\" xmlns:p=\"{CPS}\" select=\"{x}\"/></get-config>"
    )
}

fn xpath_get(x: &str) -> String {
    format!("<get><filter type=\"xpath\" xmlns:c=\"{CATS}\" xmlns:p=\"{CPS}\" select=\"{x}\"/></get>")
}

fn xpath_get_data(ds: &str, x: &str) -> String {
    format!(
        "<get-data xmlns=\"{NMDA}\" xmlns:ds=\"{DS}\"><datastore>ds:{ds}</datastore><xpath-filter xmlns:c=\"{CATS}\" xmlns:p=\"{CPS}\">{x}</xpath-filter></get-data>"
    )
}

/// Guesses about the secrets, each as (right, wrong) XPath.
fn guesses() -> Vec<(String, String)> {
    let g = |f: &dyn Fn(&str) -> String| (f("c"), f("x"));
    vec![
        g(&|c| format!("/c:cats-sma[starts-with(c:collection/c:authentication/c:credential/c:key,'{c}')]")),
        g(&|c| format!("/c:cats-sma/c:collection[starts-with(c:authentication/c:credential/c:key,'{c}')]")),
        g(&|c| format!("/c:cats-sma/p:c-ps/p:peer[starts-with(p:psk/p:key,'{c}')]")),
        g(&|c| format!("/c:cats-sma/p:c-ps/p:peer[p:psk[starts-with(p:key,'{c}')]]/p:name")),
        g(&|c| format!("/c:cats-sma[substring(p:c-ps/p:peer/p:psk/p:key,1,1)='{c}']")),
        (
            "/c:cats-sma[string-length(p:c-ps/p:peer/p:psk/p:key) = 32]".into(),
            "/c:cats-sma[string-length(p:c-ps/p:peer/p:psk/p:key) = 30]".into(),
        ),
        (
            "/c:cats-sma[c:collection/c:authentication/c:credential/c:key &gt; 'b']".into(),
            "/c:cats-sma[c:collection/c:authentication/c:credential/c:key &gt; 'd']".into(),
        ),
        // A hidden list entry (a predicate rule hides sci-b from bob).
        ("/c:cats-sma[c:scis/c:sci/c:csci-id='sci-b']".into(), "/c:cats-sma[c:scis/c:sci/c:csci-id='sci-z']".into()),
    ]
}

/// Issue 11 class 1, RFC 8341 3.4.5: XPath filters of get-config, get and get-data see only
/// what bob may read, so right and wrong guesses get byte-identical replies.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_xpath_guesses_get_identical_replies() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let mut n = 0;
    for (right, wrong) in guesses() {
        let ops: [&dyn Fn(&str) -> String; 5] = [
            &xpath_get_config,
            &xpath_get,
            &|x| xpath_get_data("running", x),
            &|x| xpath_get_data("operational", x),
            &|x| xpath_get_data("intended", x),
        ];
        for op in ops {
            let a = bob.call(&op(&right)).await;
            let b = bob.call(&op(&wrong)).await;
            assert_eq!(a, b, "right and wrong guess differ: {right}");
            assert!(!a.contains(PSK) && !a.contains(CRED_KEY) && !a.contains("sci-b"), "{a}");
            n += 1;
        }
    }
    assert_eq!(n, 40);
    // Bob still reads what he may.
    let r = bob.call(&xpath_get_config("/c:cats-sma/p:c-ps/p:peer/p:name")).await;
    assert!(r.contains("<name>p1</name>"), "{r}");
    admin_still_served(&agent).await;
}

/// Issue 11 class 1, RFC 6241 6.2.5: a subtree content match on a secret selects the same
/// (nothing) whether the guess is right or wrong.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_subtree_content_match_on_secrets() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let psk = |k: &str| {
        format!("<cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"><peer><name/><psk><key>{k}</key></psk></peer></c-ps></cats-sma>")
    };
    let cred = |k: &str| {
        format!("<cats-sma xmlns=\"{CATS}\"><collection><authentication><credential><key>{k}</key><name/></credential></authentication></collection></cats-sma>")
    };
    let sci = |k: &str| format!("<cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>{k}</csci-id></sci></scis></cats-sma>");
    let wrong_psk = PSK.replace('c', "d");
    let cases = [
        (psk(PSK), psk(&wrong_psk)),
        (cred(CRED_KEY), cred("d2VjcmV0LWtleS0wMTIzNDU2Nzg5")),
        (sci("sci-b"), sci("sci-z")),
    ];
    for (right, wrong) in &cases {
        for op in [
            |f: &str| {
                format!("<get-config><source><running/></source><filter type=\"subtree\">{f}</filter></get-config>")
            },
            |f: &str| format!("<get><filter type=\"subtree\">{f}</filter></get>"),
            |f: &str| {
                format!("<get-data xmlns=\"{NMDA}\" xmlns:ds=\"{DS}\"><datastore>ds:running</datastore><subtree-filter>{f}</subtree-filter></get-data>")
            },
        ] {
            let a = bob.call(&op(right)).await;
            let b = bob.call(&op(wrong)).await;
            assert_eq!(a, b);
            assert!(a.contains("<data") && !a.contains(PSK) && !a.contains("sci-b"), "{a}");
        }
    }
    admin_still_served(&agent).await;
}

/// Issue 11 class 1, RFC 8040 3.5 / 4.8.2 / 4.8.3: RESTCONF paths, fields and depth never
/// show or reveal the secrets.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_restconf_paths_fields_and_depth() {
    let (_d, agent) = agent("deny", "", "").await;
    let bob = Curl::new(&agent).as_user("bob", BOB_PW);
    let secret_free = |r: &HttpReply| !r.body.contains(PSK) && !r.body.contains(CRED_KEY);
    for path in [
        "/data/cats-sma:cats-sma",
        "/data/cats-sma:cats-sma?depth=unbounded",
        "/data/cats-sma:cats-sma?depth=5",
        "/data/cats-sma:cats-sma/cats-sma-cps:c-ps?fields=peer(name;psk)",
        "/data/cats-sma:cats-sma/cats-sma-cps:c-ps?fields=peer/psk/key",
        "/data/cats-sma:cats-sma?fields=collection/authentication",
        "/data/cats-sma:cats-sma?content=config",
        "/data?depth=4",
        "/ds/ietf-datastores:running/cats-sma:cats-sma",
        "/ds/ietf-datastores:operational/cats-sma:cats-sma/cats-sma-cps:c-ps/peer=p1",
    ] {
        let r = bob.get(path);
        assert!(r.status == 200 || r.status == 204 || r.status == 404, "{path}: {} {}", r.status, r.body);
        assert!(secret_free(&r), "{path}: {}", r.body);
        // The registry entry of sci-b is hidden (its metric-cache entry is not: no rule).
        assert!(!r.body.contains(r#"{"csci-id":"sci-b","cs-id""#), "{path}: {}", r.body);
    }
    // A secret and a hidden entry answer exactly as what does not exist.
    let pairs = [
        (
            "/data/cats-sma:cats-sma/cats-sma-cps:c-ps/peer=p1/psk/key",
            "/data/cats-sma:cats-sma/cats-sma-cps:c-ps/peer=p9/psk/key",
        ),
        ("/data/cats-sma:cats-sma/scis/sci=sci-b", "/data/cats-sma:cats-sma/scis/sci=sci-z"),
        (
            "/data/cats-sma:cats-sma/collection/authentication/credential=cred",
            "/data/cats-sma:cats-sma/collection/authentication/credential=crez",
        ),
    ];
    for (there, absent) in pairs {
        let (a, b) = (bob.get(there), bob.get(absent));
        assert_eq!((a.status, b.status), (404, 404), "{there}: {}", a.body);
        // The bodies differ only by the key the URI names.
        let strip = |s: &str, p: &str| {
            let k = p.split('=').nth(1).unwrap().split('/').next().unwrap();
            s.replace(&format!("={k}"), "=K").replace(&format!("'{k}'"), "'K'")
        };
        assert_eq!(strip(&a.body, there), strip(&b.body, absent));
    }
    // The readable part is there.
    let r = bob.get("/data/cats-sma:cats-sma/cats-sma-cps:c-ps/peer=p1/psk/key-id");
    assert_eq!(r.status, 200, "{}", r.body);
    let admin = Curl::new(&agent);
    assert!(admin.get("/data/cats-sma:cats-sma/cats-sma-cps:c-ps").body.contains(PSK));
}

fn establish(inner: &str) -> String {
    format!(
        "<establish-subscription xmlns=\"{SN}\" xmlns:yp=\"{YP}\" xmlns:ds=\"{DS}\">{inner}</establish-subscription>"
    )
}

fn selection(x: &str) -> String {
    format!("<yp:datastore-xpath-filter xmlns:c=\"{CATS}\" xmlns:p=\"{CPS}\">{x}</yp:datastore-xpath-filter>")
}

/// Issue 11 class 1, RFC 8641 3.9: YANG-Push periodic and on-change selections push the
/// same content for right and wrong guesses.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_yang_push_selections() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut n = 0;
    for (right, wrong) in guesses().into_iter().take(4) {
        for ds in ["running", "operational"] {
            for trigger in [
                "<yp:periodic><yp:period>10</yp:period></yp:periodic>",
                "<yp:on-change><yp:sync-on-start>true</yp:sync-on-start></yp:on-change>",
            ] {
                if ds == "operational" && trigger.contains("on-change") {
                    // On-change of operational covers metric data only (not these nodes).
                    continue;
                }
                let mut got = Vec::new();
                for guess in [&right, &wrong] {
                    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
                    let r = bob
                        .call(&establish(&format!("<yp:datastore>ds:{ds}</yp:datastore>{}{trigger}", selection(guess))))
                        .await;
                    assert!(r.contains("<id"), "{r}");
                    got.push(normalize(&bob.notification("push-update").await));
                }
                assert_eq!(got[0], got[1], "{right} ({ds}, {trigger})");
                assert!(!got[0].contains(PSK) && !got[0].contains(CRED_KEY));
                n += 1;
            }
        }
    }
    assert_eq!(n, 12);
    // A subtree selection with a content match on the PSK.
    let mut got = Vec::new();
    for k in [PSK.to_owned(), PSK.replace('c', "d")] {
        let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
        let sel = format!(
            "<yp:datastore-subtree-filter><cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"><peer><psk><key>{k}</key></psk></peer></c-ps></cats-sma></yp:datastore-subtree-filter>"
        );
        let r = bob
            .call(&establish(&format!(
                "<yp:datastore>ds:running</yp:datastore>{sel}<yp:periodic><yp:period>10</yp:period></yp:periodic>"
            )))
            .await;
        assert!(r.contains("<id"), "{r}");
        got.push(normalize(&bob.notification("push-update").await));
    }
    assert_eq!(got[0], got[1]);
    admin_still_served(&agent).await;
}

/// Issue 11 class 1, RFC 5277 / RFC 8639 with RFC 8341 3.4.6: a notification filter that
/// tests content bob may not read (the edit list of netconf-config-change) matches
/// neither a right nor a wrong guess. The union with netconf-session-start makes the
/// outcome visible by order: the first notification bob gets is the session start.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_notification_filters_see_pruned_content() {
    let (_d, agent) = agent("deny", "", "").await;
    for guess in ["scis", "credential"] {
        let x = format!("/n:netconf-config-change[contains(n:edit/n:target,'{guess}')] | /n:netconf-session-start");
        // Every session is open before the subscriptions start, so the next session start
        // is the one opened after the commit.
        let mut a = Nc::open(&agent, "bob", BOB_PW).await;
        let mut b = Nc::open(&agent, "bob", BOB_PW).await;
        let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
        // RFC 5277 create-subscription and RFC 8639 establish-subscription on NETCONF.
        let r = a
            .call(&format!(
                "<create-subscription xmlns=\"{NOTIF}\"><filter type=\"xpath\" xmlns:n=\"{BASE_NOTIF}\" select=\"{x}\"/></create-subscription>"
            ))
            .await;
        assert!(ok(&r), "{r}");
        let r = b
            .call(&format!(
                "<establish-subscription xmlns=\"{SN}\"><stream>NETCONF</stream><stream-xpath-filter xmlns:n=\"{BASE_NOTIF}\">{x}</stream-xpath-filter></establish-subscription>"
            ))
            .await;
        assert!(r.contains("<id"), "{r}");
        // A session start both filters select: from then on the subscriptions are live.
        let _primer = Nc::open(&agent, "admin", PASSWORD).await;
        for s in [&mut a, &mut b] {
            let m = s.next().await;
            assert!(m.contains("netconf-session-start"), "{m}");
        }
        let r = admin
            .call(&edit(&format!("<cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>sci-{guess}</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma>")))
            .await;
        assert!(ok(&r), "{r}");
        let _later = Nc::open(&agent, "admin", PASSWORD).await;
        for s in [&mut a, &mut b] {
            let m = s.next().await;
            assert!(m.contains("netconf-session-start") && !m.contains("netconf-config-change"), "{guess}: {m}");
        }
    }
    admin_still_served(&agent).await;
}

/// RFC 8341 3.4.6: the notifications bob receives carry only the content he may read
/// (the edit list of netconf-config-change is pruned), over RFC 5277 and RFC 8639.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class1_delivered_notifications_are_pruned() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut a = Nc::open(&agent, "bob", BOB_PW).await;
    let mut b = Nc::open(&agent, "bob", BOB_PW).await;
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let mut watcher = Nc::open(&agent, "admin", PASSWORD).await;
    let create = format!("<create-subscription xmlns=\"{NOTIF}\"/>");
    assert!(ok(&a.call(&create).await));
    assert!(ok(&watcher.call(&create).await));
    let r = b
        .call(&format!("<establish-subscription xmlns=\"{SN}\"><stream>NETCONF</stream></establish-subscription>"))
        .await;
    assert!(r.contains("<id"), "{r}");
    // A session start every subscriber receives: from then on the subscriptions are live.
    let _primer = Nc::open(&agent, "admin", PASSWORD).await;
    for s in [&mut a, &mut b, &mut watcher] {
        s.notification("netconf-session-start").await;
    }
    let r = admin
        .call(&edit(&format!(
            "<cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>sci-n</csci-id><cs-id>AR1</cs-id></sci></scis></cats-sma>"
        )))
        .await;
    assert!(ok(&r), "{r}");
    let full = watcher.notification("netconf-config-change").await;
    assert!(full.contains("<edit>") && full.contains("sci-n"), "{full}");
    for s in [&mut a, &mut b] {
        let m = s.notification("netconf-config-change").await;
        assert!(!m.contains("<edit>") && !m.contains("sci-n") && m.contains("<changed-by>"), "{m}");
    }
    admin_still_served(&agent).await;
}

/// Issue 11 class 3: expensive expressions are refused with resource-denied before they
/// run, over every way a filter comes in; the session and the admin are still served.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class3_expensive_filters_are_resource_denied() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let long = format!("/c:cats-sma/c:scis/c:sci[c:csci-id='{}']", "x".repeat(5000));
    let exprs = [
        "//*[count(//*)&gt;=0]".to_owned(),
        "/c:cats-sma/c:scis/c:sci[count(/c:cats-sma/c:scis/c:sci) &gt; 0]".to_owned(),
        "/c:cats-sma/c:scis/c:sci[count(../c:sci) &gt; 0]".to_owned(),
        "/c:cats-sma/c:scis/c:sci[following-sibling::*]".to_owned(),
        "/c:cats-sma/c:scis/c:sci[.//*]".to_owned(),
        // An absolute path after a multiply (missed by the first check; found in review).
        "/c:cats-sma/c:scis/c:sci[1 * /c:cats-sma/c:scis/c:sci/c:cs-id &gt; 0]".to_owned(),
        "//c:sci|".repeat(20) + "//c:sci",
        long,
        "/c:a[c:b[c:c[c:d[c:e[c:f]]]]]".to_owned(),
    ];
    let mut n = 0;
    for x in &exprs {
        for op in [xpath_get_config(x), xpath_get(x), xpath_get_data("operational", x)] {
            let r = bob.call(&op).await;
            assert_eq!(tag(&r), "resource-denied", "{x}: {r}");
            n += 1;
        }
        // Also as a YANG-Push selection and as a notification filter.
        let r = bob
            .call(&establish(&format!(
                "<yp:datastore>ds:running</yp:datastore>{}<yp:periodic><yp:period>100</yp:period></yp:periodic>",
                selection(x)
            )))
            .await;
        assert_eq!(tag(&r), "resource-denied", "{x}: {r}");
        let r = bob
            .call(&format!(
                "<create-subscription xmlns=\"{NOTIF}\"><filter type=\"xpath\" xmlns:c=\"{CATS}\" select=\"{x}\"/></create-subscription>"
            ))
            .await;
        assert_eq!(tag(&r), "resource-denied", "{x}: {r}");
        n += 2;
    }
    // A subtree filter with more elements than subtree_max_nodes.
    let big =
        format!("<cats-sma xmlns=\"{CATS}\"><scis>{}</scis></cats-sma>", "<sci><csci-id>a</csci-id></sci>".repeat(600));
    let r = bob.call(&format!("<get><filter type=\"subtree\">{big}</filter></get>")).await;
    assert_eq!(tag(&r), "resource-denied", "{r}");
    n += 1;
    assert!(n >= 40);
    // RESTCONF: a stream filter is 413.
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    let r = c.get("/streams/NETCONF/xml?filter=//*%5Bcount(//*)%3E=0%5D");
    assert_eq!((r.status, r.error_tag().as_str()), (413, "resource-denied"), "{}", r.body);
    // Refusals are audited (aggregated per reason).
    let trail = audit(&agent);
    assert!(trail.iter().any(|r| r["category"] == "input-refused" && r["input"] == "filter"), "{trail:#?}");
    // RFC 8650 establish-subscription over RESTCONF with such a selection: 413 as well.
    for x in ["//*[count(//*)>=0]", "/cats-sma:cats-sma/scis/sci[count(../sci) > 0]"] {
        let body = format!(
            r#"{{"ietf-subscribed-notifications:input":{{"ietf-yang-push:datastore":"ietf-datastores:running",
            "ietf-yang-push:datastore-xpath-filter":"{x}","ietf-yang-push:periodic":{{"period":100}}}}}}"#
        );
        let r = c.send_json("POST", "/operations/ietf-subscribed-notifications:establish-subscription", &body);
        assert_eq!((r.status, r.error_tag().as_str()), (413, "resource-denied"), "{x}: {}", r.body);
    }
    // The session goes on.
    let r = bob.call(&xpath_get_config("/c:cats-sma/c:scis/c:sci/c:csci-id")).await;
    assert!(r.contains("sci-a"), "{r}");
    admin_still_served(&agent).await;
}

/// Issue 11 class 2 ("one message kills the process"), found by the xpath_filter fuzz target:
/// a location path applied to a number, a string or a function result (`2//o`, `1/a`) made
/// libyang assert and the whole agent abort. Every reader refuses them with invalid-value
/// before libyang sees them, and the agent keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class2_xpath_type_errors_that_aborted_libyang_are_refused() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let exprs = ["2//o", "1/a", "'a'/b", "count(/c:cats-sma)/c:x", "(1)/a", "-1/a", "string(/c:cats-sma)//c:x"];
    for x in exprs {
        let x = x.replace('\'', "&apos;");
        for op in [xpath_get_config(&x), xpath_get(&x), xpath_get_data("operational", &x)] {
            let r = bob.call(&op).await;
            assert_eq!(tag(&r), "invalid-value", "{x}: {r}");
        }
        let r = bob
            .call(&establish(&format!(
                "<yp:datastore>ds:running</yp:datastore>{}<yp:periodic><yp:period>100</yp:period></yp:periodic>",
                selection(&x)
            )))
            .await;
        assert!(r.contains("rpc-error"), "{x}: {r}");
        let r = bob
            .call(&format!(
                "<create-subscription xmlns=\"{NOTIF}\"><filter type=\"xpath\" xmlns:c=\"{CATS}\" select=\"{x}\"/></create-subscription>"
            ))
            .await;
        assert!(r.contains("rpc-error"), "{x}: {r}");
    }
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    let r = c.get("/streams/NETCONF/xml?filter=1%2Fa");
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "{}", r.body);
    // Still alive, for bob and for everyone else.
    let r = bob.call(&xpath_get_config("/c:cats-sma/c:scis/c:sci/c:csci-id")).await;
    assert!(r.contains("sci-a"), "{r}");
    admin_still_served(&agent).await;
}

/// Issue 11 class 3: with many SCIs, an admin's edit+commit sent after bob's hostile filter
/// and while bob keeps a big (permitted) read running completes with <ok/>; filters are
/// evaluated on a snapshot, outside the datastore lock.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class3_reads_do_not_stall_commits() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let scis: String = (0..3000).map(|i| format!("<sci><csci-id>bulk-{i}</csci-id><cs-id>AR1</cs-id></sci>")).collect();
    let r = admin.call(&edit(&format!("<cats-sma xmlns=\"{CATS}\"><scis>{scis}</scis></cats-sma>"))).await;
    assert!(ok(&r), "{r}");
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let mut bob2 = Nc::open(&agent, "bob", BOB_PW).await;
    // Bob's reads go out first.
    let hostile = rpc(1, &xpath_get("//*[count(//*)&gt;=0]"));
    bob.s.send(format!("\n#{}\n{}\n##\n", hostile.len(), hostile).as_bytes()).await;
    let heavy = rpc(1, &xpath_get_data("operational", "//*"));
    bob2.s.send(format!("\n#{}\n{}\n##\n", heavy.len(), heavy).as_bytes()).await;
    // Then the admin's one-leaf edit and commit.
    let r = admin
        .call(&format!(
            "<edit-config><target><candidate/></target><config><cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>sci-a</csci-id><description>x</description></sci></scis></cats-sma></config></edit-config>"
        ))
        .await;
    assert!(ok(&r), "{r}");
    let r = admin.call("<commit/>").await;
    assert!(ok(&r), "{r}");
    let r = bob.next().await;
    assert_eq!(tag(&r), "resource-denied", "{r}");
    let r = bob2.next().await;
    assert!(r.contains("bulk-2999") && !r.contains(PSK), "the heavy read completes too");
}

/// Issue 11 class 4, RFC 8341 3.4.4/3.4.5: a rule with module-name cats-sma-cps matches the
/// C-PS nodes it defines (augmented into cats-sma), over NETCONF and RESTCONF, for writes
/// and reads.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class4_augmenting_module_rules_match() {
    let read_rule = "<rule><name>no-cps-reads</name><module-name>cats-sma-cps</module-name><access-operations>read</access-operations><action>deny</action></rule>".to_owned();
    let (_d, agent) = agent("permit", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let peer = |name: &str| {
        format!(
            "<cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"><peer><name>{name}</name><url>http://127.0.0.1:9/</url><psk><key-id>k</key-id><key>{PSK}</key></psk></peer></c-ps></cats-sma>"
        )
    };
    let r = bob.call(&edit(&peer("evil"))).await;
    assert_eq!(tag(&r), "access-denied", "{r}");
    let trail = audit(&agent);
    assert!(
        trail.iter().any(|r| r["category"] == "nacm-denial"
            && r["user"] == "bob"
            && r["path"].as_str().is_some_and(|p| p.contains("cats-sma-cps:c-ps"))),
        "{trail:#?}"
    );
    let r = bob
        .call(&edit(&format!(
            "<cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"><peer><name>p1</name><url>http://127.0.0.1:10/</url></peer></c-ps></cats-sma>"
        )))
        .await;
    assert_eq!(tag(&r), "access-denied", "update: {r}");
    let r = bob
        .call(&format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{CATS}\"><c-ps xmlns=\"{CPS}\"><peer xmlns:nc=\"{NC}\" nc:operation=\"delete\"><name>p1</name></peer></c-ps></cats-sma></config></edit-config>"
        ))
        .await;
    assert_eq!(tag(&r), "access-denied", "delete: {r}");
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    let r = c.send_json(
        "POST",
        "/data/cats-sma:cats-sma/cats-sma-cps:c-ps",
        &format!(r#"{{"cats-sma-cps:peer":[{{"name":"evil","url":"http://127.0.0.1:9/","psk":{{"key-id":"k","key":"{PSK}"}}}}]}}"#),
    );
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    let r = c.send_json(
        "PUT",
        "/data/cats-sma:cats-sma/cats-sma-cps:c-ps/peer=p1/url",
        r#"{"cats-sma-cps:url":"http://x/"}"#,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // Writes elsewhere in cats-sma are permitted (write-default permit).
    let r = bob.call(&edit(&format!("<cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>sci-a</csci-id><description>ok</description></sci></scis></cats-sma>"))).await;
    assert!(ok(&r), "{r}");
    // Reads: a read rule on cats-sma-cps hides the peers.
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let r = admin.call(&edit(&nacm_config("permit", &read_rule))).await;
    assert!(ok(&r), "{r}");
    let r = bob.call("<get-config><source><running/></source></get-config>").await;
    assert!(!r.contains("c-ps") && r.contains("sci-a"), "{r}");
    let r = c.get("/data/cats-sma:cats-sma/cats-sma-cps:c-ps");
    assert_eq!(r.status, 404, "{}", r.body);
    let r = admin.call("<get-config><source><running/></source></get-config>").await;
    assert!(r.contains("<name>p1</name>") && !r.contains("evil"), "{r}");
}

/// Issue 11 class 4, RFC 8341 `path` (node-instance-identifier): a rule for one list entry
/// applies to that entry only, however its predicate is quoted.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class4_predicate_rule_paths_are_evaluated() {
    let permit_a = format!(
        "<rule><name>edit-sci-a</name><module-name>cats-sma</module-name><path xmlns:c=\"{CATS}\">/c:cats-sma/c:scis/c:sci[c:csci-id = 'sci-a']</path><access-operations>update create</access-operations><action>permit</action></rule>"
    );
    let (_d, agent) = agent("deny", &permit_a, "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let desc = |id: &str| {
        edit(&format!("<cats-sma xmlns=\"{CATS}\"><scis><sci><csci-id>{id}</csci-id><description>bob</description></sci></scis></cats-sma>"))
    };
    let r = bob.call(&desc("sci-a")).await;
    assert!(ok(&r), "the permitted entry: {r}");
    let r = bob.call(&desc("sci-b")).await;
    assert_eq!(tag(&r), "access-denied", "another entry: {r}");
    let r = bob.call(&desc("sci-c")).await;
    assert_eq!(tag(&r), "access-denied", "a new entry: {r}");
    // The read rule for sci-b (written with double quotes) hides exactly sci-b.
    let r = bob.call("<get-config><source><running/></source></get-config>").await;
    assert!(r.contains("sci-a") && !r.contains("sci-b"), "{r}");
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=sci-b").status, 404);
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=sci-a").status, 200);
    let r = c.send_json("PUT", "/data/cats-sma:cats-sma/scis/sci=sci-b/description", r#"{"cats-sma:description":"x"}"#);
    assert_eq!(r.status, 403, "{}", r.body);
    admin_still_served(&agent).await;
}

/// Issue 11 class 4, RFC 8341 3.4.4 step 8: resync, clear-quarantine and probe-sci are
/// default-deny-all in the schema, over NETCONF and RESTCONF, until a rule permits one.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class4_engine_rpcs_are_default_deny() {
    let permit_resync = "<rule><name>resync</name><module-name>cats-sma</module-name><rpc-name>resync</rpc-name><access-operations>exec</access-operations><action>permit</action></rule>";
    let (_d, agent) = agent("deny", permit_resync, "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    for op in [
        format!("<clear-quarantine xmlns=\"{CATS}\"><accept>true</accept></clear-quarantine>"),
        format!("<clear-quarantine xmlns=\"{CATS}\"/>"),
        format!("<probe-sci xmlns=\"{CATS}\"><csci-id>sci-a</csci-id></probe-sci>"),
    ] {
        let r = bob.call(&op).await;
        assert_eq!(tag(&r), "access-denied", "{op}: {r}");
    }
    let r = bob.call(&format!("<resync xmlns=\"{CATS}\"/>")).await;
    assert!(ok(&r), "a permit rule lets resync through: {r}");
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    for (op, body) in [
        ("clear-quarantine", r#"{"cats-sma:input":{"accept":true}}"#),
        ("probe-sci", r#"{"cats-sma:input":{"csci-id":"sci-a"}}"#),
    ] {
        let r = c.send_json("POST", &format!("/operations/cats-sma:{op}"), body);
        assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{op}: {}", r.body);
    }
    // Every denial is in the audit trail, with the user and the operation.
    let trail = audit(&agent);
    for op in ["cats-sma:clear-quarantine", "cats-sma:probe-sci"] {
        assert!(
            trail.iter().any(|r| r["category"] == "nacm-denial" && r["user"] == "bob" && r["operation"] == op),
            "{op}: {trail:#?}"
        );
    }
    // The admin (recovery user) may.
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let r = admin.call(&format!("<clear-quarantine xmlns=\"{CATS}\"/>")).await;
    assert!(r.contains("released"), "{r}");
}

/// Issue 11 class 4: RESTCONF request identities are never NETCONF session ids, so a
/// kill-session cannot name (and clear) one; many requests in flight at once each keep
/// their own identity (every one of bob's writes is still checked by NACM).
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class4_restconf_identities() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    for id in ["2147483648", "2147483649", "4294967295"] {
        let r = admin.call(&format!("<kill-session><session-id>{id}</session-id></kill-session>")).await;
        assert_eq!(tag(&r), "invalid-value", "{id}: {r}");
    }
    let c = Curl::new(&agent).as_user("bob", BOB_PW);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let c = Curl { root: c.root.clone(), cacert: c.cacert.clone(), user: c.user.clone(), extra: Vec::new() };
        tasks.push(std::thread::spawn(move || {
            c.send_json(
                "POST",
                "/data/cats-sma:cats-sma/scis",
                &format!(r#"{{"cats-sma:sci":[{{"csci-id":"race-{i}","cs-id":["AR1"]}}]}}"#),
            )
            .status
        }));
        // Kill-sessions naming the ids those requests could get, meanwhile.
        let r =
            admin.call(&format!("<kill-session><session-id>{}</session-id></kill-session>", 2147483648u64 + i)).await;
        assert_eq!(tag(&r), "invalid-value", "{r}");
    }
    for t in tasks {
        assert_eq!(t.join().unwrap(), 403, "every write is checked for bob");
    }
    let r = admin.call("<get-config><source><running/></source></get-config>").await;
    assert!(!r.contains("race-"), "{r}");
}

/// Issue 11 class 3: the limits are the bootstrap file's `[filters]` table.
#[tokio::test(flavor = "multi_thread")]
async fn issue11_class3_filter_limits_are_configurable() {
    let (_d, agent) = agent("deny", "", "[filters]\nxpath_max_length = 48\nxpath_max_scans = 1\n").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let r = bob.call(&xpath_get_config("/c:cats-sma/c:scis/c:sci[c:csci-id='sci-a']/c:cs-id")).await;
    assert_eq!(tag(&r), "resource-denied", "longer than 48 bytes: {r}");
    let r = bob.call(&xpath_get_config("//c:sci | //c:credential-ref")).await;
    assert_eq!(tag(&r), "resource-denied", "two scans: {r}");
    let r = bob.call(&xpath_get_config("//c:sci")).await;
    assert!(r.contains("sci-a") && !r.contains("sci-b"), "{r}");
    admin_still_served(&agent).await;
}

/// RFC 8341 section 3.5.1.1: with write-default permit, bob still cannot write the nodes
/// marked `nacm:default-deny-write` (a receiver instance of configured subscriptions, a
/// NETCONF listen endpoint) until a rule permits it; reads stay as they were.
#[tokio::test(flavor = "multi_thread")]
async fn rfc8341_3_5_1_1_default_deny_write_data_needs_an_explicit_permit() {
    const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
    const CSNR: &str = "urn:cats-sma:yang:cats-sma-notif-receivers";
    let instance = format!(
        r#"<subscriptions xmlns="{SN}"><receiver-instances xmlns="{CSNR}"><receiver-instance><name>mine</name>
        <access-as>admin</access-as><udp-notif-receiver><remote-address>192.0.2.1</remote-address>
        <remote-port>9999</remote-port></udp-notif-receiver></receiver-instance></receiver-instances></subscriptions>"#
    );
    let (_d, agent) = agent("permit", "", "").await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let r = bob.call(&edit(&instance)).await;
    assert_eq!(tag(&r), "access-denied", "{r}");
    // An ordinary write is still allowed by write-default permit.
    let r =
        bob.call(&edit(&format!(r#"<cats-sma xmlns="{CATS}"><agent><site-id>s2</site-id></agent></cats-sma>"#))).await;
    assert!(ok(&r), "{r}");
    let trail = audit(&agent);
    assert!(trail.iter().any(|r| r["category"] == "nacm-denial" && r["user"] == "bob"), "{trail:#?}");
    // With a permit rule for the container, bob may write it, but only as himself.
    let permit = format!(
        r#"<nacm xmlns="{NACM}"><rule-list><name>ops</name><rule><name>receivers</name>
        <module-name>cats-sma-notif-receivers</module-name><access-operations>*</access-operations>
        <action>permit</action></rule></rule-list></nacm>"#
    );
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let r = admin.call(&edit(&permit)).await;
    assert!(ok(&r), "{r}");
    let r = bob.call(&edit(&instance)).await;
    assert!(r.contains("<rpc-error>") && r.contains("access-as"), "bob may not send as admin: {r}");
    let r = bob.call(&edit(&instance.replace("<access-as>admin</access-as>", "<access-as>bob</access-as>"))).await;
    assert!(ok(&r), "{r}");
}

/// RFC 8341 section 3.5.2: what NACM refuses is counted in `/nacm`'s state. The admin's
/// `<get>` of the whole `/nacm` (a filter the agent answers by printing the configuration
/// in place with the counters inside) shows each refusal; bob, whom NACM applies to, gets
/// nothing of `/nacm` (`default-deny-all`, section 3.5.1.2) by the same request.
#[tokio::test(flavor = "multi_thread")]
async fn rfc8341_3_5_2_refusals_are_counted_in_a_get_of_the_whole_nacm() {
    let (_d, agent) = agent("deny", "", "").await;
    let mut admin = Nc::open(&agent, "admin", PASSWORD).await;
    let mut bob = Nc::open(&agent, "bob", BOB_PW).await;
    let get = format!("<get><filter type=\"subtree\"><nacm xmlns=\"{NACM}\"/></filter></get>");
    let r = admin.call(&get).await;
    let before = |leaf: &str| count(&r, leaf);
    let (ops, writes) = (before("denied-operations"), before("denied-data-writes"));
    assert!(r.contains("<group><name>ops</name><user-name>bob</user-name></group>"), "the configuration too: {r}");
    // kill-session is default-deny-all; a write under write-default deny.
    let k = bob.call("<kill-session><session-id>1</session-id></kill-session>").await;
    assert_eq!(tag(&k), "access-denied", "{k}");
    let w =
        bob.call(&edit(&format!("<cats-sma xmlns=\"{CATS}\"><agent><site-id>s2</site-id></agent></cats-sma>"))).await;
    assert_eq!(tag(&w), "access-denied", "{w}");
    let r = admin.call(&get).await;
    assert_eq!(count(&r, "denied-operations"), ops + 1, "{r}");
    assert_eq!(count(&r, "denied-data-writes"), writes + 1, "{r}");
    let b = bob.call(&get).await;
    assert!(b.contains("<data/>") || b.contains("<data></data>"), "nothing of /nacm for bob: {b}");
    admin_still_served(&agent).await;
}
