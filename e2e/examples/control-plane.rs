//! A control plane to poke at with kubectl: prints the kubeconfig and waits for Ctrl-C.
//!
//!     cargo run -p highwater-e2e --example control-plane
use highwater_e2e::ControlPlane;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let control_plane = ControlPlane::with_controller_manager().await?;
    control_plane.hold();
    Ok(())
}
