//! `tessera check-config` and `tessera serve --check`: everything `serve` would refuse at
//! start, found without binding anything (as `nginx -t`): values, the directories and
//! files they name, upstream names, scripts (compiled), host names. Prints
//! `configuration OK`, or every problem as `FILE:LINE: key.path: what is wrong` and exits 1.

use std::path::Path;

use crate::config::ServeConfig;

/// Checks `config` (read from `path`, if any; command-line options already applied)
/// and reports. Returns only when it is valid.
pub fn report(path: Option<&Path>, config: &ServeConfig) {
    let problems = problems(config);
    if problems.is_empty() {
        println!("configuration OK");
        return;
    }
    let text = path.and_then(|p| std::fs::read_to_string(p).ok());
    for problem in &problems {
        eprintln!("{}", located(path, text.as_deref(), problem));
    }
    std::process::exit(1);
}

/// A config file that could not be read or parsed: reported the same way, exit 1.
pub fn unreadable(path: &Path, error: &anyhow::Error) -> ! {
    let message = format!("{error:#}");
    // toml's own message says where ("... line N, column M: ..."); a key no crate knows
    // (`unknown field `rot``) is found in the text.
    let line = message
        .split("line ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    match line {
        Some(line) => eprintln!("{}:{line}: {message}", path.display()),
        None => {
            let text = std::fs::read_to_string(path).ok();
            eprintln!("{}", located(Some(path), text.as_deref(), &message));
        }
    }
    std::process::exit(1);
}

/// Every problem found, each a message that starts with the key it is about in
/// backquotes when it is about one.
fn problems(config: &ServeConfig) -> Vec<String> {
    let mut problems = problems_but_modules(config);
    // The modules check the proxy's and the scripts' keys (upstream names, the cache,
    // scripts compiled) as `serve` would build them.
    if let Err(e) = config.modules(None) {
        problems.push(format!("{e:#}"));
    }
    problems
}

/// The problems [`problems`] finds in everything but the modules' keys (a reload
/// builds the modules itself, keeping their caches).
pub fn problems_but_modules(config: &ServeConfig) -> Vec<String> {
    let server = &config.server;
    let mut problems = server.problems();
    let roots = std::iter::once(("root".to_string(), server.root.as_deref())).chain(
        server
            .host
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("host[{i}].root"), h.root.as_deref())),
    );
    for (key, root) in roots {
        if let Some(root) = root.filter(|r| !r.is_dir()) {
            problems.push(format!("`{key}`: {} is not a directory", root.display()));
        }
    }
    for (_, rules, _) in &server.routes {
        let Some(dir) = rules.alias.as_ref().filter(|d| !d.is_dir()) else {
            continue;
        };
        let key = &rules.key;
        problems.push(format!(
            "`{key}.alias`: {} is not a directory",
            dir.display()
        ));
    }
    let logs = std::iter::once(("access_log".to_string(), server.access_log.as_deref())).chain(
        server
            .host
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("host[{i}].access_log"), h.access_log.as_deref())),
    );
    for (key, log) in logs {
        let Some(log) = log else { continue };
        let dir = log.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            problems.push(format!(
                "`{key}`: the directory of {} does not exist",
                log.display()
            ));
        }
    }
    if let Some(dir) = server.pid_file.as_ref().and_then(|p| p.parent()) {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            problems.push(format!(
                "`pid_file`: the directory {} does not exist",
                dir.display()
            ));
        }
    }
    // The htpasswd files and the certificates and keys, read as `serve` would (once the
    // keys themselves are right).
    if problems.is_empty() {
        problems.extend(server::htpasswd_problem(server));
        if let Err(e) = server::Tls::new(server, None) {
            problems.push(e);
        }
    }
    problems
}

/// `FILE:LINE: key: what`, the line found from the key path when the file has it.
pub fn located(path: Option<&Path>, text: Option<&str>, problem: &str) -> String {
    let file = path.map_or("(command line)".to_string(), |p| p.display().to_string());
    let key = problem
        .split('`')
        .nth(1)
        .filter(|k| !k.is_empty() && !k.contains(char::is_whitespace));
    let line = key.zip(text).and_then(|(k, t)| locate(t, k)).or_else(|| {
        // A message about a value (`route `/api`: no upstream named `ap``) or a key the
        // file should not have (`unknown field `rot``): the line that sets it.
        let token = problem.split('`').nth(1)?;
        mentioned(text?, token)
    });
    let what = match key {
        Some(k) if problem.starts_with('`') => problem[k.len() + 2..]
            .trim_start_matches(':')
            .trim()
            .to_string(),
        _ => problem.to_string(),
    };
    match (line, key) {
        (Some(line), Some(key)) if problem.starts_with('`') => {
            format!("{file}:{line}: {key}: {what}")
        }
        (Some(line), _) => format!("{file}:{line}: {what}"),
        (None, Some(key)) if problem.starts_with('`') => format!("{file}: {key}: {what}"),
        _ => format!("{file}: {what}"),
    }
}

