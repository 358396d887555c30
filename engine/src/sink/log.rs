use std::{
    fs::OpenOptions,
    io::{self, Write},
    sync::Mutex,
};

use async_trait::async_trait;
use highwater_crds::LogSink as LogSinkSpec;

use super::{DeliveryContext, ExternalSink, SinkError, envelope::Envelope};
use highwater_store::{Error, Event, Result};

/// Writes one JSON line per event to stdout, stderr or a file (appended).
pub struct LogSink {
    out: Mutex<Box<dyn Write + Send>>,
}

impl LogSink {
    pub fn new(spec: &LogSinkSpec) -> Result<Self> {
        let out: Box<dyn Write + Send> = match spec.target.as_deref() {
            None | Some("stdout") => Box::new(io::stdout()),
            Some("stderr") => Box::new(io::stderr()),
            Some(path) => Box::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(Error::io(format!("opening log sink file {path}")))?,
            ),
        };
        Ok(LogSink { out: Mutex::new(out) })
    }
}

#[async_trait]
impl ExternalSink for LogSink {
    fn kind(&self) -> &'static str {
        "log"
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let mut buf = Vec::with_capacity(events.len() * 256);
        for ev in events {
            serde_json::to_writer(&mut buf, &Envelope::new(ctx, ev)).map_err(|e| SinkError::at(0, e.to_string()))?;
            buf.push(b'\n');
        }
        // One write per batch: lines of concurrent consumers never interleave mid-line.
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        out.write_all(&buf)
            .and_then(|_| out.flush())
            .map_err(|e| SinkError::at(0, format!("writing the log sink: {e}")))
    }
}
