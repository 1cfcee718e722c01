//! The engine's RPCs (cats-sma module): `resync` asks the update controller for a full
//! snapshot (to one C-PS or all), `clear-quarantine` releases held reports. `probe-sci`
//! needs the pull client and answers operation-not-supported until it exists.

use yang2::data::{Data, DataTree};

use crate::engine::update::UpdateEvent;
use crate::engine::Engine;
use crate::error::{ErrorTag, RpcError};
use crate::netconf::AppRpc;

pub struct EngineRpcs {
    pub engine: Engine,
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
            _ => Err(RpcError::protocol(
                ErrorTag::OperationNotSupported,
                format!("{module}:{name} is not implemented yet (probe-sci comes with SCI pull)"),
            )
            .with_bad_element(name)),
        }
    }
}
