//! Wiring: state directory, datastores, users, the management core and its front ends
//! (NETCONF, RESTCONF), the engine and the C-PS adapters, started together and stopped together.

use std::net::SocketAddr;
use std::sync::Arc;

use tracing::info;

use crate::config::state::{FirstStart, StateDir, ADMIN_PASSWORD_ENV, ADMIN_USER};
use crate::config::Bootstrap;
use crate::datastore::Datastores;
use crate::mgmt::users::UserStore;
use crate::netconf;

/// A running agent.
pub struct Agent {
    /// The management core every front end shares.
    pub core: Arc<crate::mgmt::Core>,
    pub netconf_addrs: Vec<SocketAddr>,
    /// Where SCIs POST reports, when HTTP collection is enabled.
    pub sci_http: Option<SocketAddr>,
    /// What the SCI listener speaks (https / http) and its server certificate.
    pub sci_tls: Arc<crate::engine::collect::http::TlsStatus>,
    /// Where SCIs stream reports over gRPC, when gRPC collection is enabled, and whether it
    /// speaks TLS.
    pub sci_grpc: Option<SocketAddr>,
    pub sci_grpc_tls: Arc<crate::engine::collect::tls_status::TlsStatus>,
    /// The metric engine (its update stream feeds the C-PS adapters and YANG-Push).
    pub engine: crate::engine::Engine,
    /// The C-PS REST adapters (one session per configured peer).
    pub cps: Arc<crate::cps::Adapters>,
    /// The BGP-LS speaker (routing/bgp-ls; idle until configured).
    pub bgp: Arc<crate::routing::bgp::Speaker>,
    /// Seed 000's IP-layer metrics (ip-metrics; the collector idle until enabled).
    pub ipm: Arc<crate::ipm::Ipm>,
    /// The RESTCONF server and where it listens, when enabled.
    pub restconf: Option<(Arc<crate::restconf::Restconf>, crate::restconf::Listening)>,
    /// NETCONF over TLS (RFC 7589) and Call Home (RFC 8071), configured in the datastore.
    pub netconf_tls: Arc<netconf::tls::Status>,
    pub call_home: Arc<netconf::call_home::CallHome>,
    pub state: StateDir,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Agent {
    /// Starts everything; returns once the NETCONF listeners are bound.
    pub async fn start(boot: Bootstrap) -> Result<Agent, String> {
        crate::config::message_limits::install(boot.message_limits.clone());
        let state_path = boot.state_dir();
        let state =
            StateDir::open(&state_path).map_err(|e| format!("state directory {}: {e}", state_path.display()))?;
        let audit = crate::mgmt::audit::Audit::open(&state.path, boot.audit.clone())
            .map_err(|e| format!("audit trail in {}: {e}", state.path.display()))?;
        crate::mgmt::audit::install(audit);
        state.audit_tightened();
        let host_key = state.host_key().map_err(|e| format!("SSH host key: {e}"))?;
        // What clients and coordinators pin (hierarchy/subordinate/host-key).
        let public = host_key.public_key();
        tracing::info!(
            "SSH host key {} ({})",
            public.to_openssh().unwrap_or_default(),
            public.fingerprint(russh::keys::HashAlg::Sha256)
        );
        let (mut entries, first) = state.credentials().map_err(|e| format!("credentials: {e}"))?;
        entries.extend(boot.users.iter().cloned());
        let users = UserStore::from_entries(&entries)?;
        let ctx = crate::yang::context();
        let datastores =
            Arc::new(Datastores::open(ctx, Some(state.startup_file())).map_err(|e| format!("datastores: {e}"))?);
        let recovery = boot.recovery_user.clone().unwrap_or_else(|| ADMIN_USER.to_owned());
        crate::mgmt::filter::configure(boot.filters.clone());
        let nacm = crate::nacm::Nacm::new(Some(recovery));
        datastores.with_tree(crate::datastore::Datastore::Running, |t| nacm.load(t)).map_err(|e| e.to_string())?;
        datastores.register_consumer(nacm.clone());
        datastores.set_write_guard(nacm.clone());
        datastores.register_state_provider(nacm.clone());
        datastores.register_state_provider(Arc::new(crate::mgmt::audit::AuditState));
        let names = nacm.clone();
        crate::mgmt::audit::set_user_resolver(move |s| names.user_of(s));
        let limits = crate::mgmt::auth_limits::Limits::new(boot.limits.clone(), &users);
        datastores.register_state_provider(Arc::new(crate::mgmt::auth_limits::LimitsState {
            limits: Arc::downgrade(&limits),
        }));
        let server = crate::mgmt::Core::new(datastores.clone(), users, boot.netconf.clone(), nacm, limits);
        netconf::attach(&server);
        server.events.configure(&boot.peer_limits);
        crate::cps::transport::set_reply_limit(boot.peer_limits.cps_reply_bytes);
        let Collectors { engine, sci_http, sci_tls, sci_grpc, sci_grpc_tls } =
            start_engine(&datastores, &server, &boot, &state.path).await?;
        let keys = crate::cps::NorthboundKeys::from_state_dir(&state.path, boot.cps.signing_algorithm)
            .map_err(|e| format!("C-PS signing key / nonces in {}: {e}", state.path.display()))?;
        let cps = start_cps(&datastores, &server, &engine, keys)?;
        let bgp = start_bgp(&datastores, &server, &engine, &cps)?;
        let ipm = start_ipm(&datastores, &server, &engine)?;
        start_hierarchy(&datastores, &server, &engine)?;
        // Configured subscriptions (RFC 8639 section 2.5) once the engine feeds on-change.
        let configured = datastores
            .with_tree(crate::datastore::Datastore::Running, |t| crate::push::configured::Configured::start(&server, t))
            .map_err(|e| e.to_string())?;
        datastores.register_consumer(configured.clone());
        datastores.register_state_provider(Arc::new(crate::push::configured::ConfiguredState { configured }));
        let restconf = if boot.restconf.enabled {
            Some(crate::restconf::start(server.clone(), boot.restconf.clone(), &state.path).await?)
        } else {
            None
        };
        let ssh_config = Arc::new(netconf::ssh::ssh_config(host_key.clone()));
        let (netconf_tls, call_home) = netconf::tls::start(&server, ssh_config, state.path.clone())?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(netconf::ssh::serve(server.clone(), host_key, move |addrs| {
            let _ = tx.send(addrs.to_vec());
        }));
        let addrs = match rx.await {
            Ok(a) => a,
            Err(_) => {
                return Err(match task.await {
                    Ok(Err(e)) => format!("NETCONF listener: {e}"),
                    _ => "NETCONF listener failed to start".into(),
                })
            }
        };
        if let Some(first) = first {
            announce_first_start(&first, &addrs);
        }
        let sci = match sci_http {
            Some(a) => format!("; SCI reports: {}://{a}/reports", sci_tls.scheme()),
            None => "; SCI HTTP collection disabled".into(),
        };
        let sci = match sci_grpc {
            Some(a) => format!("{sci}; SCI gRPC: {}://{a}", if sci_grpc_tls.is_tls() { "grpcs" } else { "grpc" }),
            None => sci,
        };
        let rc = match &restconf {
            Some((_, l)) => format!(
                "; RESTCONF: {}",
                l.addrs.iter().map(|a| format!("{}://{a}/restconf", l.scheme)).collect::<Vec<_>>().join(", ")
            ),
            None => "; RESTCONF disabled".into(),
        };
        info!(state_dir = %state.path.display(), "cats-sma ready: NETCONF over SSH listening on {}{sci}{rc}", list(&addrs));
        Ok(Agent {
            core: server,
            netconf_addrs: addrs,
            sci_http,
            sci_tls,
            sci_grpc,
            sci_grpc_tls,
            engine,
            cps,
            bgp,
            ipm,
            restconf,
            netconf_tls,
            call_home,
            state,
            task,
        })
    }

    /// Stops accepting, closes sessions and waits for the listeners to end.
    pub async fn shutdown(self) {
        self.cps.shutdown();
        self.bgp.shutdown();
        self.engine
            .query(|core| {
                let now = core.clock.now();
                if let Some(r) = core.recorder.as_mut() {
                    r.flush(now);
                }
            })
            .await;
        // The engine takes no report after this; the next run continues its history.
        match crate::engine::restart::save(&self.engine, &self.state.path).await {
            Ok(n) => info!(histories = n, "validator history saved for the next run"),
            Err(e) => tracing::warn!(
                "validator history not saved ({e}): the next run refuses reports timestamped before it starts, \
                 for one timestamp window"
            ),
        }
        let _ = self.core.shutdown.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await;
    }
}

/// Hands the engine what the last run saved of the validator's memory (`restart.rs`); after
/// an unclean stop, says so in the log and the audit trail.
async fn restore_validator_history(engine: &crate::engine::Engine, state_dir: &std::path::Path) -> Result<(), String> {
    use crate::engine::restart::{begin, Start};
    match begin(engine, state_dir).await.map_err(|e| format!("validator history in {}: {e}", state_dir.display()))? {
        Start::First => {}
        Start::Clean { restored } => info!(histories = restored, "validator history of the last run restored"),
        Start::Unclean { floor, why } => {
            tracing::warn!("{why}: reports timestamped before {floor} are refused as replay for one timestamp window");
            crate::mgmt::audit::event(crate::mgmt::audit::Category::StateFile)
                .outcome("unclean-stop")
                .field("path", state_dir.join(crate::engine::restart::HISTORY_FILE).display().to_string())
                .field("reason", why)
                .field("replay-floor", floor.to_rfc3339())
                .emit();
        }
    }
    Ok(())
}

/// What [`start_engine`] started: the engine and the SCI listeners' addresses and TLS.
struct Collectors {
    engine: crate::engine::Engine,
    sci_http: Option<SocketAddr>,
    sci_tls: Arc<crate::engine::collect::http::TlsStatus>,
    sci_grpc: Option<SocketAddr>,
    sci_grpc_tls: Arc<crate::engine::collect::tls_status::TlsStatus>,
}

/// Starts the metric engine: configuration from running, a consumer for later commits, its
/// state in the operational view, its notifications on the NETCONF stream, and the HTTP
/// and gRPC collectors.
async fn start_engine(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    boot: &Bootstrap,
    state_dir: &std::path::Path,
) -> Result<Collectors, String> {
    let (sci_listen, limits) = (boot.sci_listen, &boot.peer_limits);
    use crate::engine::collect::{grpc, http, tls_status};
    use crate::engine::northbound::{config, state};
    let weak = Arc::downgrade(server);
    let sink: crate::engine::NotificationSink =
        Arc::new(move |module: &'static str, name: &'static str, body: String| {
            if let Some(s) = weak.upgrade() {
                s.events.publish(module, name, body);
            }
        });
    let engine = crate::engine::Engine::start_with(crate::engine::clock::Clock::new(), sink, limits.clone());
    server.push.set_engine(engine.changes.clone());
    let (mut settings, mqtt_settings, pull_settings, grpc_settings) = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| {
            config::load_all(&engine, t);
            (
                http::settings(t),
                crate::engine::collect::mqtt::settings(t),
                crate::engine::collect::pull::settings(t),
                grpc::settings(t),
            )
        })
        .map_err(|e| e.to_string())?;
    // The recording starts with the configuration, before any report.
    if boot.record.path.is_some() {
        let xml = datastores
            .with_tree(crate::datastore::Datastore::Running, crate::record::config_xml)
            .map_err(|e| e.to_string())?;
        let opened = engine.start_recording(boot.record.clone(), xml).await?;
        info!(path = %opened, "recording SCI reports and configuration changes for cats-sma replay");
    }
    // The validator's memory from the last run, before any collector can deliver a report.
    restore_validator_history(&engine, state_dir).await?;
    let (pull_tx, pull_rx) = tokio::sync::watch::channel(pull_settings);
    let (now_tx, now_rx) = tokio::sync::mpsc::unbounded_channel();
    engine.submit(move |core| core.pull_requests = Some(now_tx));
    // Active probes of STALE SCIs run in a task of their own (seed 004, SCI Failure Detection).
    let (probe_tx, probe_rx) = tokio::sync::mpsc::unbounded_channel();
    engine.submit(move |core| core.failure.requests = Some(probe_tx));
    tokio::spawn(crate::engine::probe::serve(engine.clone(), probe_rx));
    datastores.register_state_provider(Arc::new(crate::engine::probe::FailureState { engine: engine.clone() }));
    let pull_status = crate::engine::collect::pull::PullStatus::default();
    let mqtt_status = crate::engine::collect::mqtt::MqttStatus::default();
    tokio::spawn(crate::engine::collect::pull::serve(engine.clone(), pull_rx.clone(), now_rx, pull_status.clone()));
    let (mqtt_tx, mqtt_rx) = tokio::sync::watch::channel(mqtt_settings);
    tokio::spawn(crate::engine::collect::mqtt::serve(engine.clone(), mqtt_rx, mqtt_status.clone()));
    datastores.register_state_provider(Arc::new(crate::engine::collect::state::CollectorState {
        ingress: engine.ingress.clone(),
        pull: pull_status,
        mqtt: mqtt_status,
    }));
    if let Some(a) = sci_listen {
        settings.listen = a;
        settings.enabled = true;
    }
    if boot.sci_plain_http {
        settings.force_plain();
    }
    let (http_tx, http_rx) = tokio::sync::watch::channel(settings);
    let (bound_tx, mut bound_rx) = tokio::sync::watch::channel(None);
    let (grpc_tx, grpc_rx) = tokio::sync::watch::channel(grpc_settings);
    let (grpc_bound_tx, mut grpc_bound_rx) = tokio::sync::watch::channel(None);
    datastores.register_consumer(Arc::new(config::EngineConfig {
        engine: engine.clone(),
        http: http_tx,
        http_override: sci_listen,
        http_plain: boot.sci_plain_http,
        grpc: grpc_tx,
        mqtt: mqtt_tx,
        pull: pull_tx,
        pending_policy: Default::default(),
        replay: false,
    }));
    datastores.register_state_provider(Arc::new(state::EngineState { engine: engine.clone() }));
    server.metrics.register(Arc::new(crate::engine::northbound::metrics::EngineMetrics { engine: engine.clone() }));
    server.register_app_rpc(
        "cats-sma",
        Arc::new(crate::engine::northbound::rpc::EngineRpcs { engine: engine.clone(), pull: pull_rx }),
    );
    let tls_status = Arc::new(http::TlsStatus::new(tls_status::HTTP));
    datastores.register_state_provider(tls_status.clone());
    tokio::spawn(http::serve(
        engine.clone(),
        http_rx,
        bound_tx,
        server.limits.sci_http.clone(),
        state_dir.to_owned(),
        tls_status.clone(),
    ));
    let grpc_tls = Arc::new(tls_status::TlsStatus::new(tls_status::GRPC));
    datastores.register_state_provider(grpc_tls.clone());
    tokio::spawn(grpc::serve(
        engine.clone(),
        grpc_rx,
        grpc_bound_tx,
        server.limits.sci_grpc.clone(),
        state_dir.to_owned(),
        grpc_tls.clone(),
    ));
    // The collectors report their first bind (or that they are disabled / failed).
    let wait = std::time::Duration::from_secs(5);
    let _ = tokio::join!(
        tokio::time::timeout(wait, bound_rx.changed()),
        tokio::time::timeout(wait, grpc_bound_rx.changed())
    );
    let (sci_http, sci_grpc) = (*bound_rx.borrow(), *grpc_bound_rx.borrow());
    Ok(Collectors { engine, sci_http, sci_tls: tls_status, sci_grpc, sci_grpc_tls: grpc_tls })
}

