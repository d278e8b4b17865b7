//! What travels between processes through Redis (one invalidation per message, as
//! text), and how a process follows the sequence of messages: which it applies, which
//! it has seen, and when it must read the log back or, not knowing what it missed,
//! drop its memory tier.

/// One invalidation a client asked a process for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalidation {
    /// `PURGE` of one URL (its key, every variant); `soft` marks it stale.
    Purge { key: String, soft: bool },
    /// `PURGE` with `Surrogate-Key` or `xkey`: every object with one of the keys.
    PurgeKeys { keys: Vec<String>, soft: bool },
    /// `BAN` of a prefix of keys.
    Ban { prefix: String },
    /// `BAN` with `X-Ban-Url` and/or `X-Ban-Host`: the expressions as sent.
    BanMatching {
        url: Option<String>,
        host: Option<String>,
    },
}

impl Invalidation {
    /// `KIND\nPAYLOAD`. Keys, prefixes and expressions come from URLs and field values,
    /// which hold no line feed; surrogate keys hold no space.
    fn encode(&self) -> String {
        match self {
            Invalidation::Purge { key, soft } => {
                format!("{}\n{key}", if *soft { "soft-purge" } else { "purge" })
            }
            Invalidation::PurgeKeys { keys, soft } => format!(
                "{}\n{}",
                if *soft {
                    "soft-purge-keys"
                } else {
                    "purge-keys"
                },
                keys.join(" ")
            ),
            Invalidation::Ban { prefix } => format!("ban\n{prefix}"),
            Invalidation::BanMatching { url, host } => {
                let mut s = String::from("ban-regex");
                for (name, value) in [("url", url), ("host", host)] {
                    if let Some(v) = value {
                        s.push('\n');
                        s.push_str(name);
                        s.push(' ');
                        s.push_str(v);
                    }
                }
                s
            }
        }
    }

    fn decode(kind: &str, payload: &str) -> Option<Invalidation> {
        Some(match kind {
            "purge" | "soft-purge" => Invalidation::Purge {
                key: payload.to_string(),
                soft: kind == "soft-purge",
            },
            "purge-keys" | "soft-purge-keys" => Invalidation::PurgeKeys {
                keys: payload
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect(),
                soft: kind == "soft-purge-keys",
            },
            "ban" => Invalidation::Ban {
                prefix: payload.to_string(),
            },
            "ban-regex" => {
                let (mut url, mut host) = (None, None);
                for line in payload.split('\n') {
                    match line.split_once(' ') {
                        Some(("url", v)) => url = Some(v.to_string()),
                        Some(("host", v)) => host = Some(v.to_string()),
                        _ => return None,
                    }
                }
                Invalidation::BanMatching { url, host }
            }
            _ => return None,
        })
    }
}

/// One message: an invalidation, the process that made it (its node id), and its place
/// in the log (the log's epoch, and its sequence number in that epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// Names one life of the log in Redis: a Redis that lost its data (restarted without
    /// persistence, flushed) starts a new epoch, and its sequence numbers again from 1.
    pub(crate) epoch: String,
    pub(crate) seq: u64,
    pub(crate) node: u64,
    pub(crate) what: Invalidation,
}

/// What a publisher hands the log's script: `NODE KIND\nPAYLOAD`; the script puts
/// `EPOCH SEQ ` before it.
pub(crate) fn body(node: u64, what: &Invalidation) -> String {
    format!("{node:016x} {}", what.encode())
}

impl Message {
    /// `EPOCH SEQ NODE KIND\nPAYLOAD`; `None` for anything else.
    pub(crate) fn parse(raw: &str) -> Option<Message> {
        let (head, payload) = raw.split_once('\n')?;
        let mut fields = head.split(' ');
        let epoch = fields.next()?.to_string();
        let seq = fields.next()?.parse().ok()?;
        let node = u64::from_str_radix(fields.next()?, 16).ok()?;
        let kind = fields.next()?;
        if fields.next().is_some() || epoch.is_empty() {
            return None;
        }
        Some(Message {
            epoch,
            seq,
            node,
            what: Invalidation::decode(kind, payload)?,
        })
    }
}

/// Where a process is in the log: the epoch and the last sequence number it has seen
/// (applied, or its own). Before its first read of the log it knows nothing.
#[derive(Debug, Default)]
pub(crate) struct Follow {
    epoch: Option<String>,
    last: u64,
    synced: bool,
}

