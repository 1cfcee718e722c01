//! RESTCONF (RFC 8040) driven with curl over real HTTPS (the agent's generated certificate
//! verified): discovery, every method in both encodings, query parameters, conditional
//! requests, NMDA datastores (RFC 8527), YANG Patch (RFC 8072), operations, and the
//! section 7 errors (bad path, bad JSON, bad value, missing key, conflict, wrong content
//! type, NACM denial).

mod common;

use common::*;

const SCIS: &str = "/data/cats-sma:cats-sma/scis";
const JSON: &str = "Content-Type: application/yang-data+json";

fn sci_json(id: &str, cs: &str) -> String {
    format!(r#"{{"cats-sma:sci":[{{"csci-id":"{id}","cs-id":["{cs}"]}}]}}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_authentication_and_encodings() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);
    assert!(c.root.starts_with("https://127.0.0.1:"), "{}", c.root);

    // RFC 8040 3.1: root discovery needs no credentials.
    let anon = Curl { user: None, ..Curl::new(&agent) };
    let r = anon.get("//.well-known/host-meta");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("rel=\"restconf\"") && r.body.contains("href=\"/restconf\""), "{}", r.body);
    // Everything else does (RFC 8040 2.5): 401 with a Basic challenge.
    let r = anon.get("/data");
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").unwrap().starts_with("Basic"));
    assert_eq!(r.error_tag(), "access-denied");
    let r = c.as_user("admin", "wrong").get("/data");
    assert_eq!(r.status, 401);
    let r = c.as_user("nobody", PASSWORD).get("/data");
    assert_eq!(r.status, 401);
    let r = anon.get("//.well-known/host-meta.json");
    assert_eq!(r.json()["links"][0]["href"], "/restconf");

    // The API resource and yang-library-version, JSON and XML.
    let r = c.get("");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/yang-data+json"));
    assert_eq!(r.json()["ietf-restconf:restconf"]["yang-library-version"], "2019-01-04");
    let r = c.get_xml("/yang-library-version");
    assert_eq!(r.header("content-type"), Some("application/yang-data+xml"));
    assert!(r.body.contains(">2019-01-04</yang-library-version>"), "{}", r.body);
    let r = c.call("GET", "/yang-library-version", &["Accept: image/png"], None);
    assert_eq!(r.status, 406);

    // Both HTTP versions (ALPN).
    let h2 = Curl { extra: vec!["--http2".into()], ..Curl::new(&agent) }.get("/yang-library-version");
    assert_eq!(h2.status, 200);
    let h1 = Curl { extra: vec!["--http1.1".into()], ..Curl::new(&agent) }.get("/yang-library-version");
    assert_eq!(h1.status, 200);

    // The operations and the streams / capabilities of ietf-restconf-monitoring.
    let r = c.get("/operations");
    let ops = r.json();
    for op in ["cats-sma:resync", "cats-sma:clear-quarantine", "cats-sma:probe-sci"] {
        assert!(ops["ietf-restconf:operations"][op].is_array(), "{op}: {}", r.body);
    }
    let r = c.get("/data/ietf-restconf-monitoring:restconf-state");
    assert_eq!(r.status, 200, "{}", r.body);
    let state = r.json();
    let stream = &state["ietf-restconf-monitoring:restconf-state"]["streams"]["stream"][0];
    assert_eq!(stream["name"], "NETCONF");
    assert_eq!(stream["replay-support"], true);
    let loc = stream["access"].as_array().unwrap().iter().find(|a| a["encoding"] == "json").unwrap()["location"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(loc, format!("{}/streams/NETCONF/json", c.root));
    assert!(r.body.contains("urn:ietf:params:restconf:capability:yang-patch:1.0"));

    // The whole datastore: JSON and XML wrappers; HEAD has the headers and no body.
    let r = c.get("/data");
    assert!(r.json()["ietf-restconf:data"]["ietf-yang-library:yang-library"].is_object());
    let r = c.get_xml("/data?content=config");
    assert!(r.body.starts_with("<data xmlns=\"urn:ietf:params:xml:ns:yang:ietf-restconf\""), "{}", r.body);
    let r = c.call("HEAD", "/data/ietf-restconf-monitoring:restconf-state", &[], None);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert!(r.header("etag").is_some() && r.header("last-modified").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn every_method_both_encodings_and_the_errors() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);

    // POST creates a child (RFC 8040 4.4.1): 201 with its Location.
    let r = c.send_json("POST", SCIS, &sci_json("10.0.0.1:80", "AR1"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.header("location"), Some("/restconf/data/cats-sma:cats-sma/scis/sci=10.0.0.1%3A80"));
    // Again: the same typed error NETCONF gives (data-exists → 409).
    let r = c.send_json("POST", SCIS, &sci_json("10.0.0.1:80", "AR1"));
    assert_eq!((r.status, r.error_tag().as_str()), (409, "data-exists"), "{}", r.body);
    assert!(r.json()["ietf-restconf:errors"]["error"][0]["error-path"].as_str().unwrap().contains("sci"));

    // GET the entry in both encodings.
    let one = format!("{SCIS}/sci=10.0.0.1%3A80");
    let r = c.get(&one);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cats-sma:sci"][0]["cs-id"][0], "AR1");
    let r = c.get_xml(&one);
    assert!(r.body.starts_with("<sci xmlns=\"urn:cats-sma:yang:cats-sma\">"), "{}", r.body);
    assert!(r.body.contains("<csci-id>10.0.0.1:80</csci-id>"), "{}", r.body);

    // PUT replaces (204) in XML; PUT of a new resource creates it (201).
    let xml = "<sci xmlns=\"urn:cats-sma:yang:cats-sma\"><csci-id>10.0.0.1:80</csci-id><cs-id>AR2</cs-id>\
               <description>edge</description></sci>";
    let r = c.send_xml("PUT", &one, xml);
    assert_eq!(r.status, 204, "{}", r.body);
    let r = c.get(&one);
    assert_eq!(r.json()["cats-sma:sci"][0]["cs-id"], serde_json::json!(["AR2"]), "replace drops AR1: {}", r.body);
    let r = c.send_json("PUT", &format!("{SCIS}/sci=10.0.0.2%3A80"), &sci_json("10.0.0.2:80", "AR1"));
    assert_eq!(r.status, 201, "{}", r.body);
    // A leaf PUT.
    let r = c.send_json("PUT", &format!("{one}/description"), r#"{"cats-sma:description":"core"}"#);
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(c.get(&format!("{one}/description")).json()["cats-sma:description"], "core");

    // PATCH merges (RFC 8040 4.6.1) and never creates.
    let r = c.send_json(
        "PATCH",
        &one,
        r#"{"cats-sma:sci":[{"csci-id":"10.0.0.1:80","cs-id":["AR3"],"expected-interval":7}]}"#,
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let v = c.get(&one).json();
    assert_eq!(v["cats-sma:sci"][0]["cs-id"], serde_json::json!(["AR2", "AR3"]));
    assert_eq!(v["cats-sma:sci"][0]["expected-interval"], 7);
    let r = c.send_json("PATCH", &format!("{SCIS}/sci=9.9.9.9%3A1"), &sci_json("9.9.9.9:1", "AR1"));
    assert_eq!(r.status, 404, "{}", r.body);

    // Query parameters: depth, fields, content, with-defaults.
    let r = c.get("/data/cats-sma:cats-sma?depth=2");
    let v = r.json();
    assert!(v["cats-sma:cats-sma"]["scis"].is_object(), "{}", r.body);
    assert!(v["cats-sma:cats-sma"]["scis"]["sci"].is_null(), "depth 2 stops at scis: {}", r.body);
    let r = c.get(&format!("{one}?fields=description"));
    let v = r.json();
    assert_eq!(v["cats-sma:sci"][0]["description"], "core");
    assert!(v["cats-sma:sci"][0]["cs-id"].is_null(), "{}", r.body);
    assert_eq!(v["cats-sma:sci"][0]["csci-id"], "10.0.0.1:80", "keys stay");
    let r = c.get("/data/cats-sma:cats-sma/cache?with-defaults=report-all");
    assert!(r.json()["cats-sma:cache"]["max-entries"].is_number(), "{}", r.body);
    let r = c.get("/data/cats-sma:cats-sma/cache");
    assert!(!r.body.contains("max-entries"), "explicit mode (the default) shows no defaults: {}", r.body);
    let r = c.get("/data/cats-sma:cats-sma/cache?with-defaults=report-all-tagged");
    assert!(r.body.contains("\"ietf-netconf-with-defaults:default\":true"), "{}", r.body);
    let r = c.get_xml("/data/cats-sma:cats-sma/cache?with-defaults=report-all-tagged");
    assert!(r.body.contains("urn:ietf:params:xml:ns:netconf:default:1.0"), "{}", r.body);
    // trim hides a value set explicitly to its default; explicit shows it.
    let r = c.send_json("PUT", "/data/cats-sma:cats-sma/cache/max-entries", r#"{"cats-sma:max-entries":100000}"#);
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    assert!(c.get("/data/cats-sma:cats-sma/cache").body.contains("\"max-entries\":100000"));
    let r = c.get("/data/cats-sma:cats-sma/cache?with-defaults=trim");
    assert!(!r.body.contains("max-entries"), "{}", r.body);
    // A leaf-list instance is addressed by its value.
    let r = c.get(&format!("{one}/cs-id=AR2"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cats-sma:cs-id"], serde_json::json!(["AR2"]));
    let r = c.get("/data/cats-sma:cats-sma?content=nonconfig");
    assert!(r.json()["cats-sma:cats-sma"]["scis"].is_null(), "{}", r.body);
    let r = c.get(&format!("{one}?depth=0"));
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"));
    let r = c.get(&format!("{one}?nosuch=1"));
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"));

    // OPTIONS lists the methods; DELETE removes (204), then data-missing (409).
    let r = c.call("OPTIONS", &one, &[], None);
    assert_eq!(r.status, 200);
    assert!(r.header("allow").unwrap().contains("PATCH"));
    let r = c.call("DELETE", &format!("{SCIS}/sci=10.0.0.2%3A80"), &[], None);
    assert_eq!(r.status, 204, "{}", r.body);
    let r = c.call("DELETE", &format!("{SCIS}/sci=10.0.0.2%3A80"), &[], None);
    assert_eq!((r.status, r.error_tag().as_str()), (409, "data-missing"), "{}", r.body);
    let r = c.get(&format!("{SCIS}/sci=10.0.0.2%3A80"));
    assert_eq!((r.status, r.error_tag().as_str()), (404, "invalid-value"));

    // The error cases of section 7.
    let r = c.get("/data/cats-sma:cats-sma/nosuch");
    assert_eq!((r.status, r.error_tag().as_str()), (400, "unknown-element"), "bad path: {}", r.body);
    let r = c.get("/data/nosuch:thing");
    assert_eq!(r.status, 400, "unknown module: {}", r.body);
    let r = c.get("/nosuch");
    assert_eq!(r.status, 404);
    let r = c.send_json("POST", SCIS, r#"{"cats-sma:sci":[{"csci-id":"#);
    assert_eq!((r.status, r.error_tag().as_str()), (400, "malformed-message"), "bad JSON: {}", r.body);
    let r = c.send_xml("POST", SCIS, "<sci xmlns=\"urn:cats-sma:yang:cats-sma\"><csci-id>x</sci>");
    assert_eq!((r.status, r.error_tag().as_str()), (400, "malformed-message"), "bad XML: {}", r.body);
    assert!(r.body.starts_with("<errors xmlns=\"urn:ietf:params:xml:ns:yang:ietf-restconf\">"), "{}", r.body);
    let r = c.send_json("POST", SCIS, r#"{"cats-sma:sci":[{"csci-id":"10.0.0.3:80","expected-interval":"soon"}]}"#);
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "bad value: {}", r.body);
    let r = c.send_json("POST", SCIS, r#"{"cats-sma:sci":[{"cs-id":["AR1"]}]}"#);
    assert_eq!(r.status, 400, "missing key: {}", r.body);
    assert!(["missing-element", "invalid-value"].contains(&r.error_tag().as_str()), "{}", r.body);
    let r = c.call("POST", SCIS, &["Content-Type: text/plain"], Some("x"));
    assert_eq!(r.status, 415, "wrong content type: {}", r.body);
    let r = c.send_json("PUT", &one, &sci_json("10.0.0.9:80", "AR1"));
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "key in body differs: {}", r.body);
    let r = c.get(&format!("{SCIS}/sci=a,b"));
    assert_eq!(r.status, 400, "two keys for a one-key list: {}", r.body);
    let r = c.send_json("PUT", "/data/ietf-restconf-monitoring:restconf-state", "{}");
    assert_eq!(r.status, 400, "state data cannot be written: {}", r.body);

    // Conditional requests (RFC 8040 3.4.1, RFC 7232).
    let r = c.get(&one);
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    let r = c.call("GET", &one, &[&format!("If-None-Match: {etag}")], None);
    assert_eq!(r.status, 304);
    let r = c.call("GET", &one, &[&format!("If-Modified-Since: {lm}")], None);
    assert_eq!(r.status, 304);
    let r = c.call("PATCH", &one, &[JSON, "If-Match: \"1\""], Some(&sci_json("10.0.0.1:80", "AR4")));
    assert_eq!(r.status, 412, "stale ETag: {}", r.body);
    let r = c.call("PATCH", &one, &[JSON, &format!("If-Match: {etag}")], Some(&sci_json("10.0.0.1:80", "AR4")));
    assert_eq!(r.status, 204, "{}", r.body);
    let new_etag = r.header("etag").unwrap().to_owned();
    assert_ne!(new_etag, etag, "every change of running changes the ETag");
    let r = c.call("GET", &one, &[&format!("If-None-Match: {etag}")], None);
    assert_eq!(r.status, 200);
    let r =
        c.call("DELETE", &format!("{one}/description"), &["If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT"], None);
    assert_eq!(r.status, 412, "{}", r.body);

    // RFC 8040 1.4: while a NETCONF session holds the candidate lock, edits wait (in-use).
    let mut nc = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    nc.hello(true).await;
    assert!(nc.rpc11(&rpc(1, "<lock><target><candidate/></target></lock>")).await.contains("<ok/>"));
    let r = c.call("DELETE", &format!("{one}/description"), &[], None);
    assert_eq!((r.status, r.error_tag().as_str()), (409, "in-use"), "{}", r.body);
    assert!(nc.rpc11(&rpc(2, "<unlock><target><candidate/></target></unlock>")).await.contains("<ok/>"));
    let r = c.call("DELETE", &format!("{one}/description"), &[], None);
    assert_eq!(r.status, 204, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn nmda_datastores_and_yang_patch() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);
    let cand = "/ds/ietf-datastores:candidate/cats-sma:cats-sma/scis";
    let run = "/ds/ietf-datastores:running/cats-sma:cats-sma/scis";

    // RFC 8527: the candidate is its own datastore; running does not see its edits.
    let r = c.send_json("POST", cand, &sci_json("10.1.0.1:80", "AR1"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.header("location"),
        Some("/restconf/ds/ietf-datastores:candidate/cats-sma:cats-sma/scis/sci=10.1.0.1%3A80")
    );
    assert_eq!(c.get(&format!("{cand}/sci=10.1.0.1%3A80")).status, 200);
    assert_eq!(c.get(&format!("{run}/sci=10.1.0.1%3A80")).status, 404);
    // Operational and intended are read-only.
    let r = c.send_json("POST", "/ds/ietf-datastores:operational/cats-sma:cats-sma/scis", &sci_json("x", "AR1"));
    assert_eq!(r.status, 405, "{}", r.body);
    let r = c.get("/ds/ietf-datastores:operational/ietf-yang-library:yang-library");
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/ds/ietf-datastores:nosuch").status, 404);
    // Startup is writable (and persisted).
    let r = c.send_json(
        "PUT",
        "/ds/ietf-datastores:startup/cats-sma:cats-sma/scis/sci=10.1.0.9%3A80",
        &sci_json("10.1.0.9:80", "AR1"),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        std::fs::read_to_string(agent.state_dir.join("startup.xml")).unwrap_or_default().contains("10.1.0.9:80")
            || agent
                .state_dir
                .read_dir()
                .unwrap()
                .any(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default().contains("10.1.0.9:80"))
    );

    // YANG Patch (RFC 8072), JSON: three edits applied as one.
    let patch = r#"{"ietf-yang-patch:yang-patch":{"patch-id":"p1","edit":[
        {"edit-id":"e1","operation":"create","target":"/sci=10.2.0.1%3A80","value":{"cats-sma:sci":[{"csci-id":"10.2.0.1:80","cs-id":["AR1"]}]}},
        {"edit-id":"e2","operation":"merge","target":"/sci=10.2.0.1%3A80/description","value":{"cats-sma:description":"via patch"}},
        {"edit-id":"e3","operation":"create","target":"/sci=10.2.0.2%3A80","value":{"cats-sma:sci":[{"csci-id":"10.2.0.2:80","cs-id":["AR2"]}]}}]}}"#;
    let r =
        c.call("PATCH", "/data/cats-sma:cats-sma/scis", &["Content-Type: application/yang-patch+json"], Some(patch));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ietf-yang-patch:yang-patch-status"]["patch-id"], "p1");
    assert!(r.json()["ietf-yang-patch:yang-patch-status"]["ok"].is_array(), "{}", r.body);
    assert_eq!(
        c.get("/data/cats-sma:cats-sma/scis/sci=10.2.0.1%3A80/description").json()["cats-sma:description"],
        "via patch"
    );

    // A failing edit: nothing of the patch is kept, and the status names the edit.
    let patch = r#"{"ietf-yang-patch:yang-patch":{"patch-id":"p2","edit":[
        {"edit-id":"ok-one","operation":"delete","target":"/sci=10.2.0.2%3A80"},
        {"edit-id":"dup","operation":"create","target":"/sci=10.2.0.1%3A80","value":{"cats-sma:sci":[{"csci-id":"10.2.0.1:80"}]}}]}}"#;
    let r =
        c.call("PATCH", "/data/cats-sma:cats-sma/scis", &["Content-Type: application/yang-patch+json"], Some(patch));
    assert_eq!(r.status, 409, "{}", r.body);
    let st = &r.json()["ietf-yang-patch:yang-patch-status"];
    assert_eq!(st["edit-status"]["edit"][0]["edit-id"], "dup", "{}", r.body);
    assert_eq!(st["edit-status"]["edit"][0]["errors"]["error"][0]["error-tag"], "data-exists");
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=10.2.0.2%3A80").status, 200, "edit ok-one was undone");

    // The same in XML.
    let patch = "<yang-patch xmlns=\"urn:ietf:params:xml:ns:yang:ietf-yang-patch\"><patch-id>p3</patch-id>\
        <edit><edit-id>x1</edit-id><operation>replace</operation><target>/sci=10.2.0.2%3A80</target>\
        <value><sci xmlns=\"urn:cats-sma:yang:cats-sma\"><csci-id>10.2.0.2:80</csci-id><cs-id>AR9</cs-id></sci></value></edit>\
        <edit><edit-id>x2</edit-id><operation>remove</operation><target>/sci=10.2.0.1%3A80</target></edit></yang-patch>";
    let r = c.call(
        "PATCH",
        "/data/cats-sma:cats-sma/scis",
        &["Content-Type: application/yang-patch+xml", "Accept: application/yang-data+xml"],
        Some(patch),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("<patch-id>p3</patch-id><ok/>"), "{}", r.body);
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=10.2.0.1%3A80").status, 404);
    assert_eq!(c.get("/data/cats-sma:cats-sma/scis/sci=10.2.0.2%3A80").json()["cats-sma:sci"][0]["cs-id"][0], "AR9");
    // insert / point (RFC 8040 4.8.5, 4.8.6) and YANG Patch move on the ordered-by user
    // policy rules.
    let pol = "/data/cats-sma:cats-sma/cats-sma-policy:policy";
    let rule = |n: &str| {
        format!(
            r#"{{"cats-sma-policy:rule":[{{"name":"{n}","priority":1,"condition":"SCI_Health = DEGRADED","action":"REDUCE SCI_GAS BY 50%"}}]}}"#
        )
    };
    for n in ["a", "c"] {
        let r = c.send_json("POST", pol, &rule(n));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let point = "%2Fcats-sma%3Acats-sma%2Fcats-sma-policy%3Apolicy%2Frule%3Dc";
    let r = c.send_json("POST", &format!("{pol}?insert=before&point={point}"), &rule("b"));
    assert_eq!(r.status, 201, "{}", r.body);
    let r = c.send_json("POST", &format!("{pol}?insert=first"), &rule("z"));
    assert_eq!(r.status, 201, "{}", r.body);
    let order = || -> Vec<String> {
        let v = c.get(&format!("{pol}?fields=rule(name)")).json();
        v["cats-sma-policy:policy"]["rule"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(order(), ["z", "a", "b", "c"]);
    let mv = r#"{"ietf-yang-patch:yang-patch":{"patch-id":"mv","edit":[{"edit-id":"m","operation":"move","target":"/rule=z","where":"after","point":"/rule=b"}]}}"#;
    let r = c.call("PATCH", pol, &["Content-Type: application/yang-patch+json"], Some(mv));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(order(), ["a", "b", "z", "c"]);
    let r = c.send_json(
        "POST",
        &format!("{}?insert=first", "/data/cats-sma:cats-sma/scis"),
        &sci_json("10.2.9.9:1", "AR1"),
    );
    assert_eq!((r.status, r.error_tag().as_str()), (400, "invalid-value"), "scis is not user-ordered: {}", r.body);
    let r = c.send_json("POST", &format!("{pol}?insert=before"), &rule("y"));
    assert_eq!(r.status, 400, "before needs point: {}", r.body);

    // The datastore resource itself (RFC 8040 3.4): PATCH merges, PUT replaces everything.
    let r = c.send_json("PATCH", "/data", r#"{"ietf-restconf:data":{"cats-sma:cats-sma":{"agent":{"csma-id":"c9"}}}}"#);
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(c.get("/data/cats-sma:cats-sma/agent/csma-id").json()["cats-sma:csma-id"], "c9");
    let r = c.send_json(
        "PUT",
        "/data",
        r#"{"ietf-restconf:data":{"cats-sma:cats-sma":{"scis":{"sci":[{"csci-id":"10.6.0.1:80","cs-id":["AR1"]}]}}}}"#,
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let v = c.get("/data/cats-sma:cats-sma/scis?content=config").json();
    assert_eq!(v["cats-sma:scis"]["sci"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(c.get("/data/cats-sma:cats-sma/agent/csma-id").status, 404, "replaced away");
    assert_eq!(c.call("DELETE", "/data", &[], None).status, 405);

    // A patch body with a data media type on POST is refused; a bad operation is a 400.
    let bad = r#"{"ietf-yang-patch:yang-patch":{"patch-id":"p4","edit":[{"edit-id":"a","operation":"explode","target":"/sci=1"}]}}"#;
    let r = c.call("PATCH", "/data/cats-sma:cats-sma/scis", &["Content-Type: application/yang-patch+json"], Some(bad));
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn nacm_denies_restconf_writes_reads_and_operations() {
    let dir = tempfile::tempdir().unwrap();
    let hash = cats_sma::mgmt::users::hash_password("bob-pw").unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, format!("[[users]]\nname = \"bob\"\npassword_hash = \"{hash}\"\n")).unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    let admin = Curl::new(&agent);
    let bob = admin.as_user("bob", "bob-pw");

    // Without rules bob may read (read-default permit) but not write (write-default deny).
    let r = bob.send_json("POST", SCIS, &sci_json("10.3.0.1:80", "AR1"));
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    // The admin (recovery user) configures NACM through RESTCONF: bob may write scis but
    // not invoke resync, and may not read the agent container.
    let nacm = r#"{"ietf-netconf-acm:nacm":{"enable-nacm":true,"groups":{"group":[{"name":"ops","user-name":["bob"]}]},
        "rule-list":[{"name":"ops","group":["ops"],"rule":[
          {"name":"scis","module-name":"cats-sma","path":"/cats-sma:cats-sma/scis","access-operations":"*","action":"permit"},
          {"name":"no-agent","module-name":"cats-sma","path":"/cats-sma:cats-sma/agent","access-operations":"read","action":"deny"},
          {"name":"no-resync","module-name":"cats-sma","rpc-name":"resync","access-operations":"exec","action":"deny"}]}]}}"#;
    let r = admin.send_json("PUT", "/data/ietf-netconf-acm:nacm", nacm);
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let r = admin.send_json("PUT", "/data/cats-sma:cats-sma/agent", r#"{"cats-sma:agent":{"csma-id":"c1"}}"#);
    assert!(r.status == 201 || r.status == 204, "{}", r.body);

    let r = bob.send_json("POST", SCIS, &sci_json("10.3.0.1:80", "AR1"));
    assert_eq!(r.status, 201, "now permitted: {}", r.body);
    let r = bob.send_json("PUT", "/data/cats-sma:cats-sma/cache", r#"{"cats-sma:cache":{"ttl":5}}"#);
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    let r = bob.call("POST", "/operations/cats-sma:resync", &[], None);
    assert_eq!((r.status, r.error_tag().as_str()), (403, "access-denied"), "{}", r.body);
    let r = bob.get("/data/cats-sma:cats-sma/agent");
    assert_eq!(r.status, 404, "unreadable data is hidden, not refused: {}", r.body);
    assert_eq!(admin.get("/data/cats-sma:cats-sma/agent").json()["cats-sma:agent"]["csma-id"], "c1");
    let r = admin.call("POST", "/operations/cats-sma:resync", &[], None);
    assert_eq!(r.status, 204, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_body_is_413_too_big() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("boot.toml");
    std::fs::write(&cfg, "[restconf]\nmax_body_size = 4096\n").unwrap();
    let agent = start_agent(&dir.path().join("state"), &["--config", cfg.to_str().unwrap()]);
    let c = Curl::new(&agent);
    let big = format!(r#"{{"cats-sma:description":"{}"}}"#, "x".repeat(5000));
    let r = c.send_json("PUT", "/data/cats-sma:cats-sma/scis/sci=a/description", &big);
    assert_eq!((r.status, r.error_tag().as_str()), (413, "too-big"), "{}", r.body);
    let r = c.send_json("POST", SCIS, &sci_json("10.7.0.1:80", "AR1"));
    assert_eq!(r.status, 201, "a small body still goes through: {}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8040_3_1_host_meta_answers_the_xrd_to_accept_xrd_xml() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let anon = Curl { user: None, ..Curl::new(&agent) };
    // The request of RFC 8040 section 3.1's example.
    let r = anon.call("GET", "//.well-known/host-meta", &["Accept: application/xrd+xml"], None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/xrd+xml"));
    assert!(r.body.contains("<Link rel=\"restconf\" href=\"/restconf\"/>"), "{}", r.body);
    // RFC 6415 6.2: a client asking for JSON only gets the JRD; one that takes neither, 406.
    let r = anon.call("GET", "//.well-known/host-meta", &["Accept: application/json"], None);
    assert_eq!((r.status, r.header("content-type")), (200, Some("application/json")), "{}", r.body);
    assert_eq!(r.json()["links"][0]["href"], "/restconf");
    let r = anon.call("GET", "//.well-known/host-meta", &["Accept: image/png"], None);
    assert_eq!(r.status, 406, "{}", r.body);
    let r = anon.call("GET", "//.well-known/host-meta.json", &["Accept: application/xrd+xml"], None);
    assert_eq!(r.status, 406, "{}", r.body);
    let r = anon.call("DELETE", "//.well-known/host-meta", &[], None);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc7231_6_5_5_every_405_carries_allow() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);
    // RFC 8527 3.2: operational and intended are read-only.
    for ds in ["operational", "intended"] {
        let path = format!("/ds/ietf-datastores:{ds}/cats-sma:cats-sma/scis");
        for method in ["POST", "PUT", "PATCH"] {
            let r = c.send_json(method, &path, &sci_json("10.0.0.1:80", "AR1"));
            assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")), "{method} {ds}: {}", r.body);
            assert_eq!(r.error_tag(), "operation-not-supported");
        }
        let r = c.call("DELETE", &format!("{path}/sci=x"), &[], None);
        assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")), "DELETE {ds}");
    }
    // An operation resource is invoked with POST.
    let r = c.get("/operations/cats-sma:resync");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST, OPTIONS")), "{}", r.body);
    let r = c.send_json("POST", "/operations", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")), "{}", r.body);
    let r = c.send_json("PUT", "/yang-library-version", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")), "{}", r.body);
    let r = c.call("DELETE", "/data", &[], None);
    assert_eq!(r.status, 405);
    assert!(!r.header("allow").unwrap().contains("DELETE"), "{:?}", r.header("allow"));
    let r = c.send_json("POST", "/streams/NETCONF/json", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn rfc8040_3_4_1_2_json_and_xml_representations_have_different_strong_etags() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(&dir.path().join("state"), &[]);
    let c = Curl::new(&agent);
    assert_eq!(c.send_json("POST", SCIS, &sci_json("10.0.0.1:80", "AR1")).status, 201);
    let one = format!("{SCIS}/sci=10.0.0.1%3A80");
    let json = c.get(&one);
    let xml = c.get_xml(&one);
    let (jt, xt) = (json.header("etag").unwrap().to_owned(), xml.header("etag").unwrap().to_owned());
    assert_ne!(jt, xt, "one entity-tag per representation");
    assert!(!jt.starts_with("W/") && !xt.starts_with("W/"), "strong tags: {jt} {xt}");
    // If-None-Match compares with the representation being selected.
    assert_eq!(c.call("GET", &one, &[&format!("If-None-Match: {jt}")], None).status, 304);
    assert_eq!(
        c.call("GET", &one, &["Accept: application/yang-data+xml", &format!("If-None-Match: {xt}")], None).status,
        304
    );
    let r = c.call("GET", &one, &["Accept: application/yang-data+xml", &format!("If-None-Match: {jt}")], None);
    assert_eq!(r.status, 200, "the JSON tag does not validate the XML representation");
    assert_eq!(r.header("etag"), Some(xt.as_str()));
    // If-Match: either tag names the current state; after a change neither does.
    let body = sci_json("10.0.0.1:80", "AR2");
    let r = c.call("PATCH", &one, &[JSON, &format!("If-Match: {xt}")], Some(&body));
    assert_eq!(r.status, 204, "{}", r.body);
    let new = r.header("etag").unwrap().to_owned();
    assert_ne!(new, jt);
    for stale in [&jt, &xt] {
        let r = c.call("PATCH", &one, &[JSON, &format!("If-Match: {stale}")], Some(&body));
        assert_eq!(r.status, 412, "{stale}: {}", r.body);
    }
    let r = c.call("PATCH", &one, &[JSON, &format!("If-Match: {new}")], Some(&body));
    assert_eq!(r.status, 204, "{}", r.body);
}
