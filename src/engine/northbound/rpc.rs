//! The engine's RPCs (cats-sma module): `resync` asks the update controller for a full
//! snapshot (to one C-PS or all), `clear-quarantine` releases held reports, `probe-sci`
//! probes the SCI now — its failure-detection probe, else a GET of its pull URL (seed 004:
//! active probes to tell SCI failure from partition),
//! `report-sci-failure` is the external health monitor's webhook (seed 004, SCI Failure
//! Detection: the SCI is FAILED at once), `local-steering` answers which SCI should serve
//! a CS-ID (`engine/steering.rs`).

use yang2::data::{Data, DataTree};

use crate::engine::update::UpdateEvent;
use crate::engine::Engine;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::AppRpc;

pub struct EngineRpcs {
    pub engine: Engine,
    pub pull: tokio::sync::watch::Receiver<crate::engine::collect::pull::PullSettings>,
}

fn input(t: &DataTree<'static>, rpc: &str, leaf: &str) -> Option<String> {
    t.find_path(&format!("/cats-sma:{rpc}/{leaf}")).ok().and_then(|n| n.value_canonical())
}

impl AppRpc for EngineRpcs {
    fn call(&self, module: &str, name: &str, t: &DataTree<'static>) -> Result<String, RpcError> {
        match (module, name) {
            ("cats-sma", "resync") => {
                let peer = input(t, "resync", "c-ps");
                self.engine.updates.send(UpdateEvent::Resync { peer }).map_err(|e| {
                    RpcError::application(
                        ErrorTag::OperationFailed,
                        format!("the update controller is not running: {e}"),
                    )
                })?;
                Ok(String::new())
            }
            ("cats-sma", "clear-quarantine") => {
                let csci = input(t, "clear-quarantine", "csci-id");
                let accept = input(t, "clear-quarantine", "accept").as_deref() == Some("true");
                // A stopping agent has saved the validator's memory: a report released now
                // would be unknown to the next run (`engine/restart.rs`).
                let released = self
                    .engine
                    .query_blocking(move |core| (!core.closed).then(|| core.clear_quarantine(csci.as_deref(), accept)))
                    .flatten()
                    .ok_or_else(|| {
                        RpcError::application(ErrorTag::OperationFailed, "the engine is stopping or not running")
                    })?;
                Ok(format!("<released xmlns=\"urn:cats-sma:yang:cats-sma\">{released}</released>"))
            }
            ("cats-sma", "probe-sci") => {
                let csci = input(t, "probe-sci", "csci-id").unwrap_or_default();
                let target = self.pull.borrow().get(&csci).cloned();
                let id = csci.clone();
                let (state, probe) = self
                    .engine
                    .query_blocking(move |core| {
                        let probe = core.failure.settings.targets.get(&id).cloned();
                        (
                            core.cache.get(&id).map(|e| e.state.yang()),
                            probe.map(|m| (m, core.failure.settings.timeout_for(&id))),
                        )
                    })
                    .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, "the engine is not running"))?;
                let ns = "urn:cats-sma:yang:cats-sma";
                let mut out = String::new();
                match (probe, target) {
                    // The SCI's configured probe (failure-detection) first, else its pull URL.
                    (Some((method, timeout)), _) => {
                        let started = std::time::Instant::now();
                        let handle = tokio::runtime::Handle::current();
                        let answer = tokio::task::block_in_place(|| {
                            handle.block_on(crate::engine::probe::probe(&method, timeout))
                        });
                        let rtt = started.elapsed().as_micros().min(u32::MAX as u128);
                        let reachable = !matches!(answer, crate::engine::probe::Answer::NoAnswer(_));
                        out.push_str(&format!("<reachable xmlns=\"{ns}\">{reachable}</reachable>"));
                        if reachable {
                            out.push_str(&format!("<rtt xmlns=\"{ns}\">{rtt}</rtt>"));
                        }
                    }
                    (None, Some(target)) => {
                        let started = std::time::Instant::now();
                        let handle = tokio::runtime::Handle::current();
                        let limit = self.engine.limits.pull_response_bytes;
                        let result = tokio::task::block_in_place(|| {
                            handle.block_on(crate::engine::collect::pull::probe(&csci, &target, limit))
                        });
                        let rtt = started.elapsed().as_micros().min(u32::MAX as u128);
                        out.push_str(&format!("<reachable xmlns=\"{ns}\">{}</reachable>", result.is_ok()));
                        if result.is_ok() {
                            out.push_str(&format!("<rtt xmlns=\"{ns}\">{rtt}</rtt>"));
                        }
                    }
                    // Neither a probe nor a pull URL: nothing to probe with.
                    (None, None) => out.push_str(&format!("<reachable xmlns=\"{ns}\">false</reachable>")),
                }
                if let Some(s) = state {
                    out.push_str(&format!("<state xmlns=\"{ns}\">{s}</state>"));
                }
                Ok(out)
            }
            ("cats-sma", "report-sci-failure") => {
                let csci = input(t, "report-sci-failure", "csci-id").unwrap_or_default();
                let detail = input(t, "report-sci-failure", "detail").unwrap_or_default();
                // RPC input is not validated against the data (a leafref to the registry
                // is not resolved): an SCI that is not registered is refused here.
                let (from, to) = self
                    .engine
                    .query_blocking(move |core| {
                        if !core.is_registered(&csci) {
                            let shown = crate::text::printable(&csci, 64);
                            return Err((ErrorTag::InvalidValue, format!("{shown} is not a registered SCI")));
                        }
                        core.health_monitor_failure(&csci, &detail).map_err(|e| (ErrorTag::OperationFailed, e))
                    })
                    .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, "the engine is not running"))?
                    .map_err(|(tag, e)| RpcError::application(tag, e).with_bad_element("csci-id"))?;
                let ns = "urn:cats-sma:yang:cats-sma";
                Ok(format!(
                    "<old-state xmlns=\"{ns}\">{}</old-state><new-state xmlns=\"{ns}\">{}</new-state>",
                    from.yang(),
                    to.yang()
                ))
            }
            // seed 004, Network Partition: the co-located forwarder's hook (steering.rs).
            ("cats-sma", "local-steering") => {
                crate::engine::steering::rpc(&self.engine, input(t, "local-steering", "cs-id"))
            }
            _ => Err(RpcError::protocol(ErrorTag::OperationNotSupported, format!("{module}:{name} is not served"))
                .with_bad_element(name)),
        }
    }
}
