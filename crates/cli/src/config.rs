//! The TOML shape of the whole product (docs/config.md): the server's keys, the proxy's
//! (`[[upstream]]`, `[[route]]`, `[esi]`, `[cache]`) and the scripts' (`[[script]]`,
//! `[[shared_dict]]`), read from one file here and handed to the crate each belongs to.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use edge::EdgeModule;
use serde::Deserialize;

/// Everything `tessera serve` can be told in its config file. Every key is optional.
#[derive(Debug, Default)]
pub struct ServeConfig {
    /// The server's own keys (listeners, files, limits, timeouts, access log).
    pub server: server::Config,
    /// `[[upstream]]`: origins to proxy to (see docs/esi.md, "The ESI proxy").
    pub upstream: Vec<edge::UpstreamConfig>,
    /// `[[route]]`: path prefixes proxied to an upstream, with ESI assembly. Requests no
    /// upstream route matches are served from `root`. None by default: static files only.
    pub route: Vec<edge::RouteConfig>,
    /// `[esi]`: ESI assembly limits and policies for proxied pages.
    pub esi: edge::EsiConfig,
    /// `[cache]`: the proxy's response cache (docs/cache.md).
    pub cache: edge::CacheConfig,
    /// `[[script]]`: Lua handlers mounted at path prefixes (docs/lua.md). Default none.
    pub script: Vec<script::ScriptConfig>,
    /// `[[shared_dict]]`: dictionaries shared by every worker's scripts. Default none.
    pub shared_dict: Vec<script::SharedDictConfig>,
}

/// The modules `tessera serve` runs, and the proxy's handle for its cache counters.
pub struct Modules {
    pub all: Vec<Arc<dyn handler::Module>>,
    pub proxy: Option<Arc<EdgeModule>>,
    /// The scripts' shared state (dictionaries), for a reload to keep, and what they
    /// loaded, for a reload to say which changed.
    pub scripts: Option<Arc<script::Scripts>>,
    /// `[tls] certificate_script` loaded, for the server's certificate resolver
    /// ([`Modules::server_config`]).
    pub certificate: Option<Arc<dyn handler::CertificateHook>>,
}

impl Modules {
    /// The server's configuration with what the modules loaded for it (the certificate
    /// hook).
    pub fn server_config(&self, server: &server::Config) -> server::Config {
        let mut config = server.clone();
        config.tls.certificate_hook = self.certificate.clone();
        config
    }
}

/// The `kind` labels of request metrics of every module [`ServeConfig::modules`] may build,
/// registered when the server is bound whatever the configuration uses: a reload may add
/// a module, and a scrape lists the same families either way. In the order a scrape
/// lists them, after the static files'.
pub const MODULE_KINDS: [handler::KindLabels; 2] = [EdgeModule::KINDS, script::ScriptModule::KINDS];

/// The keys that belong to the modules rather than to the server.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ModuleKeys {
    upstream: Vec<edge::UpstreamConfig>,
    route: Vec<edge::RouteConfig>,
    esi: edge::EsiConfig,
    cache: edge::CacheConfig,
    script: Vec<script::ScriptConfig>,
    shared_dict: Vec<script::SharedDictConfig>,
}

/// `[[host.route]]` and `[[host.script]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct HostModuleKeys {
    route: Vec<edge::RouteConfig>,
    script: Vec<script::ScriptConfig>,
}