/// Starts the C-PS adapters: subscribed to the update controller before any peer starts (a
/// new session asks for its full snapshot), peers from running, a consumer for later
/// commits, the session state in the operational view, `c-ps-unreachable` on the stream.
fn start_cps(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    engine: &crate::engine::Engine,
    keys: crate::cps::NorthboundKeys,
) -> Result<Arc<crate::cps::Adapters>, String> {
    use crate::cps::session::{Hooks, Identity};
    use crate::engine::update::UpdateEvent;
    let updates = engine.updates.clone();
    let hints = engine.updates.clone();
    let detail = engine.updates.clone();
    let wake_engine = engine.waker();
    let weak = Arc::downgrade(server);
    let hooks = Hooks {
        resync: Arc::new(move |peer: &str| {
            let _ = updates.send(UpdateEvent::Resync { peer: Some(peer.to_owned()) });
        }),
        refresh_hint: Arc::new(move |peer: &str, interval| {
            let _ = hints.send(UpdateEvent::RefreshHint { peer: peer.to_owned(), interval });
        }),
        sci_detail: Arc::new(move |on| {
            let _ = detail.send(UpdateEvent::SciDetail(on));
            // Switched on: the engine sends every row now (the controller then gives every
            // C-PS a full snapshot with them), not at the next report or heartbeat.
            if on {
                wake_engine();
            }
        }),
        unreachable: Arc::new(move |u: &crate::cps::session::Unreachable| {
            let esc = |s: &str| crate::text::xml(s).into_owned();
            let body = format!(
                "<c-ps-unreachable xmlns=\"urn:cats-sma:yang:cats-sma\"><c-ps>{}</c-ps><url>{}</url>\
                 <backoff>{}</backoff><buffered-updates>{}</buffered-updates></c-ps-unreachable>",
                esc(&u.c_ps),
                esc(&u.url),
                u.backoff.as_secs_f64().ceil() as u32,
                u.buffered.min(u32::MAX as usize)
            );
            if let Some(s) = weak.upgrade() {
                s.events.publish("cats-sma", "c-ps-unreachable", body);
            }
        }),
    };
    let placeholder = Identity { csma_id: String::new(), site_id: String::new() };
    let adapters = crate::cps::Adapters::start(placeholder, engine.updates.subscribe(), hooks);
    adapters.set_keys(keys);
    adapters.set_northbound(Arc::new(crate::cps::grpc::policy::MgmtNorthbound { core: Arc::downgrade(server) }));
    let consumer = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| crate::cps::config::CpsConfig::load(adapters.clone(), t))
        .map_err(|e| e.to_string())?;
    datastores.register_consumer(Arc::new(consumer));
    datastores.register_state_provider(Arc::new(crate::cps::state::CpsState { adapters: adapters.clone() }));
    server.metrics.register(Arc::new(crate::cps::state::CpsMetrics { adapters: adapters.clone() }));
    start_overload(datastores, server, &adapters, engine)?;
    Ok(adapters)
}

