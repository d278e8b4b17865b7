//! Content negotiation of the content coding: which of the codings tessera can produce a
//! client accepts, from its Accept-Encoding (RFC 9110 section 12.5.3), with q-values.

/// A content coding tessera produces (or passes through, or decodes from an upstream).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Coding {
    Identity,
    Gzip,
    Brotli,
    Zstd,
}

impl Coding {
    /// The codings tessera compresses with, in its default order of preference: zstd
    /// (fastest for its ratio), then Brotli (smallest at the levels an edge can afford),
    /// then gzip (understood by every client).
    pub const COMPRESSED: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// The token in Content-Encoding and Accept-Encoding.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The coding a Content-Encoding (or Accept-Encoding) token names; `x-gzip` is gzip
    /// (RFC 9110 section 8.4.1.3). `None` for one tessera does not know.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        let token = wire::trim_ows(token);
        [Coding::Identity, Coding::Gzip, Coding::Brotli, Coding::Zstd]
            .into_iter()
            .find(|c| token.eq_ignore_ascii_case(c.token().as_bytes()))
            .or_else(|| {
                token
                    .eq_ignore_ascii_case(b"x-gzip")
                    .then_some(Coding::Gzip)
            })
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a request's Accept-Encoding allows: a q-value in thousandths for each coding
/// tessera knows (0 means refused). Parsing borrows nothing and allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Accepted {
    q: [u16; 4],
}

impl Accepted {
    /// A request without Accept-Encoding: identity only. RFC 9110 would allow any coding,
    /// but a client that says nothing may decode nothing (nginx and Caddy read it so).
    pub const IDENTITY: Accepted = Accepted { q: [1000, 0, 0, 0] };

    /// Reads an Accept-Encoding value (`None`: the request has none). An explicit entry
    /// beats `*`; identity is acceptable unless `identity;q=0`, or `*;q=0` with no entry
    /// for identity, says otherwise; an empty value accepts identity only. An entry
    /// whose q-value does not parse counts as absent.
    pub fn parse(value: Option<&[u8]>) -> Accepted {
        let Some(value) = value else {
            return Accepted::IDENTITY;
        };
        let mut explicit: [Option<u16>; 4] = [None; 4];
        let mut any = None;
        for item in value.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let token = wire::trim_ows(parts.next().unwrap_or_default());
            if token.is_empty() {
                continue;
            }
            let mut q = Some(1000);
            for param in parts {
                let param = wire::trim_ows(param);
                if param.len() > 2 && param[..2].eq_ignore_ascii_case(b"q=") {
                    q = parse_qvalue(&param[2..]);
                }
            }
            let Some(q) = q else { continue };
            if token == b"*" {
                any = Some(q);
            } else if let Some(coding) = Coding::from_token(token) {
                explicit[coding.index()] = Some(q);
            }
        }
        let mut accepted = Accepted { q: [0; 4] };
        for (i, q) in explicit.iter().enumerate() {
            accepted.q[i] = q.or(any).unwrap_or(0);
        }
        // Identity is acceptable by default, whatever else the list says.
        accepted.q[0] = explicit[0].or(any).unwrap_or(1000);
        accepted
    }

    /// The q-value of `coding`, in thousandths.
    pub fn q(&self, coding: Coding) -> u16 {
        self.q[coding.index()]
    }

    /// Whether `coding` is acceptable.
    pub fn accepts(&self, coding: Coding) -> bool {
        self.q(coding) > 0
    }

    /// The coding to compress with: of `order` (the server's preference), the one the
    /// client gives the highest q-value, the earlier on a tie; `None` when it accepts none
    /// of them. Identity's own q-value is not weighed against them: like nginx and Caddy,
    /// a client that accepts a compressed coding gets it.
    pub fn choose(&self, order: &[Coding]) -> Option<Coding> {
        let mut best: Option<(Coding, u16)> = None;
        for &coding in order {
            let q = self.q(coding);
            if q > 0 && best.map_or(true, |(_, b)| q > b) {
                best = Some((coding, q));
            }
        }
        best.map(|(c, _)| c)
    }
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_qvalue(text: &[u8]) -> Option<u16> {
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| (d - b'0') as u16);
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Accepted {
        Accepted::parse(Some(s.as_bytes()))
    }

    #[test]
    fn no_header_means_identity_only() {
        let a = Accepted::parse(None);
        assert!(a.accepts(Coding::Identity));
        assert_eq!(a.choose(&Coding::COMPRESSED), None);
    }

    #[test]
    fn server_order_breaks_ties_and_q_values_win() {
        let order = Coding::COMPRESSED;
        assert_eq!(
            parse("gzip, deflate, br, zstd").choose(&order),
            Some(Coding::Zstd)
        );
        assert_eq!(parse("gzip, br").choose(&order), Some(Coding::Brotli));
        assert_eq!(
            parse("gzip;q=1, br;q=0.5").choose(&order),
            Some(Coding::Gzip)
        );
        assert_eq!(parse("x-gzip").choose(&order), Some(Coding::Gzip));
        assert_eq!(
            parse("gzip, br").choose(&[Coding::Gzip, Coding::Brotli]),
            Some(Coding::Gzip)
        );
    }

    #[test]
    fn refusals_and_wildcards() {
        let order = Coding::COMPRESSED;
        assert_eq!(parse("*;q=0").choose(&order), None);
        assert!(!parse("*;q=0").accepts(Coding::Identity));
        assert!(parse("*;q=0, identity").accepts(Coding::Identity));
        assert!(!parse("gzip, identity;q=0").accepts(Coding::Identity));
        assert_eq!(parse("*, gzip;q=0").choose(&order), Some(Coding::Zstd));
        assert_eq!(parse("zstd;q=0, br;q=0, gzip;q=0").choose(&order), None);
        assert_eq!(parse("").choose(&order), None);
        assert!(parse("").accepts(Coding::Identity));
        // A q-value that does not parse drops its entry.
        assert_eq!(parse("gzip;q=2").choose(&order), None);
        assert_eq!(parse("gzip;q=0.0001").choose(&order), None);
    }
}
