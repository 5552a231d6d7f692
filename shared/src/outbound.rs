//! Where the platform may send requests that carry secrets or hand out
//! commands: HTTPS to a public host. A URL the administrator sets (the captcha
//! verifier, the DNS endpoint, the outbound webhook) or the join base URL
//! that `curl | sudo sh` fetches from is checked here before it is saved.
//! Plain HTTP and private, loopback or link-local addresses are refused unless
//! `KUBEBYON_ALLOW_PRIVATE_OUTBOUND=true` (a platform whose services live on a
//! private network, and the tests).
//!
//! A name is checked again where it is used: the clients that send those
//! secrets resolve through [`PublicOnly`], which refuses a name that resolves
//! to any private address at the moment of connecting (a name that pointed
//! somewhere public when it was saved, then at the metadata endpoint, or a
//! DNS-rebinding answer, reaches nothing).

use std::net::{IpAddr, SocketAddr};

/// Whether `ip` is an address no public service has: private, loopback,
/// link-local, reserved, benchmarking, documentation and protocol ranges, a
/// cloud's metadata or wire server, and every IPv6 form that carries an IPv4
/// address inside (mapped, compatible, NAT64, 6to4, Teredo) when that one
/// is such an address, or always where the form is obsolete.
fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
                || a == 0
                || (a == 192 && b == 0 && c == 0) // IETF protocol assignments (192.0.0.170 NAT64 discovery)
                || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || a >= 240 // reserved, broadcast
                || v4 == std::net::Ipv4Addr::new(168, 63, 129, 16) // Azure's wire server
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let first = segments[0];
            let embedded = |high: u16, low: u16| {
                private(IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(high) << 16) | u32::from(low),
                )))
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || (first & 0xffc0) == 0xfec0 // site local (obsolete)
                || (first == 0x2001 && segments[1] == 0x0db8) // documentation
                || (first == 0x2001 && segments[1] == 0) // Teredo: an IPv4 address in disguise
                || (first == 0x0100 && segments[1..4] == [0, 0, 0]) // discard only
                || (first == 0x0064 && segments[1] == 0xff9b && segments[2] == 1) // local-use NAT64
                || (first == 0x0064 && segments[1] == 0xff9b && segments[2..6] == [0, 0, 0, 0]
                    && embedded(segments[6], segments[7])) // NAT64
                || (first == 0x2002 && embedded(segments[1], segments[2])) // 6to4
                || segments[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible (obsolete)
                || v6.to_ipv4_mapped().is_some_and(|v4| private(IpAddr::V4(v4)))
        }
    }
}

/// A resolver for clients that carry secrets: the system's resolver, and a
/// name any of whose addresses is private resolves to nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublicOnly;

impl PublicOnly {
    /// The public addresses of `name`, or why there are none.
    pub async fn lookup(name: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port)).await?.collect();
        match addrs.iter().find(|a| private(a.ip())) {
            Some(bad) => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{name} resolves to {}, a private address (KUBEBYON_ALLOW_PRIVATE_OUTBOUND=true allows it)",
                    bad.ip()
                ),
            )),
            None => Ok(addrs),
        }
    }

    /// A reqwest client builder resolving through this resolver, unless
    /// private destinations are allowed.
    pub fn reqwest(allow_private: bool) -> reqwest::ClientBuilder {
        let builder = reqwest::Client::builder();
        if allow_private {
            builder
        } else {
            builder.dns_resolver(std::sync::Arc::new(PublicOnly))
        }
    }
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let addrs = Self::lookup(name.as_str(), 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl aws_smithy_runtime_api::client::dns::ResolveDns for PublicOnly {
    fn resolve_dns<'a>(
        &'a self,
        name: &'a str,
    ) -> aws_smithy_runtime_api::client::dns::DnsFuture<'a> {
        aws_smithy_runtime_api::client::dns::DnsFuture::new(async move {
            Self::lookup(name, 0)
                .await
                .map(|addrs| addrs.into_iter().map(|a| a.ip()).collect())
                .map_err(aws_smithy_runtime_api::client::dns::ResolveDnsError::new)
        })
    }
}