/// Overload control (seed 003): its settings from running and later commits, its state in
/// the operational view, `overload-state-change` on the stream.
fn start_overload(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    cps: &Arc<crate::cps::Adapters>,
    engine: &crate::engine::Engine,
) -> Result<(), String> {
    use crate::overload::{config::OverloadConsumer, state::OverloadState, Transition};
    let overload = cps.registry.overload.clone();
    let weak = Arc::downgrade(server);
    let hook = Arc::new(move |t: &Transition| {
        let body = format!(
            "<overload-state-change xmlns=\"urn:cats-sma:yang:cats-sma-overload\"><direction>{}</direction>\
             <peer>{}</peer><overloaded>{}</overloaded><cause>{}</cause><sequence-number>{}</sequence-number>\
             <reduction-percentage>{}</reduction-percentage></overload-state-change>",
            t.direction.yang(),
            crate::text::xml(&t.peer),
            t.overloaded,
            t.cause,
            t.sequence,
            t.reduction
        );
        if let Some(s) = weak.upgrade() {
            s.events.publish("cats-sma-overload", "overload-state-change", body);
        }
    });
    overload.set_hook(hook.clone());
    engine.doic.set_hook(hook);
    let consumer = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| {
            OverloadConsumer::load(overload.clone(), engine.doic.clone(), t)
        })
        .map_err(|e| e.to_string())?;
    datastores.register_consumer(Arc::new(consumer));
    datastores.register_state_provider(Arc::new(OverloadState {
        registry: cps.registry.clone(),
        reporting: engine.doic.clone(),
    }));
    tokio::spawn(crate::overload::report::run_sampler(engine.clone()));
    Ok(())
}

