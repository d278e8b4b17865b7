//! Static files without a precompressed sibling, compressed on the fly once: when a file
//! of a type `[compression]` lists is loaded into the open-file cache, its forms in each
//! coding of the policy that no sibling provides are made and kept with it, within the
//! site's budget, so that serving one costs what serving a sibling costs.

use std::sync::Arc;

use crate::config::CacheControlRule;
use crate::files::open::{Compressed, FileEntry};
use crate::sites::Site;
use compress::{Coding, Compression};

/// Files larger than this are sent as they are: compressing one would hold its worker
/// for tens of milliseconds, and large text files are rare (give them siblings).
pub(crate) const MAX_FILE_SIZE: u64 = 1 << 20;

/// Whether the path's Cache-Control rule forbids transforming it.
pub(crate) fn no_transform(rules: &[CacheControlRule], key: &[u8]) -> bool {
    rules
        .iter()
        .filter(|rule| key.starts_with(rule.prefix.as_bytes()))
        .max_by_key(|rule| rule.prefix.len())
        .is_some_and(|rule| {
            rule.value
                .split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
        })
}

/// The compressed forms of `plain` (siblings `(brotli, gzip)` exist or not), or `None`
/// when the file cannot be read whole or its forms do not fit the site's budget.
pub(crate) fn forms(
    policy: &Compression,
    site: &Site,
    plain: &FileEntry,
    (has_brotli, has_gzip): (bool, bool),
    extra: &[u8],
) -> Option<Compressed> {
    let body: std::borrow::Cow<'_, [u8]> = if plain.in_memory {
        plain.body().into()
    } else {
        let mut data = vec![0u8; plain.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&plain.file, &mut data, 0).ok()?;
        data.into()
    };
    let mut made = Vec::new();
    for &coding in &policy.order {
        if (coding == Coding::Brotli && has_brotli) || (coding == Coding::Gzip && has_gzip) {
            continue;
        }
        let bytes = compress::compress(coding, policy.level(coding), &[&body]).ok()?;
        // Not worth keeping when it saves nothing.
        if bytes.len() < body.len() {
            made.push((coding, bytes));
        }
    }
    let total = made.iter().map(|(_, b)| b.len() as u64).sum();
    let mut forms = Compressed::reserve(&site.compressed_bytes, policy.file_cache_bytes, total)?;
    for (coding, bytes) in made {
        let file = plain.file.try_clone().ok()?;
        forms.entries.push(Arc::new(FileEntry::compressed(
            file,
            plain.identity(),
            plain.content_type,
            coding,
            extra,
            bytes.to_vec(),
        )));
    }
    Some(forms)
}
