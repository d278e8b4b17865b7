//! The routing tables: per site, every path prefix a module declared, with what each
//! module does there. Built once per configuration generation; `exchange` looks a
//! request's normalised path up in its site's table.

use std::collections::HashMap;
use std::sync::Arc;

use handler::{Module, Role};

/// What the modules do for the paths under one prefix.
#[derive(Debug, Clone, Default)]
pub(crate) struct Routed {
    /// The handlers that may answer, longest prefix first (a handler that passes hands
    /// the request to the next; the static files answer when all pass): (module, tag).
    pub handlers: Vec<(usize, u32)>,
    /// The filter around whichever answers (the longest filter prefix): (module, tag).
    pub filter: Option<(usize, u32)>,
}

/// The routing tables, one per site (`sites` of them): every prefix any module declared
/// for the site, each with what every module does for it. A path takes the longest
/// prefix it matches on whole segments; since the table holds every prefix, that entry
/// names the longest handler and filter prefixes of the path too.
pub(crate) fn routes(modules: &[Arc<dyn Module>], sites: usize) -> Vec<handler::Router<Routed>> {
    let all = declared(modules);
    (0..sites)
        .map(|site| {
            let all: Vec<&(usize, handler::Route)> = all
                .iter()
                .filter(|(_, r)| r.site == site && r.rule.is_none())
                .collect();
            site_routes(&all)
        })
        .collect()
}

/// The handler and filter of the routes the rules choose (`handler::Route::rule`), per
/// site and rule: (module, tag) each.
pub(crate) type ByRule = Vec<HashMap<usize, Chosen>>;

/// What a module does for the requests one rule chooses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Chosen {
    pub handler: Option<(usize, u32)>,
    pub filter: Option<(usize, u32)>,
}

/// [`ByRule`] of `modules`.
pub(crate) fn by_rule(modules: &[Arc<dyn Module>], sites: usize) -> ByRule {
    let mut tables: ByRule = vec![HashMap::new(); sites];
    for (m, route) in declared(modules) {
        let (Some(rule), Some(table)) = (route.rule, tables.get_mut(route.site)) else {
            continue;
        };
        let chosen = table.entry(rule).or_default();
        match route.role {
            Role::Handler => chosen.handler = Some((m, route.tag)),
            Role::Filter => chosen.filter = Some((m, route.tag)),
        }
    }
    tables
}

fn declared(modules: &[Arc<dyn Module>]) -> Vec<(usize, handler::Route)> {
    let mut all: Vec<(usize, handler::Route)> = Vec::new();
    for (m, module) in modules.iter().enumerate() {
        all.extend(module.routes().into_iter().map(|r| (m, r)));
    }
    all
}

fn site_routes(all: &[&(usize, handler::Route)]) -> handler::Router<Routed> {
    let handlers = handler::Router::new(
        all.iter()
            .filter(|(_, r)| r.role == Role::Handler)
            .map(|(m, r)| (r.prefix.clone(), (*m, r.tag))),
    );
    let filters = handler::Router::new(
        all.iter()
            .filter(|(_, r)| r.role == Role::Filter)
            .map(|(m, r)| (r.prefix.clone(), (*m, r.tag))),
    );
    let mut prefixes: Vec<&str> = all.iter().map(|(_, r)| r.prefix.as_str()).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    handler::Router::new(prefixes.into_iter().map(|prefix| {
        let routed = Routed {
            handlers: handlers
                .iter()
                .filter(|(p, _)| whole_prefix(p, prefix.as_bytes()))
                .map(|(_, &h)| h)
                .collect(),
            filter: filters.find(prefix.as_bytes()).copied(),
        };
        (prefix, routed)
    }))
}

/// Whether `prefix` takes `path` (the router's rule, for building the table).
fn whole_prefix(prefix: &[u8], path: &[u8]) -> bool {
    handler::Router::new([(prefix, ())]).find(path).is_some()
}
