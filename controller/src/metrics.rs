//! The Prometheus text endpoint both roles serve: a thread that answers `GET /metrics`
//! with what a render function returns at that moment (HTTP/1.0, one request per
//! connection: all a Prometheus scrape needs, and no HTTP framework in a root daemon).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

fn answer(stream: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let (status, body) = if request.starts_with("GET /metrics") {
        ("200 OK", render())
    } else {
        ("404 Not Found", "only /metrics\n".to_string())
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Starts the endpoint on `listen` in a background thread (nothing when `listen` is
/// empty); returns the address bound.
pub fn serve(
    listen: &str,
    render: impl Fn() -> String + Send + 'static,
) -> std::io::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let listener = TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if let Err(e) = answer(stream, &render) {
                log::debug!("metrics request: {e}");
            }
        }
    });
    Ok(Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut conn = TcpStream::connect(addr).unwrap();
        write!(conn, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn each_scrape_renders_anew_and_other_paths_are_not_found() {
        let n = std::sync::atomic::AtomicU32::new(0);
        let addr = serve("127.0.0.1:0", move || {
            format!("scrape {}\n", n.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
        })
        .unwrap()
        .unwrap();
        assert!(get(addr, "/metrics").ends_with("\r\n\r\nscrape 0\n"));
        assert!(get(addr, "/metrics").ends_with("scrape 1\n"));
        assert!(get(addr, "/").starts_with("HTTP/1.0 404"));
    }

    #[test]
    fn an_empty_address_serves_nothing() {
        assert_eq!(serve("", String::new).unwrap(), None);
    }
}
