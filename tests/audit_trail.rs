//! Issue 11, "An audit trail" (seed 004, Security Considerations: log all authentication
//! failures, policy violations and anomalous metric changes), and class 8 ("Files"): the
//! agent keeps an append-only JSON-lines `audit.log` in its state directory, private like
//! every other file there; configuration changes say who, which datastore and which paths;
//! state-changing operations are recorded with their outcome; the counters are in the
//! operational state; loosened file modes are tightened on start and recorded.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{connect, rpc, start_agent, Curl, PASSWORD};

const NS: &str = "urn:cats-sma:yang:cats-sma";

fn records(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("audit.log")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))).collect()
}

/// Waits until a record satisfying `f` is in the trail (records are written synchronously,
/// so this only absorbs the reply having been read before the line was appended).
async fn wait_for(dir: &Path, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..100 {
        if let Some(r) = records(dir).into_iter().find(|r| f(r)) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no {what} record in the audit trail: {:#?}", records(dir))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread")]
async fn issue11_audit_records_config_changes_and_operations_with_who_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &[]);
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let edit = format!(
        "<edit-config><target><running/></target><config><cats-sma xmlns=\"{NS}\"><scis><sci>\
         <csci-id>audit-sci</csci-id><cs-id>AR1</cs-id><expected-interval>1000</expected-interval></sci></scis>\
         </cats-sma></config></edit-config>"
    );
    let reply = s.rpc11(&rpc(1, &edit)).await;
    assert!(reply.contains("<ok/>"), "{reply}");
    let change = wait_for(dir.path(), "config-change", |r| r["category"] == "config-change").await;
    assert_eq!(change["user"], "admin");
    assert_eq!(change["datastore"], "running");
    let paths = change["paths"].as_array().unwrap();
    assert!(
        paths.iter().any(|p| p.as_str().unwrap().contains("sci[csci-id='audit-sci']")),
        "the changed paths are named: {paths:?}"
    );
    let op = wait_for(dir.path(), "rpc", |r| r["category"] == "rpc" && r["operation"] == "edit-config").await;
    assert_eq!(op["outcome"], "success");
    assert_eq!(op["transport"], "netconf");
    assert_eq!(op["user"], "admin");

    // A failing state-changing operation is recorded with its error-tag.
    let reply = s.rpc11(&rpc(2, "<commit/>")).await;
    assert!(reply.contains("<ok/>") || reply.contains("rpc-error"), "{reply}");
    let reply = s.rpc11(&rpc(3, "<unlock><target><running/></target></unlock>")).await;
    assert!(reply.contains("rpc-error"), "{reply}");
    let failed = wait_for(dir.path(), "failed unlock", |r| r["operation"] == "unlock").await;
    assert_eq!(failed["outcome"], "failure");
    assert!(failed["error-tag"].is_string(), "{failed}");

    // The agent's own RPCs are state-changing too (resync changes what the C-PSes hold).
    let reply = s.rpc11(&rpc(4, &format!("<resync xmlns=\"{NS}\"/>"))).await;
    assert!(reply.contains("rpc-reply"), "{reply}");
    wait_for(dir.path(), "resync", |r| r["operation"] == "cats-sma:resync").await;

    // Reads are not audited.
    let before = records(dir.path()).len();
    let reply = s.rpc11(&rpc(5, "<get-config><source><running/></source></get-config>")).await;
    assert!(reply.contains("<data"), "{reply}");
    assert_eq!(records(dir.path()).len(), before, "a read wrote an audit record");

    // The counters are in the operational state.
    let state = s
        .rpc11(&rpc(
            6,
            &format!("<get><filter type=\"subtree\"><cats-sma xmlns=\"{NS}\"><audit/></cats-sma></filter></get>"),
        ))
        .await;
    assert!(state.contains("<audit>"), "{state}");
    assert!(state.contains("<name>config-change</name>"), "{state}");
    let total: u64 = state.split("<records>").nth(1).and_then(|r| r.split('<').next()).unwrap().parse().unwrap();
    assert!(total >= 4, "{state}");

    // RESTCONF writes name the RESTCONF user.
    let c = Curl::new(&agent);
    let r = c.send_json("PATCH", "/data/cats-sma:cats-sma/agent", r#"{"cats-sma:agent":{"csma-id":"audited"}}"#);
    assert!(r.status < 300, "{} {}", r.status, r.body);
    let rc = wait_for(dir.path(), "RESTCONF change", |r| {
        r["category"] == "config-change"
            && r["paths"].as_array().is_some_and(|p| p.iter().any(|x| x.as_str().unwrap_or("").contains("csma-id")))
    })
    .await;
    assert_eq!(rc["user"], "admin");

    // Every record is one line with a rising sequence number.
    let all = records(dir.path());
    for w in all.windows(2) {
        assert!(w[1]["seq"].as_u64() > w[0]["seq"].as_u64(), "{w:?}");
    }
    assert_eq!(mode(&dir.path().join("audit.log")), 0o600);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue11_class8_state_files_are_private_and_loosened_modes_are_tightened() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    {
        let agent = start_agent(&state, &[]);
        let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
        s.hello(true).await;
        // Something secret in startup: an SCI credential key.
        let edit = format!(
            "<edit-config><target><running/></target><config><cats-sma xmlns=\"{NS}\"><collection><authentication>\
             <credential><name>k</name><type>hmac-sha256</type><key>c2VjcmV0LWtleS1udW1iZXItMDA=</key></credential>\
             </authentication></collection></cats-sma></config></edit-config>"
        );
        assert!(s.rpc11(&rpc(1, &edit)).await.contains("<ok/>"));
        let copy = "<copy-config><target><startup/></target><source><running/></source></copy-config>";
        assert!(s.rpc11(&rpc(2, copy)).await.contains("<ok/>"));
    }
    assert_eq!(mode(&state), 0o700);
    for e in std::fs::read_dir(&state).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{} is not private", p.display());
    }
    // Someone loosens the startup file and the directory; the next start tightens both
    // and says so in the trail.
    std::fs::set_permissions(state.join("startup.xml"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = start_agent(&state, &[]);
    assert_eq!(mode(&state.join("startup.xml")), 0o600);
    assert_eq!(mode(&state), 0o700);
    let r = wait_for(&state, "state-file", |r| {
        r["category"] == "state-file" && r["path"].as_str().is_some_and(|p| p.ends_with("startup.xml"))
    })
    .await;
    assert_eq!(r["old-mode"], "644");
    assert!(agent.stderr_lines.lock().unwrap().iter().any(|l| l.contains("tightened")));
    drop(agent);

    // A symlink planted in the state directory stops the start: secrets are never written
    // through one.
    std::fs::remove_file(state.join("startup.xml")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), state.join("startup.xml")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cats-sma"))
        .args(["run", "--state-dir"])
        .arg(&state)
        .args(["--netconf-listen", "127.0.0.1:0", "--restconf-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.path().join("elsewhere").exists());
}
