//! A keep-alive HTTP/1.1 client for the SCI collector, shared by the load generators.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A keep-alive HTTP/1.1 connection to a collector.
pub struct Http {
    s: tokio::net::TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
}

impl Http {
    pub async fn connect(addr: SocketAddr) -> Http {
        let s = tokio::net::TcpStream::connect(addr).await.expect("collector");
        s.set_nodelay(true).unwrap();
        Http { s, addr, buf: Vec::new() }
    }

    /// POSTs a report (or a batch) and checks that every report was accepted.
    pub async fn post(&mut self, body: &str) {
        let head = format!(
            "POST /reports HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        self.s.write_all(head.as_bytes()).await.unwrap();
        self.s.write_all(body.as_bytes()).await.unwrap();
        let mut tmp = [0u8; 8192];
        loop {
            if let Some(h) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let headers = String::from_utf8_lossy(&self.buf[..h]).to_lowercase();
                let len: usize = headers
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                if self.buf.len() >= h + 4 + len {
                    let text = String::from_utf8_lossy(&self.buf[h + 4..h + 4 + len]).into_owned();
                    assert!(headers.starts_with("http/1.1 200"), "collector refused: {text}");
                    assert!(!text.contains("\"reason\""), "reports rejected: {}", &text[..text.len().min(600)]);
                    self.buf.drain(..h + 4 + len);
                    return;
                }
            }
            let n = self.s.read(&mut tmp).await.unwrap();
            assert!(n > 0, "collector closed");
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }
}