impl ServeConfig {
    /// Reads a config file: each top-level key goes to the crate that owns it, and a key
    /// no crate knows is refused by name.
    pub fn load(path: &Path) -> anyhow::Result<ServeConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid config file {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<ServeConfig> {
        let mut table: toml::Table = toml::from_str(text).map_err(one_line)?;
        // Per site, the scripts' rules come before the routes': at an equal prefix a
        // script answers first (it passes to the route's module when it has no `content`).
        let mut routes = Vec::new();
        let (scripts_chosen, chosen) = take_site_rules(&mut table, 0, "", &mut routes)?;
        let mut modules = toml::Table::new();
        for key in crate::keys::MODULE_KEYS {
            if let Some(value) = table.remove(key) {
                modules.insert(key.into(), value);
            }
        }
        // A host's routes and scripts belong to the modules too, on that host's site.
        let mut host_modules = Vec::new();
        if let Some(toml::Value::Array(hosts)) = table.get_mut("host") {
            for (i, host) in hosts.iter_mut().enumerate() {
                let Some(host) = host.as_table_mut() else {
                    continue;
                };
                let at = format!("host[{i}].");
                let host_chosen = take_site_rules(host, i + 1, &at, &mut routes)?;
                let mut keys = toml::Table::new();
                for key in crate::keys::HOST_MODULE_KEYS {
                    if let Some(value) = host.remove(key) {
                        keys.insert(key.into(), value);
                    }
                }
                let m: HostModuleKeys = toml::Value::Table(keys)
                    .try_into()
                    .map_err(|e| unknown_key(e, "host."))
                    .with_context(|| format!("host[{i}]"))?;
                host_modules.push((i + 1, m, host_chosen));
            }
        }
        let mut server: server::Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e| unknown_key(e, ""))?;
        server.routes = routes;
        let mut m: ModuleKeys = toml::Value::Table(modules)
            .try_into()
            .map_err(|e| unknown_key(e, ""))?;
        // Request-limit zones shared between nodes keep their counts in the cache's Redis.
        server.limit_redis = (m.cache.redis.as_ref())
            .filter(|r| !r.url.is_empty())
            .map(|r| server::LimitRedis {
                url: r.url.clone(),
                prefix: r.key_prefix.clone(),
            });
        for (route, (rule, key)) in m.route.iter_mut().zip(chosen) {
            route.rule = rule;
            route.key = key;
        }
        for (script, (rule, _)) in m.script.iter_mut().zip(scripts_chosen) {
            script.rule = rule;
        }
        for (site, h, (scripts_chosen, chosen)) in host_modules {
            let host = server
                .host
                .get(site - 1)
                .and_then(|h| h.names.first().cloned());
            m.route
                .extend(h.route.into_iter().zip(chosen).map(|(r, (rule, key))| {
                    edge::RouteConfig {
                        site,
                        host: host.clone(),
                        rule,
                        key,
                        ..r
                    }
                }));
            m.script.extend(
                h.script
                    .into_iter()
                    .zip(scripts_chosen)
                    .map(|(s, (rule, _))| script::ScriptConfig { site, rule, ..s }),
            );
        }
        // A script the rules choose by a regex reads its captures as variables.
        for s in m.script.iter_mut() {
            let site_rules = server.routes.iter().filter(|(site, _, _)| *site == s.site);
            if let Some((_, rules, _)) = s.rule.and_then(|r| site_rules.clone().nth(r)) {
                s.regex = rules.regex.clone().map(|re| (re, rules.case_insensitive));
            }
        }
        Ok(ServeConfig {
            server,
            upstream: m.upstream,
            route: m.route,
            esi: m.esi,
            cache: m.cache,
            script: m.script,
            shared_dict: m.shared_dict,
        })
    }
}

/// [`take_rules`] of a site's `[[script]]`s, then of its `[[route]]`s (`at`: `""` or
/// `host[I].`): the rules each chose, scripts' and routes'.
type Chosen = (Vec<Mounted>, Vec<Mounted>);

/// Per entry kept for a module: its place among the site's rules when they choose it,
/// and its key path (`host[0].route[2]`).
type Mounted = (Option<usize>, String);

fn take_site_rules(
    table: &mut toml::Table,
    site: usize,
    at: &str,
    out: &mut Vec<(usize, rules::RouteRules, bool)>,
) -> anyhow::Result<Chosen> {
    let mut chosen: Chosen = Default::default();
    for (kind, name, into) in [
        (Mounts::Script, "script", &mut chosen.0),
        (Mounts::Route, "route", &mut chosen.1),
    ] {
        if let Some(mounts) = table.get_mut(name) {
            let key = format!("{at}{name}");
            *into = take_rules((mounts, kind, &key), site, out).context(key.clone())?;
        }
    }
    Ok(chosen)
}

/// Which array [`take_rules`] reads: `[[route]]` or `[[script]]` (at the top level or a
/// host's).
#[derive(Clone, Copy, PartialEq)]
enum Mounts {
    Route,
    Script,
}

