//! The engine's RPCs (cats-sma module): `resync` asks the update controller for a full
//! snapshot (to one C-PS or all), `clear-quarantine` releases held reports, `probe-sci`
//! GETs the SCI's pull URL (seed 004: active probes to tell SCI failure from partition),
//! `local-steering` answers which SCI should serve a CS-ID (`engine/steering.rs`).

use yang2::data::{Data, DataTree};

use crate::engine::update::UpdateEvent;
use crate::engine::Engine;
use crate::error::{ErrorTag, RpcError};
use crate::netconf::AppRpc;

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
                let released =
                    self.engine
                        .query_blocking(move |core| core.clear_quarantine(csci.as_deref(), accept))
                        .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, "the engine is not running"))?;
                Ok(format!("<released xmlns=\"urn:cats-sma:yang:cats-sma\">{released}</released>"))
            }
            ("cats-sma", "probe-sci") => {
                let csci = input(t, "probe-sci", "csci-id").unwrap_or_default();
                let target = self.pull.borrow().get(&csci).cloned();
                let id = csci.clone();
                let state = self
                    .engine
                    .query_blocking(move |core| core.cache.get(&id).map(|e| e.state.yang()))
                    .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, "the engine is not running"))?;
                let ns = "urn:cats-sma:yang:cats-sma";
                let mut out = String::new();
                match target {
                    Some(target) => {
                        let started = std::time::Instant::now();
                        let handle = tokio::runtime::Handle::current();
                        let limit = self.engine.limits.pull_response_bytes;
                        let result = tokio::task::block_in_place(|| {
                            handle.block_on(crate::engine::collect::pull::probe(&target, limit))
                        });
                        let rtt = started.elapsed().as_micros().min(u32::MAX as u128);
                        out.push_str(&format!("<reachable xmlns=\"{ns}\">{}</reachable>", result.is_ok()));
                        if result.is_ok() {
                            out.push_str(&format!("<rtt xmlns=\"{ns}\">{rtt}</rtt>"));
                        }
                    }
                    // No pull URL: nothing to probe with.
                    None => out.push_str(&format!("<reachable xmlns=\"{ns}\">false</reachable>")),
                }
                if let Some(s) = state {
                    out.push_str(&format!("<state xmlns=\"{ns}\">{s}</state>"));
                }
                Ok(out)
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
