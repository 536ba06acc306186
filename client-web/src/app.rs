//! What every handler reaches: the daemon and the page's sessions (a leaf
//! below the routes and the live streams, which both take it).

use std::sync::Arc;

use crate::auth::Auth;
use crate::grpc::Daemon;

/// What every handler reaches.
#[derive(Clone)]
pub struct App {
    pub daemon: Daemon,
    pub auth: Arc<Auth>,
}
