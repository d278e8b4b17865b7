//! [`Engine`]: one worker's Lua state with its loaded scripts (what every worker shares
//! is [`Scripts`], in `scripts.rs`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use mlua::{AnyUserData, Function, Lua, LuaOptions, MultiValue, Table, Value};

use crate::base::{self, caller};
use crate::config::ScriptConfig;
use crate::context::{self, Context, RequestHead};
use crate::guard::WorkerGuard;
use crate::location;
use crate::scripts::compile;
pub use crate::scripts::Scripts;
use crate::shared;
use crate::socket;
use crate::tally::{self, Failure, Phase};

mod body_filter;

/// Largest response body `tessera.http.request` reads. 8 MiB, like ESI fragments.
const MAX_HTTP_BODY: usize = 8 << 20;

/// The functions a script module returned.
#[derive(Clone, Default)]
struct Phases {
    access: Option<Function>,
    content: Option<Function>,
    header_filter: Option<Function>,
    body_filter: Option<Function>,
    log: Option<Function>,
}

struct Mount {
    config: ScriptConfig,
    /// The regex the rules choose it by, whose captures are variables.
    regex: Option<regex::bytes::Regex>,
    /// The script's name in log lines.
    name: Rc<str>,
    limit: Duration,
    phases: RefCell<Option<Phases>>,
}

/// Where a request path is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountId(pub(crate) usize);

/// How a phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `access` let the request through (no exit or redirect).
    Continue,
    /// The context holds the response to send (`content` ran, or `exit`/`redirect`).
    Respond,
    /// The script failed (error, time or memory limit, panic; logged): answer 500.
    Failed,
}

/// One loaded version of a mount's script. A timer belongs to the version that set it and
/// is dropped if, when it fires, a reload has replaced that version: otherwise every
/// reload would add one more copy of a self-rescheduling timer started by `init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    mount: usize,
    generation: u64,
}

/// A request in a script's hands: the context userdata it sees as `r`.
pub struct Call {
    ud: AnyUserData,
    mount: usize,
}

/// One worker's Lua state and scripts. Not `Send`: each worker owns one.
pub struct Engine {
    lua: Lua,
    scripts: Arc<Scripts>,
    /// Longest prefix first.
    mounts: Vec<Mount>,
    /// The mount of a path: indexes into `mounts`.
    routes: handler::Router<usize>,
    guard: Arc<WorkerGuard>,
    /// Context userdata not in use, reused for the next request.
    free: RefCell<Vec<AnyUserData>>,
    /// Which version of each mount's script is loaded (0: none), numbered by `loads`.
    loaded: Rc<[Cell<u64>]>,
    /// Load attempts so far, on every mount: the next one is numbered `loads + 1`.
    loads: Cell<u64>,
    /// The script version whose code is running now, for tagging timers.
    running: Rc<Cell<Option<Version>>>,
    /// Finished requests whose `log` phase is still to run.
    logs: RefCell<Vec<Call>>,
    /// Wakes the task that runs `log` phases (which holds only a weak reference, so
    /// that the engine of a configuration a reload replaced is freed).
    logs_ready: Rc<tokio::sync::Notify>,
    timer_limit: Duration,
    /// The request whose phase is running, for `tessera.location.capture`.
    running_request: location::Running,
}

