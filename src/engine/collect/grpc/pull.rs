//! gRPC pull (seed 004, SCI Collection Interface, pull mode: "gRPC unary"): one
//! `cats.sma.v1.SciAgent/GetReport` call to a pull target with a grpc:// or grpcs:// URL,
//! on a connection of its own (hyper's HTTP/2 client over the TCP or TLS stream the HTTP
//! pull opens, ALPN h2, the server verified the same way), bounded by the pull response
//! limit and the pull timeout. The answer is handed back as the bytes received: its proof
//! (`Report.authorization`) covers them, and `wire.rs` decodes them as a Stream message.

use std::sync::Arc;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tonic::Code;

use super::codec::RawCodec;
use super::pb;
use crate::engine::collect::pull::{failure, Endpoint, FetchError, Fetched, Payload, TIMEOUT};

/// The method the C-SMA calls.
pub const GET_REPORT: &str = "/cats.sma.v1.SciAgent/GetReport";

/// Largest header block the agent accepts in an answer (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE).
const MAX_HEADER_LIST: u32 = 16 * 1024;

/// A gRPC failure in words: the status, its message, and its causes (a TLS failure
/// reported by the transport stays one).
fn status_error(s: &tonic::Status, max: usize) -> FetchError {
    let message = crate::text::printable(s.message(), 300);
    // tonic's own words when the answer is over the decoding limit: refused by the agent,
    // not an error of the SCI's.
    if s.code() == Code::OutOfRange && s.message().starts_with("Error, decoded message length too large") {
        return FetchError::Refused(format!("the Report is larger than {max} bytes (pull response limit)"));
    }
    // A compressed answer (gRPC message compression is not taken, `docs/sci-protocol.md`):
    // tonic's decoder refuses it; the SCI answered something the agent refuses.
    let compressed = (s.code() == Code::Unimplemented && s.message().starts_with("Content is compressed with"))
        || (s.code() == Code::Internal
            && s.message().starts_with("protocol error: received message with compressed-flag"));
    if compressed {
        return FetchError::Refused(format!(
            "a compressed answer ({message}): gRPC message compression is not supported"
        ));
    }
    if std::error::Error::source(s).is_some() {
        return match failure(s) {
            FetchError::Tls(e) => FetchError::Tls(format!("gRPC {:?}: {e}", s.code())),
            other => FetchError::Unreachable(format!("gRPC {:?}: {other}", s.code())),
        };
    }
    FetchError::Unreachable(format!("gRPC status {:?}: {message}", s.code()))
}

/// Calls `GetReport` for `csci_id` on the target `ep` (grpc or grpcs), reading at most
/// `max` bytes of the answer.
pub(crate) async fn get_report(
    ep: &Endpoint,
    csci_id: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    max: usize,
) -> Result<Fetched, FetchError> {
    let tls_used = ep.scheme.tls();
    let origin: http::Uri = format!("{}://{}", if tls_used { "https" } else { "http" }, ep.authority)
        .parse()
        .map_err(|e| FetchError::Config(format!("authority {:?}: {e}", ep.authority)))?;
    let call = async {
        let c = ep.connect(tls).await?;
        if tls_used && !c.h2 {
            return Err(FetchError::Unreachable("the server did not choose HTTP/2 (ALPN h2) for gRPC".into()));
        }
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake::<_, tonic::body::Body>(TokioIo::new(c.io))
            .await
            .map_err(|e| failure(&e))?;
        // The connection lives as long as the call: dropped with `send` when it returns.
        let driver = tokio::spawn(conn);
        let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
            let mut send = send.clone();
            async move { send.send_request(req).await }
        });
        let mut grpc = tonic::client::Grpc::with_origin(svc, origin).max_decoding_message_size(max);
        let mut req = tonic::Request::new(pb::GetReportRequest { csci_id: csci_id.to_owned() });
        req.set_timeout(TIMEOUT);
        grpc.ready().await.map_err(|e| FetchError::Unreachable(format!("gRPC channel not ready: {e}")))?;
        let answer = grpc
            .unary(
                req,
                http::uri::PathAndQuery::from_static(GET_REPORT),
                RawCodec::<pb::GetReportRequest, Bytes>::default(),
            )
            .await;
        driver.abort();
        let msg = answer.map_err(|s| status_error(&s, max))?.into_inner();
        Ok(Fetched { payload: Payload::Grpc(msg), address: c.address, verified: tls_used })
    };
    tokio::time::timeout(TIMEOUT, call).await.map_err(|_| FetchError::Unreachable("timed out".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed004_grpc_pull_a_compressed_answer_is_refused_not_unreachable() {
        // tonic's decoder words for the two ways a compressed message arrives: with a
        // grpc-encoding the agent does not accept, and with the flag but no encoding.
        for s in [
            tonic::Status::unimplemented("Content is compressed with `gzip` which isn't supported"),
            tonic::Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ),
        ] {
            let e = status_error(&s, 1024);
            assert!(matches!(&e, FetchError::Refused(m) if m.contains("compress")), "{e:?}");
        }
        // Any other status stays a failure of the target.
        let e = status_error(&tonic::Status::unavailable("restarting"), 1024);
        assert!(matches!(e, FetchError::Unreachable(_)), "{e:?}");
    }
}
