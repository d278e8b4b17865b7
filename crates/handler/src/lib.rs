//! `handler` is the seam between "a connection" and "what answers it" (DESIGN.md,
//! "Workspace layout"; docs/architecture.md follows one request through it).
//!
//! What it is for: the one request/response model every protocol, handler and filter
//! shares, so that each is written once: a [`Module`] (the proxy, Lua scripts) says which
//! path prefixes it answers or filters ([`Route`]) and starts one [`Service`] per worker;
//! a service answers a [`Request`] now ([`Answer::Now`]) or later ([`Deferred`], for
//! work that waits), or filters it ([`Filtered`], [`Attached`]: Lua's access,
//! header_filter and log phases); a [`Response`] is a [`ResponseHead`] (status and
//! fields as data, encoded per protocol only at the connection; its fields a
//! [`FieldList`], which a module may fill before it has a head) and a [`Body`]. The
//! [`Router`] is the one longest-whole-segment-prefix table, one per site; [`Hosts`] says
//! which site a request's host names. [`Upstreams`] is how a
//! module other than the proxy reaches upstreams, and [`Subrequests`] how it reaches the
//! server's own routes.
//!
//! What it is not for: parsing or encoding HTTP/1 (that is `wire`), connections and
//! static files (`server`), proxying (`edge`), Lua (`script`), compressing bodies
//! (`compress`, a body filter written against these types). It depends on `wire` only
//! among tessera's crates, and the middle crates meet only here.
//!
//! How it fits: `cli` builds the modules from the configuration and hands them to
//! `server`, which routes each request once (path decoded and normalised once), runs the
//! route's filter and handlers through these traits, and encodes what they return.

mod body;
mod certificate;
mod fields;
mod head;
mod hosts;
mod metrics;
mod notes;
mod pooled;
mod request_body;
mod router;
mod service;
mod subrequest;
mod upstream;

pub use body::{Body, BodyError, BodyFilter, Chunks, FileRegion, Piece, Tunnel};
pub use certificate::{CertificateHook, ChosenCertificate};
pub use fields::FieldList;
pub use head::ResponseHead;
pub use hosts::{is_valid_name, Hosts};
pub use metrics::{
    bump, content_type as metrics_content_type, Labels, MetricKind, Metrics, PerThread,
};
pub use notes::{CacheResult, LogNotes, Noted, UpstreamAttempt};
pub use pooled::{local_future, local_future_with, pin, LocalFuture, Pooled};
pub use request_body::{body_pipe, BodyFailure, BodyWriter, RequestBody, PIPE_CAPACITY};
pub use router::Router;
pub use service::{
    status_page_len, write_status_page, Answer, Attached, Deferred, EditedRequest, Filter,
    Filtered, KindLabels, Later, Module, Request, Response, Role, Route, Service, STATUS_PAGE_TYPE,
};
pub use subrequest::{install_subrequests, subrequests, Budget, SubReply, Subrequest, Subrequests};
pub use upstream::{
    BalanceRequest, BalancerHook, PeerView, UpstreamReply, UpstreamRequest, Upstreams,
    UpstreamsFactory,
};
