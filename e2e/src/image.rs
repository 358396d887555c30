//! The container image, built offline from the repository's one `Dockerfile` and run, with
//! Debian's `buildah` and `podman` (no Docker engine, no registry):
//!
//! - a local **base** stands in for distroless: the shared libraries `ldd` lists for the two
//!   binaries, `/etc/passwd` and `/etc/group` with `nonroot` (65532), the host's CA bundle and an
//!   empty `/tmp`, made with `buildah from scratch` + `buildah copy` + `buildah commit`;
//! - the **image** is `buildah build --pull=never --isolation chroot` of the Dockerfile with
//!   `BASE=<that base>` and `BINARIES=prebuilt`: the binaries cargo built for the tests (debug
//!   info stripped) are handed in through a small build context, `target/release/…`.
//!
//! Both are cached in `<cache_dir>/containers` (vfs storage) under tags keyed by a hash of what
//! went in (libraries, Dockerfile, binaries); older tags are removed when a new one is built.
//! Every container runs as a test would run it in a cluster: read-only root, user 65532, no
//! capabilities, no new privileges, host network (to reach the test's PostgreSQL on 127.0.0.1).
//!
//! A missing `buildah`, `podman` or `runc` is an error naming the packages, never a skip.
use std::{
    fs,
    hash::Hasher,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};

use crate::process::Process;

/// The image's repository in the local storage; the tag is the cache key.
pub const IMAGE: &str = "localhost/highwater-e2e";
/// The local stand-in for `gcr.io/distroless/cc-debian12:nonroot`.
pub const BASE: &str = "localhost/highwater-e2e-base";
/// The two programs the image holds.
pub const PROGRAMS: [&str; 2] = ["highwater", "highwater-operator"];
/// Bumped when the base's recipe changes (part of its cache key).
const BASE_RECIPE: &str = "base-v1";
/// The real node's pod sandbox image (see [`Engine::pause_image`]).
pub const PAUSE: &str = "localhost/highwater-e2e-pause";
const PAUSE_RECIPE: &str = "pause-v1";
const CATATONIT: &str = "/usr/bin/catatonit";

/// The local repository of an earlier release's image (the release's commit names it).
pub fn release_repository(commit: &str) -> String {
    format!("{IMAGE}-release-{commit}")
}

/// The repository's `Dockerfile`.
pub fn dockerfile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile")
}

/// buildah and podman with this harness's configuration: `CONTAINERS_CONF` (runc, cgroupfs,
/// file events, explicit ulimits: crun and the defaults fail on this kind of machine's hybrid
/// cgroups and limits) and `CONTAINERS_STORAGE_CONF` (vfs under the cache directory).
#[derive(Clone, Debug)]
pub struct Engine {
    dir: PathBuf,
    buildah: PathBuf,
    podman: PathBuf,
}

/// An image ready to run, and how it came to be.
#[derive(Clone, Debug)]
pub struct Image {
    pub name: String,
    /// False when the cached image was reused.
    pub built: bool,
    /// Time spent making the base and the image (near zero when cached).
    pub build_time: Duration,
}

impl Engine {
    /// `buildah`, `podman` and `runc` from PATH, storage in `<cache_dir>/containers`.
    pub fn new() -> Result<Engine> {
        for program in ["buildah", "podman", "runc"] {
            which(program)?;
        }
        Engine::with_programs(which("buildah")?, which("podman")?, crate::cache_dir()?.join("containers"))
    }

    /// The given programs and storage directory (the configuration files are written there).
    pub fn with_programs(
        buildah: impl Into<PathBuf>,
        podman: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
    ) -> Result<Engine> {
        let engine = Engine { dir: dir.into(), buildah: buildah.into(), podman: podman.into() };
        fs::create_dir_all(engine.dir.join("tmp")).with_context(|| format!("creating {}", engine.dir.display()))?;
        engine.write_config()?;
        // Fails here, with the reason, when the engine cannot work at all.
        engine.podman_ok(&["info", "--format", "{{.Store.GraphDriverName}}"]).context("checking podman")?;
        Ok(engine)
    }

