//! Where a connection is in its life: the states of the worker's connection slots.

use pool::State;

/// Where a connection is in its life. Each state's slots form a list ordered by when
/// they entered it, so timeouts are found oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// No connection.
    Free,
    /// Receiving a request head (from accept, or from the first byte after idling).
    ReadingHead,
    /// Receiving (and discarding) a request body.
    ReadingBody,
    /// Producing a response that waits on something (not used by static files, which
    /// answer synchronously; proxied and scripted responses will).
    Handling,
    /// The response is written and the socket is full: waiting for the client to read.
    Writing,
    /// A keep-alive connection between requests. Holds no buffer.
    Idle,
    /// Closed by a timeout or eviction; the slot frees when its task notices.
    Closing,
}

impl State for ConnState {
    const COUNT: usize = 7;
    fn index(self) -> usize {
        self as usize
    }
}

impl ConnState {
    /// The state's name in metrics: `reading_head`...
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Free => "free",
            ConnState::ReadingHead => "reading_head",
            ConnState::ReadingBody => "reading_body",
            ConnState::Handling => "handling",
            ConnState::Writing => "writing",
            ConnState::Idle => "idle",
            ConnState::Closing => "closing",
        }
    }

    pub const ALL: [ConnState; 7] = [
        ConnState::Free,
        ConnState::ReadingHead,
        ConnState::ReadingBody,
        ConnState::Handling,
        ConnState::Writing,
        ConnState::Idle,
        ConnState::Closing,
    ];
}
