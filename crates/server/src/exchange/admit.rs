//! What may stop a request its route's rules chose before its handler: the request
//! limits (`limited.rs`), then the access list and the checks (`access.rs`,
//! `checks.rs`), in nginx's order of phases.

use super::checks::{self, Checked};
use super::edited::Rerouted;
use super::{access, limited};
use crate::facts::ConnFacts;
use crate::generation::Generation;
use crate::routing;
use crate::worker::Worker;

/// What may stop a request the rules routed before its handler: the request limits, then
/// the access checks ([`police`]), as nginx's preaccess phase comes before its access
/// phase (a request the limits refuse is not checked). Returns its place among its key's
/// requests in flight and the fields a forward auth answer gives it, or what to await:
/// a delay of the limits or a check. A request answered again after it waited was
/// counted by the limits the first time.
pub(super) fn admit(
    worker: &Worker,
    conn: &ConnFacts,
    (gen, site): (&Generation, usize),
    req: &wire::Request<'_, '_>,
    checked: Option<&Checked>,
    (decided, path, rerouted): (&mut routing::Decided, &[u8], &mut Option<Rerouted>),
) -> Result<Admitted, handler::LocalFuture<Checked>> {
    let seen = (&mut *decided, path, rerouted);
    let (held, refused) = match limited::limits(worker, conn, (gen, site), req, checked, seen) {
        Ok((held, refused)) => (std::cell::Cell::new(held), refused),
        Err(ms) => return Err(limited::delay(ms)),
    };
    if refused {
        return Ok((held, None));
    }
    let copied = police(worker, conn, (gen, site), req, checked, decided)?;
    Ok((held, copied))
}

/// A request [`admit`] lets on: its place among its key's requests in flight, and the
/// fields a forward auth answer gives it.
type Admitted = (
    std::cell::Cell<Option<crate::limit::Held>>,
    Option<checks::Copied>,
);

/// The route's policy on a request the rules routed: its access list, then its checks
/// (`basic_auth`, `forward_auth`), any of which may answer it in its route's place.
/// Returns the fields a forward auth answer puts into the request, or the check to await
/// when one waits.
fn police(
    worker: &Worker,
    conn: &ConnFacts,
    (gen, site): (&Generation, usize),
    req: &wire::Request<'_, '_>,
    checked: Option<&Checked>,
    decided: &mut routing::Decided,
) -> Result<Option<checks::Copied>, handler::LocalFuture<Checked>> {
    if access::check(worker, (gen, site), conn.client.ip(), decided) {
        return Ok(None);
    }
    match checks::run(worker, (gen, site), decided.rule, (req, conn), checked) {
        checks::Check::Pass(copied) => Ok(copied),
        checks::Check::Answer(response) => {
            (decided.response, decided.files) = (Some(response), false);
            Ok(None)
        }
        checks::Check::Wait(check) => Err(check),
    }
}

/// `req` with the fields a forward auth answer gave in place of its own of those names
/// (a client cannot send them itself), into `fields`: what the route's handler (the
/// proxy, to the origin) and the files see.
pub(super) fn copy_fields<'a>(
    req: &wire::Request<'a, 'a>,
    copied: Option<&'a checks::Copied>,
    fields: &'a mut Vec<wire::Header<'a>>,
) -> Option<wire::Request<'a, 'a>> {
    let copied = copied?;
    let replaced = |name: &str| copied.names.iter().any(|n| name.eq_ignore_ascii_case(n));
    fields.extend(req.headers.iter().filter(|h| !replaced(h.name)).copied());
    fields.extend(copied.fields.iter().filter_map(|(name, value)| {
        let name = std::str::from_utf8(name).ok()?;
        Some(wire::Header { name, value })
    }));
    Some(routing::view(req, None, fields))
}