impl Engine {
    /// Builds this worker's state and loads every script (a script that fails here is
    /// logged and its mount answers 500 until a reload succeeds). `upstreams` is the
    /// worker's upstream client, for `tessera.http.request`.
    pub fn new(
        scripts: Arc<Scripts>,
        worker: usize,
        upstreams: Option<Rc<dyn handler::Upstreams>>,
    ) -> Rc<Engine> {
        // Coroutines for `content` calls are recycled (mlua keeps none by default): without
        // a pool every request would create a Lua thread and its stack for the collector.
        let lua = base::new_state(LuaOptions::new().thread_pool_size(64));
        let memory: usize = scripts.configs.iter().map(|c| c.memory_limit).sum();
        if let Err(e) = lua.set_memory_limit(memory) {
            tracing::warn!(worker, error = %e, "Lua memory limit not available");
        }
        // SAFETY: only reads the state pointer.
        let mut state = std::ptr::null_mut();
        let _ = unsafe { lua.exec_raw::<()>((), |s| state = s) };
        let guard = scripts.watchdog.guard(state);
        let mut mounts: Vec<Mount> = scripts
            .configs
            .iter()
            .map(|c| Mount {
                // Compiled as the rules compiled it (a bad one never gets here).
                regex: c.regex.as_ref().and_then(|(pattern, ci)| {
                    regex::bytes::RegexBuilder::new(pattern)
                        .case_insensitive(*ci)
                        .build()
                        .ok()
                }),
                config: c.clone(),
                name: c.path.display().to_string().into(),
                limit: Duration::from_secs_f64(c.time_limit),
                phases: RefCell::new(None),
            })
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.config.prefix.len()));
        let routes = handler::Router::new(
            mounts
                .iter()
                .enumerate()
                .map(|(i, m)| (m.config.prefix.clone(), i)),
        );
        let timer_limit = mounts
            .iter()
            .map(|m| m.limit)
            .max()
            .unwrap_or(Duration::from_secs(1));
        let loaded: Rc<[Cell<u64>]> = mounts.iter().map(|_| Cell::new(0)).collect();
        let engine = Rc::new(Engine {
            lua,
            loaded,
            loads: Cell::new(0),
            running: Rc::new(Cell::new(None)),
            scripts,
            mounts,
            routes,
            guard,
            free: RefCell::new(Vec::new()),
            logs: RefCell::new(Vec::new()),
            logs_ready: Rc::new(tokio::sync::Notify::new()),
            timer_limit,
            running_request: Default::default(),
        });
        if let Err(e) = engine.install_api(worker, upstreams) {
            tracing::error!(worker, error = %e, "cannot set up the Lua API");
        }
        if let Err(e) = crate::package_path::install(&engine.lua, &engine.scripts.configs) {
            tracing::error!(worker, error = %e, "cannot set the Lua package.path");
        }
        for i in 0..engine.mounts.len() {
            engine.load(i, worker);
        }
        engine
    }

    /// Runs this worker's background work, `log` phases, until the engine is dropped.
    /// Call once, inside the worker's `LocalSet`.
    pub fn spawn_background(self: &Rc<Self>) {
        let engine = Rc::downgrade(self);
        let ready = self.logs_ready.clone();
        evloop::spawn_local(async move {
            loop {
                ready.notified().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.run_logs();
            }
        });
    }

    /// Runs the `log` phase of every finished request queued.
    fn run_logs(&self) {
        let calls = std::mem::take(&mut *self.logs.borrow_mut());
        for call in calls {
            if let Some(f) = self.phase(call.mount, |p| p.log.clone()) {
                self.call_sync(call.mount, &f, &call, Phase::Log);
            }
            self.end(call);
        }
    }

    /// (Re)loads one script: runs its file and takes the phase functions from the table
    /// it returns, then its `init`. On failure the previous version stays.
    fn load(&self, i: usize, worker: usize) {
        let mount = &self.mounts[i];
        let generation = self.loads.get() + 1;
        self.loads.set(generation);
        let loaded = (|| -> Result<Phases, String> {
            let chunk = compile(&self.lua, &mount.config.path).map_err(|e| e.to_string())?;
            let _inside = self.guard.enter(mount.limit);
            let _sockets = socket::enter(socket::Scope::Refused("init"));
            let _running = Running::new(
                &self.running,
                Version {
                    mount: i,
                    generation,
                },
            );
            let module: Table = chunk.call(()).map_err(|e| e.to_string())?;
            let get = |name: &str| -> Result<Option<Function>, String> {
                module
                    .get::<Option<Function>>(name)
                    .map_err(|e| format!("`{name}` must be a function: {e}"))
            };
            let phases = Phases {
                access: get("access")?,
                content: get("content")?,
                header_filter: get("header_filter")?,
                body_filter: get("body_filter")?,
                log: get("log")?,
            };
            if let Some(init) = get("init")? {
                init.call::<()>(worker)
                    .map_err(|e| format!("init failed: {e}"))?;
            }
            Ok(phases)
        })();
        let previous = mount.phases.borrow().is_some();
        tally::loaded(loaded.is_ok());
        match loaded {
            Ok(phases) => {
                *mount.phases.borrow_mut() = Some(phases);
                self.loaded[i].set(generation);
                if previous {
                    tracing::info!(worker, script = %mount.name, "script reloaded");
                }
            }
            Err(message) if previous => tracing::error!(
                worker, script = %mount.name, error = %message,
                "script reload failed; the previous version keeps running"
            ),
            Err(message) => tracing::error!(
                worker, script = %mount.name, error = %message,
                "script failed to load; its requests get 500"
            ),
        }
    }

    fn install_api(
        &self,
        worker: usize,
        upstreams: Option<Rc<dyn handler::Upstreams>>,
    ) -> mlua::Result<()> {
        let lua = &self.lua;
        let tessera = base::install(lua, Some(worker))?;

        // tessera.shared.NAME:get/set/incr/delete
        let shared_table = lua.create_table()?;
        for name in self.scripts.dicts.names() {
            shared_table.set(
                name,
                shared::DictHandle::new(self.scripts.dicts.clone(), name),
            )?;
        }
        tessera.set("shared", shared_table.clone())?;
        lua.globals().set("shared", shared_table)?;

        // tessera.timer.at(delay, f, ...)
        let timer = lua.create_table()?;
        let guard = self.guard.clone();
        let timer_limit = self.timer_limit;
        let running = self.running.clone();
        let loaded = self.loaded.clone();
        timer.set(
            "at",
            lua.create_function(move |lua, (delay, f, args): (f64, Function, MultiValue)| {
                if !(delay.is_finite() && delay >= 0.0) {
                    return Err(mlua::Error::runtime("timer delay must be >= 0"));
                }
                let Some(version) = running.get() else {
                    return Err(mlua::Error::runtime("timer.at outside a script call"));
                };
                let at = caller(lua);
                let guard = guard.clone();
                let running = running.clone();
                let loaded = loaded.clone();
                evloop::spawn_local(async move {
                    evloop::time::sleep(Duration::from_secs_f64(delay)).await;
                    if loaded[version.mount].get() != version.generation {
                        tracing::debug!(worker, timer = %at, "timer of a replaced script version dropped");
                        return;
                    }
                    let sockets = socket::Scope::timer();
                    let call = Guarded {
                        future: f.call_async::<()>(args),
                        guard,
                        limit: timer_limit,
                        running,
                        version,
                        sockets,
                    };
                    tally::call(Phase::Timer);
                    let result = call.await;
                    socket::release(sockets);
                    match result {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tally::failed(Phase::Timer, Failure::of(&e));
                            tracing::error!(worker, timer = %at, error = %e, "timer failed")
                        }
                        Err(()) => {
                            tally::failed(Phase::Timer, Failure::Panic);
                            tracing::error!(worker, timer = %at, "timer panicked")
                        }
                    }
                });
                Ok(true)
            })?,
        )?;
        tessera.set("timer", timer)?;

        // tessera.http.request{upstream=, method=, path=, headers=, body=}
        let http_table = lua.create_table()?;
        http_table.set(
            "request",
            lua.create_async_function(move |lua, opts: Table| {
                let upstreams = upstreams.clone();
                async move {
                    let Some(upstreams) = upstreams else {
                        return Ok((
                            Value::Nil,
                            Value::String(lua.create_string("no upstreams are configured")?),
                        ));
                    };
                    let upstream: String = opts.get("upstream")?;
                    let method: Option<String> = opts.get("method")?;
                    let method = method.unwrap_or_else(|| "GET".into());
                    if !context::is_token(method.as_bytes()) {
                        return Err(mlua::Error::runtime("invalid method"));
                    }
                    let path: Option<String> = opts.get("path")?;
                    let mut headers = Vec::new();
                    if let Some(t) = opts.get::<Option<Table>>("headers")? {
                        for pair in t.pairs::<mlua::String, mlua::String>() {
                            let (k, v) = pair?;
                            let (k, v) = (k.as_bytes().to_vec(), v.as_bytes().to_vec());
                            if !context::is_token(&k) {
                                return Err(mlua::Error::runtime("invalid header name"));
                            }
                            if v.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                                return Err(mlua::Error::runtime("invalid header value"));
                            }
                            headers.push((k, v));
                        }
                    }
                    let body = match opts.get::<Option<mlua::String>>("body")? {
                        Some(b) => bytes::Bytes::copy_from_slice(&b.as_bytes()),
                        None => bytes::Bytes::new(),
                    };
                    let result = upstreams
                        .call(handler::UpstreamRequest {
                            upstream,
                            method,
                            target: path.unwrap_or_else(|| "/".into()),
                            headers,
                            body,
                            max_body: MAX_HTTP_BODY,
                        })
                        .await;
                    match result {
                        Ok(reply) => {
                            let res = lua.create_table()?;
                            res.set("status", reply.status)?;
                            let h = lua.create_table()?;
                            for (k, v) in &reply.headers {
                                h.set(lua.create_string(k)?, lua.create_string(v)?)?;
                            }
                            res.set("headers", h)?;
                            res.set("body", lua.create_string(&reply.body[..])?)?;
                            Ok((Value::Table(res), Value::Nil))
                        }
                        Err(e) => Ok((Value::Nil, Value::String(lua.create_string(e)?))),
                    }
                }
            })?,
        )?;
        tessera.set("http", http_table)?;
        socket::setup::install(lua, &tessera)?;
        location::install(lua, &tessera, self.running_request.clone())?;

        lua.globals().set("tessera", tessera)?;
        Ok(())
    }

    /// The script mounted at `path` (a request target), if any. Cheap: a few prefix
    /// comparisons.
    pub fn mount(&self, path: &[u8]) -> Option<MountId> {
        self.routes.find(path).map(|&i| MountId(i))
    }

    fn phase(
        &self,
        mount: usize,
        pick: impl FnOnce(&Phases) -> Option<Function>,
    ) -> Option<Function> {
        self.mounts[mount].phases.borrow().as_ref().and_then(pick)
    }

    /// Whether the loaded script at `mount` has the phase `pick` selects (no clone).
    fn has(&self, mount: usize, pick: impl FnOnce(&Phases) -> bool) -> bool {
        self.mounts[mount]
            .phases
            .borrow()
            .as_ref()
            .is_some_and(pick)
    }

    /// Whether the script at `m` is loaded and has a `content` phase.
    pub fn has_content(&self, m: MountId) -> bool {
        self.mounts[m.0]
            .phases
            .borrow()
            .as_ref()
            .is_none_or(|p| p.content.is_some())
    }

    /// The variables the script at `m` may write (its `vars`), and the regex whose
    /// captures are variables.
    pub fn declared(&self, m: MountId) -> (&[String], Option<&regex::bytes::Regex>) {
        let mount = &self.mounts[m.0];
        (&mount.config.vars, mount.regex.as_ref())
    }

    /// Whether the script at `m` has a `header_filter` phase.
    pub fn has_header_filter(&self, m: MountId) -> bool {
        self.has(m.0, |p| p.header_filter.is_some())
    }

    /// Whether the script at `m` has a `header_filter`, `body_filter` or `log` phase:
    /// something that must see the response of a request under it, whoever answers.
    pub fn watches_responses(&self, m: MountId) -> bool {
        self.has(m.0, |p| {
            p.header_filter.is_some() || p.body_filter.is_some() || p.log.is_some()
        })
    }

    /// The script handling `call`, as log lines name it.
    pub fn script_name(&self, call: &Call) -> &str {
        &self.mounts[call.mount].name
    }

    /// Whether the script of `call` has a `header_filter` phase.
    pub fn has_header_filter_of(&self, call: &Call) -> bool {
        self.phase(call.mount, |p| p.header_filter.clone())
            .is_some()
    }

    /// Starts a request under `m`: a context filled from its head.
    pub fn begin<'a, I>(&self, m: MountId, head: RequestHead<'a, I>) -> Call
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])>,
    {
        let ud = self.free.borrow_mut().pop().unwrap_or_else(|| {
            self.lua
                .create_userdata(Context::default())
                .expect("creating a userdata only fails when Lua is out of memory")
        });
        let call = Call { ud, mount: m.0 };
        context::with(&call.ud, |c| c.fill(head));
        call
    }

    /// Reads or changes the context of `call` (the response after a phase, the body
    /// before `content`).
    pub fn context<R>(&self, call: &Call, f: impl FnOnce(&mut Context) -> R) -> Option<R> {
        context::with(&call.ud, f)
    }

    /// Runs `access`, if the script has one. As `content`, it finishes here unless the
    /// script awaits an upstream call or a timer.
    pub fn access(&self, call: &Call) -> Content {
        let access = match &*self.mounts[call.mount].phases.borrow() {
            None => return Content::Done(self.not_loaded(call)),
            Some(phases) => match &phases.access {
                None => return Content::Done(Outcome::Continue),
                Some(f) => f.clone(),
            },
        };
        self.call_async(&access, call, Phase::Access)
    }

    /// Runs `content`. It finishes here unless the script awaits an upstream call or a
    /// timer; then the rest is a future for the worker's event loop (the only case that
    /// allocates one).
    pub fn content(&self, call: &Call) -> Content {
        let Some(f) = self.phase(call.mount, |p| p.content.clone()) else {
            return Content::Done(self.not_loaded(call));
        };
        self.call_async(&f, call, Phase::Content)
    }

    /// Runs `f` (the `access` or `content` phase) as a coroutine, polled once here.
    fn call_async(&self, f: &Function, call: &Call, phase: Phase) -> Content {
        tally::call(phase);
        let mut running = ContentCall {
            call: Guarded {
                future: f.call_async::<Value>(call.ud.clone()),
                guard: self.guard.clone(),
                limit: self.mounts[call.mount].limit,
                running: self.running.clone(),
                version: self.version(call.mount),
                sockets: socket::Scope::request(&call.ud),
            },
            ud: Some(call.ud.clone()),
            name: self.mounts[call.mount].name.clone(),
            phase,
            request: (
                self.running_request.clone(),
                self.mounts[call.mount].config.site,
            ),
        };
        // The first poll, here, with the waker of the task the loop is polling (the
        // connection's, or a spawned task's), which is the one that will poll the
        // pending future again: what the script awaits is then registered once, and
        // that task's next poll does not resume the script only to find it still
        // waiting. Off the loop (no task known) the first poll has no waker, and the
        // server's poll, which follows at once, registers the real one.
        let task = evloop::current::waker().map(|w| (w, evloop::current::poll()));
        let waker = task.as_ref().map(|(w, _)| w);
        let mut cx = TaskContext::from_waker(waker.unwrap_or(Waker::noop()));
        match Pin::new(&mut running).poll(&mut cx) {
            Poll::Ready(outcome) => Content::Done(outcome),
            Poll::Pending => Content::Pending(PendingContent {
                future: Box::pin(running),
                polled_with: task,
            }),
        }
    }

    /// Runs `header_filter` on the response in the context (status and headers).
    pub fn header_filter(&self, call: &Call) -> Outcome {
        if !self.has(call.mount, |p| p.header_filter.is_some()) {
            return Outcome::Continue;
        }
        match self.phase(call.mount, |p| p.header_filter.clone()) {
            None => Outcome::Continue,
            Some(f) => match self.call_sync(call.mount, &f, call, Phase::HeaderFilter) {
                // exit() in a header filter just ends it.
                Outcome::Respond => Outcome::Continue,
                other => other,
            },
        }
    }

    /// Queues `log` (run later by the background task), then recycles the context.
    pub fn finish(&self, call: Call) {
        socket::release(socket::Scope::request(&call.ud));
        if context::with(&call.ud, |c| std::mem::take(&mut c.failed)) == Some(true) {
            // A call stopped by the memory limit leaves its garbage behind, and LuaJIT
            // does not collect when an allocation fails: without a full collection now,
            // the next requests would fail on the same limit. Only failures pay for it.
            if let Err(e) = self.lua.gc_collect() {
                tracing::warn!(error = %e, "garbage collection after a failed script call");
            }
        }
        if self.has(call.mount, |p| p.log.is_some()) {
            self.logs.borrow_mut().push(call);
            self.logs_ready.notify_one();
        } else {
            self.end(call);
        }
    }

    fn end(&self, call: Call) {
        let mut free = self.free.borrow_mut();
        // A handful covers every request in flight at once on a worker in the steady
        // state; more would only hold memory.
        if free.len() < 64 {
            free.push(call.ud);
        }
    }

    fn not_loaded(&self, call: &Call) -> Outcome {
        tracing::error!(script = %self.mounts[call.mount].name, "script is not loaded");
        Outcome::Failed
    }

    fn version(&self, mount: usize) -> Version {
        Version {
            mount,
            generation: self.loaded[mount].get(),
        }
    }

    fn call_sync(&self, mount: usize, f: &Function, call: &Call, phase: Phase) -> Outcome {
        tally::call(phase);
        let m = &self.mounts[mount];
        let result = {
            let _inside = self.guard.enter(m.limit);
            let _sockets = socket::enter(socket::Scope::refused(phase));
            let _running = Running::new(&self.running, self.version(mount));
            let _no_request = location::NoRequest::new(&self.running_request);
            std::panic::catch_unwind(AssertUnwindSafe(|| f.call::<Value>(call.ud.clone())))
        };
        finish_call(&call.ud, &m.name, result, phase)
    }
}

