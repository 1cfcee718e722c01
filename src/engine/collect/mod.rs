//! SCI Collection Interface (seed 004): how reports reach the engine. HTTP push
//! (`http.rs`), gRPC push (`grpc/`), MQTT through a broker (`mqtt.rs`), HTTP and gRPC pull
//! (`pull.rs`, `grpc/pull.rs`) and Server-Sent Events streams the C-SMA subscribes to
//! (`sse/`); their state in the operational datastore (`state.rs`, and `tls_status.rs`
//! for the TLS of the two listeners).

pub mod grpc;
pub mod http;
pub mod mqtt;
pub mod pull;
pub mod sse;
pub mod state;
pub mod tls_status;