/// What to do with a message that came by pub/sub.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Live {
    /// The next one, from another process.
    Apply,
    /// Seen already, or this process's own.
    Skip,
    /// Some came before it that were not seen (or another epoch): read the log.
    CatchUp,
}

/// What a read of the log calls for.
#[derive(Debug, Default)]
pub(crate) struct CatchUp {
    /// Other processes' invalidations not seen yet, oldest first.
    pub(crate) apply: Vec<Message>,
    /// Why the memory tier must be dropped: what was missed cannot be known.
    pub(crate) drop: Option<&'static str>,
}

impl Follow {
    /// Whether `(epoch, seq)` is where this process already is.
    pub(crate) fn at(&self, epoch: Option<&str>, seq: u64) -> bool {
        self.synced && self.epoch.as_deref() == epoch && self.last >= seq
    }

    pub(crate) fn live(&mut self, m: &Message, me: u64) -> Live {
        match &self.epoch {
            _ if !self.synced => return Live::CatchUp,
            Some(e) if *e == m.epoch => {}
            // The first message of a log begun since this process last read it.
            None if m.seq == 1 => {
                self.epoch = Some(m.epoch.clone());
                self.last = 0;
            }
            _ => return Live::CatchUp,
        }
        if m.seq <= self.last {
            return Live::Skip;
        }
        if m.seq > self.last + 1 {
            return Live::CatchUp;
        }
        self.last = m.seq;
        if m.node == me {
            Live::Skip
        } else {
            Live::Apply
        }
    }

