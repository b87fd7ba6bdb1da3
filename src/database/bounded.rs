//! A connection check's stream, bounded in bytes: a server (a tenant's, so hostile until
//! checked) sends a check at most [`READ_LIMIT`] bytes in all and no message declaring more
//! than [`MESSAGE_LIMIT`], and the check is cut the moment it passes either. tokio-postgres
//! would otherwise wait for a message's declared length, growing its buffer up to 4 GiB.
//!
//! The framing followed is the one tokio-postgres reads: the one-byte answer to an SSL
//! request, then backend messages (a tag, a 4-byte length that counts itself, a body). Over
//! TLS the raw stream only counts (its bytes are records) and the plaintext inside it is
//! framed ([`Framed`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// The most a check reads from a server in all, TLS records included: the startup exchange,
/// a handshake's certificate chain and the few rows a check asks for fit several times over.
pub const READ_LIMIT: usize = 64 * 1024;

/// The longest message a check accepts, its header included: PostgreSQL's own (an error, a
/// parameter, a row of a count) are a few hundred bytes.
pub const MESSAGE_LIMIT: usize = 16 * 1024;

/// Why a check stopped reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Overrun {
    #[error("the server sent more than {READ_LIMIT} bytes, more than a check reads")]
    Total,
    #[error(
        "the server announced a message of {0} bytes, more than a check reads ({MESSAGE_LIMIT})"
    )]
    Message(u64),
    #[error("the server sent a message with an impossible length ({0})")]
    Malformed(u32),
}

impl Overrun {
    /// The overrun behind `error`, if that is why a connection failed.
    pub fn behind(error: &(dyn std::error::Error + 'static)) -> Option<Overrun> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(overrun) = error
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Overrun>())
            {
                return Some(*overrun);
            }
            next = error.source();
        }
        None
    }
}

/// Where the stream is in the server's messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frames {
    /// The one byte answering an SSL request: `S` (TLS follows) or anything else.
    SslAnswer,
    /// TLS records, framed inside by the plaintext stream.
    Encrypted,
    /// A message's header, `got` of its 5 bytes read.
    Header { got: usize, header: [u8; 5] },
    /// A message's body, `left` bytes of it still to come.
    Body { left: usize },
}

impl Frames {
    const HEADER: Frames = Frames::Header {
        got: 0,
        header: [0; 5],
    };