/// The coordinator role (seed 004, Scalability): the subordinates from running and later
/// commits, their state in the operational view, `subordinate-state-change` on the stream.
fn start_hierarchy(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    engine: &crate::engine::Engine,
) -> Result<(), String> {
    use crate::hierarchy::{config, state::HierarchyState, Hierarchy, Status};
    let weak = Arc::downgrade(server);
    let notify = Arc::new(move |name: &str, status: Status, reason: &str, scis: u32| {
        let esc = |s: &str| crate::text::xml(s).into_owned();
        let body = format!(
            "<subordinate-state-change xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\"><subordinate>{}</subordinate>\
             <status>{}</status><reason>{}</reason><scis-contributed>{scis}</scis-contributed></subordinate-state-change>",
            esc(name),
            status.yang(),
            esc(reason)
        );
        if let Some(s) = weak.upgrade() {
            s.events.publish("cats-sma-hierarchy", "subordinate-state-change", body);
        }
    });
    let hierarchy = Hierarchy::new(engine.clone(), notify);
    let settings =
        datastores.with_tree(crate::datastore::Datastore::Running, config::settings).map_err(|e| e.to_string())?;
    hierarchy.configure(settings);
    datastores.register_consumer(Arc::new(config::HierarchyConsumer { hierarchy: hierarchy.clone() }));
    datastores.register_state_provider(Arc::new(HierarchyState { hierarchy }));
    Ok(())
}

