//! A TCP proxy on 127.0.0.1 that a test can cut: while blocked it moves
//! no byte either way and new connections hang in their handshake, as a
//! network partition does (nothing is closed, nobody is told).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    blocked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Forward every connection to `target` (`host:port`).
    pub fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking accept");
        let blocked = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s, target) = (Arc::clone(&blocked), Arc::clone(&stop), target.to_string());
        std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect(&target) else {
                            continue;
                        };
                        for (from, to) in [(&client, &server), (&server, &client)] {
                            let (from, to) = (
                                from.try_clone().expect("a socket"),
                                to.try_clone().expect("a socket"),
                            );
                            let (b, s) = (Arc::clone(&b), Arc::clone(&s));
                            std::thread::spawn(move || pump(from, to, &b, &s));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Self {
            port,
            blocked,
            stop,
        }
    }

    /// Stop forwarding (`true`) or go on (`false`).
    pub fn block(&self, blocked: bool) {
        self.blocked.store(blocked, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, blocked: &AtomicBool, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Acquire) {
        if blocked.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
