//! An HTTP/2 front that gives tonic a `:authority` it accepts.
//!
//! Why: the kubelet dials a plugin's registration socket with grpc-go and
//! no `WithAuthority`, so the `:authority` of its requests is the socket's
//! file path (`/var/lib/kubelet/plugins_registry/<driver>-reg.sock`). The h2
//! crate under tonic checks `:authority` with `http::uri::Authority` and
//! resets a stream whose value is no URI authority (RST_STREAM
//! PROTOCOL_ERROR): the kubelet's GetInfo fails and it retries forever. h2
//! has no switch to relax the check (hyperium/h2 pull request #487 is still
//! open), so this front rewrites the value before h2 sees it.
//!
//! What it owns: the accepted Unix connections of one listener, each paired
//! with an in-memory pipe whose other end tonic serves ([`FrontedIncoming`]
//! is the stream of those ends that `serve_with_incoming_shutdown` takes),
//! and one task per connection that pumps bytes both ways.
//!
//! How data flows, per connection:
//! - tonic to client: every byte unchanged.
//! - client to tonic: the 24-byte connection preface and every frame
//!   unchanged (streamed, never buffered whole), except header blocks. A
//!   HEADERS frame and its CONTINUATION frames are gathered (up to
//!   [`MAX_HEADER_BLOCK_BYTES`]), decoded with an HPACK decoder that keeps the
//!   client's dynamic table for the whole connection, and written again as
//!   one HEADERS frame (split into CONTINUATIONs beyond the default frame
//!   size) of literals that never touch h2's dynamic table. An
//!   `:authority` that `http::uri::Authority` refuses becomes `localhost`;
//!   every other field passes as it was.
//!
//! A client that breaks the framing or HPACK loses its own connection, with
//! one log line; nothing else is affected.
//!
//! Only the registration socket goes through the front (see
//! `server::serve`): the kubelet dials the DRA socket as `unix:<path>`, so
//! its authority there is `localhost`, and NodePrepareResources is better
//! off without a copy of every byte and a re-encoding of every request. The
//! front takes any `UnixListener`, so it is one line to put it before the
//! DRA socket too.

use crate::plugin::log;
use loona_hpack::decoder::DecoderError;
use loona_hpack::Decoder;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

/// What every HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length (3 bytes), type, flags, stream identifier (4 bytes).
const FRAME_HEAD_BYTES: usize = 9;
/// The most a header block may take, as sent (all its frames' payloads)
/// and as re-encoded. A gRPC request's headers are a few hundred bytes;
/// the limit keeps a client from making the front buffer without end.
/// Other frames are streamed through, so their 24-bit length (at most
/// 16 MiB) needs no limit here; h2 enforces its own maximum frame size.
pub const MAX_HEADER_BLOCK_BYTES: usize = 64 * 1024;
/// The largest frame payload h2 accepts until it says otherwise: the
/// default SETTINGS_MAX_FRAME_SIZE, which tonic does not change.
const MAX_FRAME_PAYLOAD_BYTES: usize = 16_384;
/// The HPACK dynamic table's size limit: the default
/// SETTINGS_HEADER_TABLE_SIZE, which tonic's h2 server does not change, so
/// the client's encoder keeps within it.
const HEADER_TABLE_SIZE_BYTES: usize = 4096;
/// The in-memory pipe's buffer, each way.
const PIPE_BUFFER_BYTES: usize = 64 * 1024;
/// What replaces an `:authority` h2 would refuse; grpc-go itself sends it
/// for a `unix:` target.
const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

/// Frame types (RFC 9113 §6).
mod frame_type {
    pub const HEADERS: u8 = 0x1;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6.2, §6.10).
mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// The stream of tonic's ends of the pipes, one per connection accepted
/// on the listener; give it to `Server::serve_with_incoming_shutdown`.
pub struct FrontedIncoming {
    listener: UnixListener,
}

impl FrontedIncoming {
    pub fn new(listener: UnixListener) -> Self {
        FrontedIncoming { listener }
    }
}

impl Stream for FrontedIncoming {
    type Item = std::io::Result<DuplexStream>;

    /// Accepts the next connection and starts its pump; tonic pulls the
    /// next one when it is ready, as it does from a `UnixListenerStream`
    /// (an accept error is handed on the same way: tonic logs it and goes
    /// on accepting).
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.listener.poll_accept(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Some(Err(error))),
            Poll::Ready(Ok((client, _))) => {
                let (tonic_end, front_end) = tokio::io::duplex(PIPE_BUFFER_BYTES);
                tokio::spawn(pump(client, front_end));
                Poll::Ready(Some(Ok(tonic_end)))
            }
        }
    }
}

