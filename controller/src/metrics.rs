//! The Prometheus text endpoint both roles serve: answers `GET /metrics` with what a
//! render function returns at that moment (HTTP/1.0, one request per connection: all a
//! Prometheus scrape needs, and no HTTP framework in a root daemon). Each connection gets
//! a thread of its own, a few at a time, and every read and write a time limit; the
//! request is read up to a size limit: a process on the node that connects and stalls, or
//! sends an endless line, delays no other scrape. The request's header lines are read to
//! the end before the answer goes out, in one write, followed by a FIN: a socket closed
//! with unread bytes sends a reset instead, and a client can lose the answer with it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 8;
/// The most bytes of a request read (its line and headers).
pub const MAX_REQUEST_LINE: u64 = 4096;
/// Time limit of each read and write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A label value as the text exposition format requires it: `\`, `"` and newlines escaped
/// (a GPU UUID or a configuration name could carry anything a file gave it).
pub fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn answer(mut stream: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_REQUEST_LINE));
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let complete = request.ends_with('\n');
    if complete {
        // The header lines, up to the blank one (or the size limit), left unanswered.
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 && !matches!(line.as_str(), "\r\n" | "\n") {
            line.clear();
        }
    }
    let (status, body) = if !complete {
        ("400 Bad Request", "request line too long or cut\n".to_string())
    } else if request.starts_with("GET /metrics") {
        ("200 OK", render())
    } else {
        ("404 Not Found", "only /metrics\n".to_string())
    };
    let response = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.shutdown(Shutdown::Write)
}

/// Starts the endpoint on `listen` in a background thread (nothing when `listen` is
/// empty); returns the address bound.
pub fn serve(
    listen: &str,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> std::io::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let listener = TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    let render = Arc::new(render);
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                open.fetch_sub(1, Ordering::SeqCst);
                log::debug!("metrics: {MAX_CONNECTIONS} connections open; one refused");
                continue;
            }
            let (render, open) = (Arc::clone(&render), Arc::clone(&open));
            std::thread::spawn(move || {
                if let Err(e) = answer(stream, render.as_ref()) {
                    log::debug!("metrics request: {e}");
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn label_values_escape_what_would_end_or_break_the_label() {
        assert_eq!(label("GPU-1234"), "GPU-1234");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

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
    fn a_stalled_client_delays_no_other_scrape_and_an_endless_line_is_refused() {
        let addr = serve("127.0.0.1:0", || "ok\n".to_string()).unwrap().unwrap();
        // A process connects and sends nothing.
        let _stalled = TcpStream::connect(addr).unwrap();
        let start = std::time::Instant::now();
        assert!(get(addr, "/metrics").ends_with("ok\n"));
        assert!(start.elapsed() < IO_TIMEOUT, "answered beside the stalled client");
        let mut conn = TcpStream::connect(addr).unwrap();
        let long = "A".repeat(MAX_REQUEST_LINE as usize * 4);
        let _ = conn.write_all(long.as_bytes());
        let mut text = String::new();
        let _ = conn.read_to_string(&mut text);
        assert!(text.starts_with("HTTP/1.0 400"), "{text}");
    }

    #[test]
    fn headers_sent_after_the_request_line_are_read_and_the_whole_answer_arrives() {
        let body = "x".repeat(100_000) + "\n";
        let expected = body.clone();
        let addr = serve("127.0.0.1:0", move || body.clone()).unwrap().unwrap();
        for _ in 0..20 {
            let mut conn = TcpStream::connect(addr).unwrap();
            conn.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(5));
            // As a scraper sends them: headers after the line, in writes of their own.
            conn.write_all(b"Host: node\r\nAccept: text/plain\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(5));
            conn.write_all(b"\r\n").unwrap();
            let mut text = String::new();
            conn.read_to_string(&mut text).expect("a FIN, never a reset");
            assert!(
                text.starts_with("HTTP/1.0 200 OK\r\n"),
                "{}",
                &text[..40.min(text.len())]
            );
            assert!(text.ends_with(&expected), "{} bytes", text.len());
        }
    }

    #[test]
    fn an_empty_address_serves_nothing() {
        assert_eq!(serve("", String::new).unwrap(), None);
    }
}
