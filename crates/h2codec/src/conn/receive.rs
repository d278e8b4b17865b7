//! What the client sends: HEADERS and DATA on their streams, the header block's bound,
//! and the receive windows given back as the server reads.

use super::*;

impl Conn {
    /// A header block gathered over CONTINUATION frames may not grow past four times the
    /// head's budget (a head that large is refused anyway; beyond it is a flood).
    pub(super) fn check_block(&mut self) -> Result<(), ConnError> {
        let bound = (self.config.max_header_list_size as usize).saturating_mul(4);
        if self.block.len() > bound.max(frame::DEFAULT_MAX_FRAME_SIZE as usize) {
            return Err(self.fail(Reason::ENHANCE_YOUR_CALM));
        }
        Ok(())
    }

    pub(super) fn on_data(
        &mut self,
        stream: u32,
        end_stream: bool,
        len: usize,
        flow_len: u32,
    ) -> Result<Option<Event>, ConnError> {
        self.recv_window -= i64::from(flow_len);
        if self.recv_window < 0 {
            return Err(self.fail(Reason::FLOW_CONTROL_ERROR));
        }
        if self.is_idle(stream) {
            return Err(self.fail(Reason::PROTOCOL_ERROR));
        }
        // Padding is never the server's to read: given back at once.
        let padding = flow_len - len as u32;
        let allowance = self.allowance();
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) else {
            // A closed or half-closed stream: the bytes still count against the
            // connection's window (section 6.9), so they are given back; DATA the
            // client sent before it saw the server's reset is ignored.
            self.release_connection(flow_len);
            if !self.streams.contains_key(&stream) && self.closed_how(stream) == Some(true) {
                return Ok(None);
            }
            return Ok(self.stream_error(stream, Reason::STREAM_CLOSED));
        };
        s.recv_window -= i64::from(flow_len);
        if s.recv_window < -allowance {
            self.release_connection(flow_len);
            return Ok(self.stream_error(stream, Reason::FLOW_CONTROL_ERROR));
        }
        s.received += len as u64;
        let too_long = s.length.is_some_and(|l| s.received > l);
        let too_short = end_stream && s.length.is_some_and(|l| s.received != l);
        if too_long || too_short {
            // Section 8.1.1: a content-length the DATA frames do not add up to.
            self.release_connection(flow_len);
            return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
        }
        if padding > 0 {
            // Given back to both windows, announced as read bytes are.
            self.release(stream, padding as usize);
        }
        if end_stream {
            if let Some(s) = self.streams.get_mut(&stream) {
                s.recv_open = false;
            }
            self.close_if_done(stream);
        }
        if len == 0 && !end_stream {
            return Ok(None);
        }
        Ok(Some(Event::Data {
            stream,
            data: Bytes::new(),
            end_stream,
        }))
    }

    /// How far a client may overrun a stream's window before it has seen the server's
    /// SETTINGS: it may assume 65,535 until then (section 6.9.2).
    pub(super) fn allowance(&self) -> i64 {
        match self.acked {
            true => 0,
            false => (DEFAULT_WINDOW - i64::from(self.config.initial_stream_window)).max(0),
        }
    }

    pub(super) fn on_headers(
        &mut self,
        stream: u32,
        end_stream: bool,
        block: &[u8],
    ) -> Result<Option<Event>, ConnError> {
        enum Kind {
            New,
            Trailers,
            /// Decoded for the HPACK table's sake, then refused with this reason.
            Refused(Reason),
            /// Decoded for the HPACK table's sake, and nothing more.
            Ignored,
        }
        let kind = match self.streams.get(&stream) {
            Some(s) if s.recv_open => Kind::Trailers,
            Some(_) => Kind::Refused(Reason::STREAM_CLOSED),
            None if stream <= self.last_stream => match self.closed_how(stream) {
                // Sent before the client saw the reset: decoded, and ignored.
                Some(true) => Kind::Ignored,
                // A stream both sides ended (section 5.1, "closed").
                Some(false) => return Err(self.fail(Reason::STREAM_CLOSED)),
                // Stream identifiers only grow (section 5.1.1).
                None => return Err(self.fail(Reason::PROTOCOL_ERROR)),
            },
            None => {
                self.last_stream = stream;
                if self.going_away.is_some()
                    || self.streams.len() >= self.config.max_concurrent_streams as usize
                {
                    Kind::Refused(Reason::REFUSED_STREAM)
                } else {
                    Kind::New
                }
            }
        };
        let trailers = matches!(kind, Kind::Trailers);
        let malformed = self.decode(block, trailers)?;
        match kind {
            Kind::Ignored => Ok(None),
            Kind::Refused(reason) => {
                if self.streams.contains_key(&stream) {
                    return Ok(self.stream_error(stream, reason));
                }
                frame::write_rst_stream(&mut self.out, stream, reason);
                self.closed(stream, true);
                Ok(None)
            }
            Kind::Trailers => {
                if !end_stream || malformed {
                    return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
                }
                let Some(s) = self.streams.get_mut(&stream) else {
                    unreachable!("a stream with trailers is open")
                };
                if s.length.is_some_and(|l| s.received != l) {
                    return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
                }
                s.recv_open = false;
                self.close_if_done(stream);
                Ok(Some(Event::Data {
                    stream,
                    data: Bytes::new(),
                    end_stream: true,
                }))
            }
            Kind::New => {
                let (length, bad_length) = match self.content_length() {
                    Ok(l) => (l, end_stream && l.is_some_and(|l| l != 0)),
                    Err(()) => (None, true),
                };
                // A head over the budget is answered 431 by the server, whatever the
                // fields it lost.
                let oversize = self.head.oversize;
                if !oversize && (malformed || bad_length || !self.pseudo_complete()) {
                    frame::write_rst_stream(&mut self.out, stream, Reason::PROTOCOL_ERROR);
                    self.closed(stream, true);
                    return Ok(None);
                }
                self.streams.insert(
                    stream,
                    Stream {
                        recv_open: !end_stream,
                        send_open: true,
                        headers_sent: false,
                        send_window: self.peer_window,
                        recv_window: i64::from(self.config.initial_stream_window),
                        unannounced: 0,
                        length,
                        received: 0,
                    },
                );
                Ok(Some(Event::Request { stream, end_stream }))
            }
        }
    }

    pub(super) fn release_connection(&mut self, n: u32) {
        self.unannounced += n;
        let threshold = self
            .config
            .initial_connection_window
            .max(DEFAULT_WINDOW as u32)
            / 2;
        if self.unannounced >= threshold {
            frame::write_window_update(&mut self.out, 0, self.unannounced);
            self.recv_window += i64::from(self.unannounced);
            self.unannounced = 0;
        }
    }

    /// The server has read `n` body bytes of `stream`: the client may send that many
    /// more (announced in batches of half a window).
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = n as u32;
        self.release_connection(n);
        let threshold = (self.config.initial_stream_window / 2).max(1);
        if let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) {
            s.unannounced += n;
            if s.unannounced >= threshold {
                frame::write_window_update(&mut self.out, stream, s.unannounced);
                s.recv_window += i64::from(s.unannounced);
                s.unannounced = 0;
            }
        }
    }
}
