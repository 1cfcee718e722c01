//! Seed 004, Protocol Adapter (centralized model, gRPC): the real agent binary with a
//! `grpc://` C-PS peer configured over NETCONF, and the reference C-PS serving the stream
//! (`src/cps/reference/grpc.rs`): SCI reports reach the Computing Service Table, the C-PS's
//! full-sync request, query and policy update go the other way (the update through the
//! datastore: visible in running), a slow C-PS fills the bounded buffer (drops counted), and
//! a C-PS restart mid-stream ends in a new stream, a full sync and a continuing sequence.

mod common;
mod cps_support;

use std::time::Duration;

use cats_sma::cps::auth::hex;
use cats_sma::cps::grpc::pb;
use cats_sma::cps::reference::{CpsConfig, CpsState, RefGrpc};
use common::{connect, http_post, rpc, start_agent, RawSession, PASSWORD};
use cps_support::*;

fn peer_config(addr: std::net::SocketAddr, extra: &str) -> String {
    format!(
        r#"<edit-config><target><running/></target><config>
        <cats-sma xmlns="urn:cats-sma:yang:cats-sma">
          <agent><csma-id>{CSMA}</csma-id><site-id>{SITE}</site-id></agent>
          <scis><sci><csci-id>188.3.67.3:67</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>
               <sci><csci-id>188.3.67.4:70</csci-id><cs-id>LLM1</cs-id><authentication>none</authentication></sci></scis>
          <policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control>
            <min-interval>0</min-interval></update-control></policy>
          <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer>
            <name>ref</name><url>grpc://{addr}</url><allowed-cs-id>AR1</allowed-cs-id>
            <psk><key-id>{KEY_ID}</key-id><key>{}</key></psk>
            <backoff-initial>50</backoff-initial><backoff-max>300</backoff-max>{extra}
          </peer></c-ps>
        </cats-sma></config></edit-config>"#,
        hex(SECRET)
    )
}

fn report(csci: &str, cs: &str, seq: u64, gas: u32) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{}","gas":{gas},"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

const SESSION: &str = r#"<get><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma">
    <c-ps xmlns="urn:cats-sma:yang:cats-sma-cps"><peer><name>ref</name><session/></peer></c-ps></cats-sma></filter></get>"#;

/// A leaf of the session's operational state.
async fn session_leaf(s: &mut RawSession, leaf: &str) -> Option<String> {
    let r = s.rpc11(&rpc(50, SESSION)).await;
    let open = format!("<{leaf}>");
    let start = r.find(&open)? + open.len();
    let end = r[start..].find(&format!("</{leaf}>"))? + start;
    Some(r[start..end].to_owned())
}

