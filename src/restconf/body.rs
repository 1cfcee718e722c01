//! Response bodies: a complete buffer, or a stream of chunks (server-sent events) fed by a
//! channel, so one hyper service type serves both.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

pub enum RcBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl RcBody {
    pub fn empty() -> RcBody {
        RcBody::Full(None)
    }
    pub fn text(s: impl Into<Bytes>) -> RcBody {
        let b = s.into();
        RcBody::Full(if b.is_empty() { None } else { Some(b) })
    }
}

impl Body for RcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            RcBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RcBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, RcBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RcBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            RcBody::Full(None) => SizeHint::with_exact(0),
            RcBody::Stream(_) => SizeHint::default(),
        }
    }
}
