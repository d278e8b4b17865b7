//! Lua hooks outside a request's phases: an upstream's `balancer_script` (`balance(r,
//! peers)`, [`Hook::balancer`]) and `[tls] certificate_script` (`certificate(sni)`,
//! [`Hook::certificate`]). A
//! hook is one file whose module returns a table with the hook's function. It is shared
//! by every thread ([`Hook`] is `Send + Sync`, handed to the proxy or the TLS setup
//! through `handler`'s traits); each thread that calls it has its own Lua state for it,
//! made at its first call and dropped once the hook is (a reload made a new one). The
//! limits are a `[[script]]`'s defaults: [`TIME_LIMIT`] per call (the same watchdog),
//! [`MEMORY_LIMIT`] per state.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use mlua::{Function, Lua, LuaOptions, MultiValue, Table, UserData, UserDataMethods, Value};

use crate::base;
use crate::guard::{Watchdog, WorkerGuard};
use crate::scripts::{load, read};
use crate::tally::{self, Failure, Phase};
use crate::Error;

/// Longest a hook's call may run: a `[[script]]`'s default `time_limit`.
pub const TIME_LIMIT: Duration = Duration::from_secs(1);
/// Most memory one thread's state of a hook may hold: a `[[script]]`'s default
/// `memory_limit`.
pub const MEMORY_LIMIT: usize = 64 << 20;

/// A loaded hook: its file, compiled and checked to return its function.
pub struct Hook {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    function: &'static str,
    source: Vec<u8>,
    phase: Phase,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Hook({}: {})",
            self.shared.path.display(),
            self.shared.function
        )
    }
}

/// The watchdog of every hook's calls: one thread for the process.
fn watchdog() -> &'static Arc<Watchdog> {
    static WATCHDOG: OnceLock<Arc<Watchdog>> = OnceLock::new();
    WATCHDOG.get_or_init(Watchdog::start)
}

/// One thread's state of one hook.
struct State {
    guard: Arc<WorkerGuard>,
    /// `None` when the module failed on this thread (logged once, when the state was
    /// made): every call then falls back.
    function: Option<Function>,
    lua: Lua,
}

impl Drop for State {
    fn drop(&mut self) {
        self.guard.detach();
    }
}

thread_local! {
    /// This thread's states, with the hooks they belong to.
    static STATES: RefCell<Vec<(Weak<Shared>, Rc<State>)>> = const { RefCell::new(Vec::new()) };
}

/// A Lua state sandboxed as a script's, its `tessera` table without `worker_id` (a hook's
/// state is a thread's, not a worker's).
fn new_lua() -> mlua::Result<Lua> {
    let lua = base::new_state(LuaOptions::new());
    base::install(&lua, None)?;
    Ok(lua)
}

/// Runs the module and takes `function` from the table it returns.
fn resolve(lua: &Lua, path: &Path, source: &[u8], function: &str) -> Result<Function, Error> {
    let failed = |message: String| Error::Load {
        path: path.to_owned(),
        message,
    };
    let chunk = load(lua, path, source)?;
    let module: Value = chunk.call(()).map_err(|e| failed(e.to_string()))?;
    let Value::Table(module) = module else {
        return Err(failed(format!(
            "the module must return a table with a `{function}` function, not a {}",
            module.type_name()
        )));
    };
    match module.get::<Value>(function) {
        Ok(Value::Function(f)) => Ok(f),
        _ => Err(failed(format!(
            "the table the module returns has no `{function}` function"
        ))),
    }
}

/// A state of `shared` on this thread, with the module run in it (within the time and
/// memory limits): its function, or why there is none (then the state's calls fall back).
fn new_state(shared: &Shared) -> (State, Result<(), Error>) {
    let lua = new_lua().unwrap_or_else(|_| base::new_state(LuaOptions::new()));
    if let Err(e) = lua.set_memory_limit(MEMORY_LIMIT) {
        tracing::warn!(error = %e, "Lua memory limit not available");
    }
    // SAFETY: only reads the state pointer.
    let mut raw = std::ptr::null_mut();
    let _ = unsafe { lua.exec_raw::<()>((), |s| raw = s) };
    let guard = watchdog().guard(raw);
    let function = {
        let _inside = guard.enter(TIME_LIMIT);
        resolve(&lua, &shared.path, &shared.source, shared.function)
    };
    let (function, loaded) = match function {
        Ok(f) => (Some(f), Ok(())),
        Err(e) => (None, Err(e)),
    };
    let state = State {
        guard,
        function,
        lua,
    };
    (state, loaded)
}

