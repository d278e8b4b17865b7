//! What the server sends: response heads, DATA within the windows, resets, GOAWAY.

use super::*;

impl Conn {
    /// Frames a response head: `:status` and `fields` (names in any case; they are sent
    /// in lower case). `end_stream`: no body follows.
    pub fn send_headers<'f>(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<(), StreamGone> {
        match self.streams.get_mut(&stream) {
            Some(s) if s.send_open && !s.headers_sent => {
                s.headers_sent = true;
                s.send_open = !end_stream;
            }
            _ => return Err(StreamGone),
        }
        let at = frame::begin_headers(&mut self.out);
        let mut block = self.encoder.response(status, &mut self.out);
        for (name, value) in fields {
            block.field_any_case(name, value);
        }
        block.finish();
        frame::finish_headers(&mut self.out, at, stream, end_stream, self.peer_max_frame);
        if end_stream {
            self.sent_end(stream);
        }
        Ok(())
    }

    /// Frames trailers after a response's body: a header block of `fields` (names in
    /// lower case) with END_STREAM, which ends the stream (RFC 9113 section 8.1).
    pub fn send_trailers<'f>(
        &mut self,
        stream: u32,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), StreamGone> {
        match self.streams.get_mut(&stream) {
            Some(s) if s.send_open && s.headers_sent => s.send_open = false,
            _ => return Err(StreamGone),
        }
        let at = frame::begin_headers(&mut self.out);
        let mut block = self.encoder.block(&mut self.out);
        for (name, value) in fields {
            block.field_any_case(name, value);
        }
        block.finish();
        frame::finish_headers(&mut self.out, at, stream, true, self.peer_max_frame);
        self.sent_end(stream);
        Ok(())
    }

    /// What `stream` may send now: the smaller of its window and the connection's.
    pub fn capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(s) if s.send_open => s.send_window.min(self.send_window).max(0) as usize,
            _ => 0,
        }
    }

    /// Frames as much of `data` as the windows allow, in frames of at most the client's
    /// SETTINGS_MAX_FRAME_SIZE; `end_stream` ends the stream with the last byte (only if
    /// all of `data` went). Returns how many bytes went.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, StreamGone> {
        let room = match self.streams.get(&stream) {
            Some(s) if s.send_open && s.headers_sent => {
                s.send_window.min(self.send_window).max(0) as usize
            }
            _ => return Err(StreamGone),
        };
        let n = room.min(data.len());
        let ends = end_stream && n == data.len();
        if n == 0 && !ends {
            return Ok(0);
        }
        let max = self.peer_max_frame as usize;
        let mut sent = 0;
        loop {
            let len = (n - sent).min(max);
            let last = sent + len == n;
            frame::write_data(&mut self.out, stream, &data[sent..sent + len], ends && last);
            sent += len;
            if last {
                break;
            }
        }
        self.send_window -= n as i64;
        let Some(s) = self.streams.get_mut(&stream) else {
            unreachable!("checked above")
        };
        s.send_window -= n as i64;
        if ends {
            s.send_open = false;
            self.sent_end(stream);
        }
        Ok(n)
    }

    /// Starts a DATA frame on `stream` whose payload the caller appends to
    /// [`Conn::payload`] itself (a file read straight into the output, with no copy in
    /// between). Returns how many bytes it may append: at most `want`, within the
    /// windows and the client's frame size; when that is 0 no frame is started. End the
    /// frame with [`Conn::finish_data`] before anything else is framed.
    pub fn begin_data(&mut self, stream: u32, want: usize) -> Result<usize, StreamGone> {
        let room = match self.streams.get(&stream) {
            Some(s) if s.send_open && s.headers_sent => {
                s.send_window.min(self.send_window).max(0) as usize
            }
            _ => return Err(StreamGone),
        };
        let n = room.min(want).min(self.peer_max_frame as usize);
        if n > 0 {
            self.data_at = Some((stream, self.out.len(), n));
            self.out.extend_from_slice(&[0; frame::HEAD_LEN]);
        }
        Ok(n)
    }

    /// The output, for the payload of the DATA frame [`Conn::begin_data`] started.
    pub fn payload(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Ends the DATA frame [`Conn::begin_data`] started, with what was appended since
    /// (at most what it allowed); `end_stream` ends the stream with it.
    ///
    /// # Panics
    ///
    /// If more was appended than `begin_data` allowed.
    pub fn finish_data(&mut self, end_stream: bool) {
        let Some((stream, at, room)) = self.data_at.take() else {
            return;
        };
        let len = self.out.len() - at - frame::HEAD_LEN;
        assert!(
            len <= room,
            "{len} bytes appended where {room} were allowed"
        );
        let head = frame::Head {
            len: len as u32,
            kind: frame::kind::DATA,
            flags: if end_stream {
                frame::flag::END_STREAM
            } else {
                0
            },
            stream,
        };
        self.out[at..at + frame::HEAD_LEN].copy_from_slice(&head.to_bytes());
        self.send_window -= len as i64;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send_window -= len as i64;
            if end_stream {
                s.send_open = false;
                self.sent_end(stream);
            }
        }
    }

    /// Resets a stream the server can no longer answer (its body broke off, say).
    pub fn reset(&mut self, stream: u32, reason: Reason) {
        if self.streams.remove(&stream).is_some() {
            frame::write_rst_stream(&mut self.out, stream, reason);
            self.closed(stream, true);
        }
    }

    /// GOAWAY: streams the client has opened are answered, newer ones are refused. With
    /// a reason other than NO_ERROR the connection is over.
    pub fn go_away(&mut self, reason: Reason) {
        if reason != Reason::NO_ERROR {
            self.fail(reason);
            return;
        }
        if self.going_away.is_none() {
            frame::write_goaway(&mut self.out, self.last_stream, reason, b"");
            self.going_away = Some(self.last_stream);
        }
    }
}