    /// After reading the log: `head` is its epoch and last sequence number (`None`: Redis
    /// holds no log), `log` the messages it keeps, oldest first (read after `head`), and
    /// `memory_empty` whether this process's memory tier holds nothing yet.
    pub(crate) fn catch_up(
        &mut self,
        head: Option<(String, u64)>,
        log: Vec<Message>,
        memory_empty: bool,
        me: u64,
    ) -> CatchUp {
        let first = !self.synced;
        self.synced = true;
        let Some((epoch, seq)) = head else {
            // Nothing was ever sent through this Redis, or it lost its data.
            let lost = self.epoch.take().is_some();
            self.last = 0;
            return CatchUp {
                apply: Vec::new(),
                drop: lost.then_some("redis lost the invalidation log (restarted or flushed)"),
            };
        };
        if first {
            // What came before this process started concerns nothing it holds; but
            // what came while it served without Redis may have.
            self.epoch = Some(epoch);
            self.last = seq;
            return CatchUp {
                apply: Vec::new(),
                drop: (!memory_empty)
                    .then_some("objects were stored before redis could first be reached"),
            };
        }
        let from = match &self.epoch {
            Some(e) if *e == epoch => self.last,
            // The log began after this process last read it: all of it is new.
            None => 0,
            Some(_) => {
                self.epoch = Some(epoch);
                self.last = seq;
                return CatchUp {
                    apply: Vec::new(),
                    drop: Some("redis lost the invalidation log (restarted or flushed)"),
                };
            }
        };
        self.epoch = Some(epoch.clone());
        if seq <= from {
            return CatchUp::default();
        }
        let new: Vec<Message> = log
            .into_iter()
            .filter(|m| m.epoch == epoch && m.seq > from)
            .collect();
        if new.first().map_or(true, |m| m.seq > from + 1) {
            self.last = seq;
            return CatchUp {
                apply: Vec::new(),
                drop: Some("the invalidation log was trimmed past the last one seen"),
            };
        }
        self.last = new.last().map_or(seq, |m| m.seq.max(seq));
        CatchUp {
            apply: new.into_iter().filter(|m| m.node != me).collect(),
            drop: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(epoch: &str, seq: u64, node: u64) -> Message {
        Message {
            epoch: epoch.into(),
            seq,
            node,
            what: Invalidation::Purge {
                key: format!("h/{seq}"),
                soft: false,
            },
        }
    }

    #[test]
    fn every_invalidation_survives_the_trip() {
        for what in [
            Invalidation::Purge {
                key: "shop.example/a?b=1 3f2a".into(),
                soft: false,
            },
            Invalidation::Purge {
                key: "h/x".into(),
                soft: true,
            },
            Invalidation::PurgeKeys {
                keys: vec!["k1".into(), "k2".into()],
                soft: true,
            },
            Invalidation::Ban {
                prefix: "h/news/".into(),
            },
            Invalidation::BanMatching {
                url: Some(r"^/a b/.*\.html$".into()),
                host: None,
            },
            Invalidation::BanMatching {
                url: Some("^/x".into()),
                host: Some(r"^www\.".into()),
            },
        ] {
            let raw = format!("e1 42 {}", body(0xabc, &what));
            let m = Message::parse(&raw).unwrap();
            assert_eq!((m.epoch.as_str(), m.seq, m.node), ("e1", 42, 0xabc));
            assert_eq!(m.what, what, "{raw}");
        }
        assert!(Message::parse("e1 1 00 unknown\nx").is_none());
        assert!(Message::parse("e1 x 00 purge\nx").is_none());
        assert!(Message::parse("no line feed").is_none());
    }

    #[test]
    fn messages_are_applied_once_in_order_and_own_ones_skipped() {
        let mut f = Follow::default();
        assert_eq!(
            f.live(&message("e", 1, 2), 1),
            Live::CatchUp,
            "not synced yet"
        );
        let c = f.catch_up(Some(("e".into(), 3)), vec![], true, 1);
        assert!(c.apply.is_empty() && c.drop.is_none());
        assert!(f.at(Some("e"), 3));
        assert_eq!(f.live(&message("e", 3, 2), 1), Live::Skip, "seen");
        assert_eq!(f.live(&message("e", 4, 2), 1), Live::Apply);
        assert_eq!(f.live(&message("e", 4, 2), 1), Live::Skip, "applied once");
        assert_eq!(f.live(&message("e", 5, 1), 1), Live::Skip, "its own");
        assert_eq!(f.live(&message("e", 7, 2), 1), Live::CatchUp, "6 missed");
        let log = (3..=7).map(|s| message("e", s, if s == 6 { 1 } else { 2 }));
        let c = f.catch_up(Some(("e".into(), 7)), log.collect(), false, 1);
        assert_eq!(c.drop, None);
        assert_eq!(
            c.apply.iter().map(|m| m.seq).collect::<Vec<_>>(),
            [7],
            "6 is its own"
        );
        assert_eq!(f.live(&message("e", 7, 2), 1), Live::Skip);
    }

    #[test]
    fn a_process_that_cannot_know_what_it_missed_drops_its_memory() {
        let mut f = Follow::default();
        f.catch_up(Some(("e".into(), 10)), vec![], true, 1);
        // Trimmed: the log starts at 13, 11 and 12 are gone.
        let log = (13..=20).map(|s| message("e", s, 2)).collect();
        let c = f.catch_up(Some(("e".into(), 20)), log, false, 1);
        assert!(c.drop.is_some() && c.apply.is_empty());
        assert!(f.at(Some("e"), 20));
        // Redis lost its data: no log at all, then a new epoch.
        assert!(f.catch_up(None, vec![], false, 1).drop.is_some());
        let c = f.catch_up(
            Some(("e2".into(), 2)),
            vec![message("e2", 1, 2), message("e2", 2, 2)],
            false,
            1,
        );
        assert_eq!(c.apply.len(), 2, "the new log began after the last read");
        assert!(c.drop.is_none());
        let c = f.catch_up(Some(("e3".into(), 1)), vec![message("e3", 1, 2)], false, 1);
        assert!(c.drop.is_some(), "another epoch without a read in between");
        // Objects stored before Redis was first reached: what they missed is unknown.
        let mut g = Follow::default();
        assert!(g
            .catch_up(Some(("e".into(), 5)), vec![], false, 1)
            .drop
            .is_some());
        let mut h = Follow::default();
        assert!(h.catch_up(None, vec![], false, 1).drop.is_none());
        assert_eq!(h.live(&message("e", 2, 2), 1), Live::CatchUp, "1 missed");
        let mut h = Follow::default();
        h.catch_up(None, vec![], false, 1);
        assert_eq!(
            h.live(&message("e", 1, 2), 1),
            Live::Apply,
            "a new log's first"
        );
        assert_eq!(h.live(&message("e", 2, 2), 1), Live::Apply);
        let mut h = Follow::default();
        assert!(h.catch_up(None, vec![], false, 1).drop.is_none());
        let c = h.catch_up(Some(("e".into(), 1)), vec![message("e", 1, 2)], false, 1);
        assert_eq!(c.apply.len(), 1, "the first message of a new log");
    }
}
