//! Record and replay (issue 21): a real agent records what its engine took (`run
//! --record`); `cats-sma replay` re-runs the engine on the recording under injected time,
//! the same bytes on every run and the same site values the live agent computed, and
//! `--with-config` shows what another policy would have advertised instead. And the
//! operator's `cats-sma status` table over NETCONF.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

const POLICY_NS: &str = "urn:cats-sma:yang:cats-sma-policy";

fn report(csci: &str, seq: u64, gas: i64, health: &str) -> String {
    report_json(csci, "AR1", seq, gas, health)
}

fn replay(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cats-sma")).arg("replay").args(args).output().expect("run replay");
    assert!(out.status.success(), "replay {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn seed004_replay_of_a_recording_is_deterministic_and_shows_a_policy_what_if() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("engine.rec");
    let agent =
        start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0", "--record", rec.to_str().unwrap()]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = Nc::open(&agent).await;
    let r = nc.edit(&format!("<scis>{}{}</scis>", registered("sci-1", 1000), registered("sci-2", 300))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let post = |body: String| async move { http_post(sci, "/reports", "application/json", body.as_bytes()).await };
    assert_eq!(post(report("sci-1", 1, 400, "HEALTHY")).await.0, 200);
    assert_eq!(post(report("sci-2", 1, 200, "HEALTHY")).await.0, 200);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(post(report("sci-1", 2, 430, "HEALTHY")).await.0, 200);
    // Refused: malformed, and an SCI nobody registered.
    assert_eq!(post("{oops".into()).await.0, 400);
    assert_eq!(post(report("sci-9", 1, 5, "HEALTHY")).await.0, 422);
    // A policy change mid-recording, then sci-2 stops reporting (STALE, then FAILED).
    let r = nc
        .edit(&format!(
            "<policy xmlns=\"{POLICY_NS}\"><transforms><gas-safety-factor>0.9</gas-safety-factor></transforms></policy>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    for seq in 3..8 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(post(report("sci-1", seq, 400 + seq as i64 * 10, "HEALTHY")).await.0, 200);
    }
    let live = nc.wait("sci-2 failed", &entry("sci-2"), |r| r.contains("<state>failed</state>")).await;
    assert!(live.contains("failed"), "{live}");
    let services = nc.get("<services/>").await;
    // reported-gas is the policy module's (its own xmlns).
    let live_gas = services
        .split("<reported-gas")
        .nth(1)
        .and_then(|r| r.split_once('>'))
        .and_then(|(_, r)| r.split_once('<'))
        .map(|(v, _)| v.to_owned())
        .unwrap_or_else(|| panic!("no AR1 reported-gas: {services}"));
    drop(nc);
    let mut agent = agent;
    assert!(agent.terminate().success());

    // Deterministic: two runs (two processes, two hash seeds of their own), one output.
    let a = replay(&[rec.to_str().unwrap()]);
    let b = replay(&[rec.to_str().unwrap()]);
    assert_eq!(a, b, "two replays of one recording differ");
    assert!(a.contains("notify sci-state-change") && a.contains("failed"), "{a}");
    assert!(a.contains("notify auth-failure") || a.contains("advertise AR1"), "{a}");
    // The engine's result is the live agent's: the last advertised AR1 value.
    let last = a.lines().rev().find(|l| l.contains(" advertise AR1 ")).expect("AR1 advertised");
    assert!(last.contains(&format!(" gas={live_gas} ")), "live reported-gas {live_gas}, replay: {last}\n{a}");

    // What if the policy had said 0.5? The last configuration recorded, with that factor.
    let text = std::fs::read_to_string(&rec).unwrap();
    let configs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["ev"] == "config")
        .map(|v| v["xml"].as_str().unwrap().to_owned())
        .collect();
    assert!(configs.len() >= 3, "start, the SCIs, the policy: {configs:?}");
    let last_config = configs.last().unwrap();
    assert!(last_config.contains("<gas-safety-factor>0.9</gas-safety-factor>"), "{last_config}");
    let other = last_config.replace("<gas-safety-factor>0.9<", "<gas-safety-factor>0.5<");
    let other_file = dir.path().join("half.xml");
    std::fs::write(&other_file, other).unwrap();
    let d1 = replay(&[rec.to_str().unwrap(), "--with-config", other_file.to_str().unwrap()]);
    let d2 = replay(&[rec.to_str().unwrap(), "--with-config", other_file.to_str().unwrap()]);
    assert_eq!(d1, d2, "two what-if replays differ");
    // sci-1 alone at the end: 470 × 0.9 recorded, × 0.5 in the what-if.
    assert!(d1.lines().any(|l| l.starts_with("- ") && l.contains(&format!("advertise AR1 gas={live_gas} "))), "{d1}");
    assert!(d1.lines().any(|l| l.starts_with("+ ") && l.contains("advertise AR1 gas=235 ")), "{d1}");
    assert!(d1.lines().all(|l| l.starts_with("- ") || l.starts_with("+ ")), "{d1}");

    // Not a recording: a clear error, exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_cats-sma")).args(["replay"]).arg(&other_file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cats-sma recording"));
}

/// `cats-sma status` (issue 21, the operator's CLI): over NETCONF with the host key of the
/// agent's state directory pinned, the services, SCIs and their states as tables.
#[tokio::test(flavor = "multi_thread")]
async fn rfc6241_status_command_prints_services_and_scis_over_netconf() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let agent = start_agent(&state, &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent).await;
    let r = nc.edit(&format!("<scis>{}{}</scis>", registered("sci-1", 5000), registered("sci-2", 5000))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, body) = http_post(
        agent.sci_addr.unwrap(),
        "/reports",
        "application/json",
        report("sci-1", 1, 640, "HEALTHY").as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let run = |extra: &[&str], password: &str| {
        Command::new(env!("CARGO_BIN_EXE_cats-sma"))
            .args(["status", "--port", &agent.addr.port().to_string(), "--state-dir"])
            .arg(&state)
            .args(extra)
            .env("CATS_SMA_PASSWORD", password)
            .output()
            .unwrap()
    };
    let out = run(&[], PASSWORD);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1 services, 2 SCIs (1 active, 1 healthy)"), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("AR1") && l.contains("640")), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("sci-2") && l.contains("active")), "{text}");
    // A wrong password, and a host key that is not the agent's: refused, exit 1.
    let out = run(&[], "wrong");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let out = run(&["--host-key-fingerprint", "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"], PASSWORD);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).to_lowercase().contains("host key"), "{:?}", out);
}

