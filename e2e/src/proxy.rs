//! A TCP proxy on loopback that plays a bad network between dispatchers and the database: it
//! passes bytes, cuts every connection (reset, and new ones reset at once), black-holes them
//! (half-open: accepted, bytes swallowed, nothing answered) or slows them down.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use highwater_e2e::proxy::{Mode, Proxy};
//! let proxy = Proxy::start("127.0.0.1:5432".parse()?).await?;
//! let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
//! proxy.set_mode(Mode::Cut); // every connection through `url` is reset
//! proxy.set_mode(Mode::Pass);
//! # Ok(()) }
//! ```
use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bytes flow both ways.
    Pass,
    /// Every open connection is reset; new ones are accepted and reset at once.
    Cut,
    /// Connections stay open (new ones are accepted) but bytes go nowhere, as when a link dies
    /// without a FIN or RST. A connection that lost bytes is reset when the mode changes back,
    /// as the peer's TCP stack eventually would.
    HalfOpen,
    /// Every chunk waits this long before it is forwarded.
    Slow(Duration),
}

pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Proxy> {
        Proxy::start_on("127.0.0.1:0".parse().expect("a socket address"), upstream).await
    }

    /// Listens on `listen` (port 0: a free one) and forwards to `upstream`: the real node's pods
    /// reach loopback services through one on their bridge's address (crate::pod_network).
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind(listen).await.with_context(|| format!("binding the proxy's {listen}"))?;
        let port = listener.local_addr()?.port();
        let (mode, rx) = watch::channel(Mode::Pass);
        let task = tokio::spawn(accept_loop(listener, upstream, rx));
        Ok(Proxy { port, mode, task })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.mode.send_replace(Mode::Cut);
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, mode: watch::Receiver<Mode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        // Dropping a socket with zero linger sends RST instead of FIN: a cut, not a goodbye.
        let _ = client.set_zero_linger();
        if *mode.borrow() == Mode::Cut {
            continue;
        }
        tokio::spawn(forward(client, upstream, mode.clone()));
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = server.set_zero_linger();
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut lost_bytes = false;
    loop {
        let (n, to) = tokio::select! {
            r = cr.read(&mut up) => match r { Ok(n) if n > 0 => (n, Side::Server), _ => return },
            r = sr.read(&mut down) => match r { Ok(n) if n > 0 => (n, Side::Client), _ => return },
            changed = mode.changed() => {
                let now = *mode.borrow_and_update();
                if changed.is_err() || now == Mode::Cut || (lost_bytes && now != Mode::HalfOpen) {
                    return;
                }
                continue;
            }
        };
        let current = *mode.borrow();
        let (bytes, writer) = match to {
            Side::Server => (&up[..n], &mut sw),
            Side::Client => (&down[..n], &mut cw),
        };
        match current {
            Mode::Cut => return,
            Mode::HalfOpen => lost_bytes = true,
            Mode::Slow(delay) => {
                tokio::time::sleep(delay).await;
                if writer.write_all(bytes).await.is_err() {
                    return;
                }
            }
            Mode::Pass => {
                if writer.write_all(bytes).await.is_err() {
                    return;
                }
            }
        }
    }
}

enum Side {
    Client,
    Server,
}
