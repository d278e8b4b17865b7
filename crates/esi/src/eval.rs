//! Per-request evaluation of a compiled template, and assembly once fragment outcomes
//! are known.

use std::time::Duration;

use bytes::Bytes;

use crate::expr::Escape;
use crate::request::Request;
use crate::template::{Node, Template};

/// Index of an include in [`Evaluation::includes`].
pub type IncludeId = usize;

/// One fragment to fetch, with its URLs resolved for this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludeRequest {
    /// `src` with variables substituted (percent-encoded) and resolved against the page URL.
    pub src: String,
    /// `alt`, likewise: fetched when `src` fails.
    pub alt: Option<String>,
    /// `onerror="continue"`: when src and alt fail, the include yields nothing.
    pub continue_on_error: bool,
    /// `ttl` attribute, if given.
    pub ttl: Option<Duration>,
    /// `timeout`/`maxwait` attribute, if given.
    pub timeout: Option<Duration>,
    /// `no-store` attribute.
    pub no_store: bool,
    /// Whether the include sits inside an `esi:try` (in its attempt or its except).
    pub in_try: bool,
    /// Byte offset of the tag in the template.
    pub offset: u64,
}

/// One item of an evaluated page, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Bytes to output: a zero-copy slice of the template, or substituted `esi:vars` text.
    Bytes(Bytes),
    /// The fragment [`Evaluation::includes`]`[id]` goes here.
    Include(IncludeId),
    /// An `esi:try`. The items `i+1..attempt_end` (where `i` is this item's index) are the
    /// attempt, `attempt_end..end` the except. The attempt is output if none of its
    /// includes fails (an include with `onerror="continue"`, or one inside a nested try
    /// whose except succeeds, does not fail it); otherwise the except is.
    Try {
        /// One past the attempt's last item.
        attempt_end: usize,
        /// One past the except's last item.
        end: usize,
    },
}

/// A template evaluated for one request: what to output and what to fetch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    items: Vec<Item>,
    includes: Vec<IncludeRequest>,
}

/// Returned by an assembly callback when a fragment could not be had (src and alt failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentFailed;

/// A fragment failed with no `esi:try` and no `onerror="continue"` to absorb it: per the
/// W3C note the page as a whole fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("include of {src} failed outside esi:try and without onerror=\"continue\"")]
pub struct IncludeFailed {
    /// Which include.
    pub include: IncludeId,
    /// Its resolved src.
    pub src: String,
}

impl Template {
    /// Evaluates the template for one request: chooses `esi:when` branches, substitutes
    /// variables, resolves include URLs. Never fails; cost is proportional to the number
    /// of nodes, not the size of the page (literal text is shared, not copied).
    pub fn evaluate(&self, req: &Request) -> Evaluation {
        let mut ev = Evaluation {
            items: Vec::with_capacity(self.nodes.len()),
            includes: Vec::new(),
        };
        let mut scratch = Vec::new();
        ev.eval(self, req, 0, self.nodes.len(), false, &mut scratch);
        ev
    }
}

impl Evaluation {
    /// The items in document order (see [`Item`]).
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The includes, indexed by [`IncludeId`], in document order.
    pub fn includes(&self) -> &[IncludeRequest] {
        &self.includes
    }

