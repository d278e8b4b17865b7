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

    /// Whether they apply to a response of `status`: every one with `always`, else the
    /// statuses nginx's `add_header` adds to.
    pub fn apply_to(&self, status: u16) -> bool {
        self.always
            || matches!(
                status,
                200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
            )
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
    /// Applies them to a request's fields (name, value), in order; `expanded` as for
    /// [`Edits::apply`].
    pub fn apply_fields<'v>(
        &self,
        fields: &mut Vec<(Box<str>, Vec<u8>)>,
        expanded: &mut impl Iterator<Item = &'v [u8]>,
    ) {
        for edit in self.list.iter() {
            let name = &edit.name[..];
            let same = |n: &str| n.as_bytes().eq_ignore_ascii_case(name);
            if edit.how == How::Remove {
                fields.retain(|(n, _)| !same(n));
                continue;
            }
            let value = match edit.value.literal() {
                Some(value) => value,
                None => expanded.next().unwrap_or_default(),
            };
            let name = String::from_utf8_lossy(name).into();
            match edit.how {
                How::Default if fields.iter().any(|(n, _)| same(n)) => {}
                How::Set => match fields.iter().position(|(n, _)| same(n)) {
                    // In the place of the first one, as the client sent it.
                    Some(first) => {
                        fields[first].1 = value.to_vec();
                        let mut i = 0;
                        fields.retain(|(n, _)| {
                            i += 1;
                            i - 1 == first || !same(n)
                        });
                    }
                    None => fields.push((name, value.to_vec())),
                },
                _ => fields.push((name, value.to_vec())),
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
