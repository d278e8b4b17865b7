//! One thread's event loop and its connections (see the module above for the models).

mod http2;

use super::Progress;
use crate::config::Plan;
use crate::h2;
use crate::os::timerfd;
use crate::response::ResponseParser;
use crate::stats::{micros, FailureKind, ThreadStats};
use crate::stream::Stream;
use crate::Error;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMER: Token = Token(usize::MAX);
/// After a failed connect, wait this long before the slot tries again, so a dead
/// server does not turn the generator into a busy loop.
const CONNECT_RETRY: Duration = Duration::from_millis(1);

/// This thread's part of the run.
pub(super) struct Share {
    pub(super) connections: usize,
    pub(super) requests: Option<u64>,
    pub(super) rate: Option<f64>,
    ramp: Option<f64>,
}

impl Share {
    pub(super) fn of(plan: &Plan, index: usize) -> Share {
        let split = |total: u64| {
            total / plan.threads as u64 + ((index as u64) < total % plan.threads as u64) as u64
        };
        Share {
            connections: split(plan.connections as u64) as usize,
            requests: plan.requests_total.map(split),
            rate: plan.rate.map(|r| r / plan.threads as f64),
            ramp: plan.ramp.map(|r| r / plan.threads as f64),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Connecting,
    Open,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    sent: Instant,
    intended: Instant,
    wire: u16,
    /// HTTP/2: the stream carrying it (0 for HTTP/1.1).
    stream: u32,
}

struct Conn {
    stream: Option<Stream>,
    state: State,
    since: Instant,
    rbuf: Box<[u8]>,
    rpos: usize,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    inflight: VecDeque<InFlight>,
    parser: ResponseParser,
    /// HTTP/2: the connection's streams and windows; made with its first request.
    h2: Option<Box<h2::Conn>>,
    /// Open model: when the connection last became free for a request.
    idle_since: Instant,
    in_available: bool,
    ever_connected: bool,
    /// Listed in `Worker::refill`.
    refill_due: bool,
}

/// Per-connection read buffer: 16 KiB, less when there are very many
/// connections so that memory stays bounded (at most ~256 MiB in total).
fn read_buffer_size(connections: usize) -> usize {
    (256 << 20) / connections.max(1)
}

pub(super) struct Worker<'a> {
    plan: &'a Plan,
    poll: Poll,
    conns: Vec<Conn>,
    pub(super) stats: ThreadStats,
    start: Instant,
    deadline: Option<Instant>,
    /// Requests this thread may still send (count-bounded runs).
    budget: Option<u64>,
    inflight_total: usize,
    reopen: VecDeque<(Instant, usize)>,
    /// Ramp: slots not yet opened for the first time, and when the next may open.
    unopened: usize,
    next_open: Instant,
    ramp_interval: Option<Duration>,
    /// Open model.
    interval_ns: Option<f64>,
    next_k: u64,
    available: Vec<usize>,
    mix_pos: usize,
    /// Connections opened with keep-alive, for the server name each one sends.
    name_turn: usize,
    timer: OwnedFd,
    timer_armed: Option<Instant>,
    next_tick: Instant,
    progress: Arc<Progress>,
    reported: (u64, u64),
    /// Slots that have been connected at least once (for the ramp's connect rate).
    connected_once: usize,
    /// Closed model: connections whose answers arrived during this round of events, to
    /// be topped up together after it (see [`Worker::refill`]).
    refill: Vec<usize>,
    /// HTTP/2: the events of the frames just read (kept to reuse its allocation).
    h2_events: Vec<h2::Event>,
}

impl<'a> Worker<'a> {
    pub(super) fn new(
        plan: &'a Plan,
        share: Share,
        poll: Poll,
        start: Instant,
        progress: Arc<Progress>,
    ) -> Result<Self, Error> {
        let open_model = share.rate.is_some();
        let mut rbuf = read_buffer_size(plan.connections).clamp(4096, 16384);
        if plan.http2 {
            // Room for any frame but DATA (whose payload is skipped as it comes) whole.
            rbuf = rbuf.max(16_384 + h2codec::frame::HEAD_LEN);
        }
        let conns = (0..share.connections)
            .map(|_| Conn {
                stream: None,
                state: State::Closed,
                since: start,
                rbuf: vec![0; rbuf].into_boxed_slice(),
                rpos: 0,
                rlen: 0,
                wbuf: Vec::with_capacity(
                    plan.wires.iter().map(|w| w.bytes.len()).max().unwrap_or(0) * plan.pipeline,
                ),
                wpos: 0,
                inflight: VecDeque::with_capacity(plan.pipeline),
                parser: ResponseParser::new(),
                h2: None,
                idle_since: start,
                in_available: false,
                ever_connected: false,
                refill_due: false,
            })
            .collect();
        let timer = timerfd()?;
        poll.registry().register(
            &mut mio::unix::SourceFd(&timer.as_raw_fd()),
            TIMER,
            Interest::READABLE,
        )?;
        if open_model {
            // Wake-ups for scheduled sends should be precise to microseconds.
            // SAFETY: prctl with PR_SET_TIMERSLACK takes an integer argument.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        }
        Ok(Worker {
            plan,
            poll,
            conns,
            stats: ThreadStats::new(start, open_model),
            start,
            deadline: plan.duration.map(|d| start + d),
            budget: share.requests,
            inflight_total: 0,
            reopen: VecDeque::new(),
            unopened: share.connections,
            next_open: start,
            ramp_interval: share.ramp.map(|r| Duration::from_secs_f64(1.0 / r)),
            interval_ns: share.rate.map(|r| 1e9 / r),
            next_k: 0,
            available: Vec::with_capacity(share.connections),
            mix_pos: 0,
            name_turn: usize::MAX,
            timer,
            timer_armed: None,
            next_tick: start,
            progress,
            reported: (0, 0),
            connected_once: 0,
            refill: Vec::with_capacity(share.connections),
            h2_events: Vec::new(),
        })
    }

    fn open_model(&self) -> bool {
        self.interval_ns.is_some()
    }

    fn intended(&self, k: u64) -> Instant {
        let ns = self.interval_ns.unwrap_or(0.0) * k as f64;
        self.start + Duration::from_nanos(ns as u64)
    }

    fn budget_left(&self) -> bool {
        self.budget != Some(0)
    }

    fn take_budget(&mut self) -> bool {
        match &mut self.budget {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }

    pub(super) fn run(&mut self) -> Result<(), Error> {
        let mut events = Events::with_capacity(1024);
        if self.conns.is_empty() {
            return Ok(());
        }
        // In the open model without keep-alive a connection is opened per
        // request, at its intended time, so every slot starts free.
        if self.open_model() && !self.plan.keepalive {
            for slot in 0..self.conns.len() {
                self.make_available(slot);
            }
            self.unopened = 0;
        }
        loop {
            let now = Instant::now();
            if self.deadline.is_some_and(|d| now >= d) || self.progress.stop.load(Ordering::Relaxed)
            {
                break;
            }
            if !self.budget_left() && self.inflight_total == 0 {
                break;
            }
            self.open_due(now);
            if self.open_model() {
                self.dispatch(now);
            }
            if now >= self.next_tick {
                self.tick(now);
            }
            self.arm_timer(now)?;
            match self.poll.poll(&mut events, None) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for ev in events.iter() {
                let token = ev.token();
                if token == TIMER {
                    let mut buf = [0u8; 8];
                    // SAFETY: reading 8 bytes from our own timerfd into a local buffer.
                    unsafe { libc::read(self.timer.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                    self.timer_armed = None;
                    continue;
                }
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                self.on_event(token.0, readable, ev.is_writable(), ev.is_error());
            }
            self.refill();
        }
        self.report_progress();
        Ok(())
    }

    /// The next moment something is due; the timer fd wakes the loop then.
    fn arm_timer(&mut self, now: Instant) -> Result<(), Error> {
        let mut next = self.next_tick;
        if let Some(d) = self.deadline {
            next = next.min(d);
        }
        if self.unopened > 0 {
            next = next.min(self.next_open);
        }
        if let Some(&(at, _)) = self.reopen.front() {
            next = next.min(at);
        }
        if self.open_model() && !self.available.is_empty() && self.budget_left() {
            next = next.min(self.intended(self.next_k));
        }
        if self.timer_armed.is_some_and(|a| a <= next) {
            return Ok(());
        }
        let wait = next
            .saturating_duration_since(now)
            .max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: valid timerfd and a fully initialised itimerspec.
        let rc = unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error().into());
        }
        self.timer_armed = Some(next);
        Ok(())
    }

    fn report_progress(&mut self) {
        let r = self.stats.responses;
        let f = self.stats.failures.total();
        self.progress
            .responses
            .fetch_add(r - self.reported.0, Ordering::Relaxed);
        self.progress
            .failures
            .fetch_add(f - self.reported.1, Ordering::Relaxed);
        self.reported = (r, f);
    }

    /// Every 100 ms: progress counters and the oldest-first timeout checks.
    fn tick(&mut self, now: Instant) {
        self.next_tick = now
            + Duration::from_millis(100)
                .min(self.plan.timeout / 4)
                .max(Duration::from_millis(1));
        self.report_progress();
        let timeout = self.plan.timeout;
        for slot in 0..self.conns.len() {
            let c = &self.conns[slot];
            match c.state {
                State::Connecting if now.saturating_duration_since(c.since) >= timeout => {
                    self.fail(slot, now, FailureKind::Connect);
                }
                State::Open
                    if c.inflight
                        .front()
                        .is_some_and(|f| now.saturating_duration_since(f.sent) >= timeout) =>
                {
                    self.fail(slot, now, FailureKind::Timeout);
                }
                _ => {}
            }
        }
    }

    /// Opens connections that are due: the first time (ramped) and again after a close.
    fn open_due(&mut self, now: Instant) {
        while self.unopened > 0 && self.next_open <= now {
            let slot = self.conns.len() - self.unopened;
            self.unopened -= 1;
            if let Some(iv) = self.ramp_interval {
                self.next_open += iv;
            }
            self.start_slot(slot, now);
        }
        while let Some(&(at, slot)) = self.reopen.front() {
            if at > now {
                break;
            }
            self.reopen.pop_front();
            self.start_slot(slot, now);
        }
    }

    /// Puts a closed slot back to work according to the mode.
    fn start_slot(&mut self, slot: usize, now: Instant) {
        if self.open_model() && !self.plan.keepalive {
            self.make_available(slot);
            return;
        }
        if !self.budget_left() {
            return;
        }
        if !self.plan.keepalive {
            // One connection per request: the request is counted from the connect.
            if !self.take_budget() {
                return;
            }
            self.enqueue(slot, now, now);
        }
        self.connect(slot, now);
    }

    fn connect(&mut self, slot: usize, now: Instant) {
        // The server name: that of the request just queued for a connection that
        // carries one, else the mix's names in turn, one per connection opened.
        let len = self.plan.mix.len();
        let turn = match self.plan.keepalive {
            false => self.mix_pos + len - 1,
            true => {
                self.name_turn = self.name_turn.wrapping_add(1);
                self.name_turn
            }
        };
        let wire = usize::from(self.plan.mix[turn % len]);
        let tls = self.plan.tls.as_ref().map(|t| (t, wire));
        let result =
            Stream::connect(&self.plan.address, self.plan.keepalive, tls).and_then(|mut s| {
                self.poll.registry().register(
                    s.source(),
                    Token(slot),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(s)
            });
        let c = &mut self.conns[slot];
        c.since = now;
        c.rpos = 0;
        c.rlen = 0;
        c.parser.reset();
        match result {
            Ok(s) => {
                c.stream = Some(s);
                c.state = State::Connecting;
            }
            Err(_) => {
                c.state = State::Connecting;
                self.fail(slot, now, FailureKind::Connect);
            }
        }
    }

    fn make_available(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        if !c.in_available {
            c.in_available = true;
            self.available.push(slot);
        }
    }

    /// Appends the next request of the mix to the slot's write buffer.
    #[inline]
    fn enqueue(&mut self, slot: usize, sent: Instant, intended: Instant) {
        let wire = self.plan.mix[self.mix_pos];
        self.mix_pos += 1;
        if self.mix_pos == self.plan.mix.len() {
            self.mix_pos = 0;
        }
        let c = &mut self.conns[slot];
        let stream = if self.plan.http2 {
            let h2 =
                c.h2.get_or_insert_with(|| Box::new(h2::Conn::new(&mut c.wbuf)));
            h2.request(&self.plan.wires, wire, &mut c.wbuf)
        } else {
            c.wbuf
                .extend_from_slice(&self.plan.wires[wire as usize].bytes);
            0
        };
        c.inflight.push_back(InFlight {
            sent,
            intended,
            wire,
            stream,
        });
        self.inflight_total += 1;
    }

    /// Open model: hands due requests to free connections.
    fn dispatch(&mut self, now: Instant) {
        while let Some(&slot) = self.available.last() {
            let intended = self.intended(self.next_k);
            if intended > now || self.deadline.is_some_and(|d| intended >= d) || !self.budget_left()
            {
                return;
            }
            self.available.pop();
            let c = &mut self.conns[slot];
            c.in_available = false;
            let usable = if self.plan.keepalive {
                c.state == State::Open
                    && c.inflight.len() < self.plan.pipeline
                    && c.h2.as_ref().is_none_or(|h| h.room() > 0)
            } else {
                c.state == State::Closed
            };
            if !usable {
                continue;
            }
            let free_since = c.idle_since.max(intended);
            self.take_budget();
            self.next_k += 1;
            let sent = Instant::now();
            if let Some(lag) = &mut self.stats.send_lag {
                lag.saturating_record(micros(sent.saturating_duration_since(free_since)));
            }
            self.enqueue(slot, sent, intended);
            if self.plan.keepalive {
                if self.conns[slot].inflight.len() < self.plan.pipeline {
                    // HTTP/2: room for another stream.
                    self.make_available(slot);
                }
                self.flush(slot, sent);
            } else {
                self.connect(slot, sent);
            }
        }
    }

    fn on_event(&mut self, slot: usize, readable: bool, writable: bool, error: bool) {
        let Some(c) = self.conns.get_mut(slot) else {
            return;
        };
        match c.state {
            State::Closed => {}
            State::Connecting => {
                let Some(stream) = &c.stream else { return };
                if error {
                    // Refused, unreachable or reset during the handshake.
                    self.fail(slot, Instant::now(), FailureKind::Connect);
                } else if writable {
                    // A non-blocking connect becomes writable once established.
                    // Only the rare unclear case pays for getsockopt/getpeername.
                    if readable {
                        match stream.connected() {
                            Ok(false) => return,
                            Ok(true) => {}
                            Err(_) => return self.fail(slot, Instant::now(), FailureKind::Connect),
                        }
                    }
                    self.on_connected(slot);
                }
            }
            State::Open => {
                if writable && c.wpos < c.wbuf.len() {
                    self.flush(slot, Instant::now());
                } else if writable {
                    if let Some(Err(e)) = c.stream.as_mut().map(Stream::flush_pending) {
                        return self.io_failed(slot, Instant::now(), &e);
                    }
                }
                if readable && self.conns[slot].state == State::Open {
                    self.on_readable(slot);
                }
            }
        }
    }

    fn on_connected(&mut self, slot: usize) {
        let now = Instant::now();
        let first_time = !self.conns[slot].ever_connected;
        let c = &mut self.conns[slot];
        c.state = State::Open;
        c.ever_connected = true;
        c.idle_since = now;
        self.stats.connects += 1;
        let took = micros(now.saturating_duration_since(c.since));
        self.stats.connect_time.saturating_record(took);
        if first_time {
            self.connected_once += 1;
            if self.connected_once == self.conns.len() {
                self.stats.all_connected_at = Some(now.saturating_duration_since(self.start));
            }
        }
        if !self.plan.keepalive {
            // The request was queued when the connect started.
            self.flush(slot, now);
        } else if self.open_model() {
            self.make_available(slot);
        } else {
            self.fill(slot, now);
        }
    }

    /// Closed model: keeps `pipeline` requests in flight.
    #[inline]
    fn fill(&mut self, slot: usize, now: Instant) {
        let c = &self.conns[slot];
        let mut want = self.plan.pipeline - c.inflight.len();
        if let Some(h2) = &c.h2 {
            want = want.min(h2.room());
        }
        let mut queued = false;
        for _ in 0..want {
            if !self.take_budget() {
                break;
            }
            self.enqueue(slot, now, now);
            queued = true;
        }
        if queued {
            self.flush(slot, now);
        }
    }

    /// Writes what is buffered; on a full socket the rest waits for writability.
    #[inline]
    fn flush(&mut self, slot: usize, now: Instant) {
        let c = &mut self.conns[slot];
        let Some(stream) = &mut c.stream else { return };
        if c.state != State::Open {
            return;
        }
        while c.wpos < c.wbuf.len() {
            match stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail(slot, now, FailureKind::Reset),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_failed(slot, now, &e),
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
    }

    fn on_readable(&mut self, slot: usize) {
        loop {
            let c = &mut self.conns[slot];
            if c.state != State::Open {
                return;
            }
            if c.rlen == c.rbuf.len() {
                if c.rpos == 0 {
                    // A response head larger than the whole buffer.
                    return self.fail(slot, Instant::now(), FailureKind::BadResponse);
                }
                c.rbuf.copy_within(c.rpos..c.rlen, 0);
                c.rlen -= c.rpos;
                c.rpos = 0;
            }
            let space = c.rbuf.len() - c.rlen;
            let Some(stream) = &mut c.stream else { return };
            match stream.read(&mut c.rbuf[c.rlen..]) {
                Ok(0) => return self.on_eof(slot),
                Ok(n) => {
                    let now = Instant::now();
                    c.rlen += n;
                    self.stats.bytes_read(now, n);
                    self.process(slot, now);
                    // A short read drained the socket; with edge-triggered epoll on
                    // Linux any later data raises a new event, so skip the extra
                    // read that would only return EAGAIN.
                    let drained = self.conns[slot]
                        .stream
                        .as_ref()
                        .is_some_and(Stream::short_read_drains);
                    if n < space && drained {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_failed(slot, Instant::now(), &e),
            }
        }
    }

    /// Frames every complete response in the buffer; in the closed model the
    /// connection is then due a top-up to its pipeline depth, made by [`Worker::refill`].
    fn process(&mut self, slot: usize, now: Instant) {
        self.frame(slot, now);
        let closed_model = !self.open_model();
        let c = &mut self.conns[slot];
        // Pipelined, a connection is topped up once half its window is answered, not
        // after every read: against a server slower than the generator each read brings
        // one or two answers, and a write per read cost 1.3x wrk's CPU per request. Half
        // a window still in flight keeps the server busy meanwhile. HTTP/2 keeps all its
        // streams busy, as h2load's -m does: a stream's successor leaves with the round.
        let low = if self.plan.http2 {
            self.plan.pipeline - 1
        } else {
            self.plan.pipeline / 2
        };
        if closed_model
            && self.plan.keepalive
            && c.state == State::Open
            && c.inflight.len() <= low
            && c.inflight.len() < self.plan.pipeline
            && !c.refill_due
        {
            c.refill_due = true;
            self.refill.push(slot);
        }
    }

    /// Closed model: tops up, with one write each, the connections that got answers in
    /// the round of events just handled. Writing them together, after the reads, rather
    /// than each right after its own read, is what wrk does (it arms a writable event and
    /// writes on the next loop turn): the server then finds many requests ready at once
    /// and answers them in one pass of its event loop. Writing each at once made the
    /// server wake per request; against nginx the requests/s were 12% below wrk's.
    fn refill(&mut self) {
        if self.refill.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due = std::mem::take(&mut self.refill);
        for &slot in &due {
            let c = &mut self.conns[slot];
            c.refill_due = false;
            if c.state == State::Open && c.inflight.len() < self.plan.pipeline {
                self.fill(slot, now);
            }
        }
        due.clear();
        self.refill = due;
    }

    fn frame(&mut self, slot: usize, now: Instant) {
        if self.plan.http2 {
            return self.frame_h2(slot, now);
        }
        loop {
            let c = &mut self.conns[slot];
            if c.state != State::Open {
                return;
            }
            if c.rpos == c.rlen {
                c.rpos = 0;
                c.rlen = 0;
                return;
            }
            let Some(front) = c.inflight.front() else {
                // Bytes nobody asked for.
                return self.fail(slot, now, FailureKind::BadResponse);
            };
            let head = self.plan.wires[front.wire as usize].head;
            match c.parser.feed(&c.rbuf[c.rpos..c.rlen], head) {
                Ok((n, done)) => {
                    c.rpos += n;
                    match done {
                        Some(r) => self.complete(slot, now, r.status, r.close),
                        None => {
                            if c.rpos == c.rlen {
                                c.rpos = 0;
                                c.rlen = 0;
                            }
                            return;
                        }
                    }
                }
                Err(_) => return self.fail(slot, now, FailureKind::BadResponse),
            }
        }
    }

    fn on_eof(&mut self, slot: usize) {
        let now = Instant::now();
        let c = &mut self.conns[slot];
        if !c.inflight.is_empty() {
            if let Some(r) = c.parser.eof() {
                self.complete(slot, now, r.status, true);
                return;
            }
            return self.fail(slot, now, FailureKind::Reset);
        }
        // The server closed an idle keep-alive connection: not a failure.
        self.close(slot);
        self.reopen.push_back((now, slot));
    }

    fn complete(&mut self, slot: usize, now: Instant, status: u16, server_close: bool) {
        let c = &mut self.conns[slot];
        let f = c
            .inflight
            .pop_front()
            .expect("a response answers a request");
        self.answered(slot, now, f, Some(status), server_close);
    }

    /// A request `f` of the slot's ended: counted, and the connection goes on, closes or
    /// frees up as the mode wants. `None`: the server reset its stream.
    fn answered(
        &mut self,
        slot: usize,
        now: Instant,
        f: InFlight,
        status: Option<u16>,
        server_close: bool,
    ) {
        self.inflight_total -= 1;
        match status {
            Some(status) => self.stats.response(now, status, f.sent, f.intended),
            None => self.stats.failure(now, FailureKind::Reset, 1),
        }
        if !self.plan.keepalive || server_close {
            // Requests pipelined behind a closing response were never answered:
            // give them back to the budget rather than count them as failures.
            let c = &mut self.conns[slot];
            let unanswered = c.inflight.len() as u64;
            c.inflight.clear();
            self.inflight_total -= unanswered as usize;
            if let Some(b) = &mut self.budget {
                *b += unanswered;
            }
            self.close(slot);
            if self.open_model() && !self.plan.keepalive {
                self.conns[slot].idle_since = now;
                self.make_available(slot);
            } else {
                self.reopen.push_back((now, slot));
            }
            return;
        }
        if self.open_model() {
            let c = &mut self.conns[slot];
            c.idle_since = now;
            self.make_available(slot);
        }
        // Closed model: `process` refills once after framing everything that
        // arrived, so a batch of pipelined responses costs one write, not one each.
    }

    fn close(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        // Closing the socket removes it from the epoll set; no deregister call needed.
        drop(c.stream.take());
        c.state = State::Closed;
        c.wbuf.clear();
        c.wpos = 0;
        c.rpos = 0;
        c.rlen = 0;
        c.parser.reset();
        c.h2 = None;
    }

    /// A read or write failed: [`Worker::fail`], the first error's text kept for the report.
    fn io_failed(&mut self, slot: usize, now: Instant, e: &io::Error) {
        if self.stats.first_error.is_none() {
            self.stats.first_error = Some(e.to_string());
        }
        self.fail(slot, now, io_failure(e));
    }

    /// The connection failed: its requests fail with `kind`, and it is reopened.
    fn fail(&mut self, slot: usize, now: Instant, kind: FailureKind) {
        let c = &mut self.conns[slot];
        let was_connecting = c.state == State::Connecting;
        let mut failed = c.inflight.len() as u64;
        c.inflight.clear();
        self.inflight_total -= failed as usize;
        if failed == 0 && was_connecting && self.plan.keepalive {
            // A keep-alive connect that fails costs one request, so a run against
            // a dead server still ends after -n requests.
            if self.take_budget() {
                if self.open_model() {
                    self.next_k += 1;
                }
                failed = 1;
            }
        }
        if failed > 0 {
            self.stats.failure(now, kind, failed);
        }
        self.close(slot);
        let retry = if kind == FailureKind::Connect {
            now + CONNECT_RETRY
        } else {
            now
        };
        if self.open_model() && !self.plan.keepalive {
            self.conns[slot].idle_since = now;
            self.make_available(slot);
        } else {
            self.reopen.push_back((retry, slot));
        }
    }
}

/// What a failed read or write means: TLS refused (rustls' errors come as `InvalidData`,
/// see `tls.rs`), or the connection broke.
fn io_failure(e: &io::Error) -> FailureKind {
    match e.kind() {
        io::ErrorKind::InvalidData => FailureKind::Tls,
        _ => FailureKind::Reset,
    }
}
