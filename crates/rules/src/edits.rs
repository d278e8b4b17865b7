//! Field edits (`request_headers`, `response_headers`), compiled once: names checked,
//! values compiled as [`Template`]s.

use handler::ResponseHead;

use crate::config::HeaderEdits;
use crate::error::Error;
use crate::template::{Captures, Ctx, Template};

/// What an edit does to its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Removes every field of the name.
    Remove,
    /// Removes every field of the name, then adds this one.
    Set,
    /// Adds this one beside any others.
    Add,
    /// Adds this one when none of the name is there.
    Default,
}

/// One compiled edit.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub how: How,
    /// The name as written (sent in this case; compared in any case).
    pub name: Box<[u8]>,
    pub value: Template,
}

/// A list of edits, applied in the order remove, set, add, default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Edits {
    pub list: Box<[Edit]>,
    /// Applied to every response status (response edits only).
    pub always: bool,
}

/// Fields an edit may not touch: the server frames every message itself.
const FRAMING: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
];

/// Fields the server writes on every response it makes (an edit would repeat them).
const SERVER_WRITTEN: [&str; 2] = ["date", "server"];

impl Edits {
    /// Compiles `config`; `response` says which way it edits (responses may not touch
    /// Date and Server, which the server writes); `groups`: the regex whose captures the
    /// values may use.
    pub fn compile(
        config: &HeaderEdits,
        response: bool,
        groups: Option<&regex::bytes::Regex>,
    ) -> Result<Edits, Error> {
        let mut list = Vec::new();
        let mut push = |how: How, name: &str, value: &str| -> Result<(), Error> {
            if name.is_empty() || !name.bytes().all(wire::is_tchar) {
                return Err(Error::new(format!("`{name}` is not a field name")));
            }
            let lower = name.to_ascii_lowercase();
            if FRAMING.contains(&lower.as_str()) {
                return Err(Error::new(format!(
                    "`{name}` cannot be edited: the server frames every message itself"
                )));
            }
            if response && SERVER_WRITTEN.contains(&lower.as_str()) {
                return Err(Error::new(format!(
                    "`{name}` cannot be edited on responses: the server writes it"
                )));
            }
            if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                return Err(Error::new(format!(
                    "the value of `{name}` holds a control character"
                )));
            }
            list.push(Edit {
                how,
                name: name.as_bytes().into(),
                value: Template::compile(value, groups)?,
            });
            Ok(())
        };
        for name in &config.remove {
            push(How::Remove, name, "")?;
        }
        for (name, value) in &config.set {
            push(How::Set, name, value)?;
        }
        for (name, value) in &config.add {
            push(How::Add, name, value)?;
        }
        for (name, value) in &config.default {
            push(How::Default, name, value)?;
        }
        Ok(Edits {
            list: list.into_boxed_slice(),
            always: config.always,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The statuses nginx's `add_header` adds to (without `always`).
    pub const SUCCESS: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

    /// Whether they apply to a response of `status`: every one with `always`, else the
    /// statuses nginx's `add_header` adds to.
    pub fn apply_to(&self, status: u16) -> bool {
        self.always || Edits::SUCCESS.contains(&status)
    }

    /// Whether any value uses a capture group.
    pub fn uses_captures(&self) -> bool {
        self.list.iter().any(|e| e.value.uses_captures())
    }

    /// Whether any value uses `$request_id`.
    pub fn uses_request_id(&self) -> bool {
        self.list.iter().any(|e| e.value.uses_request_id())
    }

    /// Expands the values that have variables, in order, into `out` (one entry each;
    /// nothing for a value without variables, which [`Edits::apply`] uses as it is).
    pub fn expand(&self, ctx: &Ctx<'_>, captured: (&[u8], &Captures), out: &mut Vec<Vec<u8>>) {
        for edit in self.list.iter() {
            if edit.how != How::Remove && edit.value.literal().is_none() {
                let mut value = Vec::new();
                edit.value.expand(ctx, captured, &mut value);
                sanitize(&mut value);
                out.push(value);
            }
        }
    }

    /// How many values [`Edits::expand`] makes.
    pub fn expand_count(&self) -> impl Iterator<Item = ()> + '_ {
        self.list
            .iter()
            .filter(|e| e.how != How::Remove && e.value.literal().is_none())
            .map(|_| ())
    }

    /// Applies them to a response head; `expanded` yields what [`Edits::expand`] made,
    /// in the same order.
    pub fn apply<'v>(
        &self,
        head: &mut ResponseHead,
        expanded: &mut impl Iterator<Item = &'v [u8]>,
    ) {
        for edit in self.list.iter() {
            let name = &edit.name[..];
            if edit.how == How::Remove {
                head.remove(name);
                continue;
            }
            let value = match edit.value.literal() {
                Some(value) => value,
                None => expanded.next().unwrap_or_default(),
            };
            match edit.how {
                How::Default if head.contains(name) => {}
                How::Set => {
                    head.remove(name);
                    head.append(name, value);
                }
                _ => head.append(name, value),
            }
        }
    }
}

