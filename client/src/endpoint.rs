//! Endpoint failover: a client may be given several proxies (any proxy serves any request)
//! and uses the first that answers.

use std::time::Duration;

/// How long a proxy has to accept a TCP connection before the next one is tried.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `endpoints` may list several proxies, comma-separated: the first that accepts a TCP
/// connection within [`PROBE_TIMEOUT`] is used, else the first listed. A single endpoint is
/// returned as is (without probing), trailing `/` removed.
pub(crate) fn pick_endpoint(endpoints: &str) -> String {
    let list: Vec<&str> = endpoints
        .split(',')
        .map(|e| e.trim().trim_end_matches('/'))
        .filter(|e| !e.is_empty())
        .collect();
    if list.len() <= 1 {
        return list.first().copied().unwrap_or("").to_owned();
    }
    for e in &list {
        let Ok(url) = reqwest::Url::parse(e) else {
            continue;
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            continue;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) else {
            continue;
        };
        for a in addrs {
            if std::net::TcpStream::connect_timeout(&a, PROBE_TIMEOUT).is_ok() {
                return (*e).to_owned();
            }
        }
    }
    list[0].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_endpoint_is_taken_as_is() {
        assert_eq!(pick_endpoint("http://h:1/"), "http://h:1");
        assert_eq!(pick_endpoint(""), "");
    }

    #[test]
    fn first_listening_proxy_wins() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let live = format!("http://{}", listener.local_addr().unwrap());
        // A port that was free a moment ago: nothing listens there now.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        assert_eq!(pick_endpoint(&format!("{dead}, {live}/")), live);
    }
}