/// Why a client's connection was closed by the front.
#[derive(Debug)]
pub enum FrontError {
    Io(std::io::Error),
    /// The first 24 bytes were not the HTTP/2 preface.
    NotHttp2,
    /// A header block, as sent or as re-encoded, was over the limit.
    HeaderBlockTooLarge {
        limit_bytes: usize,
    },
    /// A HEADERS frame too short for its pad length or priority fields.
    MalformedHeadersFrame {
        payload_bytes: usize,
    },
    /// The header block did not decode.
    Hpack(DecoderError),
    ContinuationWithoutHeaders,
    /// A frame other than a CONTINUATION of the same stream while a header
    /// block was open (RFC 9113 §6.10 makes that a connection error).
    FrameInsideHeaderBlock {
        frame_type: u8,
        stream_id: u32,
    },
    /// PUSH_PROMISE is the server's; a client must not send it.
    PushPromiseFromClient,
    /// The connection ended in the middle of a header block.
    EndInsideHeaderBlock,
}

impl fmt::Display for FrontError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontError::Io(error) => write!(f, "{error}"),
            FrontError::NotHttp2 => write!(f, "the client did not start with the HTTP/2 connection preface"),
            FrontError::HeaderBlockTooLarge { limit_bytes } => write!(f, "a header block is larger than {limit_bytes} bytes"),
            FrontError::MalformedHeadersFrame { payload_bytes } => {
                write!(f, "a HEADERS frame of {payload_bytes} bytes is too short for its padding and priority fields")
            }
            FrontError::Hpack(error) => write!(f, "a header block does not decode: {error}"),
            FrontError::ContinuationWithoutHeaders => write!(f, "a CONTINUATION frame follows no HEADERS frame"),
            FrontError::FrameInsideHeaderBlock { frame_type, stream_id } => {
                write!(
                    f,
                    "a frame of type {frame_type:#x} on stream {stream_id} came inside a header block; only its CONTINUATION frames may"
                )
            }
            FrontError::PushPromiseFromClient => write!(f, "the client sent PUSH_PROMISE, which only a server may"),
            FrontError::EndInsideHeaderBlock => write!(f, "the connection ended inside a header block"),
        }
    }
}

impl std::error::Error for FrontError {}

impl From<std::io::Error> for FrontError {
    fn from(error: std::io::Error) -> Self {
        FrontError::Io(error)
    }
}

/// A frame's 9-byte head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FrameHead {
    payload_bytes: usize,
    kind: u8,
    flags: u8,
    /// Without the reserved bit.
    stream_id: u32,
}

impl FrameHead {
    fn parse(bytes: &[u8; FRAME_HEAD_BYTES]) -> FrameHead {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *bytes;
        FrameHead {
            payload_bytes: u32::from_be_bytes([0, l0, l1, l2]) as usize,
            kind,
            flags,
            stream_id: u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff,
        }
    }

    /// Appends the head; `payload_bytes` must fit 24 bits (callers keep it
    /// within [`MAX_FRAME_PAYLOAD_BYTES`]).
    fn write_to(&self, out: &mut Vec<u8>) {
        let [_, l0, l1, l2] = (self.payload_bytes as u32).to_be_bytes();
        out.extend_from_slice(&[l0, l1, l2, self.kind, self.flags]);
        out.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
    }
}

/// A header block whose END_HEADERS has not come yet.
struct OpenBlock {
    stream_id: u32,
    /// The HEADERS frame's END_STREAM, the one flag of it that carries on.
    end_stream: bool,
    fragment: Vec<u8>,
}

/// One connection's client-to-server header state: the client's HPACK
/// dynamic table (in the decoder) and the block being gathered.
struct HeaderRewriter {
    decoder: Decoder<'static>,
    open: Option<OpenBlock>,
}

