//! The Prometheus / OpenMetrics endpoint (issue 21): `GET /metrics` on the RESTCONF
//! listener, for the RESTCONF users, NACM applied; scraped by a real Prometheus server
//! (Debian's `prometheus`) that the test starts on loopback, and queried through its HTTP
//! API after SCI reports were sent.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::mosquitto::free_port;
use common::*;

const NACM: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-acm";
const BOB_PW: &str = "bob-metrics-pw";

fn report(csci: &str, seq: u64, gas: i64) -> String {
    report_json(csci, "AR1", seq, gas, "HEALTHY")
}

/// A Prometheus server, killed and reaped on drop.
struct Prometheus(Child, u16);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Prometheus {
    /// Runs an instant query; the result vector.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-G"])
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.1))
            .args(["--data-urlencode", &format!("query={q}")])
            .output()
            .expect("curl");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The first sample's value of `q`, once Prometheus has one that `ok` accepts.
    fn wait_for(&self, q: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.query(q);
            let v = r.first().and_then(|s| s["value"][1].as_str()).and_then(|s| s.parse::<f64>().ok());
            if let Some(v) = v.filter(|v| ok(*v)) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "Prometheus never answered {q} as expected: {r:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn start_prometheus(dir: &std::path::Path, agent: &AgentProcess) -> Prometheus {
    let bin = "/usr/bin/prometheus";
    assert!(
        std::path::Path::new(bin).exists(),
        "{bin} is missing: run scripts/setup.sh (it installs Debian's prometheus package)"
    );
    let target = agent.restconf.as_deref().unwrap().trim_start_matches("https://").trim_end_matches("/restconf");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: cats-sma\n    \
             scheme: https\n    metrics_path: /metrics\n    tls_config:\n      ca_file: {ca}\n    basic_auth:\n      \
             username: admin\n      password: {PASSWORD}\n    static_configs:\n      - targets: ['{target}']\n",
            ca = agent.state_dir.join("restconf-cert.pem").display()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    Prometheus(child, port)
}

#[tokio::test(flavor = "multi_thread")]
async fn openmetrics_prometheus_scrapes_reports_by_transport_and_verdict_under_nacm() {
    let dir = tempfile::tempdir().unwrap();
    let boot = boot_with_users(dir.path(), &[("bob", BOB_PW)]);
    let agent =
        start_agent(&dir.path().join("state"), &["--sci-listen", "127.0.0.1:0", "--config", boot.to_str().unwrap()]);
    let sci = agent.sci_addr.unwrap();
    let mut nc = Nc::open(&agent).await;
    let r = nc
        .edit("<scis><sci><csci-id>sci-1</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci></scis>")
        .await;
    assert!(r.contains("<ok/>"), "{r}");
    // bob may read nothing of cats-sma (NACM): its figures are not his to see.
    let r = nc
        .call(&format!(
            "<edit-config><target><running/></target><config><nacm xmlns=\"{NACM}\">\
             <groups><group><name>ops</name><user-name>bob</user-name></group></groups>\
             <rule-list><name>ops</name><group>ops</group><rule><name>no-engine</name>\
             <module-name>cats-sma</module-name><access-operations>read</access-operations>\
             <action>deny</action></rule></rule-list></nacm></config></edit-config>"
        ))
        .await;
    assert!(r.contains("<ok/>"), "{r}");

    // Two accepted, one malformed, one from an SCI nobody registered.
    for (seq, gas) in [(1, 500), (2, 520)] {
        let (status, body) = http_post(sci, "/reports", "application/json", report("sci-1", seq, gas).as_bytes()).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = http_post(sci, "/reports", "application/json", b"{not json").await;
    assert_eq!(status, 400);
    let (status, _) = http_post(sci, "/reports", "application/json", report("sci-x", 1, 10).as_bytes()).await;
    assert_eq!(status, 422);

    // The exposition itself, as curl sees it.
    let c = Curl::new(&agent);
    let r = c.get("//metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").unwrap_or("").starts_with("application/openmetrics-text"), "{:?}", r.headers);
    for line in [
        "cats_sma_reports_total{transport=\"http\",verdict=\"accepted\"} 2",
        "cats_sma_reports_total{transport=\"http\",verdict=\"malformed\"} 1",
        "cats_sma_site_gas{cs_id=\"AR1\"} 520",
        "cats_sma_cache_entries{state=\"healthy\"} 1",
        "cats_sma_rpcs_total{transport=\"netconf\",operation=\"edit-config\",error_tag=\"ok\"} 2",
    ] {
        assert!(r.body.contains(line), "{line} not in:\n{}", r.body);
    }
    assert!(r.body.contains("cats_sma_ingest_latency_seconds_count"), "{}", r.body);
    assert!(r.body.ends_with("# EOF\n"));
    // Without credentials: 401; bob sees the management figures, none of the engine's.
    let mut anon = Curl::new(&agent);
    anon.user = None;
    assert_eq!(anon.get("//metrics").status, 401);
    let r = c.as_user("bob", BOB_PW).get("//metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("cats_sma_rpcs_total") && !r.body.contains("cats_sma_reports_total"), "{}", r.body);
    assert!(!r.body.contains("site_gas") && !r.body.contains("ingest_latency"), "{}", r.body);
    assert_eq!(c.call("POST", "//metrics", &[], Some("")).status, 405);

    // A real Prometheus scrapes it over HTTPS with Basic authentication.
    let prom = start_prometheus(dir.path(), &agent);
    prom.wait_for("up{job=\"cats-sma\"}", |v| v == 1.0);
    let accepted = prom.wait_for("cats_sma_reports_total{transport=\"http\",verdict=\"accepted\"}", |_| true);
    assert_eq!(accepted, 2.0);
    // A third report shows up in the next scrapes.
    let (status, body) = http_post(sci, "/reports", "application/json", report("sci-1", 3, 540).as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    prom.wait_for("cats_sma_reports_total{transport=\"http\",verdict=\"accepted\"}", |v| v == 3.0);
    prom.wait_for("cats_sma_site_gas{cs_id=\"AR1\"}", |v| v == 540.0);
    prom.wait_for("sum(cats_sma_rejections_total)", |v| v == 2.0);
    prom.wait_for("cats_sma_ingest_latency_seconds_count", |v| v >= 3.0);
}