impl Edits {
    /// Applies them to a request's fields, in order, borrowing their names and literal
    /// values (nothing is copied or allocated beyond `fields`' own growth); `expanded`
    /// as for [`Edits::apply`].
    pub fn apply_headers<'v>(
        &'v self,
        fields: &mut Vec<wire::Header<'v>>,
        expanded: &mut impl Iterator<Item = &'v [u8]>,
    ) {
        for edit in self.list.iter() {
            let name = &edit.name[..];
            let same = |n: &str| n.as_bytes().eq_ignore_ascii_case(name);
            if edit.how == How::Remove {
                fields.retain(|h| !same(h.name));
                continue;
            }
            let value = match edit.value.literal() {
                Some(value) => value,
                None => expanded.next().unwrap_or_default(),
            };
            // Checked to be token characters at compile: ASCII.
            let name = std::str::from_utf8(name).unwrap_or_default();
            let header = wire::Header { name, value };
            match edit.how {
                How::Default if fields.iter().any(|h| same(h.name)) => {}
                How::Set => match fields.iter().position(|h| same(h.name)) {
                    // In the place of the first one, as the client sent it.
                    Some(first) => {
                        fields[first] = header;
                        let mut i = 0;
                        fields.retain(|h| {
                            i += 1;
                            i - 1 == first || !same(h.name)
                        });
                    }
                    None => fields.push(header),
                },
                _ => fields.push(header),
            }
        }
    }
}

/// Makes an expanded value safe in a field: a control character a variable brought in
/// (a decoded `%0d%0a` in `$uri`) is percent-encoded, never written raw.
pub fn sanitize(value: &mut Vec<u8>) {
    if !value.iter().any(|&b| is_unsafe(b)) {
        return;
    }
    let raw = std::mem::take(value);
    for b in raw {
        if is_unsafe(b) {
            value.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            value.push(b);
        }
    }
}

