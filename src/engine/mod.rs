//! The C-SMA metric engine (seed 004): SCI collection, validation, the metric cache and SCI
//! state machine, per-service aggregation, the policy engine and the update controller.
//! Configured through the datastores (northbound), its state is the operational datastore.

pub mod aggregate;
pub mod cache;
pub mod clock;
pub mod model;
pub mod report;
pub mod sci_state;
pub mod validate;