/// Takes the rule keys out of each entry of `mounts` (a `[[route]]` or `[[script]]`
/// array, `key` naming it in errors: `route`, `host[0].script`) into `out`, with the
/// entry's site and whether a module serves it.
///
/// A route's keys are `rules::config::ROUTE_KEYS`; a route no module serves (`respond`,
/// `redirect`, `rewrite`: no `upstream` or `root`) leaves the array, the rest stays for
/// the proxy. A script's are `rules::config::SCRIPT_KEYS`, and only a script that has one
/// becomes a rule (the others are mounted by their prefix alone, as before rules).
/// Returns, for each entry left, its place among the site's rules when the rules choose
/// it (it has a matcher other than its prefix: `edge::RouteConfig::rule`,
/// `script::ScriptConfig::rule`).
fn take_rules(
    (mounts, kind, key): (&mut toml::Value, Mounts, &str),
    site: usize,
    out: &mut Vec<(usize, rules::RouteRules, bool)>,
) -> anyhow::Result<Vec<Mounted>> {
    let mut chosen = Vec::new();
    let Some(array) = mounts.as_array_mut() else {
        return Ok(chosen);
    };
    let taken: &[&str] = match kind {
        Mounts::Route => &rules::config::ROUTE_KEYS,
        Mounts::Script => &rules::config::SCRIPT_KEYS,
    };
    let mut kept = Vec::new();
    for (i, entry) in std::mem::take(array).into_iter().enumerate() {
        let toml::Value::Table(mut table) = entry else {
            kept.push(entry);
            continue;
        };
        let module =
            kind == Mounts::Script || table.contains_key("upstream") || table.contains_key("root");
        let mut keys = toml::Table::new();
        for key in taken {
            let value = match *key {
                // The proxy reads the prefix too.
                "prefix" => table.get(*key).cloned(),
                _ => table.remove(*key),
            };
            if let Some(value) = value {
                keys.insert(key.to_string(), value);
            }
        }
        if kind == Mounts::Script && keys.is_empty() {
            chosen.push((None, format!("{key}[{i}]")));
            kept.push(toml::Value::Table(table));
            continue;
        }
        if kind == Mounts::Script {
            if let Some(prefix) = table.get("prefix") {
                keys.insert("prefix".into(), prefix.clone());
            }
        }
        let keys_set: Vec<String> = keys.keys().cloned().collect();
        let mut rules: rules::RouteRules = toml::Value::Table(keys)
            .try_into()
            .map_err(one_line)
            .with_context(|| format!("[{i}]"))?;
        rules.key = format!("{key}[{i}]");
        if module {
            // Chosen by the rules when more than its prefix says when it applies.
            let by_rules = rules::config::MATCHER_KEYS
                .iter()
                .any(|key| keys_set.iter().any(|k| k == key));
            let index = out.iter().filter(|(s, _, _)| *s == site).count();
            chosen.push((by_rules.then_some(index), format!("{key}[{i}]")));
            kept.push(toml::Value::Table(table));
        } else if table.keys().any(|k| k != "prefix") {
            // Keys neither the rules nor a module without `upstream` take: the proxy
            // refuses them by name (an unknown key, a key that needs `upstream`).
            chosen.push((None, format!("{key}[{i}]")));
            kept.push(toml::Value::Table(table));
        }
        out.push((site, rules, module));
    }
    *array = kept;
    Ok(chosen)
}

/// [`one_line`], with an unknown key explained: every key valid where it was written, and
/// the nearest (`crate::keys`). `prefix` is the path of the table that was read.
fn unknown_key(e: toml::de::Error, prefix: &str) -> anyhow::Error {
    anyhow::anyhow!(crate::keys::explain(one_line(e).to_string(), prefix))
}

/// A TOML error in one line: toml prints a snippet of the file with a caret under the
/// fault on lines of their own, which a one-line error keeps only as "line L, column C".
fn one_line(e: toml::de::Error) -> anyhow::Error {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    let line = match first.strip_prefix("TOML parse error at ") {
        Some(at) => {
            let message: Vec<&str> = lines.filter(|l| !l.contains('|')).collect();
            format!("{at}: {}", message.join(" "))
        }
        None => std::iter::once(first)
            .chain(lines)
            .collect::<Vec<_>>()
            .join(" "),
    };
    anyhow::anyhow!(line)
}

impl ServeConfig {
    /// The proxy's part, when it has upstreams (for routes, or for scripts to call).
    pub fn edge(&self) -> Option<edge::EdgeConfig> {
        if self.upstream.is_empty() && self.route.is_empty() {
            return None;
        }
        Some(edge::EdgeConfig {
            upstream: self.upstream.clone(),
            route: self.route.clone(),
            esi: self.esi.clone(),
            cache: self.cache.clone(),
            hosts: self.server.hosts(),
            compression: self.server.compression(),
        })
    }

