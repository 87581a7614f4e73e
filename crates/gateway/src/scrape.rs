//! `/metrics` alone, on a port of its own: what `cairn mount --metrics
//! ADDR` serves when no S3 gateway runs. An unsigned `GET /metrics` with no
//! query answers the registry as on the gateway's port; anything else is
//! 404. One thread, serving on the gateway's accept loop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::oneshot;

use crate::error::{GatewayError, Result};
use crate::metrics::{is_scrape, Metrics};
use crate::server::{accept, bind};

/// A `/metrics` listener running; dropping it (or [`Scrapes::stop`])
/// stops it.
pub struct Scrapes {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Scrapes {
    /// Where it listens (the port chosen, if `:0` was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and returns once scrapes in flight are answered.
    pub fn stop(self) {}
}

impl Drop for Scrapes {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The answer to `req`: the figures for a scrape, else 404.
fn answer<B>(metrics: &Metrics, req: &http::Request<B>) -> http::Response<Full<Bytes>> {
    if !is_scrape(req) {
        let mut resp = http::Response::new(Full::new(Bytes::from_static(
            b"not found: this port answers GET /metrics only\n",
        )));
        *resp.status_mut() = http::StatusCode::NOT_FOUND;
        return resp;
    }
    let (text, ctype) = metrics.text(req.headers().get(http::header::ACCEPT));
    let mut resp = http::Response::new(Full::new(Bytes::from(text)));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    resp
}

/// Serves `metrics` at `listen` until the returned [`Scrapes`] is dropped.
pub fn serve_metrics(listen: SocketAddr, metrics: Metrics) -> Result<Scrapes> {
    let (listener, addr) = bind(listen)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(GatewayError::Runtime)?;
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let resp = answer(&metrics, &req);
        async move { Ok::<_, Infallible>(resp) }
    });
    let (tx, rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("cairn-metrics".into())
        .spawn(move || runtime.block_on(accept(listener, service, rx, "the metrics listener")))
        .map_err(GatewayError::Runtime)?;
    tracing::info!(%addr, "metrics listen");
    Ok(Scrapes {
        addr,
        stop: Some(tx),
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn metrics() -> Metrics {
        let mut registry = prometheus_client::registry::Registry::default();
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc();
        registry.register("cairn_test", "A test figure", c);
        Metrics::alone(std::sync::Arc::new(registry))
    }

    fn body(resp: http::Response<Full<Bytes>>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(resp.into_body().collect()).unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn an_unsigned_get_of_metrics_is_answered_and_nothing_else() {
        let m = metrics();
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        let resp = answer(&m, &get("/metrics"));
        assert_eq!(resp.status(), http::StatusCode::OK);
        assert!(body(resp).contains("cairn_test_total 1"));
        for req in [
            get("/"),
            get("/metrics?x=1"),
            get("/other"),
            http::Request::put("/metrics").body(()).unwrap(),
            http::Request::get("/metrics")
                .header(http::header::AUTHORIZATION, "AWS4-HMAC-SHA256 x")
                .body(())
                .unwrap(),
        ] {
            let what = format!("{} {}", req.method(), req.uri());
            assert_eq!(
                answer(&m, &req).status(),
                http::StatusCode::NOT_FOUND,
                "{what}"
            );
        }
    }
}