impl HeaderRewriter {
    fn new() -> Self {
        let mut decoder = Decoder::new();
        // The table starts at this size; a size update beyond it is an error.
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE_BYTES);
        HeaderRewriter { decoder, open: None }
    }

    fn open_block_bytes(&self) -> usize {
        self.open.as_ref().map_or(0, |block| block.fragment.len())
    }

    fn is_block_open(&self) -> bool {
        self.open.is_some()
    }

    /// Takes one HEADERS or CONTINUATION frame; when it ends the block,
    /// the frames to send to h2 in its place.
    fn frame(&mut self, head: FrameHead, payload: &[u8]) -> Result<Option<Vec<u8>>, FrontError> {
        let block = match (head.kind, self.open.take()) {
            (frame_type::HEADERS, None) => OpenBlock {
                stream_id: head.stream_id,
                end_stream: head.flags & flag::END_STREAM != 0,
                fragment: headers_fragment(head.flags, payload)?.to_vec(),
            },
            (frame_type::CONTINUATION, Some(mut block)) if block.stream_id == head.stream_id => {
                block.fragment.extend_from_slice(payload);
                block
            }
            (frame_type::CONTINUATION, None) => return Err(FrontError::ContinuationWithoutHeaders),
            (frame_type, _) => return Err(FrontError::FrameInsideHeaderBlock { frame_type, stream_id: head.stream_id }),
        };
        if block.fragment.len() > MAX_HEADER_BLOCK_BYTES {
            return Err(FrontError::HeaderBlockTooLarge { limit_bytes: MAX_HEADER_BLOCK_BYTES });
        }
        if head.flags & flag::END_HEADERS == 0 {
            self.open = Some(block);
            return Ok(None);
        }
        let rewritten = self.rewrite_block(&block.fragment)?;
        Ok(Some(block_frames(block.stream_id, block.end_stream, &rewritten)))
    }

    /// Decodes a whole header block (which updates the client's dynamic
    /// table) and encodes its fields again as literals, never indexed and
    /// without Huffman coding, so that h2 needs no table state of ours.
    fn rewrite_block(&mut self, block: &[u8]) -> Result<Vec<u8>, FrontError> {
        let mut rewritten = Vec::with_capacity(block.len() * 2);
        let mut too_large = false;
        self.decoder
            .decode_with_cb(block, |name, value| {
                // An indexed field can stand for 4 KiB: bound what is built.
                if too_large || rewritten.len() > MAX_HEADER_BLOCK_BYTES {
                    too_large = true;
                    return;
                }
                let value: &[u8] = if &*name == b":authority" && !is_valid_authority(&value) { REPLACEMENT_AUTHORITY } else { &value };
                encode_never_indexed(&name, value, &mut rewritten);
            })
            .map_err(FrontError::Hpack)?;
        if too_large || rewritten.len() > MAX_HEADER_BLOCK_BYTES {
            return Err(FrontError::HeaderBlockTooLarge { limit_bytes: MAX_HEADER_BLOCK_BYTES });
        }
        Ok(rewritten)
    }
}

/// Whether h2 takes `value` as `:authority`: it parses it the same way.
fn is_valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// The header block fragment of a HEADERS frame's payload, without the pad
/// length, priority fields and padding (RFC 9113 §6.2). Priority is
/// dropped: RFC 9113 deprecates it and h2 does not act on it.
fn headers_fragment(flags: u8, payload: &[u8]) -> Result<&[u8], FrontError> {
    let malformed = || FrontError::MalformedHeadersFrame { payload_bytes: payload.len() };
    let mut rest = payload;
    let mut padding_bytes = 0;
    if flags & flag::PADDED != 0 {
        let (&pad_length, after) = rest.split_first().ok_or_else(malformed)?;
        padding_bytes = usize::from(pad_length);
        rest = after;
    }
    if flags & flag::PRIORITY != 0 {
        // Stream dependency (4 bytes) and weight (1).
        rest = rest.get(5..).ok_or_else(malformed)?;
    }
    let fragment_bytes = rest.len().checked_sub(padding_bytes).ok_or_else(malformed)?;
    rest.get(..fragment_bytes).ok_or_else(malformed)
}

/// A re-encoded block as one HEADERS frame, or a HEADERS frame and
/// CONTINUATION frames when it is over h2's default maximum frame size.
/// Only END_STREAM carries over: PADDED and PRIORITY describe fields that
/// are gone, and undefined flags are to be sent unset (RFC 9113 §4.1).
fn block_frames(stream_id: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let chunks: Vec<&[u8]> = if block.is_empty() { vec![block] } else { block.chunks(MAX_FRAME_PAYLOAD_BYTES).collect() };
    let mut out = Vec::with_capacity(block.len() + FRAME_HEAD_BYTES * chunks.len());
    let last = chunks.len().saturating_sub(1);
    for (index, chunk) in chunks.into_iter().enumerate() {
        let (kind, mut flags) = match index {
            0 => (frame_type::HEADERS, if end_stream { flag::END_STREAM } else { 0 }),
            _ => (frame_type::CONTINUATION, 0),
        };
        if index == last {
            flags |= flag::END_HEADERS;
        }
        FrameHead { payload_bytes: chunk.len(), kind, flags, stream_id }.write_to(&mut out);
        out.extend_from_slice(chunk);
    }
    out
}

/// A literal header field never indexed, with a literal name (RFC 7541
/// §6.2.3). Never indexed rather than without indexing because the front
/// cannot tell which fields the client wanted kept out of tables.
fn encode_never_indexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x10);
    for string in [name, value] {
        // H bit clear: the octets as they are.
        encode_integer(string.len(), 7, 0x00, out);
        out.extend_from_slice(string);
    }
}