    fn write_config(&self) -> Result<()> {
        let storage = format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            self.dir.join("storage").display(),
            self.dir.join("run").display()
        );
        // runc refuses limits above the caller's own: take them from this process.
        let nofile = fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| {
                let line = limits.lines().find(|l| l.starts_with("Max open files"))?.to_string();
                line.split_whitespace().nth(4)?.parse::<u64>().ok()
            })
            .unwrap_or(1024)
            .min(65536);
        let conf = format!(
            "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc=4096:4096\"]\n\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             events_logfile_path = \"{}\"\n",
            self.dir.join("events.log").display()
        );
        write_atomically(&self.dir.join("storage.conf"), &storage)?;
        write_atomically(&self.dir.join("containers.conf"), &conf)
    }

    fn configure(&self, mut command: Command) -> Command {
        command
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .env("TMPDIR", self.dir.join("tmp"))
            .stdin(Stdio::null());
        command
    }

    /// `buildah` configured for this storage.
    pub fn buildah(&self) -> Command {
        self.configure(Command::new(&self.buildah))
    }

    /// `podman` configured for this storage.
    pub fn podman(&self) -> Command {
        self.configure(Command::new(&self.podman))
    }

    /// `podman run --rm` with the restrictions a cluster would apply: `--read-only --user 65532
    /// --cap-drop ALL --security-opt no-new-privileges`, host network. Add options, then the image
    /// and the command.
    pub fn run(&self) -> Command {
        let mut c = self.podman();
        c.args(["run", "--rm", "--read-only", "--user", "65532", "--cap-drop", "ALL"]);
        c.args(["--security-opt", "no-new-privileges", "--network", "host"]);
        c
    }

    pub fn buildah_ok(&self, args: &[&str]) -> Result<String> {
        let mut c = self.buildah();
        c.args(args);
        output_ok(c)
    }

    pub fn podman_ok(&self, args: &[&str]) -> Result<String> {
        let mut c = self.podman();
        c.args(args);
        output_ok(c)
    }

    fn exists(&self, image: &str) -> Result<bool> {
        let out = self.podman().args(["image", "exists", image]).output().context("running podman image exists")?;
        Ok(out.status.success())
    }

    /// Holds an exclusive lock on the storage (other tests and test processes build too) while
    /// `f` runs; not reentrant.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join("lock"))?;
        let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow!("locking {}: {e}", self.dir.display()))?;
        f()
    }

    /// The local base for `programs` (cached): returns its name.
    pub fn base(&self, programs: &[PathBuf]) -> Result<String> {
        self.locked(|| self.base_unlocked(programs))
    }

    fn base_unlocked(&self, programs: &[PathBuf]) -> Result<String> {
        let rootfs = tempfile::tempdir()?;
        let mut files = vec![];
        for library in libraries(programs)? {
            let inside = rootfs.path().join(library.strip_prefix("/")?);
            fs::create_dir_all(inside.parent().expect("a library path has a parent"))?;
            // The real file under the name the program asks for (the host's are symlinks).
            fs::copy(&library, &inside).with_context(|| format!("copying {}", library.display()))?;
            files.push(inside);
        }
        let etc = rootfs.path().join("etc");
        fs::create_dir_all(etc.join("ssl/certs"))?;
        fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )?;
        fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n")?;
        let ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
        fs::copy(ca, etc.join("ssl/certs/ca-certificates.crt"))
            .with_context(|| format!("copying {} (install ca-certificates)", ca.display()))?;
        files.extend([etc.join("passwd"), etc.join("group"), etc.join("ssl/certs/ca-certificates.crt")]);
        let tmp = rootfs.path().join("tmp");
        fs::create_dir(&tmp)?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))?;
        fs::set_permissions(rootfs.path(), fs::Permissions::from_mode(0o755))?;

        let mut key = std::hash::DefaultHasher::new();
        key.write(BASE_RECIPE.as_bytes());
        for f in &files {
            key.write(f.strip_prefix(rootfs.path())?.as_os_str().as_encoded_bytes());
            hash_file(&mut key, f)?;
        }
        let name = format!("{BASE}:{:016x}", key.finish());
        if self.exists(&name)? {
            return Ok(name);
        }
        let container = self.buildah_ok(&["from", "--pull=never", "scratch"])?;
        let made = (|| {
            let root = format!("{}/", rootfs.path().display());
            self.buildah_ok(&["copy", "--quiet", &container, &root, "/"])?;
            self.buildah_ok(&[
                "config",
                "--user",
                "65532:65532",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env",
                "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
                &container,
            ])?;
            self.buildah_ok(&["commit", "--quiet", &container, &name])
        })();
        let _ = self.buildah_ok(&["rm", &container]);
        made.context("making the local base image")?;
        self.remove_other_tags(BASE, &name);
        Ok(name)
    }

    /// The pod sandbox ("pause") image a real node's containerd needs, made locally (no
    /// registry): Debian's static `catatonit` in `-P` (pause) mode, user 65535. Cached.
    pub fn pause_image(&self) -> Result<String> {
        self.locked(|| {
            let catatonit = Path::new(CATATONIT);
            if !catatonit.is_file() {
                bail!("{CATATONIT} is missing: the real node's pause image is made from it (apt-get install catatonit; .ci/run does)");
            }
            let mut key = std::hash::DefaultHasher::new();
            key.write(PAUSE_RECIPE.as_bytes());
            hash_file(&mut key, catatonit)?;
            let name = format!("{PAUSE}:{:016x}", key.finish());
            if self.exists(&name)? {
                return Ok(name);
            }
            let container = self.buildah_ok(&["from", "--pull=never", "scratch"])?;
            let made = (|| {
                self.buildah_ok(&["copy", "--quiet", &container, CATATONIT, "/pause"])?;
                self.buildah_ok(&["config", "--entrypoint", r#"["/pause","-P"]"#, "--user", "65535:65535", &container])?;
                self.buildah_ok(&["commit", "--quiet", &container, &name])
            })();
            let _ = self.buildah_ok(&["rm", &container]);
            made.context("making the pause image")?;
            self.remove_other_tags(PAUSE, &name);
            Ok(name)
        })
    }

    /// `podman save` of `image` as a docker-archive at `archive`: what `ctr images import` takes.
    pub fn save(&self, image: &str, archive: &Path) -> Result<()> {
        self.podman_ok(&[
            "save",
            "--quiet",
            "--format",
            "docker-archive",
            "-o",
            archive.to_str().context("path")?,
            image,
        ])
        .map(drop)
    }

    /// `buildah build` of the Dockerfile with `BINARIES=prebuilt`, the given base and build
    /// context (which must hold `target/release/highwater` and `target/release/highwater-operator`).
    pub fn build(&self, context: &Path, base: &str, name: &str) -> Result<()> {
        self.locked(|| self.build_unlocked(context, base, name))
    }

    fn build_unlocked(&self, context: &Path, base: &str, name: &str) -> Result<()> {
        let revision = format!("REVISION={}", revision_of(&context.join("target/release/highwater")));
        let version = format!("VERSION={}", env!("CARGO_PKG_VERSION"));
        let base = format!("BASE={base}");
        let dockerfile = dockerfile();
        let built = self.buildah_ok(&[
            "build",
            "--quiet",
            "--pull=never",
            "--isolation",
            "chroot",
            "--layers=false",
            "--build-arg",
            &base,
            "--build-arg",
            "BINARIES=prebuilt",
            "--build-arg",
            &version,
            "--build-arg",
            &revision,
            "-f",
            dockerfile.to_str().context("Dockerfile path")?,
            "-t",
            name,
            context.to_str().context("context path")?,
        ]);
        // buildah 1.28 leaves the `binaries` stage's working container and the `prebuilt`
        // stage's untagged image behind (a failed build perhaps more): remove them.
        if let Ok(list) = self.buildah_ok(&["containers", "--format", "{{.ContainerName}}"]) {
            for c in list.lines().map(str::trim).filter(|c| c.ends_with("-working-container")) {
                let _ = self.buildah_ok(&["rm", c]);
            }
        }
        let _ = self.buildah_ok(&["rmi", "--prune"]);
        built.with_context(|| format!("buildah build of {} (context {})", dockerfile.display(), context.display()))?;
        Ok(())
    }

    /// The image for the programs in `programs_dir` (e.g. target/debug, see
    /// [`crate::pod_runner::built_programs`]): reused when the binaries, the Dockerfile and the
    /// base are unchanged, else built (base included) and the older images removed.
    pub fn image(&self, programs_dir: &Path) -> Result<Image> {
        self.image_in(programs_dir, IMAGE)
    }

    /// [`Engine::image`] under another repository, whose older tags only are removed: an earlier
    /// release's image (see [`release_repository`]) stays cached beside this build's.
    pub fn image_in(&self, programs_dir: &Path, repository: &str) -> Result<Image> {
        self.locked(|| {
            let started = Instant::now();
            let programs: Vec<PathBuf> = PROGRAMS.iter().map(|p| programs_dir.join(p)).collect();
            let base = self.base_unlocked(&programs)?;
            let mut key = std::hash::DefaultHasher::new();
            key.write(base.as_bytes());
            hash_file(&mut key, &dockerfile())?;
            for p in &programs {
                hash_file(&mut key, p)?;
            }
            let name = format!("{repository}:{:016x}", key.finish());
            if self.exists(&name)? {
                return Ok(Image { name, built: false, build_time: started.elapsed() });
            }
            let context = tempfile::tempdir()?;
            stage_binaries(&programs, context.path())?;
            self.build_unlocked(context.path(), &base, &name)?;
            self.remove_other_tags(repository, &name);
            Ok(Image { name, built: true, build_time: started.elapsed() })
        })
    }

    fn remove_other_tags(&self, repository: &str, keep: &str) {
        let list = self.podman_ok(&["images", "--format", "{{.Repository}}:{{.Tag}}", repository]).unwrap_or_default();
        for old in list.lines().map(str::trim).filter(|l| !l.is_empty() && *l != keep) {
            let _ = self.podman_ok(&["rmi", "--force", old]);
        }
        // Sizes measured for images that are gone.
        let ids = self.podman_ok(&["images", "--no-trunc", "--format", "{{.Id}}"]).unwrap_or_default();
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_prefix("size-")
                && !ids.contains(id)
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// The image as `podman save` writes it (docker-archive), gzip-compressed, in bytes: about
    /// what a registry stores and a node pulls.
    /// Kept beside the storage per image name (tags are content hashes), since measuring takes
    /// seconds.
    pub fn compressed_size(&self, image: &str) -> Result<u64> {
        let id = self.podman_ok(&["image", "inspect", "--format", "{{.Id}}", image])?;
        let cached = self.dir.join(format!("size-{id}"));
        if let Some(n) = fs::read_to_string(&cached).ok().and_then(|s| s.trim().parse().ok()) {
            return Ok(n);
        }
        let n = self.measure_compressed_size(image)?;
        write_atomically(&cached, &n.to_string())?;
        Ok(n)
    }

    fn measure_compressed_size(&self, image: &str) -> Result<u64> {
        let dir = tempfile::tempdir()?;
        let archive = dir.path().join("image.tar");
        self.podman_ok(&["save", "--quiet", "-o", archive.to_str().context("path")?, image])?;
        let gzip = Command::new("gzip")
            .args(["-6", "-c"])
            .stdin(fs::File::open(&archive)?)
            .stdout(Stdio::piped())
            .spawn()
            .context("running gzip")?;
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut out = gzip.stdout.expect("piped");
        loop {
            let read = out.read(&mut buf)?;
            if read == 0 {
                break;
            }
            n += read as u64;
        }
        Ok(n)
    }
}

/// A container started with [`Engine::run`] in the background (`podman run` attached, its output
/// in a log): SIGTERM on [`Container::stop`] reaches the program (podman proxies signals); drop
/// removes the container whatever happened.
pub struct Container {
    pub name: String,
    pub process: Process,
    engine: Engine,
}

impl Container {
    /// Starts `podman run --name NAME <options> IMAGE <args>` (`command` from [`Engine::run`]
    /// plus options, without the image). The log goes to `log`.
    pub fn start(
        engine: &Engine,
        name: &str,
        mut command: Command,
        image: &str,
        args: &[&str],
        log: &Path,
    ) -> Result<Container> {
        let _ = engine.podman_ok(&["rm", "--force", "--time", "0", name]);
        command.args(["--name", name, image]).args(args);
        let process = Process::spawn(name, command, log)?;
        Ok(Container { name: name.to_string(), process, engine: engine.clone() })
    }

    /// SIGTERM, wait (then SIGKILL after the grace period), and the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.process.terminate();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.process.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.engine.podman_ok(&["rm", "--force", "--time", "0", &self.name]);
        self.process.kill();
    }
}

/// Copies `programs` into `context/target/release/` without their debug info (what the
/// Dockerfile's `prebuilt` stage copies).
pub fn stage_binaries(programs: &[PathBuf], context: &Path) -> Result<()> {
    let dir = context.join("target/release");
    fs::create_dir_all(&dir)?;
    for p in programs {
        let name = p.file_name().context("a program path has a file name")?;
        let mut c = Command::new("objcopy");
        c.arg("--strip-debug").arg(p).arg(dir.join(name));
        output_ok(c).with_context(|| format!("staging {} (objcopy is in binutils)", p.display()))?;
    }
    Ok(())
}

/// The shared libraries and the ELF interpreter `ldd` lists for `programs`, each as the path the
/// program asks for (the file there is the symlink's target).
pub fn libraries(programs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = std::collections::BTreeSet::new();
    for p in programs {
        let mut c = Command::new("ldd");
        c.arg(p);
        let out = output_ok(c).with_context(|| format!("ldd {}", p.display()))?;
        for line in out.lines() {
            let line = line.trim();
            if line.contains("not found") {
                bail!("{}: a library is missing: {line}", p.display());
            }
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next().filter(|w| w.starts_with('/')),
            };
            if let Some(path) = path.filter(|w| w.starts_with('/')) {
                found.insert(PathBuf::from(path));
            }
        }
    }
    if found.is_empty() {
        bail!("ldd listed no libraries for {programs:?}: statically linked programs need another base recipe");
    }
    Ok(found.into_iter().collect())
}

/// The revision `program --version` reports ("highwater 0.4.0 (abc1234)" → "abc1234").
fn revision_of(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| Some(s.split_once('(')?.1.split_once(')')?.0.to_string()))
        .unwrap_or_else(|| "unknown".to_string())
}

fn hash_file(hasher: &mut std::hash::DefaultHasher, path: &Path) -> Result<()> {
    let mut file = fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        hasher.write(&buf[..n]);
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// `program` on PATH, or an error saying what to install.
pub fn which(program: &str) -> Result<PathBuf> {
    which_or(
        program,
        "the image tests need buildah, podman and runc (apt-get install buildah podman runc; .ci/run does)",
    )
}

/// `program` on PATH, or an error naming it and `fix`.
pub fn which_or(program: &str, fix: &str) -> Result<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("{program} is not on PATH: {fix}"))
}

/// Runs `command`; its stdout (trimmed) on success, else an error with the command, status and
/// stderr.
pub fn output_ok(mut command: Command) -> Result<String> {
    let shown = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let Output { status, stdout, stderr } = command.output().with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status}): {}", String::from_utf8_lossy(&stderr).trim());
    }
    Ok(String::from_utf8_lossy(&stdout).trim().to_string())
}
