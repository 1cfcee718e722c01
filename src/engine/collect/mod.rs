//! SCI Collection Interface (seed 004): how reports reach the engine. HTTP push
//! (`http.rs`), MQTT through a broker (`mqtt.rs`) and HTTP pull (`pull.rs`); their state in
//! the operational datastore (`state.rs`).

pub mod http;
pub mod mqtt;
pub mod pull;
pub mod state;