impl Hook {
    /// Reads `path`, compiles it and runs its module once (in a state of its own) to
    /// check that it returns a table with `function`, so that a broken hook stops the
    /// server at start or a reload, and check-config names it.
    fn load(path: &Path, function: &'static str, phase: Phase) -> Result<Hook, Error> {
        let shared = Shared {
            path: path.to_owned(),
            function,
            source: read(path)?,
            phase,
        };
        // Within the time limit: a module that never returns stops the start, not hangs it.
        if let (_, Err(e)) = new_state(&shared) {
            return Err(e);
        }
        Ok(Hook {
            shared: Arc::new(shared),
        })
    }

    /// An upstream's `balancer_script`: a module with `balance(r, peers)`.
    pub fn balancer(path: &Path) -> Result<Hook, Error> {
        Hook::load(path, "balance", Phase::Balancer)
    }

    /// `[tls] certificate_script`: a module with `certificate(sni)`.
    pub fn certificate(path: &Path) -> Result<Hook, Error> {
        Hook::load(path, "certificate", Phase::Certificate)
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// This thread's state of the hook, made at its first call.
    fn state(&self) -> Option<Rc<State>> {
        STATES
            .try_with(|states| {
                let mut states = states.borrow_mut();
                // States of hooks a reload replaced go (on this thread, where they
                // were made).
                states.retain(|(hook, _)| hook.strong_count() > 0);
                let mine = Arc::as_ptr(&self.shared);
                if let Some((_, state)) = states.iter().find(|(h, _)| h.as_ptr() == mine) {
                    return state.clone();
                }
                let (state, function) = new_state(&self.shared);
                if let Err(e) = function {
                    tracing::error!(script = %self.shared.path.display(), error = %e,
                        "hook failed to load on this thread; its calls fall back");
                }
                let state = Rc::new(state);
                states.push((Arc::downgrade(&self.shared), state.clone()));
                state
            })
            .ok()
    }

    /// Calls the hook's function with what `args` makes in its state: what it returned,
    /// or `None` when it failed (logged and counted).
    fn call(&self, args: impl FnOnce(&Lua) -> mlua::Result<MultiValue>) -> Option<MultiValue> {
        let state = self.state()?;
        let shared = &self.shared;
        let f = state.function.as_ref()?;
        tally::call(shared.phase);
        let result = {
            let _inside = state.guard.enter(TIME_LIMIT);
            std::panic::catch_unwind(AssertUnwindSafe(|| f.call::<MultiValue>(args(&state.lua)?)))
        };
        let (why, message) = match result {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(e)) => (Failure::of(&e), e.to_string()),
            Err(_) => (Failure::Panic, "callback panicked".to_string()),
        };
        tally::failed(shared.phase, why);
        if matches!(why, Failure::MemoryLimit) {
            // As after a script's failed call: LuaJIT does not collect when an
            // allocation fails.
            let _ = state.lua.gc_collect();
        }
        tracing::error!(script = %shared.path.display(), error = %message,
            "{} failed; the configured choice is made", shared.function);
        None
    }
}