/// The first line that sets `token` as a key or holds it as a quoted value.
fn mentioned(text: &str, token: &str) -> Option<usize> {
    let quoted = format!("\"{token}\"");
    text.lines()
        .position(|line| {
            let line = line.trim();
            line.strip_prefix(token)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
                || line.contains(&quoted)
        })
        .map(|n| n + 1)
}

/// The line (1-based) where `key` (`name`, `table.name`, `array[i].name`,
/// `array[i].table.name`, or a table itself) is set in the TOML `text`: the key's own
/// line, else its table's header.
fn locate(text: &str, key: &str) -> Option<usize> {
    let (path, name) = match key.rsplit_once('.') {
        Some((path, name)) => (path, Some(name)),
        None if key.contains('[') => (key, None),
        None => ("", Some(key)),
    };
    // `host[1].tls` is the header `[host.tls]` after the second `[[host]]`.
    let (array, index) = match path.split_once('[') {
        Some((array, rest)) => (array, rest.split(']').next().and_then(|i| i.parse().ok())),
        None => ("", None),
    };
    let table = path
        .split('.')
        .map(|part| part.split('[').next().unwrap_or(part))
        .collect::<Vec<_>>()
        .join(".");
    let mut in_table = table.is_empty();
    let mut header_line = None;
    let mut seen = 0usize;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            if table.is_empty() && Some(header) == name && header_line.is_none() {
                // A top-level key written as a table (`[[cache_control]]`).
                header_line = Some(n + 1);
            }
            if !array.is_empty() && header == array && line.starts_with("[[") {
                seen += 1;
            }
            in_table = false;
            if header == table {
                let this = seen.checked_sub(1);
                if index.is_none() || index == this {
                    in_table = true;
                    header_line = Some(n + 1);
                }
            }
            continue;
        }
        if in_table {
            if let Some(name) = name {
                let assigned = line
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.trim_start().starts_with('='));
                if assigned {
                    return Some(n + 1);
                }
            }
        }
    }
    header_line
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "listen = [\"127.0.0.1:8080\"]\n\n[limits]\nmax_head_size = 1\n\n\
        [[host]]\nnames = [\"a\"]\n\n[[host]]\nnames = [\"b\"]\nroot = \"/x\"\n";

    #[test]
    fn finds_the_line_of_a_key_path() {
        assert_eq!(locate(TEXT, "listen"), Some(1));
        assert_eq!(locate(TEXT, "limits.max_head_size"), Some(4));
        assert_eq!(locate(TEXT, "host[0].names"), Some(7));
        assert_eq!(locate(TEXT, "host[1].names"), Some(10));
        assert_eq!(locate(TEXT, "host[1].root"), Some(11));
        let nested = "[[host]]\nnames = [\"a\"]\n[host.tls]\nkey = \"k\"\n\n\
            [[host]]\nnames = [\"b\"]\n[host.tls]\nhsts = \"x\"\n";
        assert_eq!(locate(nested, "host[1].tls.hsts"), Some(9));
        assert_eq!(locate(nested, "host[0].tls.key"), Some(4));
        assert_eq!(locate(nested, "host[0].tls.hsts"), Some(3));
        assert_eq!(locate(nested, "host[1]"), Some(6));
        // Not set in the file: the table's header.
        assert_eq!(locate(TEXT, "host[0].root"), Some(6));
        assert_eq!(locate(TEXT, "workers"), None);
    }

    #[test]
    fn problems_are_written_file_line_key_what() {
        let path = Path::new("t.toml");
        assert_eq!(
            located(
                Some(path),
                Some(TEXT),
                "`host[1].names`: \"b\" is claimed by host[0] too"
            ),
            "t.toml:10: host[1].names: \"b\" is claimed by host[0] too"
        );
        assert_eq!(
            located(Some(path), Some(TEXT), "`workers` must be at most 1024"),
            "t.toml: workers: must be at most 1024"
        );
    }
}
