//! SCI Collection Interface (seed 004): how reports reach the engine. HTTP push
//! (`http.rs`) and MQTT through a broker (`mqtt.rs`); HTTP pull comes next.

pub mod http;
pub mod mqtt;
