//! The real node's pod network: a Linux bridge of the host's own (no uplink, nothing routed
//! off the machine) that the CNI `bridge` plugin attaches each pod to, with addresses from
//! `host-local` IPAM. The test's services listen on loopback, which a pod cannot reach, so the
//! host side of the bridge carries two addresses that [`PodNetwork::forward`] proxies from:
//!
//! - [`GATEWAY`] (the pods' default route), e.g. for the test's PostgreSQL;
//! - the `kubernetes` Service's cluster IP ([`crate::apiserver::SERVICE_IP`]), port 443, to the
//!   API server: pods use in-cluster configuration (`KUBERNETES_SERVICE_HOST`, the mounted
//!   service-account token and CA) exactly as in a cluster, and the API server's certificate
//!   names that IP. This stands in for kube-proxy, which would need a routable API server.
//!
//! One such network per machine at a time (a fixed bridge name and addresses): the real node
//! holds a lock while it exists (crate::real_node).
use std::{net::SocketAddr, path::Path, process::Command};

use anyhow::{Context, Result};

use crate::{
    apiserver::SERVICE_IP,
    image::{output_ok, which_or},
    proxy::Proxy,
};

pub const BRIDGE: &str = "hwe2e0";
pub const SUBNET: &str = "10.244.0.0/24";
/// The bridge's address on the host: the pods' gateway.
pub const GATEWAY: &str = "10.244.0.1";

pub struct PodNetwork {
    ip: std::path::PathBuf,
}

impl PodNetwork {
    /// Creates the bridge (replacing one a killed run left) with [`GATEWAY`] and the Service IP,
    /// and writes the CNI configuration into `cni_conf_dir`, IPAM state into `ipam_dir`.
    pub fn create(cni_conf_dir: &Path, ipam_dir: &Path) -> Result<PodNetwork> {
        let network = PodNetwork { ip: which_or("ip", "apt-get install iproute2")? };
        let _ = network.ip(&["link", "del", BRIDGE]);
        network.ip(&["link", "add", BRIDGE, "type", "bridge"])?;
        network.ip(&["addr", "add", &format!("{GATEWAY}/24"), "dev", BRIDGE])?;
        network.ip(&["addr", "add", &format!("{SERVICE_IP}/32"), "dev", BRIDGE])?;
        network.ip(&["link", "set", BRIDGE, "up"])?;
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "highwater-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                        // Through the host: the Service IP is an address of the bridge.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": ipam_dir,
                    },
                },
                {"type": "loopback"},
            ],
        });
        let file = cni_conf_dir.join("10-highwater-e2e.conflist");
        std::fs::write(&file, serde_json::to_vec_pretty(&conf)?)
            .with_context(|| format!("writing {}", file.display()))?;
        Ok(network)
    }

    /// A proxy listening on `address:port` of the bridge (port 0: a free one) to `upstream`.
    pub async fn forward(&self, address: &str, port: u16, upstream: SocketAddr) -> Result<Proxy> {
        Proxy::start_on(format!("{address}:{port}").parse()?, upstream).await
    }

    fn ip(&self, args: &[&str]) -> Result<String> {
        let mut c = Command::new(&self.ip);
        c.args(args);
        output_ok(c)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        let _ = self.ip(&["link", "del", BRIDGE]);
    }
}