/// Whether an optional setting is absent or reads as an http(s) URL of at
/// most 2,000 characters without whitespace: its syntax only ([`check`]
/// and [`check_resolved`] also judge where it leads).
pub fn is_http_url(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(|u| {
        (u.starts_with("https://") || u.starts_with("http://"))
            && u.len() <= 2000
            && !u.contains(char::is_whitespace)
    })
}

/// Checks `raw` as [`check`] does, and also resolves its host name: a name
/// that resolves now to a private address is refused. A name that does not
/// resolve yet passes (it is checked again on every connection).
pub async fn check_resolved(raw: &str, allow_private: bool) -> Result<(), String> {
    check(raw, allow_private)?;
    if allow_private {
        return Ok(());
    }
    let Ok(url) = reqwest::Url::parse(raw) else {
        return Ok(());
    };
    if let Some(url::Host::Domain(name)) = url.host() {
        let port = url.port_or_known_default().unwrap_or(443);
        let lookup = PublicOnly::lookup(name, port);
        match tokio::time::timeout(std::time::Duration::from_secs(5), lookup).await {
            Ok(Err(err)) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(format!("must be a public host: {err}"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `ip` is no address a server is reached at: link-local (a
/// cloud's metadata endpoint among them), unspecified, multicast or
/// broadcast. Refused whatever `KUBEBYON_ALLOW_PRIVATE_OUTBOUND` says.
fn never_a_server(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() || v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| never_a_server(IpAddr::V4(v4)))
        }
    }
}

/// Checks the server a credential is sent to by another protocol than
/// HTTPS (a PostgreSQL instance): `host` on `port` (an address, or a name
/// resolved now, within 5 s) must lead to a public address, or with
/// `allow_private` to any address a server may have. A name that does not
/// resolve is refused: the credential would go wherever it later points.
pub async fn check_server(host: &str, port: u16, allow_private: bool) -> Result<(), String> {
    let lookup = tokio::net::lookup_host((host, port));
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(std::time::Duration::from_secs(5), lookup).await {
            Ok(Ok(addrs)) => addrs.collect(),
            _ => return Err(format!("{host} does not resolve")),
        };
    if addrs.is_empty() {
        return Err(format!("{host} does not resolve"));
    }
    if let Some(bad) = addrs.iter().find(|a| never_a_server(a.ip())) {
        return Err(format!(
            "{host} leads to {}, a link-local, unspecified or multicast address where no server is",
            bad.ip()
        ));
    }
    if let Some(bad) = addrs.iter().find(|a| !allow_private && private(a.ip())) {
        return Err(format!(
            "{host} leads to {}, a private address (KUBEBYON_ALLOW_PRIVATE_OUTBOUND=true allows it)",
            bad.ip()
        ));
    }
    Ok(())
}

/// Checks `raw` as a destination for secrets: `Err` says why not.
pub fn check(raw: &str, allow_private: bool) -> Result<(), String> {
    let url = reqwest::Url::parse(raw).map_err(|e| format!("is not a URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err("must be https:// (secrets and scripts travel over it)".into()),
        other => return Err(format!("must be https://, not {other}://")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials in the URL".into());
    }
    if allow_private {
        return Ok(());
    }
    let private_host = match url.host() {
        None => return Err("has no host".into()),
        Some(url::Host::Ipv4(ip)) => private(ip.into()),
        Some(url::Host::Ipv6(ip)) => private(ip.into()),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    };
    if private_host {
        return Err("must be a public host (private, loopback and link-local addresses are refused unless KUBEBYON_ALLOW_PRIVATE_OUTBOUND=true)".into());
    }
    Ok(())
}

/// Checks the base URL join commands are given (`curl -sSL <url>/join/… | sudo sh`):
/// as [`check`], except that plain HTTP to this machine's own loopback is
/// allowed, where a developer's platform and its test machines live.
pub fn check_join_base(raw: &str, allow_private: bool) -> Result<(), String> {
    let loopback = reqwest::Url::parse(raw).is_ok_and(|url| {
        url.scheme() == "http"
            && match url.host() {
                Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            }
    });
    if loopback {
        return Ok(());
    }
    check(raw, allow_private)
}

#[cfg(test)]
mod tests {
    use super::{PublicOnly, check, check_join_base, check_resolved, check_server};

    /// A loopback HTTP server answering every request 200.
    async fn loopback_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            }
        });
        port
    }

    #[tokio::test]
    async fn a_name_resolving_to_a_private_address_is_refused_when_connecting() {
        let port = loopback_server().await;
        // `localhost` stands for any public-looking name whose answer is
        // private: the name itself is not looked at here, only its addresses.
        let url = format!("http://localhost:{port}/");
        let allowed = PublicOnly::reqwest(true).build().unwrap();
        assert_eq!(allowed.get(&url).send().await.unwrap().status(), 200);
        let guarded = PublicOnly::reqwest(false).build().unwrap();
        let refused = guarded.get(&url).send().await.unwrap_err();
        assert!(refused.is_connect(), "{refused:?}");
        let err = PublicOnly::lookup("localhost", port).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("private address"), "{err}");
    }

    #[tokio::test]
    async fn the_route53_client_resolver_refuses_private_answers_too() {
        use aws_smithy_runtime_api::client::dns::ResolveDns;
        let refused = PublicOnly.resolve_dns("localhost").await.unwrap_err();
        assert!(
            std::error::Error::source(&refused)
                .is_some_and(|e| e.to_string().contains("private address")),
            "{refused:?}"
        );
        // A name that does not resolve (no network here) is left to the
        // connection; a private destination is fine where it is allowed.
        assert!(
            check_resolved("https://challenges.example.com/", false)
                .await
                .is_ok()
        );
        assert!(check_resolved("http://localhost:1/", true).await.is_ok());
    }

    #[test]
    fn join_commands_fetch_over_https_unless_on_this_machine() {
        assert!(check_join_base("http://localhost:8080", false).is_ok());
        assert!(check_join_base("http://127.0.0.1:8080", false).is_ok());
        assert!(check_join_base("https://kubebyon.example.com", false).is_ok());
        assert!(check_join_base("http://kubebyon.example.com", false).is_err());
        assert!(check_join_base("http://10.0.0.5:8080", false).is_err());
    }

    #[test]
    fn only_https_to_public_hosts_passes() {
        assert!(check("https://challenges.example.com/siteverify", false).is_ok());
        assert!(check("https://[2001:4860::8888]/x", false).is_ok());
        // Public IPv4 inside NAT64 and 6to4 stays public.
        assert!(check("https://[64:ff9b::808:808]/", false).is_ok());
        assert!(check("https://[2002:808:808::1]/", false).is_ok());
        assert!(check("https://198.20.0.1/", false).is_ok());
        for bad in [
            "http://challenges.example.com/siteverify",
            "ftp://example.com/",
            "https://user:pass@example.com/",
            "https://127.0.0.1/",
            "https://10.1.2.3/",
            "https://172.16.0.1/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://[fe80::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://localhost/",
            "https://metadata.localhost./",
            "https://2130706433/",
            "https://0x7f.1/",
            // The review's addresses: metadata behind IPv6 forms, and
            // ranges no public service has.
            "https://[::a9fe:a9fe]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://[64:ff9b:1::1]/",
            "https://[2002:a9fe:a9fe::1]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[fec0::1]/",
            "https://[2001:db8::1]/",
            "https://198.18.0.1/",
            "https://198.19.255.1/",
            "https://240.0.0.1/",
            "https://255.255.255.254/",
            "https://192.0.0.170/",
            "https://168.63.129.16/",
            "not a url",
        ] {
            assert!(check(bad, false).is_err(), "{bad}");
        }
        assert!(check("http://127.0.0.1:9000/siteverify", true).is_ok());
        assert!(check("ftp://127.0.0.1/", true).is_err());
    }

    #[tokio::test]
    async fn a_servers_address_is_public_or_allowed_and_never_link_local() {
        for (host, allow_private) in [
            ("169.254.169.254", true),
            ("fe80::1", true),
            ("0.0.0.0", true),
            ("::ffff:169.254.169.254", true),
            ("127.0.0.1", false),
            ("10.0.0.5", false),
            ("localhost", false),
            ("no-such-host.invalid", true),
        ] {
            assert!(
                check_server(host, 5432, allow_private).await.is_err(),
                "{host} (private allowed: {allow_private})"
            );
        }
        for (host, allow_private) in [
            ("127.0.0.1", true),
            ("10.0.0.5", true),
            ("localhost", true),
            ("8.8.8.8", false),
        ] {
            assert!(
                check_server(host, 5432, allow_private).await.is_ok(),
                "{host} (private allowed: {allow_private})"
            );
        }
    }
}
