//! Whether and how the dispatcher exports traces, from the OpenTelemetry SDK's standard variables
//! (the SDK and the OTLP exporter read the rest themselves: `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`/`_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`).
use highwater_store::{Error, Result};
use opentelemetry_sdk::trace::Sampler;

/// Export traces over OTLP/HTTP (protobuf).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `OTEL_SERVICE_NAME` or `service.name` in `OTEL_RESOURCE_ATTRIBUTES` was given: the
    /// resource keeps it instead of `highwater-dispatcher`.
    pub service_named: bool,
}

/// `None` (off) unless an OTLP endpoint is set or `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true`
/// and `OTEL_TRACES_EXPORTER=none` turn it off. `env` looks a variable up (`std::env::var` in
/// the binary).
pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Option<Config>> {
    let get = |k: &str| env(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| get("OTEL_EXPORTER_OTLP_ENDPOINT"));
    match get("OTEL_TRACES_EXPORTER").as_deref() {
        None if endpoint.is_none() => return Ok(None),
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(Error::config(format!(
                "OTEL_TRACES_EXPORTER={other:?}: the dispatcher exports traces with `otlp` only"
            ))
            .with_fix(
                "set OTEL_TRACES_EXPORTER=otlp (or unset it) and send the spans to an OpenTelemetry \
                       Collector, Jaeger or another OTLP backend; `none` turns tracing off",
            ));
        }
    }
    for var in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(p) = get(var) {
            if p != "http/protobuf" {
                return Err(Error::config(format!(
                    "{var}={p:?}: the dispatcher exports OTLP over HTTP with protobuf only"
                ))
                .with_fix(format!(
                    "set {var}=http/protobuf (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the backend's \
                     OTLP/HTTP port (4318 by default), e.g. http://otel-collector:4318"
                )));
            }
            break;
        }
    }
    let service_named = get("OTEL_SERVICE_NAME").is_some()
        || get("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    Ok(Some(Config { service_named }))
}

/// The sampler `OTEL_TRACES_SAMPLER` (and `_ARG`) names, read as the SDK reads them (the SDK
/// falls back to `parentbased_always_on` for a name it does not implement, and to the ratio 1.0
/// for a missing or bad ratio). Built here, not by the SDK, because the spans are planned before
/// their delivery with the same sampler (`super::plan`).
pub fn sampler(env: impl Fn(&str) -> Option<String>) -> Sampler {
    let ratio = || env("OTEL_TRACES_SAMPLER_ARG").and_then(|r| r.trim().parse::<f64>().ok()).unwrap_or(1.0);
    let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
    match env("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
        Some("always_on") => Sampler::AlwaysOn,
        Some("always_off") => Sampler::AlwaysOff,
        Some("traceidratio") => Sampler::TraceIdRatioBased(ratio()),
        Some("parentbased_always_off") => parent_based(Sampler::AlwaysOff),
        Some("parentbased_traceidratio") => parent_based(Sampler::TraceIdRatioBased(ratio())),
        _ => parent_based(Sampler::AlwaysOn),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Option<Config>> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        from_env(move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_sampler_is_the_one_the_sdk_would_read() {
        let named = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            format!("{:?}", sampler(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())))
        };
        assert_eq!(named(&[]), "ParentBased(AlwaysOn)");
        assert_eq!(named(&[("OTEL_TRACES_SAMPLER", "always_off")]), "AlwaysOff");
        assert_eq!(
            named(&[("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.01")]),
            "ParentBased(TraceIdRatioBased(0.01))"
        );
        assert_eq!(named(&[("OTEL_TRACES_SAMPLER", "traceidratio")]), "TraceIdRatioBased(1.0)");
        assert_eq!(named(&[("OTEL_TRACES_SAMPLER", "xray")]), "ParentBased(AlwaysOn)");
    }

    #[test]
    fn off_unless_an_endpoint_or_the_exporter_is_named() {
        assert_eq!(cfg(&[]).unwrap(), None);
        assert_eq!(cfg(&[("OTEL_SERVICE_NAME", "x")]).unwrap(), None);
        let on = Some(Config { service_named: false });
        assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap(), on);
        assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")]).unwrap(), on);
        assert_eq!(cfg(&[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap(), on);
        assert_eq!(
            cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_TRACES_EXPORTER", "none")]).unwrap(),
            None
        );
        assert_eq!(
            cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "TRUE")]).unwrap(),
            None
        );
        let named = cfg(&[("OTEL_TRACES_EXPORTER", "otlp"), ("OTEL_RESOURCE_ATTRIBUTES", "a=b, service.name=orders")]);
        assert_eq!(named.unwrap(), Some(Config { service_named: true }));
    }

    #[test]
    fn what_is_not_built_in_is_refused_with_the_fix() {
        let e = cfg(&[("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err().to_string();
        assert!(e.contains("OTEL_TRACES_EXPORTER=\"zipkin\"") && e.contains("otlp"), "{e}");
        let e = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\"") && e.contains("4318"), "{e}");
        // The signal's own variable wins over the general one.
        let ok = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        assert!(ok.unwrap().is_some());
    }
}
