//! A control plane with a real node (kubelet, containerd, the image from the Dockerfile) to poke
//! at with kubectl: prints the kubeconfig and waits for Ctrl-C, then stops the node's pods.
//! Needs root, and the binaries built (`cargo build --bins -p highwater -p highwater-operator`).
//!
//!     cargo run -p highwater-e2e --example real-node
use highwater_e2e::{
    ControlPlane, controller_manager,
    real_node::{self, RealNode},
};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let controllers = controller_manager::DEFAULT_CONTROLLERS.iter().chain(real_node::CONTROLLERS.iter());
    let cp = ControlPlane::builder().controllers(controllers.copied()).scheduler().start().await?;
    // target/<profile>/examples/real-node: the binaries are in target/<profile>.
    let exe = std::env::current_exe()?;
    let programs = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/examples");
    let node = RealNode::start(&cp, programs).await?;
    println!("node {} Ready with image {} (imagePullPolicy: Never)", highwater_e2e::kubelet::NODE, node.image.name);
    cp.hold();
    node.stop().await
}
