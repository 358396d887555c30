//! highwater-engine: the dispatcher's loop, the sinks, the SSE hub and the HTTP endpoints.
//! Built on the store; nothing here is called by the store.
pub mod discard_http;
pub mod dispatch;
#[cfg(test)]
mod fixtures;
pub mod http;
pub mod instance;
pub mod metrics;
pub mod ops_http;
pub mod redrive_http;
pub mod sink;
pub mod sse;
pub mod trace;
pub mod wait;
pub mod wait_http;
