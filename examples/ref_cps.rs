//! The reference C-PS (issue 6): `cargo run --example ref_cps -- CONFIG.toml [--listen ADDR]`.
//! Verifies the C-SMAs' signed reports, keeps the Computing Service Table and answers
//! `GET /cats/select?cs-id=X&ingress=Y` with seed 000's site selection. See
//! `docs/cps-protocol.md` and `examples/ref_cps.toml`.

use std::net::SocketAddr;

use cats_sma::cps::reference::{CpsConfig, CpsState, RefCps, RefGrpc};

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut listen: Option<SocketAddr> = None;
    let mut grpc_listen: Option<SocketAddr> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) => listen = Some(v),
                None => fail("--listen needs ADDR:PORT"),
            },
            "--grpc-listen" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) => grpc_listen = Some(v),
                None => fail("--grpc-listen needs ADDR:PORT"),
            },
            "-h" | "--help" => {
                println!("usage: ref_cps CONFIG.toml [--listen ADDR:PORT] [--grpc-listen ADDR:PORT]");
                return;
            }
            _ if path.is_none() => path = Some(a),
            _ => fail(&format!("unexpected argument '{a}'")),
        }
    }
    let config = match path {
        Some(p) => {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| fail(&format!("{p}: {e}")));
            CpsConfig::parse(&text).unwrap_or_else(|e| fail(&format!("{p}: {e}")))
        }
        None => CpsConfig::default(),
    };
    let addr = listen.unwrap_or(config.listen);
    let grpc_addr = grpc_listen.or(config.grpc_listen);
    let scheme = if config.tls_cert.is_some() { "https" } else { "http" };
    let state = CpsState::new(config).unwrap_or_else(|e| fail(&e));
    let server = RefCps::start(addr, state).await.unwrap_or_else(|e| fail(&e));
    eprintln!("reference C-PS ready: {scheme}://{}/cats/metrics", server.addr);
    let grpc = match grpc_addr {
        Some(a) => {
            let g = RefGrpc::start(a, server.state.clone()).await.unwrap_or_else(|e| fail(&e));
            let scheme = if scheme == "https" { "grpcs" } else { "grpc" };
            eprintln!("reference C-PS gRPC stream ready: {scheme}://{}", g.addr);
            Some(g)
        }
        None => None,
    };
    let _ = tokio::signal::ctrl_c().await;
    if let Some(g) = grpc {
        g.stop().await;
    }
    server.stop().await;
}

fn fail(msg: &str) -> ! {
    eprintln!("ref_cps: {msg}");
    std::process::exit(2)
}