    /// Checks what spans several crates' keys.
    pub fn validate(&self) -> anyhow::Result<()> {
        // An error page from an upstream (`@upstream:NAME`) names one that exists.
        let server = &self.server;
        let pages = std::iter::once(("error_page".to_string(), server.error_page.as_ref()))
            .chain(
                server
                    .host
                    .iter()
                    .enumerate()
                    .map(|(i, h)| (format!("host[{i}].error_page"), h.error_page.as_ref())),
            )
            .chain(
                server
                    .routes
                    .iter()
                    .map(|(_, r, _)| (format!("{}.error_page", r.key), Some(&r.error_page))),
            );
        for (key, pages) in pages {
            for page in pages.into_iter().flat_map(|p| p.values()) {
                if let Some(name) = page.strip_prefix("@upstream:") {
                    anyhow::ensure!(
                        self.upstream.iter().any(|u| u.name == name),
                        "invalid configuration: `{key}`: `{page}`: no upstream named `{name}`"
                    );
                }
            }
        }
        // A forward auth asks an upstream that exists.
        for (_, rules, _) in &server.routes {
            if let Some(name) = rules.forward_auth.as_ref().map(|f| &f.upstream) {
                anyhow::ensure!(
                    self.upstream.iter().any(|u| &u.name == name),
                    "invalid configuration: `{}.forward_auth`: no upstream named `{name}`",
                    rules.key
                );
            }
        }
        for route in &self.route {
            if let Some(root) = &route.root {
                let (key, site_root) = match route.site {
                    0 => ("root".to_string(), self.server.root.as_ref()),
                    i => (
                        format!("host[{}].root", i - 1),
                        self.server.host[i - 1]
                            .root
                            .as_ref()
                            .or(self.server.root.as_ref()),
                    ),
                };
                anyhow::ensure!(
                    Some(root) == site_root,
                    "invalid configuration: route {:?}: a static route serves from `{key}` ({}); \
                     a different directory per route ({}) is not supported",
                    route.prefix,
                    site_root.map_or("none".into(), |r| r.display().to_string()),
                    root.display()
                );
            }
        }
        Ok(())
    }

    /// Builds the modules the server runs beside its static files: the proxy (when a
    /// route proxies or a script may call an upstream) and the Lua scripts. On a reload,
    /// `previous` are the running ones: the proxy's cache and the scripts' shared
    /// dictionaries carry over, with their contents, when their settings did not change.
    pub fn modules(&self, previous: Option<&Modules>) -> anyhow::Result<Modules> {
        self.validate()?;
        let mut modules: Vec<Arc<dyn handler::Module>> = Vec::new();
        let mut upstreams: Option<Arc<dyn handler::UpstreamsFactory>> = None;
        let proxy = match self.edge() {
            Some(config) => Some(
                EdgeModule::replacing(
                    balancer_hooks(config)?,
                    previous.and_then(|p| p.proxy.as_deref()),
                )
                .map_err(|e| anyhow::anyhow!("invalid configuration: proxy: {e}"))?,
            ),
            None => None,
        };
        if let Some(proxy) = &proxy {
            upstreams = Some(proxy.clone());
        }
        let mut scripts = None;
        if !self.script.is_empty() {
            let s = script::Scripts::replacing(
                self.script.clone(),
                &self.shared_dict,
                previous.and_then(|p| p.scripts.as_deref()),
            )?;
            modules.push(Arc::new(script::ScriptModule::new(s.clone(), upstreams)));
            scripts = Some(s);
        }
        // After the scripts: at an equal prefix, a script's `content` answers before the
        // proxy (a script without `content` passes to it).
        if let Some(proxy) = &proxy {
            modules.push(proxy.clone());
        }
        let certificate = match &self.server.tls.certificate_script {
            Some(path) => Some(Arc::new(script::Hook::certificate(path).map_err(|e| {
                anyhow::anyhow!("invalid configuration: `tls.certificate_script`: {e}")
            })?) as Arc<dyn handler::CertificateHook>),
            None => None,
        };
        Ok(Modules {
            all: modules,
            proxy,
            scripts,
            certificate,
        })
    }
}

/// Loads each upstream's `balancer_script` (compiled, its module run once to check that
/// it returns `balance`) into the hook the proxy calls.
fn balancer_hooks(mut config: edge::EdgeConfig) -> anyhow::Result<edge::EdgeConfig> {
    for (i, upstream) in config.upstream.iter_mut().enumerate() {
        if let Some(path) = &upstream.balancer_script {
            let hook = script::Hook::balancer(path).map_err(|e| {
                anyhow::anyhow!("invalid configuration: `upstream[{i}].balancer_script`: {e}")
            })?;
            upstream.balancer_hook = Some(Arc::new(hook));
        }
    }
    Ok(config)
}
