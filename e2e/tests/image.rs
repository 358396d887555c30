//! The container image (the repository's Dockerfile), built offline with buildah from the
//! binaries this test build made and run with podman as a cluster would run it: read-only root,
//! user 65532, no capabilities, no new privileges (e2e/src/image.rs, docs/image.md).
//!
//! The image runs `highwater --version`, `highwater migrate` and `highwater dispatch` delivering
//! to a SQL sink in a PostgreSQL on 127.0.0.1 (host network), with /readyz answering. A missing
//! buildah, podman or runc fails these tests with what to install; it never skips them.
use std::{path::Path, time::Duration};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres, free_port},
    event_types,
    events::{self, NewEvent},
};
use highwater_e2e::{
    image::{self, Container, Engine, output_ok},
    pod_runner::built_programs,
    wait_for,
};
use serde_json::json;

const EVENTS: i64 = 50;

/// The compressed image must stay small (docs/image.md has the release figure, about half of
/// this; the tests' binaries are unoptimized).
const MAX_COMPRESSED_BYTES: u64 = 60 * 1024 * 1024;

const CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata:
  name: image-sql
spec:
  delivery: Shared
  eventTypes: [image.checked]
  sink:
    sql:
      statement: INSERT INTO image_deliveries (event_id, n) VALUES ($2, ($1->>'n')::int)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_image_migrates_and_dispatches_read_only_as_65532() {
    let engine = tokio::task::spawn_blocking(Engine::new).await.unwrap().expect("container engine");
    let programs = built_programs();
    let image = {
        let (engine, programs) = (engine.clone(), programs.clone());
        tokio::task::spawn_blocking(move || engine.image(&programs)).await.unwrap().expect("image build")
    };
    let size = engine.compressed_size(&image.name).expect("image size");
    eprintln!(
        "image {}: {} in {:.1?}, {:.1} MB compressed",
        image.name,
        if image.built { "built" } else { "cached" },
        image.build_time,
        size as f64 / 1e6
    );
    assert!(size <= MAX_COMPRESSED_BYTES, "the image is {size} bytes compressed, over {MAX_COMPRESSED_BYTES}");

    // Both programs, with the version and revision the host's binaries print.
    for program in image::PROGRAMS {
        let mut run = engine.run();
        run.args([&image.name, program, "--version"]);
        let inside = output_ok(run).expect("--version in the container");
        let mut host = std::process::Command::new(programs.join(program));
        host.arg("--version");
        let host = output_ok(host).unwrap();
        assert_eq!(inside, host);
        assert!(inside.starts_with(&format!("{program} {} (", env!("CARGO_PKG_VERSION"))), "{inside}");
    }
    // No shell in the image.
    let mut sh = engine.run();
    sh.args([&image.name, "sh", "-c", "true"]);
    let err = output_ok(sh).expect_err("the image has no shell").to_string();
    assert!(err.contains("not found"), "{err}");

    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let url = pg.url();
    let database = format!("DATABASE_URL={url}");

    let mut migrate = engine.run();
    migrate.args(["-e", &database, &image.name, "highwater", "migrate"]);
    tokio::task::spawn_blocking(move || output_ok(migrate)).await.unwrap().expect("highwater migrate in the container");

    let pool = db::connect(&url, 4).await.unwrap();
    event_types::register(&pool, "image.checked", None, None).await.unwrap();
    sqlx::query("CREATE TABLE image_deliveries (event_id bigint PRIMARY KEY, n int NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();

    // The consumer definition, mounted read-only; readable by 65532.
    let config = tempfile::tempdir().unwrap();
    std::fs::write(config.path().join("image-sql.yaml"), CONSUMER).unwrap();
    chmod(config.path(), 0o755);
    chmod(&config.path().join("image-sql.yaml"), 0o644);
    let logs = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let listen = format!("--listen=127.0.0.1:{port}");
    let mount = format!("{}:/config:ro", config.path().display());
    let mut run = engine.run();
    run.args(["-e", &database, "-e", "HIGHWATER_LOG_FORMAT=json", "-v", &mount]);
    let mut dispatcher = Container::start(
        &engine,
        &format!("highwater-e2e-dispatch-{port}"),
        run,
        &image.name,
        &["highwater", "dispatch", "--group=default", "--consumers=/config", &listen],
        &logs.path().join("dispatch.log"),
    )
    .expect("podman run highwater dispatch");

    let mut conn = pool.acquire().await.unwrap();
    for n in 0..EVENTS {
        let e = NewEvent::new("image", &format!("s-{n}"), "image.checked", json!({ "n": n }));
        events::append(&mut conn, &e).await.unwrap();
    }
    drop(conn);

    let http = reqwest::Client::new();
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let delivered = wait_for("the container to deliver every event and be ready", Duration::from_secs(120), || {
        let (pool, http, readyz) = (pool.clone(), http.clone(), readyz.clone());
        let running = dispatcher.process.check_running();
        async move {
            running?;
            let count: i64 = sqlx::query_scalar("SELECT count(*) FROM image_deliveries").fetch_one(&pool).await?;
            let ready = http.get(&readyz).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
            anyhow::Ok((count == EVENTS && ready == 200).then_some((count, ready)))
        }
    })
    .await;
    let log = dispatcher.process.log_tail(40);
    let (count, ready) = delivered.unwrap_or_else(|e| panic!("{e:#}\n--- dispatcher log ---\n{log}"));
    assert_eq!((count, ready), (EVENTS, 200));
    let sum: i64 = sqlx::query_scalar("SELECT sum(n)::bigint FROM image_deliveries").fetch_one(&pool).await.unwrap();
    assert_eq!(sum, EVENTS * (EVENTS - 1) / 2);

    // SIGTERM through podman: a clean drain and exit 0.
    let status = tokio::task::spawn_blocking(move || {
        let status = dispatcher.stop();
        (status, dispatcher.process.log_tail(40))
    })
    .await
    .unwrap();
    assert!(matches!(status.0, Some(s) if s.success()), "dispatcher exit {:?}\n{}", status.0, status.1);
}

#[test]
fn a_build_without_a_binary_fails_with_the_reason() {
    let engine = Engine::new().expect("container engine");
    let programs = built_programs();
    let base = engine.base(&[programs.join("highwater")]).expect("base");
    let context = tempfile::tempdir().unwrap();
    image::stage_binaries(&[programs.join("highwater")], context.path()).unwrap();
    let err = engine
        .build(context.path(), &base, "localhost/highwater-e2e-missing:test")
        .expect_err("a build without highwater-operator must fail");
    let text = format!("{err:#}");
    assert!(text.contains("highwater-operator"), "the error names the missing binary: {text}");
    let _ = engine.podman_ok(&["rmi", "--force", "localhost/highwater-e2e-missing:test"]);
}

#[test]
fn an_engine_that_cannot_run_fails_instead_of_skipping() {
    let dir = tempfile::tempdir().unwrap();
    let err = Engine::with_programs("/nonexistent/buildah", "/nonexistent/podman", dir.path())
        .expect_err("no podman, no engine");
    assert!(format!("{err:#}").contains("/nonexistent/podman"), "{err:#}");
    let missing = image::which("highwater-no-such-engine").unwrap_err().to_string();
    assert!(missing.contains("apt-get install buildah podman runc"), "{missing}");
}

#[test]
fn chart_and_dockerfile_versions_are_the_crate_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("charts/highwater/Chart.yaml")).unwrap()).unwrap();
    assert_eq!(chart["version"].as_str(), Some(env!("CARGO_PKG_VERSION")), "Chart.yaml version");
    assert_eq!(chart["appVersion"].as_str(), Some(env!("CARGO_PKG_VERSION")), "Chart.yaml appVersion");
    let dockerfile = std::fs::read_to_string(image::dockerfile()).unwrap();
    assert!(
        dockerfile.lines().any(|l| l.trim() == format!("ARG VERSION={}", env!("CARGO_PKG_VERSION"))),
        "the Dockerfile's default VERSION label is the crate version"
    );
}

/// `helm package` of the chart at the crate version: the archive a release publishes beside the
/// image of the same version.
#[test]
fn helm_package_has_the_crate_version() {
    let out = tempfile::tempdir().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let mut package = std::process::Command::new(highwater_e2e::helm::helm().expect("helm"));
    package.args(["package", "--version", version, "--app-version", version, "-d"]);
    package.arg(out.path()).arg(highwater_e2e::helm::chart_dir());
    output_ok(package).expect("helm package");
    let archive = out.path().join(format!("highwater-{version}.tgz"));
    assert!(archive.is_file(), "helm package wrote {}", archive.display());
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
