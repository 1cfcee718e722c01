//! The reference C-PS (issue 6): a small but real CATS Path Selector that the C-SMA's REST
//! adapter, the end-to-end tests and the demo talk to. It verifies every report (HMAC,
//! timestamp window, nonce replay), keeps the Computing Service Table per CS-ID and site,
//! and answers "which site for this CS-ID from this ingress" with seed 000's cost
//! algorithm. `examples/ref_cps.rs` runs it from a TOML file. `grpc.rs` serves the gRPC
//! stream (`grpc_listen`) on the same table; `bgp.rs` takes BGP-LS routes into it (the
//! hybrid model's newest-wins, `cst.rs`).

pub mod bgp;
pub mod config;
pub mod cst;
pub mod grpc;
pub mod overload;
pub mod server;

pub use bgp::RefBgp;
pub use config::CpsConfig;
pub use cst::{Cst, Selection};
pub use grpc::RefGrpc;
pub use server::{CpsState, RefCps};
