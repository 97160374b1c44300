//! The answer's body on its way from the upstream to the worker: passed on frame by frame
//! as it arrives (nothing held back), read for its usage as it passes, and recorded once
//! when it ends — completely, with an error, or because the worker went away.

use std::pin::Pin;
use std::task::{Context, Poll};

use agensh_protocol::model_usage::{usage_of_body, Flavour, StreamUsage, TokenUsage};
use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::fair::Permit;

/// Most of a whole (not streamed) answer kept to read its usage; a larger answer's usage is
/// not known (and said in the log).
pub const WHOLE_BODY_LIMIT: usize = 16 << 20;

/// Most bytes of ready data frames joined into one.
pub const JOIN_LIMIT: usize = 16 << 10;

/// How an answer's usage is read.
pub enum Meter {
    /// A streamed answer (SSE), read as its bytes pass.
    Stream(StreamUsage),
    /// A whole JSON answer, read at its end.
    Whole { flavour: Flavour, body: Vec<u8> },
    /// An answer that carries no usage (a model list, a token count).
    Nothing,
}

impl Meter {
    fn feed(&mut self, chunk: &[u8]) {
        match self {
            Meter::Stream(s) => s.feed(chunk),
            Meter::Whole { body, .. } => {
                if body.len() + chunk.len() <= WHOLE_BODY_LIMIT {
                    body.extend_from_slice(chunk);
                } else {
                    body.clear();
                    body.shrink_to_fit();
                    *self = Meter::Nothing;
                }
            }
            Meter::Nothing => {}
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        match self {
            Meter::Stream(s) => s.usage(),
            Meter::Whole { flavour, body } => serde_json::from_slice(body)
                .ok()
                .and_then(|v| usage_of_body(*flavour, &v)),
            Meter::Nothing => None,
        }
    }
}

/// What happens when the answer ends: given the usage read and whether the answer reached
/// its end.
pub type OnEnd = Box<dyn FnOnce(Option<TokenUsage>, bool, u64) + Send>;

/// The upstream's body, observed.
pub struct Observed {
    /// The first frame, read before the answer was handed over (a connection that drops
    /// before it is retried).
    first: Option<Frame<Bytes>>,
    /// What the upstream gave after data frames were joined: returned next.
    held: Option<Option<Result<Frame<Bytes>, reqwest::Error>>>,
    inner: reqwest::Body,
    meter: Meter,
    bytes: u64,
    on_end: Option<OnEnd>,
    /// The upstream's place in flight, held until the answer ends.
    _permit: Permit,
}

impl Observed {
    pub fn new(
        first: Option<Frame<Bytes>>,
        inner: reqwest::Body,
        meter: Meter,
        permit: Permit,
        on_end: OnEnd,
    ) -> Observed {
        let mut o = Observed {
            first: None,
            held: None,
            inner,
            meter,
            bytes: 0,
            on_end: Some(on_end),
            _permit: permit,
        };
        if let Some(f) = &first {
            o.observe(f);
        }
        o.first = first;
        o
    }

    fn observe(&mut self, frame: &Frame<Bytes>) {
        if let Some(data) = frame.data_ref() {
            self.bytes += data.len() as u64;
            self.meter.feed(data);
        }
    }

    /// `data` with the data frames the upstream has ready right now joined to it (never
    /// waiting for one, never past [`JOIN_LIMIT`]): a model streams many small events, and
    /// each frame costs more to pass on than its bytes. Anything else is held for the next
    /// poll.
    fn join(&mut self, data: Bytes, cx: &mut Context<'_>) -> Bytes {
        let mut joined: Option<Vec<u8>> = None;
        loop {
            let len = joined.as_ref().map_or(data.len(), Vec::len);
            if len >= JOIN_LIMIT || self.inner.is_end_stream() {
                break;
            }
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) if f.is_data() => {
                    let more = f.into_data().unwrap_or_default();
                    joined
                        .get_or_insert_with(|| {
                            let mut v = Vec::with_capacity(JOIN_LIMIT.min(len * 8));
                            v.extend_from_slice(&data);
                            v
                        })
                        .extend_from_slice(&more);
                }
                Poll::Ready(other) => {
                    self.held = Some(other);
                    break;
                }
                Poll::Pending => break,
            }
        }
        match joined {
            Some(v) => Bytes::from(v),
            None => data,
        }
    }

    fn finish(&mut self, complete: bool) {
        if let Some(end) = self.on_end.take() {
            end(self.meter.usage(), complete, self.bytes);
        }
    }
}

impl Body for Observed {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, reqwest::Error>>> {
        let this = &mut *self;
        if let Some(f) = this.first.take() {
            if this.inner.is_end_stream() {
                this.finish(true);
            }
            return Poll::Ready(Some(Ok(f)));
        }
        let next = match this.held.take() {
            Some(held) => Poll::Ready(held),
            None => Pin::new(&mut this.inner).poll_frame(cx),
        };
        match next {
            Poll::Ready(Some(Ok(f))) => {
                let f = match f.into_data() {
                    Ok(data) => Frame::data(this.join(data, cx)),
                    Err(f) => f,
                };
                this.observe(&f);
                // A caller may stop polling once the body says it is at its end.
                if this.held.is_none() && this.inner.is_end_stream() {
                    this.finish(true);
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(false);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.finish(true);
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.first {
            None => self.inner.size_hint(),
            Some(_) => SizeHint::default(),
        }
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        // The worker went away before the end (or the end was never polled).
        self.finish(false);
    }
}