/// The BGP-LS speaker, fed by the update controller like the C-PS adapters.
fn start_bgp(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    engine: &crate::engine::Engine,
    cps: &Arc<crate::cps::Adapters>,
) -> Result<Arc<crate::routing::bgp::Speaker>, String> {
    use crate::engine::update::UpdateEvent;
    use crate::routing::bgp::{session::SessionEvent, Hooks, Speaker, AUDIENCE};
    let subscribe = engine.updates.clone();
    let resync = engine.updates.clone();
    let registry = cps.registry.clone();
    let peers = cps.registry.clone();
    let changes = cps.registry.clone();
    let weak = Arc::downgrade(server);
    let hooks = Hooks {
        cps_unreachable: Arc::new(move || peers.peers().iter().all(|p| crate::cps::session::lock(&p.status).down)),
        cps_changed: Arc::new(move || changes.changed.subscribe()),
        subscribe: Arc::new(move || subscribe.subscribe()),
        resync: Arc::new(move || {
            let _ = resync.send(UpdateEvent::Resync { peer: Some(AUDIENCE.to_owned()) });
        }),
        site_id: Arc::new(move || registry.identity().site_id),
        events: Arc::new(move |e: &SessionEvent| {
            let reason =
                e.reason.as_deref().map(|r| format!("<reason>{}</reason>", crate::text::xml(r))).unwrap_or_default();
            let body = format!(
                "<bgp-ls-session xmlns=\"urn:cats-sma:yang:cats-sma-routing\"><neighbor>{}</neighbor>\
                 <state>{}</state>{reason}</bgp-ls-session>",
                e.neighbor,
                if e.up { "established" } else { "down" }
            );
            if let Some(s) = weak.upgrade() {
                s.events.publish("cats-sma-routing", "bgp-ls-session", body);
            }
        }),
    };
    let speaker = Speaker::new(hooks);
    let consumer = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| {
            crate::routing::bgp::config::BgpConfig::load(speaker.clone(), t)
        })
        .map_err(|e| e.to_string())?;
    datastores.register_consumer(Arc::new(consumer));
    datastores.register_state_provider(Arc::new(crate::routing::bgp::state::BgpState { speaker: speaker.clone() }));
    start_grasp(datastores, engine, cps)?;
    Ok(speaker)
}

