//! `[tracing]`: W3C trace context and the OTLP export of spans (docs/observability.md,
//! "Tracing").

use serde::Deserialize;

/// `[tracing]`. Without the table no request has a trace context and a client's
/// `traceparent` and `tracestate` go to the origin as any other field.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingConfig {
    /// Where spans are posted, OTLP over HTTP/protobuf: `http://HOST:PORT/PATH`.
    /// Default `http://127.0.0.1:4318/v1/traces`, a local OpenTelemetry Collector's
    /// OTLP/HTTP receiver.
    pub otlp_endpoint: String,
    /// The share of traces begun here (a request without a trusted `traceparent`) that
    /// are sampled, 0 to 1. Default 0.01: one request in a hundred.
    pub sampling: f64,
    /// Continue a client's trace: a valid `traceparent` from any client is honoured (its
    /// trace id, its span as the parent, its sampled flag) and its `tracestate` passed
    /// on. Default false: a client's trace fields are replaced, so that no client can
    /// make every request sampled.
    pub trust_incoming: bool,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: "http://127.0.0.1:4318/v1/traces".into(),
            sampling: 0.01,
            trust_incoming: false,
        }
    }
}

impl TracingConfig {
    /// What is wrong with it, each naming its key.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = trace::export::Endpoint::parse(&self.otlp_endpoint) {
            problems.push(format!("`tracing.otlp_endpoint`: {e}"));
        }
        if !(0.0..=1.0).contains(&self.sampling) {
            problems.push("`tracing.sampling` must be between 0 and 1".into());
        }
        problems
    }

    /// How requests get their context.
    pub(crate) fn sampler(&self) -> trace::Sampler {
        trace::Sampler::new(self.sampling, self.trust_incoming)
    }
}
