//! `/metrics` on the gateway's port, and the gateway's own figures: how
//! long requests took, by method, kind of resource and status class.
//!
//! An *unsigned* `GET /metrics` with no query answers the registry (as
//! OpenMetrics text or Prometheus's text format, by its `Accept`); a signed one is S3 (a ListObjects of a bucket named
//! `metrics`), so no bucket name is taken from S3 clients. The figures
//! are counts and sizes, never keys, names or secrets, so they need no key.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    /// One of the methods S3 uses, or `other` (labels stay few).
    method: &'static str,
    /// `service` (`/`), `bucket` (`/b`) or `object` (`/b/key`).
    resource: &'static str,
    /// `2xx`, `3xx`, `4xx` or `5xx`.
    status: &'static str,
}

type Latencies = Family<Request, Histogram, fn() -> Histogram>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Direction {
    /// `received` (request bodies) or `sent` (response bodies).
    direction: &'static str,
}

type Bytes = Family<Direction, Counter>;

/// 100 µs to ~26 s in 4x steps: a warm GET to a large PUT.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 4.0, 10))
}

/// The registry the gateway serves, and where it records its requests.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Latencies,
    bytes: Bytes,
}

/// The gateway's request figures, registered before the registry is
/// frozen into [`Metrics::new`].
#[derive(Debug, Clone)]
pub struct RequestFigures(Latencies, Bytes);

impl RequestFigures {
    /// Registers `cairn_s3_request_duration_seconds` and
    /// `cairn_s3_bytes_total` in `registry`.
    pub fn register(registry: &mut Registry) -> RequestFigures {
        let latencies = Latencies::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "cairn_s3_request_duration",
            "Time from an S3 request's arrival to its reply's head, by method, resource and status",
            Unit::Seconds,
            latencies.clone(),
        );
        let bytes = Bytes::default();
        registry.register_with_unit(
            "cairn_s3",
            "Body bytes the gateway received and sent (as announced by Content-Length)",
            Unit::Bytes,
            bytes.clone(),
        );
        RequestFigures(latencies, bytes)
    }
}

impl Metrics {
    /// What `/metrics` shows (`registry`, with `requests` registered in it).
    pub fn new(registry: Arc<Registry>, requests: RequestFigures) -> Metrics {
        Metrics {
            registry,
            requests: requests.0,
            bytes: requests.1,
        }
    }

    /// What `/metrics` shows where no S3 request is served (a mount's
    /// own listener, [`crate::serve_metrics`]): `registry` alone.
    pub fn alone(registry: Arc<Registry>) -> Metrics {
        Metrics {
            registry,
            requests: Latencies::new_with_constructor(latency_histogram),
            bytes: Bytes::default(),
        }
    }

    /// Records a request's latency, and the body bytes it moved.
    pub(crate) fn record(
        &self,
        method: &http::Method,
        path: &str,
        status: u16,
        started: Instant,
        (received, sent): (u64, u64),
    ) {
        for (direction, n) in [("received", received), ("sent", sent)] {
            if n > 0 {
                self.bytes.get_or_create(&Direction { direction }).inc_by(n);
            }
        }
        let segments = path
            .trim_matches('/')
            .splitn(2, '/')
            .filter(|s| !s.is_empty())
            .count();
        let labels = Request {
            method: match *method {
                http::Method::GET => "GET",
                http::Method::HEAD => "HEAD",
                http::Method::PUT => "PUT",
                http::Method::POST => "POST",
                http::Method::DELETE => "DELETE",
                _ => "other",
            },
            resource: ["service", "bucket", "object"][segments.min(2)],
            status: match status {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                _ => "5xx",
            },
        };
        self.requests
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }

    /// Every figure registered, as OpenMetrics text when the scraper
    /// accepts it (Prometheus asks for it), else in Prometheus's text
    /// format 0.0.4 (what `promtool check metrics` and older scrapers
    /// read); with its Content-Type.
    pub(crate) fn text(&self, accept: Option<&http::HeaderValue>) -> (String, &'static str) {
        let openmetrics = accept
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/openmetrics-text"));
        let mut out = String::new();
        let (encoded, ctype) = if openmetrics {
            (
                prometheus_client::encoding::text::encode(&mut out, &self.registry),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        } else {
            (
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        };
        if let Err(e) = encoded {
            tracing::error!(error = %e, "metrics could not be encoded");
        }
        (out, ctype)
    }
}

/// Whether `req` asks for the metrics rather than for S3.
pub(crate) fn is_scrape<B>(req: &http::Request<B>) -> bool {
    req.method() == http::Method::GET
        && req.uri().path() == "/metrics"
        && req.uri().query().is_none()
        && !req.headers().contains_key(http::header::AUTHORIZATION)
}
