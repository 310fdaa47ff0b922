//! Listeners inside a session's network namespace, served by the host: the egress proxy's
//! `127.0.0.1:3128` (DESIGN §5). A process in the session reaches it on its own loopback; the
//! host process accepts from it. The session still has no route and no DNS, so a tool that
//! ignores the proxy fails closed.

use std::net::{SocketAddr, TcpListener};

use super::{Session, SetupState};
use crate::environment::PROXY_ADDR;
use crate::error::SandboxError;
use crate::sys;

impl Session {
    /// A TCP listener bound to `addr` (an IPv4 address) inside the session's network
    /// namespace, for the host to accept connections from the session on.
    pub fn listen_tcp(&self, addr: SocketAddr) -> Result<TcpListener, SandboxError> {
        // The namespace is the session's only once init has built it: until then it may still
        // be the host's (see `sys::spawn`).
        if !matches!(self.setup, SetupState::Ready) {
            return Err(SandboxError::InvalidRequest {
                reason: "the session is not ready yet; call `Session::wait_ready` first",
            });
        }
        let SocketAddr::V4(v4) = addr else {
            return Err(SandboxError::InvalidRequest {
                reason: "a session listener needs an IPv4 address such as 127.0.0.1:3128",
            });
        };
        let socket = sys::netns::listen_in(std::os::fd::AsFd::as_fd(&self.init.pidfd), v4)
            .map_err(SandboxError::start(format!(
                "listen on {addr} inside the session's network namespace"
            )))?;
        Ok(TcpListener::from(socket))
    }

    /// The proxy's listener at `127.0.0.1:3128` inside the session; from now on every command
    /// of the session gets `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and lowercase) pointing
    /// at it and `NO_PROXY` for loopback (Appendix A).
    pub fn listen_proxy(&mut self) -> Result<TcpListener, SandboxError> {
        self.wait_ready()?;
        let listener = self.listen_tcp(PROXY_ADDR)?;
        self.env.proxy = Some(PROXY_ADDR);
        Ok(listener)
    }
}
