//! SCI Collection Interface (seed 004): how reports reach the engine. HTTP push
//! (`http.rs`) now; MQTT through a broker and HTTP pull come next.

pub mod http;
