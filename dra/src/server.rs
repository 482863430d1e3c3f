//! The two Unix sockets: the registration socket in the kubelet's
//! `plugins_registry` directory (the kubelet finds it there and calls
//! GetInfo) and the DRA service's socket, which registration names.
//! The registration socket is served through the `authority` front: the
//! kubelet's requests there carry the socket's path as `:authority`,
//! which h2 would refuse.

use crate::authority::FrontedIncoming;
use crate::plugin::{log, Plugin, Service};
use crate::proto::dra::dra_plugin_server::DraPluginServer;
use crate::proto::registration::registration_server::RegistrationServer;
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server};

/// Binds `path`, replacing a socket left by an earlier run.
fn bind(path: &Path) -> Result<UnixListener, String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(format!("cannot remove the old socket {}: {e}", path.display())),
        _ => {}
    }
    UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// Serves both services until SIGTERM or SIGINT, then removes the sockets
/// (the kubelet takes a registration socket's removal as deregistration).
pub async fn serve(plugin: Plugin, registration_socket: PathBuf) -> Result<(), String> {
    let dra_socket = plugin.dra_socket.clone();
    let service = Service(Arc::new(plugin));
    // The DRA socket first: once the registration socket appears, the
    // kubelet may call the service at once.
    let dra = bind(&dra_socket)?;
    let registration = bind(&registration_socket)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    // One service per socket: no router needed.
    let dra_server = Server::builder().serve_with_incoming_shutdown(
        DraPluginServer::new(service.clone()),
        UnixListenerStream::new(dra),
        stopped(stop_rx.clone()),
    );
    let registration_server = Server::builder().serve_with_incoming_shutdown(
        RegistrationServer::new(service),
        FrontedIncoming::new(registration),
        stopped(stop_rx),
    );
    log(&format!("serving registration on {} and DRA on {}", registration_socket.display(), dra_socket.display()));
    let signals = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        log("stopping");
        let _ = stop_tx.send(true);
        Ok::<(), String>(())
    };
    let (a, b, c) = tokio::join!(dra_server, registration_server, signals);
    for path in [&registration_socket, &dra_socket] {
        let _ = std::fs::remove_file(path);
    }
    a.map_err(|e| format!("DRA service: {e}"))?;
    b.map_err(|e| format!("registration service: {e}"))?;
    c
}

/// A gRPC channel over the Unix socket `path`, as the kubelet opens one.
pub async fn connect(path: &Path) -> Result<Channel, String> {
    let path = path.to_path_buf();
    // The URI is required by the API and unused: the connector dials the socket.
    Endpoint::try_from("http://[::]:50051")
        .map_err(|e| e.to_string())?
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .map_err(|e| format!("cannot connect: {e}"))
}