async fn until(s: &mut RawSession, what: &str, leaf: &str, ok: impl Fn(&str) -> bool) -> String {
    for _ in 0..400 {
        if let Some(v) = session_leaf(s, leaf).await.filter(|v| ok(v)) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: {}", s.rpc11(&rpc(51, SESSION)).await);
}

async fn grpc_cps(config: CpsConfig) -> RefGrpc {
    RefGrpc::start(free_addr(), CpsState::new(config).unwrap()).await.unwrap()
}

fn answers(g: &RefGrpc) -> Vec<pb::csma_body::Kind> {
    g.streams.answers.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_grpc_stream_carries_reports_out_and_sync_query_policy_in() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let g = grpc_cps(cps_config()).await;
    let state = g.streams.clone();
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    // The C-PS acts as cps-operator, whom NACM lets write the policy subtree.
    let r = s.rpc11(&rpc(1, &peer_config(g.addr, "<policy-user>cps-operator</policy-user>"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let r = s.rpc11(&rpc(2, NACM_CPS_OPERATOR)).await;
    assert!(r.contains("<ok/>"), "{r}");
    for (csci, cs) in [("188.3.67.3:67", "AR1"), ("188.3.67.4:70", "LLM1")] {
        let (status, body) = http_post(sci, "/reports", "application/json", report(csci, cs, 1, 400).as_bytes()).await;
        assert_eq!(status, 200, "{body}");
    }
    until(&mut s, "connected", "state", |v| v == "connected").await;
    let cps = CpsStateView(&g);
    wait_for("AR1 in the C-PS table, never LLM1", || cps.services() == vec![("AR1".into(), 400)]).await;
    assert_eq!(session_leaf(&mut s, "streams-opened").await.as_deref(), Some("1"));

    // A full-sync request on the stream: a new full snapshot.
    let before = cps.full_snapshots();
    assert!(g.send(SITE, pb::cps_body::Kind::FullSync(pb::FullSyncRequest { reason: "test".into() })));
    wait_for("a full snapshot after the request", || cps.full_snapshots() > before).await;
    until(&mut s, "the request counted", "full-sync-requests", |v| v == "1").await;

    // A query: the site as this C-PS may see it.
    assert!(g.send(SITE, pb::cps_body::Kind::Query(pb::Query { query_id: 5, cs_id: String::new() })));
    wait_for("the answer", || {
        answers(&g).iter().any(|a| matches!(a, pb::csma_body::Kind::Answer(q) if q.query_id == 5))
    })
    .await;
    let a = answers(&g)
        .into_iter()
        .find_map(|a| match a {
            pb::csma_body::Kind::Answer(q) if q.query_id == 5 => Some(q),
            _ => None,
        })
        .unwrap();
    let st = a.state.expect("a state");
    assert_eq!(st.services.iter().map(|s| (s.cs_id.as_str(), s.gas)).collect::<Vec<_>>(), [("AR1", 400)]);

    // A policy update, through the datastore: in running afterwards.
    let edit = r#"<cats-sma xmlns="urn:cats-sma:yang:cats-sma"><policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><heartbeat-interval>45</heartbeat-interval></update-control></policy></cats-sma>"#;
    let update = pb::PolicyUpdate { update_id: 9, format: pb::EditFormat::Xml as i32, config: edit.into() };
    assert!(g.send(SITE, pb::cps_body::Kind::Policy(update)));
    let result = policy_result(&g, 9).await;
    assert!(result.applied, "{result:?}");
    let r = s.rpc11(&rpc(3, UPDATE_CONTROL)).await;
    assert!(r.contains("<heartbeat-interval>45</heartbeat-interval>"), "{r}");
    assert!(state.is_open(SITE));

    // The same update sent again (a C-PS that lost its result when a stream broke) is
    // answered with its first outcome and not applied twice: an operator's later change
    // stays. The same id with another edit is a new update.
    let set = |id: u32, v: u32| {
        rpc(
            id,
            &format!(
                "<edit-config><target><running/></target><config>{}</config></edit-config>",
                edit.replace(">45<", &format!(">{v}<"))
            ),
        )
    };
    assert!(s.rpc11(&set(30, 50)).await.contains("<ok/>"));
    let applied = session_leaf(&mut s, "policy-updates-applied").await;
    assert_eq!(applied.as_deref(), Some("1"));
    let update = pb::PolicyUpdate { update_id: 9, format: pb::EditFormat::Xml as i32, config: edit.into() };
    assert!(g.send(SITE, pb::cps_body::Kind::Policy(update)));
    let results = |id: u64| {
        answers(&g)
            .into_iter()
            .filter_map(|a| match a {
                pb::csma_body::Kind::PolicyResult(r) if r.update_id == id => Some(r),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    wait_for("the second result of update 9", || results(9).len() == 2).await;
    assert_eq!(results(9)[0], results(9)[1]);
    let r = s.rpc11(&rpc(31, UPDATE_CONTROL)).await;
    assert!(r.contains("<heartbeat-interval>50</heartbeat-interval>"), "applied once only: {r}");
    assert_eq!(session_leaf(&mut s, "policy-updates-applied").await, applied, "not counted twice");
    let update = pb::PolicyUpdate {
        update_id: 9,
        format: pb::EditFormat::Xml as i32,
        config: edit.replace("<update-control>", "<update-control> "),
    };
    assert!(g.send(SITE, pb::cps_body::Kind::Policy(update)));
    wait_for("the third result of update 9", || results(9).len() == 3).await;
    assert!(results(9)[2].applied, "{:?}", results(9));
    let r = s.rpc11(&rpc(32, UPDATE_CONTROL)).await;
    assert!(r.contains("<heartbeat-interval>45</heartbeat-interval>"), "another edit under the same id applies: {r}");

    // RFC 8341 3.2: the recovery user is outside NACM; a C-PS configured to act as it has its
    // updates refused, running unchanged.
    let r = s.rpc11(&rpc(4, &peer_config(g.addr, "<policy-user>admin</policy-user>"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    wait_for("a new stream", || state.opened.load(std::sync::atomic::Ordering::Relaxed) >= 2 && state.is_open(SITE))
        .await;
    let edit = edit.replace(">45<", ">47<");
    let update = pb::PolicyUpdate { update_id: 10, format: pb::EditFormat::Xml as i32, config: edit };
    assert!(g.send(SITE, pb::cps_body::Kind::Policy(update)));
    let result = policy_result(&g, 10).await;
    assert!(
        !result.applied && result.error_tag == "access-denied" && result.message.contains("recovery"),
        "{result:?}"
    );
    let r = s.rpc11(&rpc(5, UPDATE_CONTROL)).await;
    assert!(r.contains("<heartbeat-interval>45</heartbeat-interval>"), "{r}");
    g.stop().await;
}

/// The C-SMA's answer to policy update `id`, once it came.
async fn policy_result(g: &RefGrpc, id: u64) -> pb::PolicyResult {
    let find = || {
        answers(g).into_iter().find_map(|a| match a {
            pb::csma_body::Kind::PolicyResult(r) if r.update_id == id => Some(r),
            _ => None,
        })
    };
    wait_for("the policy result", || find().is_some()).await;
    find().expect("a policy result")
}

/// running's policy/update-control.
const UPDATE_CONTROL: &str = r#"<get-config><source><running/></source><filter type="subtree"><cats-sma xmlns="urn:cats-sma:yang:cats-sma"><policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control/></policy></cats-sma></filter></get-config>"#;

/// NACM rules that let `cps-operator` write `/cats-sma/policy` and nothing else.
const NACM_CPS_OPERATOR: &str = r#"<edit-config><target><running/></target><config>
  <nacm xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-acm">
    <groups><group><name>cps</name><user-name>cps-operator</user-name></group></groups>
    <rule-list><name>cps</name><group>cps</group>
      <rule><name>policy</name><module-name>*</module-name>
        <path xmlns:c="urn:cats-sma:yang:cats-sma" xmlns:p="urn:cats-sma:yang:cats-sma-policy">/c:cats-sma/p:policy</path>
        <access-operations>create update delete</access-operations><action>permit</action></rule>
    </rule-list></nacm></config></edit-config>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_cps_failure_a_slow_grpc_cps_fills_the_bounded_buffer_and_drops_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    // Each Advertisement waits 400 ms at the C-PS; the C-SMA keeps two and sends one at a time.
    let g = grpc_cps(CpsConfig { ack_delay_ms: 400, ..cps_config() }).await;
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let r = s.rpc11(&rpc(1, &peer_config(g.addr, "<buffer-size>2</buffer-size><batch-size>1</batch-size>"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    until(&mut s, "connected", "state", |v| v == "connected").await;
    // GAS alternating by 25-33 %: each report is a change worth advertising (not an anomaly).
    for seq in 1..=12u64 {
        let gas = if seq % 2 == 0 { 400 } else { 300 };
        let (status, body) =
            http_post(sci, "/reports", "application/json", report("188.3.67.3:67", "AR1", seq, gas).as_bytes()).await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let dropped: u64 = until(&mut s, "drops counted", "dropped-updates", |v| v != "0").await.parse().unwrap();
    assert!(dropped > 0);
    // Never more than the buffer holds; the session stays up (slow is not failed).
    let buffered: u64 = session_leaf(&mut s, "buffered-updates").await.unwrap().parse().unwrap();
    assert!(buffered <= 2, "buffered {buffered}");
    assert_eq!(session_leaf(&mut s, "state").await.as_deref(), Some("connected"));
    // The gap makes the C-SMA send a full snapshot: the C-PS ends with the last value.
    let cps = CpsStateView(&g);
    wait_for("the last value at the C-PS", || cps.services() == vec![("AR1".into(), 400)]).await;
    g.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_cps_failure_a_grpc_cps_restart_mid_stream_reconnects_full_syncs_and_the_sequence_continues() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let state = CpsState::new(cps_config()).unwrap();
    let g = RefGrpc::start(free_addr(), state.clone()).await.unwrap();
    let addr = g.addr;
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let r = s.rpc11(&rpc(1, &peer_config(addr, ""))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, _) =
        http_post(sci, "/reports", "application/json", report("188.3.67.3:67", "AR1", 1, 400).as_bytes()).await;
    assert_eq!(status, 200);
    wait_for("AR1 at the C-PS", || cst_services(&state) == vec![("AR1".into(), 400)]).await;
    let seq_before = acked(&state);
    let snaps_before = full_snapshots(&state);

    // The C-PS goes away mid-stream (its table kept, as after a quick restart) ...
    g.stop().await;
    until(&mut s, "backoff", "state", |v| v == "backoff").await;
    // ... and comes back on the same port.
    let g = RefGrpc::start(addr, state.clone()).await.unwrap();
    wait_for("a new stream", || g.streams.is_open(SITE)).await;
    wait_for("a full snapshot on the new stream", || full_snapshots(&state) > snaps_before).await;
    assert!(acked(&state) > seq_before, "the sequence continues: {} after {seq_before}", acked(&state));
    until(&mut s, "connected again", "state", |v| v == "connected").await;
    let opened: u64 = session_leaf(&mut s, "streams-opened").await.unwrap().parse().unwrap();
    assert_eq!(opened, 2, "a stream before the restart and one after, nothing more");
    assert_eq!(g.streams.opened.load(std::sync::atomic::Ordering::Relaxed), 1);
    g.stop().await;
}

/// What the reference C-PS behind a [`RefGrpc`] holds.
struct CpsStateView<'a>(&'a RefGrpc);

impl CpsStateView<'_> {
    fn services(&self) -> Vec<(String, u32)> {
        cst_services(self.0.state())
    }
    fn full_snapshots(&self) -> u64 {
        full_snapshots(self.0.state())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_grpcs_verifies_the_cps_certificate_and_presents_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    // A CA, a server certificate for localhost, a client certificate; and a foreign CA.
    let pki = common::TestPki::new(dir.path(), "cps test CA");
    let p = |n: &str| pki.path(n);
    pki.leaf("srv", &["localhost"]);
    pki.leaf("cli", &[CSMA]);
    pki.other_ca("other-ca.pem");
    let config = CpsConfig {
        tls_cert: Some(p("srv.pem")),
        tls_key: Some(p("srv.key")),
        client_ca: Some(p("ca.pem")),
        ..cps_config()
    };
    let g = grpc_cps(config).await;
    let agent_dir = tempfile::tempdir().unwrap();
    let agent = start_agent(agent_dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let tls = |ca: &str| {
        format!(
            "<tls><trusted-ca-file>{}</trusted-ca-file><server-name>localhost</server-name>\
             <client-certificate-file>{}</client-certificate-file><client-key-file>{}</client-key-file></tls>",
            p(ca),
            p("cli.pem"),
            p("cli.key")
        )
    };
    let grpcs = |ca: &str| peer_config(g.addr, &tls(ca)).replace("grpc://", "grpcs://");
    // A trust anchor the C-PS's certificate does not chain to: refused, backoff, TLS error.
    let r = s.rpc11(&rpc(1, &grpcs("other-ca.pem"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    until(&mut s, "a TLS failure", "last-error", |v| v.contains("TLS")).await;
    assert!(!g.streams.is_open(SITE));
    // The right one: connected, with the client certificate the C-PS requires.
    let r = s.rpc11(&rpc(2, &grpcs("ca.pem"))).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, _) =
        http_post(sci, "/reports", "application/json", report("188.3.67.3:67", "AR1", 1, 400).as_bytes()).await;
    assert_eq!(status, 200);
    until(&mut s, "connected over TLS", "state", |v| v == "connected").await;
    let cps = CpsStateView(&g);
    wait_for("AR1 over grpcs", || cps.services() == vec![("AR1".into(), 400)]).await;
    // grpcs without tls, grpc with tls: refused at commit.
    let other = |extra: &str| peer_config(g.addr, extra).replace("<name>ref</name>", "<name>other</name>");
    let r = s.rpc11(&rpc(3, &other("").replace("grpc://", "grpcs://"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("grpcs url needs the 'tls' container"), "{r}");
    let r = s.rpc11(&rpc(4, &other(&tls("ca.pem")))).await;
    assert!(r.contains("<rpc-error>") && r.contains("not grpcs"), "{r}");
    // No leaf that changes nothing: REST-only leaves on a gRPC peer, policy-user on a REST one.
    let r = s.rpc11(&rpc(5, &other("<encoding>cbor</encoding>"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("'encoding' applies to REST peers only"), "{r}");
    let r = s.rpc11(&rpc(6, &other("<compression>gzip</compression>"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("'compression' applies to REST peers only"), "{r}");
    let r = s.rpc11(&rpc(7, &other("<policy-user>admin</policy-user>").replace("grpc://", "http://"))).await;
    assert!(r.contains("<rpc-error>") && r.contains("'policy-user' applies to gRPC peers only"), "{r}");
    g.stop().await;
}

/// A gRPC peer of the adapters (no agent): settings of `cps_support` with a grpc url.
fn grpc_peer(
    name: &str,
    addr: std::net::SocketAddr,
    role: cats_sma::cps::session::Role,
) -> (cats_sma::cps::session::PeerSettings, std::sync::Arc<cats_sma::cps::grpc::GrpcLink>) {
    use cats_sma::cps::grpc::{GrpcEndpoint, GrpcLink};
    let mut s = settings(name, addr, role, 100);
    s.url = format!("grpc://{addr}");
    s.gzip = false;
    let link = GrpcLink::new(GrpcEndpoint::parse(&s.url).unwrap(), None, Duration::from_secs(2), None).unwrap();
    (s, std::sync::Arc::new(link))
}

// Seed 004, C-PS Failure Handling: "the C-SMA MAY fall back to an alternative C-PS" — the
// same session logic over the gRPC stream: the fallback opens its stream only while the
// primary is down, and closes it when the primary is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_cps_failure_a_grpc_fallback_takes_over_while_the_primary_is_down() {
    use cats_sma::cps::session::{Role, SessionState};
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let a = free_addr();
    let pstate = CpsState::new(cps_config()).unwrap();
    let primary = RefGrpc::start(a, pstate.clone()).await.unwrap();
    let fallback = grpc_cps(cps_config()).await;
    let adapters = ctl.start_adapters();
    let (ps, pl) = grpc_peer("primary", a, Role::Primary);
    let (fs, fl) = grpc_peer("backup", fallback.addr, Role::Fallback);
    adapters.start_peer(ps, pl);
    adapters.start_peer(fs, fl);
    wait_for("primary in sync", || cst_services(&pstate) == view_services(&ctl)).await;
    let fb = adapters.peer("backup").unwrap();
    assert_eq!(fb.state(), SessionState::Disconnected, "fallback on standby");
    assert!(!fallback.streams.is_open(SITE), "no stream while on standby");

    primary.stop().await;
    ctl.delta("AR1", 80);
    let fview = CpsStateView(&fallback);
    wait_for("fallback in sync", || fview.services() == vec![("AR1".into(), 80)]).await;
    assert!(fallback.streams.is_open(SITE));

    let primary = RefGrpc::start(a, pstate.clone()).await.unwrap();
    wait_for("primary resumed", || cst_services(&pstate) == vec![("AR1".into(), 80)]).await;
    wait_for("fallback standby", || fb.state() == SessionState::Disconnected).await;
    wait_for("the fallback's stream closed", || !fallback.streams.is_open(SITE)).await;
    adapters.shutdown();
    primary.stop().await;
    fallback.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_cps_lists_its_grpc_service_by_server_reflection() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let g = grpc_cps(cps_config()).await;
    let ch = tonic::transport::Channel::from_shared(format!("http://{}", g.addr)).unwrap().connect().await.unwrap();
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies =
        ServerReflectionClient::new(ch).server_reflection_info(tokio_stream::iter([req])).await.unwrap().into_inner();
    let reply = replies.message().await.unwrap().expect("a reply");
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else { panic!("{reply:?}") };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"cats.sma.v1.CpsLink".to_string()), "{names:?}");
    g.stop().await;
}

// Seed 004, Periodic Synchronization: "the C-SMA MAY use a lightweight refresh message
// (e.g., keepalive) to extend the C-PS's cache TTL" — on the stream too: a heartbeat the
// C-PS already holds goes as a Keepalive, acknowledged like REST's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_an_unchanged_heartbeat_goes_as_a_keepalive_on_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), &["--sci-listen", "127.0.0.1:0"]);
    let sci = agent.sci_addr.expect("SCI collector address");
    let g = grpc_cps(cps_config()).await;
    let mut s = connect(agent.addr, "admin", PASSWORD).await.unwrap();
    s.hello(true).await;
    let cfg = peer_config(g.addr, "").replace(
        "<min-interval>0</min-interval>",
        "<min-interval>0</min-interval><heartbeat-interval>1</heartbeat-interval>",
    );
    let r = s.rpc11(&rpc(1, &cfg)).await;
    assert!(r.contains("<ok/>"), "{r}");
    let (status, _) =
        http_post(sci, "/reports", "application/json", report("188.3.67.3:67", "AR1", 1, 400).as_bytes()).await;
    assert_eq!(status, 200);
    until(&mut s, "keepalives sent", "keepalives-sent", |v| v != "0").await;
    assert_eq!(session_leaf(&mut s, "keepalive-supported").await.as_deref(), Some("true"));
    wait_for("keepalives at the C-PS", || keepalives(g.state()) > 0).await;
    g.stop().await;
}