/// Maps a call's result to an [`Outcome`], logging failures.
fn finish_call(
    ud: &AnyUserData,
    name: &str,
    result: Result<mlua::Result<Value>, Box<dyn std::any::Any + Send>>,
    phase: Phase,
) -> Outcome {
    let is_content = matches!(phase, Phase::Content);
    match result {
        Ok(Ok(value)) => {
            let appended = context::with(ud, |c| {
                if is_content {
                    c.responded = true;
                    c.append(&value)
                } else {
                    Ok(())
                }
            });
            match appended {
                Some(Err(e)) => {
                    tracing::error!(script = %name, error = %e, "script returned a bad body");
                    Outcome::Failed
                }
                _ if is_content => Outcome::Respond,
                _ => Outcome::Continue,
            }
        }
        Ok(Err(e)) => {
            let exited = context::with(ud, |c| {
                if c.exited {
                    c.responded = true;
                }
                c.exited
            });
            if exited == Some(true) && is_exit(&e) {
                return Outcome::Respond;
            }
            tracing::error!(script = %name, error = %e, "script failed");
            tally::failed(phase, Failure::of(&e));
            context::with(ud, |c| c.failed = true);
            Outcome::Failed
        }
        Err(_) => {
            tracing::error!(script = %name, "script callback panicked");
            tally::failed(phase, Failure::Panic);
            context::with(ud, |c| c.failed = true);
            Outcome::Failed
        }
    }
}

