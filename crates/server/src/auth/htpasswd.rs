//! An htpasswd file as `basic_auth` reads it: `user:hash` lines, blank lines and `#`
//! comments skipped. Only hashes made to resist guessing are taken: bcrypt (`$2y$`,
//! `$2a$`, `$2b$`, as `htpasswd -B` writes) and SHA-512-crypt (`$6$`, as `openssl passwd
//! -6` and `mkpasswd -m sha-512` write). Apache's MD5 (`$apr1$`), `{SHA}`, MD5-crypt
//! (`$1$`), DES crypt and plain passwords are refused with the file and line, so a weak
//! file never goes into service unnoticed.

use std::collections::HashMap;
use std::path::Path;

/// A user's password hash.
#[derive(Debug, Clone)]
pub(crate) enum Hash {
    Bcrypt(Box<str>),
    Sha512(Box<str>),
}

impl Hash {
    /// Whether `password` is the one this hash was made from (slow on purpose: tens of
    /// milliseconds for bcrypt at cost 10; called on the verifier threads only).
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Hash::Sha512(hash) => std::str::from_utf8(password)
                .is_ok_and(|p| sha_crypt::sha512_check(p, hash).is_ok()),
        }
    }
}

/// Each user and their hash.
pub(crate) type Users = HashMap<Box<[u8]>, Hash>;

/// Reads `path`: each user and their hash. The error names the file, and the line
/// with what is wrong on it.
pub(crate) fn read(path: &Path) -> Result<Users, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|(line, what)| format!("{}:{line}: {what}", path.display()))
}

/// [`read`] on the file's text; the error is the line number and what is wrong there.
fn parse(text: &str) -> Result<Users, (usize, String)> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let number = n + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((user, hash)) = line.split_once(':') else {
            return Err((number, "not `user:hash`".into()));
        };
        if user.is_empty() {
            return Err((number, "the user name is empty".into()));
        }
        let hash = scheme(hash).map_err(|what| (number, format!("user `{user}`: {what}")))?;
        if users.insert(user.as_bytes().into(), hash).is_some() {
            return Err((number, format!("user `{user}` is listed twice")));
        }
    }
    Ok(users)
}

const USE: &str = "use bcrypt (`htpasswd -B`) or SHA-512-crypt (`openssl passwd -6`)";

/// The hash's scheme, when it is one that is taken.
fn scheme(hash: &str) -> Result<Hash, String> {
    let weak = |name: &str| {
        Err(format!(
            "{name} is too weak to guess-proof a password; {USE}"
        ))
    };
    if ["$2y$", "$2a$", "$2b$"].iter().any(|p| hash.starts_with(p)) {
        // `$2y$10$` and 53 characters of salt and hash.
        let well_formed = hash.len() == 60
            && hash.as_bytes()[4..6].iter().all(u8::is_ascii_digit)
            && hash.as_bytes()[6] == b'$';
        return match well_formed {
            true => Ok(Hash::Bcrypt(hash.into())),
            false => Err(format!(
                "a bcrypt hash is 60 characters (`$2y$10$...`); {USE}"
            )),
        };
    }
    if let Some(rest) = hash.strip_prefix("$6$") {
        // [rounds=N$]salt$hash, the hash 86 characters.
        let parts: Vec<&str> = rest.split('$').collect();
        let well_formed = match parts[..] {
            [_, h] | [_, _, h] => h.len() == 86,
            _ => false,
        };
        return match well_formed {
            true => Ok(Hash::Sha512(hash.into())),
            false => Err(format!("a malformed SHA-512-crypt hash; {USE}")),
        };
    }
    if hash.starts_with("$apr1$") {
        return weak("Apache MD5 (`$apr1$`)");
    }
    if hash.starts_with("{SHA}") {
        return weak("unsalted SHA-1 (`{SHA}`)");
    }
    if hash.starts_with("$1$") {
        return weak("MD5-crypt (`$1$`)");
    }
    if hash.starts_with('$') {
        let id = hash.split('$').nth(1).unwrap_or_default();
        return Err(format!("the scheme `${id}$` is not supported; {USE}"));
    }
    weak("a DES crypt(3) hash or a plain password")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BCRYPT: &str = "$2y$05$LQLLyJ5cLmTXJcsN1PZVt.0Q.IG9gkgKB0KUbz4hJGoJiKiTMF.r2";

    #[test]
    fn takes_bcrypt_and_sha512_crypt_and_refuses_the_rest_by_line() {
        let sha = format!("$6$saltsalt${}", "a".repeat(86));
        let text = format!("# staff\n\nann:{BCRYPT}\nbob:{sha}\r\n");
        let users = parse(&text).unwrap();
        assert!(matches!(users.get(&b"ann"[..]), Some(Hash::Bcrypt(_))));
        assert!(matches!(users.get(&b"bob"[..]), Some(Hash::Sha512(_))));
        for (line, want) in [
            (
                "eve:$apr1$abc$def",
                "user `eve`: Apache MD5 (`$apr1$`) is too weak",
            ),
            ("eve:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=", "unsalted SHA-1"),
            ("eve:$1$abc$def", "MD5-crypt"),
            (
                "eve:abJnggxhB/yWI",
                "a DES crypt(3) hash or a plain password",
            ),
            ("eve:secret", "a DES crypt(3) hash or a plain password"),
            ("eve:$5$abc$def", "the scheme `$5$` is not supported"),
            ("eve:$2y$10$short", "a bcrypt hash is 60 characters"),
            ("eve", "not `user:hash`"),
        ] {
            let text = format!("ann:{BCRYPT}\n{line}\n");
            let (number, what) = parse(&text).unwrap_err();
            assert_eq!(number, 2, "{line}");
            assert!(what.contains(want), "{what} lacks {want}");
        }
        assert_eq!(
            parse(&format!("ann:{BCRYPT}\nann:{BCRYPT}\n")).unwrap_err(),
            (2, "user `ann` is listed twice".to_string())
        );
    }

    #[test]
    fn verifies_a_bcrypt_hash() {
        let hash = bcrypt::hash("pass", 4).unwrap();
        let hash = scheme(&hash).unwrap();
        assert!(hash.verify(b"pass"));
        assert!(!hash.verify(b"wrong"));
    }
}