/// `cats-sma simulate` (issue 21): HMAC-signed SCIs over HTTP with the failure profile (a
/// quarter stop halfway: the agent takes them STALE), and the same over MQTT (a real
/// mosquitto) and gRPC, every report accepted and counted in the summary.
#[tokio::test(flavor = "multi_thread")]
async fn seed004_simulated_scis_over_http_mqtt_and_grpc_with_credentials_and_a_failure_profile() {
    use base64ct::Encoding;
    let dir = tempfile::tempdir().unwrap();
    let key = b"0123456789abcdef0123456789abcdef";
    let b64 = base64ct::Base64::encode_string(key);
    let key_file = dir.path().join("sci.key");
    std::fs::write(&key_file, &b64).unwrap();
    let mqtt = common::mosquitto::free_port();
    let _broker = common::mosquitto::broker(dir.path(), mqtt);
    let grpc = common::mosquitto::free_port();
    let agent = start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0"]);
    let mut nc = Nc::open(&agent).await;
    let sci = |id: String| {
        format!(
            "<sci><csci-id>{id}</csci-id><cs-id>AR1</cs-id><credential-ref>sim</credential-ref>\
             <expected-interval>200</expected-interval></sci>"
        )
    };
    let scis: String = ["h", "m", "g"].iter().flat_map(|p| (0..4).map(move |i| format!("{p}{i}"))).map(sci).collect();
    let r = nc
        .edit(&format!(
            "<collection><authentication><credential><name>sim</name><type>hmac-sha256</type><key>{b64}</key>\
             </credential></authentication>\
             <mqtt><enabled>true</enabled><broker-host>127.0.0.1</broker-host><broker-port>{mqtt}</broker-port>\
             <allow-plaintext>true</allow-plaintext></mqtt>\
             <grpc><enabled>true</enabled><port>{grpc}</port><tls><enabled>false</enabled></tls></grpc></collection>\
             <scis>{scis}</scis>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let simulate = |transport: &str, target: String, prefix: &str, profile: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_cats-sma"))
            .args(["simulate", "--transport", transport, "--target", &target, "--scis", "4", "--prefix", prefix])
            .args(["--profile", profile, "--fail-percent", "25", "--duration", "3", "--interval-ms", "200"])
            .arg("--hmac-key-file")
            .arg(&key_file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let http = simulate("http", format!("http://{}", agent.sci_addr.unwrap()), "h", "failure");
    assert!(http.contains("rejected 0, transport errors 0"), "{http}");
    let sent: u64 = http.split("sent ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    assert!(http.contains(&format!("accepted {sent},")) && sent >= 40, "{http}");
    // h0 stopped halfway: STALE by now (or FAILED); h1 still reported until the end.
    let r = nc.wait("h0 stale", &entry("h0"), |r| r.contains("<state>stale</state>") || r.contains("failed")).await;
    assert!(r.contains("h0"), "{r}");
    let grpc_out = simulate("grpc", format!("http://127.0.0.1:{grpc}"), "g", "steady");
    assert!(grpc_out.contains("rejected 0, transport errors 0"), "{grpc_out}");
    let mqtt_out = simulate("mqtt", format!("127.0.0.1:{mqtt}"), "m", "ramp");
    assert!(mqtt_out.contains("transport errors 0"), "{mqtt_out}");
    // MQTT has no answers: the agent's own state shows the reports arrived, signed.
    let r = nc.wait("m3 reported", &entry("m3"), |r| r.contains("<state>healthy</state>")).await;
    assert!(r.contains("<authentication>credential</authentication>") || r.contains("hmac"), "{r}");
    let r = nc.get(&entry("g2")).await;
    assert!(r.contains("<gas>"), "{r}");
}
