//! The routing-protocol channel of the Protocol Adapter (seed 004, distributed and hybrid
//! models): the BGP-LS speaker (`bgp/`) and the GRASP objective (`grasp.rs`).

pub mod bgp;
pub mod grasp;