fn is_exit(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::CallbackError { cause, .. } => is_exit(cause),
        mlua::Error::ExternalError(e) => e.is::<context::Exit>(),
        _ => false,
    }
}

/// A Lua coroutine call that counts as inside Lua (for the time limit) during each poll,
/// and turns a panic into `Err(())`.
struct Guarded<F> {
    future: F,
    guard: Arc<WorkerGuard>,
    limit: Duration,
    running: Rc<Cell<Option<Version>>>,
    version: Version,
    /// Whose cosockets the call opens (closed when it ends).
    sockets: socket::Scope,
}

/// Marks `version` as the running script until dropped (restoring what ran before).
struct Running<'a> {
    cell: &'a Cell<Option<Version>>,
    previous: Option<Version>,
}

impl<'a> Running<'a> {
    fn new(cell: &'a Cell<Option<Version>>, version: Version) -> Running<'a> {
        Running {
            cell,
            previous: cell.replace(Some(version)),
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.cell.set(self.previous);
    }
}

impl<F: Future + Unpin> Future for Guarded<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let _inside = this.guard.enter(this.limit);
        let _sockets = socket::enter(this.sockets);
        let _waker = socket::polled(cx.waker());
        let _running = Running::new(&this.running, this.version);
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut this.future).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

/// What [`Engine::content`] did.
pub enum Content {
    /// Finished: the context holds the response (or the script failed).
    Done(Outcome),
    /// Waiting on an upstream or a timer: poll it to its outcome.
    Pending(PendingContent),
}

/// An `access` or `content` phase waiting in the event loop.
pub struct PendingContent {
    future: Pin<Box<dyn Future<Output = Outcome>>>,
    /// The waker of its first poll (in [`Engine::content`]) and the number of the task
    /// poll it happened in (`evloop::current::poll`), until it is polled again.
    polled_with: Option<(Waker, u64)>,
}

impl Future for PendingContent {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Outcome> {
        if let Some((first, number)) = self.polled_with.take() {
            // Polled by the task whose waker the first poll registered, within the same
            // poll of that task: what the script waits for wakes this task, and a wake
            // since the first poll has not been spent (the task will be polled again),
            // so resuming the script now would find it waiting. A later poll of the
            // task (the connection waited on something else in between, a flush to a
            // slow client, and its poll then may have spent the script's wake) resumes
            // it.
            if first.will_wake(cx.waker()) && number == evloop::current::poll() {
                return Poll::Pending;
            }
        }
        self.future.as_mut().poll(cx)
    }
}

/// A phase that may await (`access`, `content`), as a future.
struct ContentCall<F> {
    call: Guarded<F>,
    /// The request's context: lent to `request` while the phase is polled.
    ud: Option<AnyUserData>,
    name: Rc<str>,
    phase: Phase,
    /// Where the running request is found, and its site (`tessera.location.capture`).
    request: (location::Running, usize),
}

impl<F: Future<Output = mlua::Result<Value>> + Unpin> Future for ContentCall<F> {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Outcome> {
        let this = self.get_mut();
        let (running, site) = &this.request;
        let Some(ud) = this.ud.take() else {
            return Poll::Ready(Outcome::Failed);
        };
        // The running request while this phase runs (a subrequest's phase, nested inside,
        // puts its own and gives this one back).
        let outer = running.replace(Some((ud, *site)));
        let polled = Pin::new(&mut this.call).poll(cx);
        let ud = match running.replace(outer) {
            Some((ud, _)) => ud,
            None => unreachable!("the running request is given back"),
        };
        let done = match polled {
            Poll::Pending => None,
            Poll::Ready(Ok(r)) => Some(finish_call(&ud, &this.name, Ok(r), this.phase)),
            Poll::Ready(Err(())) => Some(finish_call(
                &ud,
                &this.name,
                Err(Box::new("panic")),
                this.phase,
            )),
        };
        this.ud = Some(ud);
        done.map_or(Poll::Pending, Poll::Ready)
    }
}

impl Drop for Engine {
    /// The last requests' `log` phases run; timers still pending are dropped when due
    /// (their script version is no longer loaded); the background task ends.
    fn drop(&mut self) {
        self.run_logs();
        for loaded in self.loaded.iter() {
            loaded.set(0);
        }
        self.logs_ready.notify_one();
        self.guard.detach();
    }
}
