//! Typed warnings: every malformed construct has one documented behaviour and one kind.

use std::fmt;

/// A fault found while parsing a template. The page is still produced; the warning says
/// what was wrong and where (`offset` is the byte offset of the construct in the input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} (at byte {offset})")]
pub struct Warning {
    /// Byte offset in the template where the faulty construct starts.
    pub offset: u64,
    /// What was wrong.
    pub kind: WarningKind,
}

/// The kinds of malformed ESI and what the parser does about each (see docs/esi.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// `<esi:` or `</esi:` without a closing `>` before the end of input or within
    /// [`Options::max_tag_len`](crate::Options::max_tag_len) bytes. The bytes are passed
    /// through as text.
    UnterminatedTag,
    /// An `esi:` element this processor does not know. The tag is dropped, its content kept.
    UnknownElement(String),
    /// An element left open: closed implicitly at an enclosing end tag or at end of input.
    UnclosedElement(String),
    /// An end tag with no matching open element. It is dropped.
    UnexpectedEndTag(String),
    /// `<!--esi` without `-->`. Its content is processed up to the end of input.
    UnterminatedCommentBlock,
    /// An element where the language does not allow it (`esi:when` outside `esi:choose`,
    /// `esi:attempt` outside `esi:try`, a second `esi:attempt`, a nested `esi:inline`).
    /// The tag is dropped and its content kept (or, for a duplicate branch, dropped).
    MisplacedElement(String),
    /// Text or an element directly inside `esi:choose` or `esi:try` (named here) other than
    /// its branches. It is dropped.
    StrayContent(String),
    /// A required branch is missing (`esi:try` without `esi:attempt`/`esi:except`,
    /// `esi:choose` without `esi:when`). The block evaluates with that branch empty.
    MissingBranch {
        /// The block element.
        element: String,
        /// The missing branch.
        branch: String,
    },
    /// A required attribute is missing (`src` on include, `test` on when, `name` on inline).
    MissingAttribute {
        /// The element.
        element: String,
        /// The attribute.
        attribute: String,
    },
    /// An attribute value that could not be understood (a bad `ttl`, `timeout`, `onerror`).
    /// The attribute is ignored.
    InvalidAttribute {
        /// The element.
        element: String,
        /// The attribute.
        attribute: String,
        /// The value as written.
        value: String,
    },
    /// An `esi:when test` expression that does not parse. It evaluates to false.
    BadExpression(String),
    /// `$(NAME...)` with an upper-case name that is not an ESI variable. It is left as text
    /// (or, in an expression, makes the expression bad).
    UnknownVariable(String),
    /// Elements nested deeper than [`Options::max_depth`](crate::Options::max_depth). The
    /// tag is dropped and its content kept, so evaluation depth stays bounded.
    NestingTooDeep,
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WarningKind::UnterminatedTag => {
                write!(f, "unterminated esi tag, passed through as text")
            }
            WarningKind::UnknownElement(n) => write!(f, "unknown element esi:{n}, tag dropped"),
            WarningKind::UnclosedElement(n) => write!(f, "esi:{n} not closed, closed implicitly"),
            WarningKind::UnexpectedEndTag(n) => write!(f, "unexpected </esi:{n}>, dropped"),
            WarningKind::UnterminatedCommentBlock => write!(f, "<!--esi without -->"),
            WarningKind::MisplacedElement(n) => write!(f, "esi:{n} not allowed here, tag dropped"),
            WarningKind::StrayContent(n) => write!(f, "content directly inside esi:{n} dropped"),
            WarningKind::MissingBranch { element, branch } => {
                write!(f, "esi:{element} without esi:{branch}")
            }
            WarningKind::MissingAttribute { element, attribute } => {
                write!(f, "esi:{element} without {attribute}")
            }
            WarningKind::InvalidAttribute {
                element,
                attribute,
                value,
            } => {
                write!(
                    f,
                    "esi:{element} {attribute}={value:?} not understood, ignored"
                )
            }
            WarningKind::BadExpression(m) => write!(f, "bad expression: {m}"),
            WarningKind::UnknownVariable(n) => write!(f, "unknown variable {n}, left as text"),
            WarningKind::NestingTooDeep => write!(f, "esi elements nested too deep, tag dropped"),
        }
    }
}