    /// Follows `bytes` as the server's next ones; an error as soon as a header announces
    /// more than a check reads.
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Overrun> {
        while let Some(&first) = bytes.first() {
            match self {
                Frames::Encrypted => return Ok(()),
                Frames::SslAnswer => {
                    *self = if first == b'S' {
                        Frames::Encrypted
                    } else {
                        Frames::HEADER
                    };
                    bytes = &bytes[1..];
                }
                Frames::Header { got, header } => {
                    let n = (header.len() - *got).min(bytes.len());
                    header[*got..*got + n].copy_from_slice(&bytes[..n]);
                    *got += n;
                    bytes = &bytes[n..];
                    if *got == header.len() {
                        let length =
                            u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                        if length < 4 {
                            return Err(Overrun::Malformed(length));
                        }
                        if length as usize + 1 > MESSAGE_LIMIT {
                            return Err(Overrun::Message(u64::from(length) + 1));
                        }
                        *self = match length as usize - 4 {
                            0 => Frames::HEADER,
                            left => Frames::Body { left },
                        };
                    }
                }
                Frames::Body { left } => {
                    let n = (*left).min(bytes.len());
                    *left -= n;
                    bytes = &bytes[n..];
                    if *left == 0 {
                        *self = Frames::HEADER;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A stream of which at most [`READ_LIMIT`] bytes are read, following the server's framing.
pub struct Bounded<S> {
    inner: S,
    read: usize,
    frames: Frames,
}

impl<S> Bounded<S> {
    /// The socket itself; `ssl_request`: the client asks for TLS first (its answer is one
    /// byte, then either TLS records or messages).
    pub fn socket(inner: S, ssl_request: bool) -> Self {
        Self {
            inner,
            read: 0,
            frames: if ssl_request {
                Frames::SslAnswer
            } else {
                Frames::HEADER
            },
        }
    }

    /// The plaintext inside TLS: messages from the first byte.
    fn plaintext(inner: S) -> Self {
        Self::socket(inner, false)
    }

    fn overrun(overrun: Overrun) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, overrun)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // One byte past the limit, to tell a server that stops there from one that goes on.
        let left = READ_LIMIT + 1 - this.read;
        let before = buf.filled().len();
        if buf.remaining() > left {
            let mut chunk = vec![0; left];
            let mut small = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut small))?;
            buf.put_slice(small.filled());
        } else {
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        }
        let new = &buf.filled()[before..];
        this.read += new.len();
        let checked = match this.read > READ_LIMIT {
            true => Err(Overrun::Total),
            false => this.frames.feed(new),
        };
        if let Err(overrun) = checked {
            // What passed the bound is not handed on.
            buf.set_filled(before);
            return Poll::Ready(Err(Self::overrun(overrun)));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Bounded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose plaintext is framed and bounded as the socket is.
pub struct Framed<T>(pub T);

impl<S, T> TlsConnect<S> for Framed<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
    T::Stream: Send + 'static,
{
    type Stream = Bounded<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let handshake = self.0.connect(stream);
        Box::pin(async move { handshake.await.map(Bounded::plaintext) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn messages_are_followed_across_any_split() {
        let mut stream = b"N".to_vec();
        stream.extend(message(b'R', &[0, 0, 0, 0]));
        stream.extend(message(b'Z', b""));
        stream.extend(message(b'E', &[b'x'; 300]));
        for split in 1..stream.len() {
            let mut frames = Frames::SslAnswer;
            for piece in stream.chunks(split) {
                frames.feed(piece).unwrap();
            }
            assert_eq!(frames, Frames::HEADER, "split every {split} bytes");
        }
    }

    #[test]
    fn a_long_message_is_refused_at_its_header() {
        let mut frames = Frames::SslAnswer;
        // An ErrorResponse claiming 2 GiB: refused before a byte of its body.
        let header = [b'N', b'E', 0x80, 0, 0, 0];
        assert_eq!(frames.feed(&header), Err(Overrun::Message(0x8000_0000 + 1)));
        let mut frames = Frames::HEADER;
        assert_eq!(frames.feed(&[b'E', 0, 0, 0, 3]), Err(Overrun::Malformed(3)));
        // The longest accepted message passes, one byte more does not.
        let mut frames = Frames::HEADER;
        let length = (MESSAGE_LIMIT - 1) as u32;
        let mut header = vec![b'D'];
        header.extend_from_slice(&length.to_be_bytes());
        assert_eq!(frames.feed(&header), Ok(()));
        let mut frames = Frames::HEADER;
        let mut header = vec![b'D'];
        header.extend_from_slice(&(length + 1).to_be_bytes());
        assert!(frames.feed(&header).is_err());
    }

    #[test]
    fn tls_records_are_only_counted() {
        let mut frames = Frames::SslAnswer;
        assert_eq!(frames.feed(&[b'S', 0x16, 0xff, 0xff, 0xff, 0xff]), Ok(()));
        assert_eq!(frames, Frames::Encrypted);
    }

    #[tokio::test]
    async fn reading_stops_one_byte_past_the_limit() {
        // A server of well-formed small messages that never stops.
        let one = message(b'N', &[b'x'; 1000]);
        let endless: Vec<u8> = one.iter().copied().cycle().take(READ_LIMIT * 4).collect();
        let mut stream = Bounded::socket(&endless[..], false);
        let mut sink = Vec::new();
        let error = stream.read_to_end(&mut sink).await.unwrap_err();
        assert_eq!(Overrun::behind(&error), Some(Overrun::Total));
        assert!(sink.len() <= READ_LIMIT, "{} bytes kept", sink.len());
    }
}
