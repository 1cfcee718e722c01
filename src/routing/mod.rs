//! The routing-protocol channel of the Protocol Adapter (seed 004, distributed and hybrid
//! models): the BGP-LS speaker (`bgp/`).

pub mod bgp;
