//! The gpuslice DRA driver's kubelet plugin (`gpuslice-dra`): see
//! `deploy/kubernetes/README.md`.

pub mod admission;
pub mod apiserver;
pub mod authority;
pub mod cdi;
pub mod claims;
pub mod devices;
pub mod plugin;
pub mod quantity;
pub mod resourceslice;
pub mod server;
pub mod tenant;

/// The kubelet's gRPC definitions (`proto/`), server and client.
pub mod proto {
    /// `pluginregistration` (k8s.io/kubelet/pkg/apis/pluginregistration/v1).
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
    /// `k8s.io.kubelet.pkg.apis.dra.v1`.
    pub mod dra {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
}