fn is_unsafe(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// Response edits as they apply to a head while it is written, when every value is
/// literal and they only set, add and remove (no `default`, which depends on what the
/// head holds): the names whose lines are left out, and the lines written after the
/// head's own. What it makes of any head is what [`Edits::apply`] makes of it, in one
/// pass and with no second copy of the head (bench/policy.sh: the copy and the pass
/// after the head was written cost a file 3-4% with five edits).
#[derive(Debug, Default, PartialEq)]
pub struct LinePlan {
    drop: Box<[Box<[u8]>]>,
    lines: Box<[u8]>,
}

impl LinePlan {
    /// The plan of `lists` applied in turn to a response of a status nginx's
    /// `add_header` adds to (`success`: every list), or of another (the lists with
    /// `always` only); `None` when a value has variables or an edit is a `default`.
    pub fn of(lists: &[&Edits], success: bool) -> Option<LinePlan> {
        let mut drop: Vec<Box<[u8]>> = Vec::new();
        let mut added: Vec<(&[u8], &[u8])> = Vec::new();
        for edits in lists.iter().filter(|e| success || e.always) {
            for edit in edits.list.iter() {
                let name = &edit.name[..];
                let same = |n: &[u8]| n.eq_ignore_ascii_case(name);
                match edit.how {
                    How::Remove | How::Set => {
                        if !drop.iter().any(|d| same(d)) {
                            drop.push(name.to_ascii_lowercase().into());
                        }
                        added.retain(|(n, _)| !same(n));
                    }
                    How::Add => {}
                    How::Default => return None,
                }
                if edit.how != How::Remove {
                    added.push((name, edit.value.literal()?));
                }
            }
        }
        let mut lines = Vec::new();
        for (name, value) in added {
            wire::write_field(&mut lines, name, value);
        }
        Some(LinePlan {
            drop: drop.into(),
            lines: lines.into(),
        })
    }

    /// Whether a line of the field `name` stays.
    #[inline]
    pub fn keeps(&self, name: &[u8]) -> bool {
        !self
            .drop
            .iter()
            .any(|d| d.len() == name.len() && d.eq_ignore_ascii_case(name))
    }

    /// Whether no line is left out.
    pub fn keeps_all(&self) -> bool {
        self.drop.is_empty()
    }

    /// The lines written after the head's own, each ending in CRLF.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }
}

/// [`LinePlan`]s for both kinds of status.
#[derive(Debug, PartialEq)]
pub struct LinePlans {
    success: LinePlan,
    other: LinePlan,
}

impl LinePlans {
    /// `None` when either status's plan cannot be made.
    pub fn of(lists: &[&Edits]) -> Option<LinePlans> {
        Some(LinePlans {
            success: LinePlan::of(lists, true)?,
            other: LinePlan::of(lists, false)?,
        })
    }

    /// The plan for a response of `status` (as [`Edits::apply_to`] tells them apart).
    pub fn for_status(&self, status: u16) -> &LinePlan {
        match Edits::SUCCESS.contains(&status) {
            true => &self.success,
            false => &self.other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Names from a small set, in mixed case, so that edits and fields collide often.
    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["X-A", "x-a", "X-B", "Content-Type", "ETag", "x-c"])
            .prop_map(str::to_string)
    }

    fn edits() -> impl Strategy<Value = HeaderEdits> {
        (
            prop::collection::btree_map(name(), "[a-z]{1,3}", 0..3),
            prop::collection::btree_map(name(), "[a-z]{1,3}", 0..3),
            prop::collection::vec(name(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(set, add, remove, always)| HeaderEdits {
                set,
                add,
                remove,
                always,
                ..HeaderEdits::default()
            })
    }

    proptest! {
        /// A head written through a plan holds the fields `Edits::apply` makes of it,
        /// in the same order, for host and route lists with and without `always`.
        #[test]
        fn a_plan_writes_what_apply_makes(
            host in edits(),
            route in edits(),
            fields in prop::collection::vec((name(), "[a-z]{1,3}"), 0..5),
            status in prop::sample::select(vec![200u16, 304, 404, 502]),
        ) {
            let host = Edits::compile(&host, true, None).unwrap();
            let route = Edits::compile(&route, true, None).unwrap();
            let lists = [&host, &route];
            let mut head = ResponseHead::new(status);
            for (n, v) in &fields {
                head.append(n.as_bytes(), v.as_bytes());
            }
            for edits in lists {
                if edits.apply_to(status) {
                    edits.apply(&mut head, &mut std::iter::empty());
                }
            }
            let mut want = Vec::new();
            for (n, v) in head.iter() {
                wire::write_field(&mut want, n, v);
            }
            let plans = LinePlans::of(&lists).unwrap();
            let plan = plans.for_status(status);
            let mut got = Vec::new();
            for (n, v) in &fields {
                if plan.keeps(n.as_bytes()) {
                    wire::write_field(&mut got, n.as_bytes(), v.as_bytes());
                }
            }
            got.extend_from_slice(plan.lines());
            prop_assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
        }
    }

    #[test]
    fn no_plan_for_a_default_or_a_variable() {
        let default = HeaderEdits {
            default: [("X-A".to_string(), "1".to_string())].into(),
            ..HeaderEdits::default()
        };
        let variable = HeaderEdits {
            set: [("X-A".to_string(), "$host".to_string())].into(),
            ..HeaderEdits::default()
        };
        for config in [default, variable] {
            let edits = Edits::compile(&config, true, None).unwrap();
            assert_eq!(LinePlans::of(&[&edits]), None);
        }
    }
}
