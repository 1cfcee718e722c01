//! Issue 21, the operator web console: a real agent with RESTCONF over HTTPS, an operator
//! allowed to run clear-quarantine and a viewer whom NACM denies it, driven by headless
//! Debian chromium (playwright-core, tests/console/console.mjs). The page logs in, sees a
//! service's GAS change live after SCI reports (through its RFC 8650 subscriptions, not a
//! reload), survives its subscriptions being killed, releases a quarantined report, and
//! the viewer's release is refused with the agent's reason.
//!
//! `CONSOLE_SCREENSHOTS=DIR` keeps screenshots of the main pages (docs/console/ holds them).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const SETUP: &str = "run scripts/setup.sh (it installs Debian's chromium and runs npm ci in tests/console)";

/// node, chromium and playwright-core, or a failure that says how to get them.
fn browser_tools(dir: &Path) -> String {
    let node = Command::new("node").arg("--version").output();
    let node = match node {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        _ => panic!("node is not installed: {SETUP}"),
    };
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing: {SETUP}");
    assert!(
        dir.join("node_modules/playwright-core/package.json").exists(),
        "playwright-core is not installed in {}: {SETUP}",
        dir.display()
    );
    node
}

fn users_file(dir: &Path) -> PathBuf {
    boot_with_users(dir, &[("operator", "operator-pw"), ("viewer", "viewer-pw")])
}

fn ok(r: &HttpReply, what: &str) {
    assert!(matches!(r.status, 200 | 201 | 204), "{what}: {} {}", r.status, r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue21_operator_console_live_gas_quarantine_release_and_nacm_refusal() {
    let script_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    let node = browser_tools(&script_dir);
    let dir = tempfile::tempdir().unwrap();
    let boot = users_file(dir.path());
    let agent =
        start_agent(&dir.path().join("state"), &["--config", boot.to_str().unwrap(), "--sci-listen", "127.0.0.1:0"]);
    let admin = Curl::new(&agent);

    // RFC 8341: clear-quarantine is default-deny-all; operators are permitted it, viewers
    // are denied it explicitly. Both may read (read-default permit) and subscribe.
    let nacm = r#"{"ietf-netconf-acm:nacm":{"enable-nacm":true,
        "groups":{"group":[{"name":"operators","user-name":["operator"]},{"name":"viewers","user-name":["viewer"]}]},
        "rule-list":[
          {"name":"operators","group":["operators"],"rule":[{"name":"release-quarantine","module-name":"cats-sma",
            "rpc-name":"clear-quarantine","access-operations":"exec","action":"permit"}]},
          {"name":"viewers","group":["viewers"],"rule":[{"name":"no-quarantine-release","module-name":"cats-sma",
            "rpc-name":"clear-quarantine","access-operations":"exec","action":"deny"}]}]}}"#;
    ok(&admin.send_json("PUT", "/data/ietf-netconf-acm:nacm", nacm), "NACM");
    // seed 004 Validator & Sanitizer: a GAS jump over 50 % within an hour is quarantined.
    let anomaly = r#"{"cats-sma:anomaly":{"gas-change-percent":50,"gas-change-window":3600000,"action":"quarantine"}}"#;
    ok(&admin.send_json("PUT", "/data/cats-sma:cats-sma/validation/anomaly", anomaly), "anomaly");
    for (id, cs, what) in [
        ("10.21.0.1:8080", "LLM1", "GPU node 1"),
        ("10.21.0.2:8080", "LLM1", "GPU node 2"),
        ("10.21.0.3:8080", "ASR1", "speech node"),
    ] {
        let sci = format!(
            r#"{{"cats-sma:sci":[{{"csci-id":"{id}","cs-id":["{cs}"],"authentication":"none","description":"{what}","expected-interval":60000}}]}}"#
        );
        ok(&admin.send_json("POST", "/data/cats-sma:cats-sma/scis", &sci), "SCI");
    }
    // A C-PS nobody answers for: its session backs off and its queue fills.
    let peer = r#"{"cats-sma-cps:peer":[{"name":"cps-lab","url":"http://127.0.0.1:9/","allowed-cs-id":["LLM1","ASR1"],
        "psk":{"key-id":"lab","key":"0123456789abcdef0123456789abcdef"}}]}"#;
    ok(&admin.send_json("POST", "/data/cats-sma:cats-sma/cats-sma-cps:c-ps", peer), "C-PS peer");

    let root = agent.restconf.clone().expect("RESTCONF is on");
    let console = format!("{}/console/", root.trim_end_matches("/restconf"));
    let reports = format!("http://{}/reports", agent.sci_addr.expect("the SCI listener"));
    let started = Instant::now();
    let mut child = Command::new("node")
        .arg("console.mjs")
        .current_dir(&script_dir)
        .env("CONSOLE_URL", &console)
        .env("SCI_REPORT_URL", &reports)
        .env("OPERATOR", "operator")
        .env("OPERATOR_PW", "operator-pw")
        .env("VIEWER", "viewer")
        .env("VIEWER_PW", "viewer-pw")
        .env("ADMIN", "admin")
        .env("ADMIN_PW", PASSWORD)
        .env("SCI1", "10.21.0.1:8080")
        .env("SCI2", "10.21.0.2:8080")
        .env("SCI3", "10.21.0.3:8080")
        .env("SERVICE", "LLM1")
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("node ({node}) did not start: {e}: {SETUP}"));
    // Read both pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let limit = Duration::from_secs(240);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let log_tail = {
        let lines = agent.stderr_lines.lock().unwrap();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    match status {
        Some(s) if s.success() => {
            println!("{out}browser test took {:.1} s", started.elapsed().as_secs_f64());
        }
        Some(s) => panic!("the browser test failed ({s}):\n{out}\n{err}\n--- agent log (tail) ---\n{log_tail}"),
        None => panic!("the browser test did not finish in {limit:?}:\n{out}\n{err}\n--- agent log ---\n{log_tail}"),
    }
}
