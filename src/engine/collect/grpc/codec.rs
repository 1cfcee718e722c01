//! The collector's tonic codec: replies are prost messages, requests are handed over as
//! the bytes that arrived (one gRPC message each), so the proof of a report is checked
//! against exactly what the SCI signed and the decoding is ours (`wire.rs`), with its
//! errors counted and answered like any malformed report.

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Encodes `E` (a prost message), decodes nothing: requests stay [`Bytes`].
pub struct RawCodec<E, D = Bytes>(PhantomData<(E, D)>);

impl<E, D> Default for RawCodec<E, D> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

impl<E: prost::Message + Send + 'static> Codec for RawCodec<E, Bytes> {
    type Encode = E;
    type Decode = Bytes;
    type Encoder = ProstEncoder<E>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder
    }
}

pub struct ProstEncoder<E>(PhantomData<E>);

impl<E: prost::Message> Encoder for ProstEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst).map_err(|e| Status::internal(format!("encoding the reply: {e}")))
    }
}

pub struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