    fn eval(
        &mut self,
        t: &Template,
        req: &Request,
        start: usize,
        end: usize,
        in_try: bool,
        scratch: &mut Vec<u8>,
    ) {
        let mut i = start;
        while i < end {
            match &t.nodes[i] {
                Node::Literal(b) => self.items.push(Item::Bytes(b.clone())),
                Node::Vars(interp) => {
                    scratch.clear();
                    interp.render(req, Escape::Html, scratch);
                    if !scratch.is_empty() {
                        self.items
                            .push(Item::Bytes(Bytes::copy_from_slice(scratch)));
                    }
                }
                Node::Include(inc) => {
                    let mut url = |interp: &crate::expr::Interp| {
                        scratch.clear();
                        interp.render(req, Escape::Url, scratch);
                        req.resolve(&String::from_utf8_lossy(scratch))
                    };
                    let src = url(&inc.src_interp);
                    let alt = inc.alt_interp.as_ref().map(url);
                    self.items.push(Item::Include(self.includes.len()));
                    self.includes.push(IncludeRequest {
                        src,
                        alt,
                        continue_on_error: inc.continue_on_error,
                        ttl: inc.ttl,
                        timeout: inc.timeout,
                        no_store: inc.no_store,
                        in_try,
                        offset: inc.offset,
                    });
                }
                Node::Try {
                    attempt,
                    except,
                    end: block_end,
                } => {
                    let at = self.items.len();
                    self.items.push(Item::Try {
                        attempt_end: 0,
                        end: 0,
                    });
                    self.eval(
                        t,
                        req,
                        attempt.0 as usize,
                        attempt.1 as usize,
                        true,
                        scratch,
                    );
                    let attempt_end = self.items.len();
                    self.eval(t, req, except.0 as usize, except.1 as usize, true, scratch);
                    self.items[at] = Item::Try {
                        attempt_end,
                        end: self.items.len(),
                    };
                    i = *block_end as usize;
                    continue;
                }
                Node::Choose { end: block_end } => {
                    let block_end = *block_end as usize;
                    let mut j = i + 1;
                    let mut chosen = None;
                    let mut otherwise = None;
                    while j < block_end {
                        match &t.nodes[j] {
                            Node::When { test, end } => {
                                if chosen.is_none() && test.test(req) {
                                    chosen = Some((j + 1, *end as usize));
                                }
                                j = *end as usize;
                            }
                            Node::Otherwise { end } => {
                                otherwise = otherwise.or(Some((j + 1, *end as usize)));
                                j = *end as usize;
                            }
                            // The compiler only puts branches directly in a choose.
                            _ => j += 1,
                        }
                    }
                    if let Some((s, e)) = chosen.or(otherwise) {
                        self.eval(t, req, s, e, in_try, scratch);
                    }
                    i = block_end;
                    continue;
                }
                // Branches are only reached through their choose.
                Node::When { end, .. } | Node::Otherwise { end } => {
                    i = *end as usize;
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Assembles the page once fragments are known. `fetch(id, include, out)` appends the
    /// fragment's bytes to `out` (a fragment may be several `Bytes`, e.g. when it was
    /// itself an assembled ESI page) or returns [`FragmentFailed`] when neither src nor
    /// alt could be had; anything it appended before failing is discarded.
    ///
    /// `fetch` is called only for includes whose output is needed, in document order: the
    /// includes of an except only when its attempt failed. A failure is absorbed by
    /// `onerror="continue"`, else by the nearest enclosing `esi:try` (whose except is then
    /// output), else the page fails with [`IncludeFailed`].
    pub fn assemble<F>(&self, mut fetch: F) -> Result<Vec<Bytes>, IncludeFailed>
    where
        F: FnMut(IncludeId, &IncludeRequest, &mut Vec<Bytes>) -> Result<(), FragmentFailed>,
    {
        let mut out = Vec::with_capacity(self.items.len());
        self.walk(0, self.items.len(), &mut fetch, &mut out)?;
        Ok(out)
    }

    fn walk<F>(
        &self,
        start: usize,
        end: usize,
        fetch: &mut F,
        out: &mut Vec<Bytes>,
    ) -> Result<(), IncludeFailed>
    where
        F: FnMut(IncludeId, &IncludeRequest, &mut Vec<Bytes>) -> Result<(), FragmentFailed>,
    {
        let mut i = start;
        while i < end {
            match &self.items[i] {
                Item::Bytes(b) => out.push(b.clone()),
                Item::Include(id) => {
                    let inc = &self.includes[*id];
                    let mark = out.len();
                    if fetch(*id, inc, out).is_err() {
                        out.truncate(mark);
                        if !inc.continue_on_error {
                            return Err(IncludeFailed {
                                include: *id,
                                src: inc.src.clone(),
                            });
                        }
                    }
                }
                Item::Try {
                    attempt_end,
                    end: block_end,
                } => {
                    let mark = out.len();
                    if self.walk(i + 1, *attempt_end, fetch, out).is_err() {
                        out.truncate(mark);
                        self.walk(*attempt_end, *block_end, fetch, out)?;
                    }
                    i = *block_end;
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }
}

/// Renders a page whose fragments can be had synchronously, for offline rendering
/// (`tessera esi render`) and tests; a proxy uses [`Evaluation::assemble`] with its own
/// concurrency instead. `get(url)` returns a fragment's body or `None`; `src` is tried,
/// then `alt`. Fragments are compiled and evaluated as ESI too, with include URLs
/// resolved against the fragment's URL, up to `max_depth` levels; a deeper include fails
/// (so `onerror`/`esi:try` apply).
pub fn render_sync<F>(
    template: &Template,
    req: &Request,
    get: &mut F,
    max_depth: usize,
) -> Result<Vec<Bytes>, IncludeFailed>
where
    F: FnMut(&str) -> Option<Bytes>,
{
    let ev = template.evaluate(req);
    ev.assemble(|_, inc, out| {
        if max_depth == 0 {
            return Err(FragmentFailed);
        }
        let urls = std::iter::once(&inc.src).chain(inc.alt.as_ref());
        for url in urls {
            // Refused like a fragment that failed: a URL that cannot be requested, or
            // one that would include its own page.
            if !crate::url::is_valid_url(url) || req.includes_itself(url) {
                continue;
            }
            let Some(body) = get(url) else { continue };
            let fragment = Template::parse(body);
            let fragment_req = req.for_fragment(url);
            if let Ok(parts) = render_sync(&fragment, &fragment_req, get, max_depth - 1) {
                out.extend(parts);
                return Ok(());
            }
        }
        Err(FragmentFailed)
    })
}