/// An HPACK integer (RFC 7541 §5.1) in the low `prefix_bits` bits of its
/// first octet, whose high bits are `first_octet_flags`.
fn encode_integer(mut value: usize, prefix_bits: u8, first_octet_flags: u8, out: &mut Vec<u8>) {
    let prefix_max = (1usize << prefix_bits) - 1;
    if value < prefix_max {
        out.push(first_octet_flags | value as u8);
        return;
    }
    out.push(first_octet_flags | prefix_max as u8);
    value -= prefix_max;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a frame head; `false` at a clean end of the connection (between
/// frames).
async fn read_frame_head<R: AsyncRead + Unpin>(client: &mut R, head: &mut [u8; FRAME_HEAD_BYTES]) -> Result<bool, FrontError> {
    let (first, rest) = head.split_at_mut(1);
    if client.read(first).await? == 0 {
        return Ok(false);
    }
    client.read_exact(rest).await?;
    Ok(true)
}

/// The client-to-server half of a connection: the preface and frames on,
/// header blocks rewritten. Returns at the client's end of the stream.
async fn forward_client_frames<R, W>(client: R, server: &mut W) -> Result<(), FrontError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut client = tokio::io::BufReader::new(client);
    let mut preface = [0u8; PREFACE.len()];
    if let Err(error) = client.read_exact(&mut preface).await {
        // Connected and went away: nothing to forward.
        return if error.kind() == std::io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(error.into()) };
    }
    if &preface != PREFACE {
        return Err(FrontError::NotHttp2);
    }
    server.write_all(&preface).await?;
    let mut rewriter = HeaderRewriter::new();
    let mut head_bytes = [0u8; FRAME_HEAD_BYTES];
    while read_frame_head(&mut client, &mut head_bytes).await? {
        let head = FrameHead::parse(&head_bytes);
        match head.kind {
            frame_type::HEADERS | frame_type::CONTINUATION => {
                // Refused before its payload is read, let alone buffered.
                if rewriter.open_block_bytes() + head.payload_bytes > MAX_HEADER_BLOCK_BYTES {
                    return Err(FrontError::HeaderBlockTooLarge { limit_bytes: MAX_HEADER_BLOCK_BYTES });
                }
                let mut payload = vec![0u8; head.payload_bytes];
                client.read_exact(&mut payload).await?;
                if let Some(frames) = rewriter.frame(head, &payload)? {
                    server.write_all(&frames).await?;
                    server.flush().await?;
                }
            }
            frame_type::PUSH_PROMISE => return Err(FrontError::PushPromiseFromClient),
            frame_type if rewriter.is_block_open() => {
                return Err(FrontError::FrameInsideHeaderBlock { frame_type, stream_id: head.stream_id })
            }
            _ => {
                server.write_all(&head_bytes).await?;
                let payload_bytes = head.payload_bytes as u64;
                let copied_bytes = tokio::io::copy(&mut (&mut client).take(payload_bytes), server).await?;
                if copied_bytes < payload_bytes {
                    return Err(FrontError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
    }
    if rewriter.is_block_open() {
        return Err(FrontError::EndInsideHeaderBlock);
    }
    Ok(())
}

/// One connection's task: both directions until either side closes; a
/// client that breaks the protocol is cut off at once.
async fn pump(client: UnixStream, front_end: DuplexStream) {
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = tokio::io::split(front_end);
    let upstream = async move {
        let forwarded = forward_client_frames(client_read, &mut server_write).await;
        // h2 reads the end of the stream and closes its side.
        let _ = server_write.shutdown().await;
        forwarded
    };
    let downstream = async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::pin!(upstream, downstream);
    tokio::select! {
        forwarded = &mut upstream => match forwarded {
            Ok(()) => downstream.await,
            Err(error) => log(&format!("authority front: closed a client's connection: {error}")),
        },
        () = &mut downstream => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::registration::registration_server::{Registration, RegistrationServer};
    use crate::proto::registration::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};
    use prost::Message;
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::time::Duration;
    use tokio_stream::wrappers::UnixListenerStream;

    const SOCKET_PATH_AUTHORITY: &[u8] = b"/var/lib/kubelet/plugins_registry/gpu.gpuslice.dev-reg.sock";
    const GET_INFO_PATH: &[u8] = b"/pluginregistration.Registration/GetInfo";

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    /// What grpc-go sends for a call (its order, without grpc-timeout).
    fn get_info_fields(authority: &[u8]) -> Fields {
        [
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", GET_INFO_PATH),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"user-agent", b"grpc-go/1.72.0"),
            (b"te", b"trailers"),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_vec(), value.to_vec()))
        .collect()
    }

    /// A client's encoder that puts every field in the dynamic table and
    /// names it by index when it comes again, as grpc-go's does (without
    /// Huffman coding; the tests stay far below the table's size, so
    /// nothing is evicted).
    #[derive(Default)]
    struct IndexingEncoder {
        /// The dynamic table, newest first (index 62 onwards).
        table: Fields,
    }

    impl IndexingEncoder {
        fn encode(&mut self, fields: &Fields) -> Vec<u8> {
            let mut out = Vec::new();
            for field in fields {
                match self.table.iter().position(|entry| entry == field) {
                    Some(position) => encode_integer(62 + position, 7, 0x80, &mut out),
                    None => {
                        // Literal with incremental indexing, new name.
                        out.push(0x40);
                        for string in [&field.0, &field.1] {
                            encode_integer(string.len(), 7, 0x00, &mut out);
                            out.extend_from_slice(string);
                        }
                        self.table.insert(0, field.clone());
                    }
                }
            }
            out
        }
    }

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        FrameHead { payload_bytes: payload.len(), kind, flags, stream_id }.write_to(&mut out);
        out.extend_from_slice(payload);
        out
    }

    /// Splits a byte string into frames (heads and payloads).
    fn parse_frames(mut bytes: &[u8]) -> Vec<(FrameHead, Vec<u8>)> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let head_bytes: [u8; FRAME_HEAD_BYTES] = bytes[..FRAME_HEAD_BYTES].try_into().unwrap();
            let head = FrameHead::parse(&head_bytes);
            frames.push((head, bytes[FRAME_HEAD_BYTES..FRAME_HEAD_BYTES + head.payload_bytes].to_vec()));
            bytes = &bytes[FRAME_HEAD_BYTES + head.payload_bytes..];
        }
        frames
    }

    fn with_authority(fields: &Fields, authority: &[u8]) -> Fields {
        fields.iter().map(|(name, value)| (name.clone(), if name == b":authority" { authority.to_vec() } else { value.clone() })).collect()
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_rest_passes() {
        let mut client = IndexingEncoder::default();
        let mut rewriter = HeaderRewriter::new();
        // h2's decoder: a table of its own, which the rewritten blocks never touch.
        let mut h2_side = Decoder::new();
        let kubelet = get_info_fields(SOCKET_PATH_AUTHORITY);
        let rewritten = rewriter.rewrite_block(&client.encode(&kubelet)).unwrap();
        assert_eq!(h2_side.decode(&rewritten).unwrap(), with_authority(&kubelet, b"localhost"));
        // A valid authority, and an empty one (which h2 refuses too).
        for (sent, seen) in [(&b"localhost:50051"[..], &b"localhost:50051"[..]), (b"", b"localhost")] {
            let fields = get_info_fields(sent);
            let rewritten = rewriter.rewrite_block(&client.encode(&fields)).unwrap();
            assert_eq!(h2_side.decode(&rewritten).unwrap(), with_authority(&fields, seen));
        }
    }

    #[test]
    fn fields_indexed_in_the_clients_dynamic_table_decode_across_requests() {
        let mut client = IndexingEncoder::default();
        let mut rewriter = HeaderRewriter::new();
        let mut h2_side = Decoder::new();
        let kubelet = get_info_fields(SOCKET_PATH_AUTHORITY);
        let first = client.encode(&kubelet);
        let second = client.encode(&kubelet);
        // The second request is indexed fields only: one octet each.
        assert_eq!(second.len(), kubelet.len());
        assert!(second.iter().all(|octet| octet & 0x80 != 0));
        for block in [first, second] {
            let rewritten = rewriter.rewrite_block(&block).unwrap();
            assert_eq!(h2_side.decode(&rewritten).unwrap(), with_authority(&kubelet, b"localhost"));
        }
        // Huffman coding and the dynamic table as grpc-go uses them: RFC 7541
        // C.4.1 and C.4.2, the second naming the first's authority by index.
        let first = [0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        let second = [0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf];
        let mut rewriter = HeaderRewriter::new();
        let request = |extra: &[(&[u8], &[u8])]| -> Fields {
            [(&b":method"[..], &b"GET"[..]), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")]
                .iter()
                .chain(extra)
                .map(|(name, value)| (name.to_vec(), value.to_vec()))
                .collect()
        };
        assert_eq!(h2_side.decode(&rewriter.rewrite_block(&first).unwrap()).unwrap(), request(&[]));
        assert_eq!(h2_side.decode(&rewriter.rewrite_block(&second).unwrap()).unwrap(), request(&[(b"cache-control", b"no-cache")]));
    }

    #[test]
    fn dynamic_table_size_updates_are_honoured_up_to_the_default() {
        let mut rewriter = HeaderRewriter::new();
        // 0x3f 0xe1 0x1f: a size update to 4096, then an indexed :method GET.
        assert!(rewriter.rewrite_block(&[0x3f, 0xe1, 0x1f, 0x82]).is_ok());
        // To 4097: more than the server allows.
        assert!(matches!(rewriter.rewrite_block(&[0x3f, 0xe2, 0x1f, 0x82]), Err(FrontError::Hpack(DecoderError::InvalidMaxDynamicSize))));
    }

    #[tokio::test]
    async fn padded_priority_and_continuation_frames_become_one_plain_headers_frame() {
        let mut client = IndexingEncoder::default();
        let kubelet = get_info_fields(SOCKET_PATH_AUTHORITY);
        let block = client.encode(&kubelet);
        let (part_one, part_two) = block.split_at(10);
        // HEADERS with END_STREAM, PADDED (3 bytes) and PRIORITY, without END_HEADERS.
        let mut headers_payload = vec![3, 0, 0, 0, 0, 16];
        headers_payload.extend_from_slice(part_one);
        headers_payload.extend_from_slice(&[0, 0, 0]);
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let data = frame(0x0, flag::END_STREAM, 1, &[0, 0, 0, 0, 0]);
        let window_update = frame(0x8, 0, 0, &[0, 1, 0, 0]);
        let mut sent = PREFACE.to_vec();
        for part in [
            &settings,
            &frame(frame_type::HEADERS, flag::END_STREAM | flag::PADDED | flag::PRIORITY, 1, &headers_payload),
            &frame(frame_type::CONTINUATION, flag::END_HEADERS, 1, part_two),
            &data,
            &window_update,
        ] {
            sent.extend_from_slice(part);
        }
        let mut received = Vec::new();
        forward_client_frames(&sent[..], &mut received).await.unwrap();

        let (preface, frames) = received.split_at(PREFACE.len());
        assert_eq!(preface, PREFACE);
        let frames = parse_frames(frames);
        assert_eq!(frames.len(), 4);
        assert_eq!(frame(frames[0].0.kind, frames[0].0.flags, 0, &frames[0].1), settings);
        let (head, payload) = &frames[1];
        assert_eq!((head.kind, head.flags, head.stream_id), (frame_type::HEADERS, flag::END_STREAM | flag::END_HEADERS, 1));
        assert_eq!(Decoder::new().decode(payload).unwrap(), with_authority(&kubelet, b"localhost"));
        assert_eq!(frame(frames[2].0.kind, frames[2].0.flags, 1, &frames[2].1), data);
        assert_eq!(frame(frames[3].0.kind, frames[3].0.flags, 0, &frames[3].1), window_update);
    }

    #[tokio::test]
    async fn broken_framing_closes_the_connection() {
        let block = IndexingEncoder::default().encode(&get_info_fields(SOCKET_PATH_AUTHORITY));
        // The frames after the preface, and the error's variant.
        let cases = [
            // Padding longer than the payload.
            (frame(frame_type::HEADERS, flag::END_HEADERS | flag::PADDED, 1, &[200, 0x82]), "MalformedHeadersFrame"),
            // PRIORITY without its five bytes.
            (frame(frame_type::HEADERS, flag::END_HEADERS | flag::PRIORITY, 1, &[0, 0]), "MalformedHeadersFrame"),
            (frame(frame_type::CONTINUATION, flag::END_HEADERS, 1, &block), "ContinuationWithoutHeaders"),
            // DATA between HEADERS and its CONTINUATION.
            (
                [frame(frame_type::HEADERS, 0, 1, &block), frame(0x0, 0, 1, b"x")].concat(),
                "FrameInsideHeaderBlock { frame_type: 0, stream_id: 1 }",
            ),
            // HEADERS of another stream, likewise.
            (
                [frame(frame_type::HEADERS, 0, 1, &block), frame(frame_type::HEADERS, flag::END_HEADERS, 3, &block)].concat(),
                "FrameInsideHeaderBlock { frame_type: 1, stream_id: 3 }",
            ),
            // An index far past both tables.
            (frame(frame_type::HEADERS, flag::END_HEADERS, 1, &[0xff, 0xff, 0xff, 0x7f]), "Hpack(HeaderIndexOutOfBounds)"),
            (frame(frame_type::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]), "PushPromiseFromClient"),
            (frame(frame_type::HEADERS, 0, 1, &block), "EndInsideHeaderBlock"),
        ];
        for (frames, expected) in cases {
            let sent = [&PREFACE[..], &frames].concat();
            let mut received = Vec::new();
            let error = forward_client_frames(&sent[..], &mut received).await.unwrap_err();
            assert!(format!("{error:?}").starts_with(expected), "{expected}: {error:?}");
            // Nothing of a refused block reached h2.
            assert_eq!(received, PREFACE);
        }
        let mut received = Vec::new();
        let error = forward_client_frames(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..], &mut received).await.unwrap_err();
        assert!(matches!(error, FrontError::NotHttp2), "{error}");
    }

    #[tokio::test]
    async fn an_oversized_header_block_is_refused() {
        // Sent: HEADERS and CONTINUATIONs over the limit, refused at the
        // frame that crosses it, before its payload is read.
        let mut sent = PREFACE.to_vec();
        let filler = vec![0u8; MAX_FRAME_PAYLOAD_BYTES];
        sent.extend(frame(frame_type::HEADERS, 0, 1, &filler));
        for _ in 0..MAX_HEADER_BLOCK_BYTES / MAX_FRAME_PAYLOAD_BYTES {
            sent.extend(frame(frame_type::CONTINUATION, 0, 1, &filler));
        }
        let mut received = Vec::new();
        let error = forward_client_frames(&sent[..], &mut received).await.unwrap_err();
        assert!(matches!(error, FrontError::HeaderBlockTooLarge { limit_bytes: MAX_HEADER_BLOCK_BYTES }), "{error}");
        assert_eq!(received, PREFACE);

        // Decoded: a 4000-byte field put in the table, then named twenty
        // times in a 20-byte block.
        let mut rewriter = HeaderRewriter::new();
        let big = vec![(b"x-big".to_vec(), vec![b'a'; 4000])];
        assert!(rewriter.rewrite_block(&IndexingEncoder::default().encode(&big)).is_ok());
        let error = rewriter.rewrite_block(&[0x80 | 62; 20]).unwrap_err();
        assert!(matches!(error, FrontError::HeaderBlockTooLarge { .. }), "{error}");
    }

    #[test]
    fn a_large_block_is_split_into_continuations() {
        let block: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let frames = parse_frames(&block_frames(7, true, &block));
        let shape: Vec<(u8, u8, u32, usize)> =
            frames.iter().map(|(head, _)| (head.kind, head.flags, head.stream_id, head.payload_bytes)).collect();
        assert_eq!(
            shape,
            [
                (frame_type::HEADERS, flag::END_STREAM, 7, 16_384),
                (frame_type::CONTINUATION, 0, 7, 16_384),
                (frame_type::CONTINUATION, flag::END_HEADERS, 7, 40_000 - 2 * 16_384)
            ]
        );
        assert_eq!(frames.into_iter().flat_map(|(_, payload)| payload).collect::<Vec<u8>>(), block);
        // An empty block is still one HEADERS frame.
        assert_eq!(block_frames(1, false, &[]), frame(frame_type::HEADERS, flag::END_HEADERS, 1, &[]));
    }

    struct TestRegistration;

    fn test_plugin_info() -> PluginInfo {
        PluginInfo {
            r#type: "DRAPlugin".into(),
            name: "gpu.gpuslice.dev".into(),
            endpoint: "/var/lib/kubelet/plugins/gpu.gpuslice.dev/dra.sock".into(),
            supported_versions: vec!["v1.DRAPlugin".into()],
        }
    }

    #[tonic::async_trait]
    impl Registration for TestRegistration {
        async fn get_info(&self, _: tonic::Request<InfoRequest>) -> Result<tonic::Response<PluginInfo>, tonic::Status> {
            Ok(tonic::Response::new(test_plugin_info()))
        }

        async fn notify_registration_status(
            &self,
            _: tonic::Request<RegistrationStatus>,
        ) -> Result<tonic::Response<RegistrationStatusResponse>, tonic::Status> {
            Ok(tonic::Response::new(RegistrationStatusResponse {}))
        }
    }

    /// How one stream ended, as a client sees it.
    #[derive(Debug, Default)]
    struct StreamOutcome {
        headers: Fields,
        data: Vec<u8>,
        trailers: Fields,
        reset_code: Option<u32>,
    }

    fn field<'a>(fields: &'a Fields, name: &[u8]) -> Option<&'a [u8]> {
        fields.iter().find(|(n, _)| n == name).map(|(_, value)| &value[..])
    }

    /// Plays the kubelet: two GetInfo calls on one connection with
    /// `authority`, the second's fields all indexed from the first's.
    async fn get_info_twice(socket: &Path, authority: &[u8]) -> HashMap<u32, StreamOutcome> {
        let mut connection = UnixStream::connect(socket).await.unwrap();
        let mut encoder = IndexingEncoder::default();
        let mut sent = PREFACE.to_vec();
        sent.extend(frame(0x4, 0, 0, &[]));
        // An empty InfoRequest: uncompressed, zero bytes.
        let message = [0u8, 0, 0, 0, 0];
        for stream_id in [1, 3] {
            sent.extend(frame(frame_type::HEADERS, flag::END_HEADERS, stream_id, &encoder.encode(&get_info_fields(authority))));
            sent.extend(frame(0x0, flag::END_STREAM, stream_id, &message));
        }
        connection.write_all(&sent).await.unwrap();

        // h2's responses use its dynamic table and Huffman coding.
        let mut decoder = Decoder::new();
        let mut outcomes: HashMap<u32, StreamOutcome> = HashMap::new();
        let ended = |outcomes: &HashMap<u32, StreamOutcome>, id: u32| {
            outcomes.get(&id).is_some_and(|o| o.reset_code.is_some() || !o.trailers.is_empty())
        };
        while !(ended(&outcomes, 1) && ended(&outcomes, 3)) {
            let mut head_bytes = [0u8; FRAME_HEAD_BYTES];
            connection.read_exact(&mut head_bytes).await.unwrap();
            let head = FrameHead::parse(&head_bytes);
            let mut payload = vec![0u8; head.payload_bytes];
            connection.read_exact(&mut payload).await.unwrap();
            let outcome = outcomes.entry(head.stream_id).or_default();
            match head.kind {
                // SETTINGS, not an ACK: acknowledge.
                0x4 if head.flags & 0x1 == 0 => connection.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
                frame_type::HEADERS => {
                    assert_ne!(head.flags & flag::END_HEADERS, 0, "h2 split a small header block");
                    let fields = decoder.decode(&payload).unwrap();
                    if outcome.headers.is_empty() {
                        outcome.headers = fields;
                    } else {
                        outcome.trailers = fields;
                    }
                }
                0x0 => outcome.data.extend_from_slice(&payload),
                0x3 => outcome.reset_code = Some(u32::from_be_bytes(payload[..4].try_into().unwrap())),
                0x7 => panic!("GOAWAY: {payload:?}"),
                _ => {}
            }
        }
        outcomes
    }

    fn temporary_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-dra-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_get_info_with_a_socket_path_authority_is_answered_through_the_front() {
        let dir = temporary_dir("authority");
        let fronted_socket = dir.join("fronted-reg.sock");
        let direct_socket = dir.join("direct-reg.sock");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let fronted = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming_shutdown(
            RegistrationServer::new(TestRegistration),
            FrontedIncoming::new(UnixListener::bind(&fronted_socket).unwrap()),
            stopped(stop_rx.clone()),
        ));
        let direct = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming_shutdown(
            RegistrationServer::new(TestRegistration),
            UnixListenerStream::new(UnixListener::bind(&direct_socket).unwrap()),
            stopped(stop_rx),
        ));
        let authority = fronted_socket.to_str().unwrap().as_bytes();
        let limit = Duration::from_secs(20);

        let outcomes = tokio::time::timeout(limit, get_info_twice(&fronted_socket, authority)).await.unwrap();
        for stream_id in [1, 3] {
            let outcome = &outcomes[&stream_id];
            assert_eq!(outcome.reset_code, None, "stream {stream_id}: {outcome:?}");
            assert_eq!(field(&outcome.headers, b":status"), Some(&b"200"[..]), "stream {stream_id}: {outcome:?}");
            assert_eq!(field(&outcome.trailers, b"grpc-status"), Some(&b"0"[..]), "stream {stream_id}: {outcome:?}");
            // A gRPC message: compressed flag, 4-byte length, the message.
            let (prefix, message) = outcome.data.split_at(5);
            assert_eq!(prefix[0], 0);
            assert_eq!(u32::from_be_bytes(prefix[1..].try_into().unwrap()) as usize, message.len());
            assert_eq!(PluginInfo::decode(message).unwrap(), test_plugin_info());
        }

        // Without the front, h2 resets both streams as it did the kubelet's.
        let outcomes = tokio::time::timeout(limit, get_info_twice(&direct_socket, authority)).await.unwrap();
        for stream_id in [1, 3] {
            assert_eq!(
                outcomes[&stream_id].reset_code,
                Some(0x1),
                "stream {stream_id}: PROTOCOL_ERROR expected, {:?}",
                outcomes[&stream_id]
            );
        }

        stop_tx.send(true).unwrap();
        fronted.await.unwrap().unwrap();
        direct.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