/// Seed 000: the IPFIX / NetFlow v9 collector, the indexes and the select-site RPC.
fn start_ipm(
    datastores: &Arc<Datastores>,
    server: &Arc<crate::mgmt::Core>,
    engine: &crate::engine::Engine,
) -> Result<Arc<crate::ipm::Ipm>, String> {
    let ipm = crate::ipm::Ipm::new(Some(engine.changes.clone()));
    let consumer = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| crate::ipm::config::IpmConsumer::load(ipm.clone(), t))
        .map_err(|e| e.to_string())?;
    datastores.register_consumer(Arc::new(consumer));
    datastores.register_state_provider(Arc::new(crate::ipm::state::IpmState { ipm: ipm.clone() }));
    server.register_app_rpc("cats-ip-metrics", Arc::new(crate::ipm::rpc::IpmRpcs { ipm: ipm.clone() }));
    Ok(ipm)
}

/// The GRASP objective CATS:ServiceMetrics, fed by the update controller.
fn start_grasp(
    datastores: &Arc<Datastores>,
    engine: &crate::engine::Engine,
    cps: &Arc<crate::cps::Adapters>,
) -> Result<(), String> {
    use crate::engine::update::UpdateEvent;
    use crate::routing::grasp::{Grasp, GraspConsumer, GraspState, Hooks, AUDIENCE};
    let subscribe = engine.updates.clone();
    let resync = engine.updates.clone();
    let registry = cps.registry.clone();
    let grasp = Grasp::new(Hooks {
        subscribe: Arc::new(move || subscribe.subscribe()),
        resync: Arc::new(move || {
            let _ = resync.send(UpdateEvent::Resync { peer: Some(AUDIENCE.to_owned()) });
        }),
        identity: Arc::new(move || registry.identity()),
    });
    let consumer = datastores
        .with_tree(crate::datastore::Datastore::Running, |t| GraspConsumer::load(grasp.clone(), t))
        .map_err(|e| e.to_string())?;
    datastores.register_consumer(Arc::new(consumer));
    datastores.register_state_provider(Arc::new(GraspState { grasp }));
    Ok(())
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

fn announce_first_start(first: &FirstStart, addrs: &[SocketAddr]) {
    let Some(addr) = addrs.first() else { return };
    eprintln!(
        "SCIs must authenticate (seed 004): register each with its credential in one request, as shown in \
         docs/configuration.md, \"Registering an SCI with a credential, in one step\"."
    );
    match &first.generated_password {
        Some(pw) => eprintln!(
            "First start: created user '{ADMIN_USER}' with password '{pw}' (shown once; stored only as an argon2 hash).\n\
             Log in with: ssh -p {} {ADMIN_USER}@{} -s netconf",
            addr.port(),
            addr.ip()
        ),
        None => eprintln!(
            "First start: created user '{ADMIN_USER}' with the password from {ADMIN_PASSWORD_ENV}.\n\
             Log in with: ssh -p {} {ADMIN_USER}@{} -s netconf",
            addr.port(),
            addr.ip()
        ),
    }
}
