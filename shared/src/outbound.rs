//! Where the platform may send requests that carry secrets or hand out
//! commands: HTTPS to a public host. A URL the administrator sets (the captcha
//! verifier, the DNS endpoint, the outbound webhook) or the join base URL
//! that `curl | sudo sh` fetches from is checked here before it is saved.
//! Plain HTTP and private, loopback or link-local addresses are refused unless
//! `KUBEBYON_ALLOW_PRIVATE_OUTBOUND=true` (a platform whose services live on a
//! private network, and the tests). Host names are not resolved here: a name
//! that resolves to a private address is not caught (see docs/security.md).

use std::net::IpAddr;

/// Whether `ip` is an address no public service has.
fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
                || a == 0
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || v6.to_ipv4_mapped().is_some_and(|v4| private(IpAddr::V4(v4)))
        }
    }
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
    use super::{check, check_join_base};

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
            "not a url",
        ] {
            assert!(check(bad, false).is_err(), "{bad}");
        }
        assert!(check("http://127.0.0.1:9000/siteverify", true).is_ok());
        assert!(check("ftp://127.0.0.1/", true).is_err());
    }
}