/// The request as `balance(r, peers)` sees it: `r:method()`, `r:path()`, `r:query()`,
/// `r:uri()`, `r:header(name)`, `r:cookie(name)`, `r:client()`, `r:upstream()`.
struct BalanceR {
    upstream: String,
    method: String,
    target: String,
    client: Option<std::net::SocketAddr>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl BalanceR {
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

impl UserData for BalanceR {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("method", |_, r, ()| Ok(r.method.clone()));
        methods.add_method("uri", |_, r, ()| Ok(r.target.clone()));
        methods.add_method("path", |_, r, ()| {
            Ok(r.target.split('?').next().unwrap_or_default().to_string())
        });
        methods.add_method("query", |_, r, ()| {
            Ok(r.target.split_once('?').map_or("", |(_, q)| q).to_string())
        });
        methods.add_method("upstream", |_, r, ()| Ok(r.upstream.clone()));
        methods.add_method("header", |lua, r, name: mlua::String| {
            r.header(&name.as_bytes())
                .map(|v| lua.create_string(v))
                .transpose()
        });
        methods.add_method("cookie", |lua, r, name: mlua::String| {
            let name = name.as_bytes();
            let found = r
                .fields
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
                .find_map(|(_, v)| crate::helpers::cookie::find(v, &name));
            found.map(|v| lua.create_string(v)).transpose()
        });
        methods.add_method("client", |_, r, ()| {
            Ok(match r.client {
                Some(c) => (Some(c.ip().to_string()), Some(c.port())),
                None => (None, None),
            })
        });
    }
}

impl handler::BalancerHook for Hook {
    fn balance(
        &self,
        req: &handler::BalanceRequest<'_>,
        peers: &[handler::PeerView<'_>],
    ) -> Option<usize> {
        let value = self.call(|lua| {
            let r = BalanceR {
                upstream: req.upstream.to_string(),
                method: req.method.to_string(),
                target: req.target.to_string(),
                client: req.client,
                fields: req
                    .fields
                    .iter()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect(),
            };
            let list: Table = lua.create_table_with_capacity(peers.len(), 0)?;
            for (i, p) in peers.iter().enumerate() {
                let peer = lua.create_table_with_capacity(0, 4)?;
                peer.set("address", p.address)?;
                peer.set("state", p.state)?;
                peer.set("weight", p.weight)?;
                peer.set("tried", p.tried)?;
                list.raw_set(i + 1, peer)?;
            }
            let mut args = MultiValue::new();
            args.push_back(Value::UserData(lua.create_userdata(r)?));
            args.push_back(Value::Table(list));
            Ok(args)
        })?;
        let value = value.into_iter().next().unwrap_or(Value::Nil);
        let index = match value {
            Value::Nil => return None,
            Value::Integer(i) => Some(i),
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e15 => Some(n as i64),
            _ => None,
        };
        match index {
            Some(i) if i >= 1 && i as usize <= peers.len() => Some(i as usize - 1),
            _ => {
                tracing::warn!(script = %self.shared.path.display(), upstream = req.upstream,
                    returned = %describe(&value), peers = peers.len(),
                    "balance returned neither a peer's index (1 to the number of peers) nor nil; \
                     the configured balancer chooses");
                None
            }
        }
    }
}

/// A value as a log line shows it.
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{:?}", s.to_string_lossy()),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.type_name().to_string(),
    }
}

impl handler::CertificateHook for Hook {
    fn certificate(&self, sni: Option<&str>) -> Option<handler::ChosenCertificate> {
        let values = self.call(|lua| {
            let sni = match sni {
                Some(name) => Value::String(lua.create_string(name)?),
                None => Value::Nil,
            };
            Ok(MultiValue::from_iter([sni]))
        })?;
        let mut values = values.into_iter();
        let bad = |what: &str| {
            tracing::warn!(script = %self.shared.path.display(), sni, returned = what,
                "certificate returned neither a name, nor a PEM chain and key, nor nil; \
                 the usual choice is made");
            None
        };
        match (values.next(), values.next()) {
            (None | Some(Value::Nil), _) => None,
            (Some(Value::String(chain)), Some(Value::String(key))) => {
                Some(handler::ChosenCertificate::Pem {
                    chain: chain.as_bytes().to_vec(),
                    key: key.as_bytes().to_vec(),
                })
            }
            (Some(Value::String(name)), None | Some(Value::Nil)) => {
                let name = name.to_string_lossy();
                if name.contains("-----BEGIN") {
                    return bad("a PEM chain without its key");
                }
                Some(handler::ChosenCertificate::Named(name))
            }
            (first, _) => bad(&first.map_or("nothing".into(), |v| describe(&v))),
        }
    }
}
