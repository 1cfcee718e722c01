//! Embeds the YANG modules into the binary so `cats-sma run` needs no files at runtime:
//! our own modules from `yang/`, and the IETF modules that `scripts/setup.sh` installs into
//! `yang/ietf/` from the PyPI `pyang` wheel (they are never committed). Compiles `proto/`
//! with protox (a protobuf compiler in Rust: no protoc to install) into the messages, the
//! gRPC client, the SCI collector's server side and the descriptor set that server
//! reflection serves; `cps.proto` (the C-PS stream) separately into `OUT_DIR/cps/`.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn revision_of(text: &str) -> Option<String> {
    // The first `revision` statement is the module's current revision (RFC 7950 7.1.9).
    let idx = text.find("\n  revision ").or_else(|| text.find("revision "))?;
    let rest = text[idx..].trim_start().strip_prefix("revision")?.trim_start();
    let rev: String = rest.trim_start_matches('"').chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    (rev.len() == 10).then_some(rev)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "yang") {
            out.push(p);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let ours = root.join("yang");
    let ietf = root.join("yang/ietf");
    println!("cargo:rerun-if-changed={}", ours.display());
    println!("cargo:rerun-if-changed={}", ietf.display());
    let mut files = Vec::new();
    collect(&ours, &mut files);
    let n_ours = files.len();
    collect(&ietf, &mut files);
    if files.len() == n_ours {
        panic!(
            "no IETF YANG modules in {}: run scripts/setup.sh (it installs them from the PyPI \
             pyang package)",
            ietf.display()
        );
    }
    files.sort();
    let mut code = String::from("/// (module name, revision, source text, ours)\n");
    code.push_str("pub static EMBEDDED: &[(&str, Option<&str>, &str, bool)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.file_stem().unwrap().to_string_lossy();
        let name = name.split('@').next().unwrap().to_string();
        let rev = match revision_of(&text) {
            Some(r) => format!("Some({r:?})"),
            None => "None".into(),
        };
        let ours = f.parent() == Some(ours.as_path());
        writeln!(code, "    ({name:?}, {rev}, include_str!({:?}), {ours}),", f.display()).unwrap();
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded_yang.rs");
    std::fs::write(out, code).unwrap();
    protos(&root);
}

/// `proto/cats/sma/v1/sci.proto`: prost messages and tonic clients (tonic-prost-build),
/// the server side with a codec that hands the handlers each message's bytes as received
/// (tonic-build's manual services: the HMAC and the JWT body hash of a report cover those
/// bytes, and a decoded-then-re-encoded message need not be the same bytes), the SciAgent
/// server an SCI runs for gRPC pull, and the
/// encoded FileDescriptorSet for gRPC server reflection.
fn protos(root: &Path) {
    use prost::Message as _;
    let dir = root.join("proto");
    let file = dir.join("cats/sma/v1/sci.proto");
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&dir]).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out.join("sci_descriptor.bin"), fds.encode_to_vec()).unwrap();
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating code for {}: {e}", file.display()));
    let raw = "crate::engine::collect::grpc::codec::RawCodec";
    let method = |name: &str, route: &str, input: &str, output: &str| {
        tonic_build::manual::Method::builder()
            .name(name)
            .route_name(route)
            .input_type(input)
            .output_type(output)
            .codec_path(raw)
    };
    let server = tonic_build::manual::Service::builder()
        .name("SciCollector")
        .package("cats.sma.v1")
        .method(
            method("stream", "Stream", "::bytes::Bytes", "super::Verdict")
                .client_streaming()
                .server_streaming()
                .build(),
        )
        .method(method("batch", "Batch", "::bytes::Bytes", "super::BatchVerdict").build())
        .build();
    // The SciAgent server (served by SCIs for gRPC pull): decoded with prost, for SCI
    // simulators and the tests; the C-SMA itself only calls it (the generated client, with
    // a codec that keeps the answer's bytes: `grpc/pull.rs`).
    let agent = tonic_build::manual::Service::builder()
        .name("SciAgent")
        .package("cats.sma.v1")
        .method(
            tonic_build::manual::Method::builder()
                .name("get_report")
                .route_name("GetReport")
                .input_type("super::GetReportRequest")
                .output_type("super::Report")
                .codec_path("::tonic_prost::ProstCodec")
                .build(),
        )
        .build();
    tonic_build::manual::Builder::new().build_client(false).build_transport(false).compile(&[server, agent]);
    cps_proto(&dir, &out);
}

/// `proto/cats/sma/v1/cps.proto` (the C-PS stream) into `OUT_DIR/cps/`: its messages and
/// the C-PS side's server trait (the reference C-PS serves it; the C-SMA's client is
/// `tonic::client::Grpc` with a codec that hands it each C-PS message's bytes, so decoding
/// and its errors are ours, `src/cps/grpc/wire.rs`), and its descriptor set for the
/// reference C-PS's server reflection.
fn cps_proto(dir: &Path, out: &Path) {
    use prost::Message as _;
    let file = dir.join("cats/sma/v1/cps.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [dir]).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let cps = out.join("cps");
    std::fs::create_dir_all(&cps).unwrap();
    std::fs::write(cps.join("cps_descriptor.bin"), fds.encode_to_vec()).unwrap();
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .build_transport(false)
        .out_dir(&cps)
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating code for {}: {e}", file.display()));
}
