//! Which hosts a webhook may reach (`dispatch --webhook-allow`, `--webhook-block-private`).
//!
//! Whoever may create an EventConsumer chooses the webhook URL, while the dispatcher runs inside
//! the network: without a policy, a definition can make the dispatcher POST to internal services
//! or a cloud metadata endpoint (server-side request forgery). Names are checked before any
//! lookup and every resolved address again at connect time (the client's resolver), so a name
//! that later resolves somewhere else (DNS rebinding) is refused too.
use std::{
    net::{IpAddr, SocketAddr},
    str::FromStr,
    sync::Arc,
};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use highwater_store::{Error, Result};

/// Loopback, private (RFC 1918, unique local), link-local (incl. cloud metadata at
/// 169.254.169.254), shared (CGNAT), benchmarking, reserved, multicast and unspecified ranges.
const NON_PUBLIC: [&str; 17] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// An address that is not reachable from the public internet.
pub fn is_non_public(ip: IpAddr) -> bool {
    // An IPv4-mapped IPv6 address (::ffff:10.0.0.1) reaches the IPv4 host.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    NON_PUBLIC.iter().any(|net| net.parse::<IpNet>().is_ok_and(|n| n.contains(&ip)))
}

#[derive(Clone, Debug, PartialEq)]
enum Allowed {
    /// `hooks.example.com`: that host.
    Host(String),
    /// `*.example.com`: any name below example.com (stored as `.example.com`).
    Below(String),
    /// `203.0.113.7` or `10.0.0.0/8`: targets whose every address is inside.
    Net(IpNet),
}

impl FromStr for Allowed {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let entry = s.trim().trim_end_matches('.').to_ascii_lowercase();
        let refuse = |why: &str| {
            Error::config(format!("--webhook-allow {s:?}: {why}")).with_fix(
                "give a host name (hooks.example.com), a wildcard \
                 (*.example.com), an address (203.0.113.7) or a network (10.0.0.0/8)",
            )
        };
        if let Ok(net) = entry.parse::<IpNet>() {
            return Ok(Allowed::Net(net.trunc()));
        }
        if let Ok(ip) = entry.parse::<IpAddr>() {
            return Ok(Allowed::Net(IpNet::from(ip)));
        }
        let (below, name) = match entry.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, entry.as_str()),
        };
        let valid = !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !valid {
            return Err(refuse("not a host name, wildcard, address or network"));
        }
        Ok(if below { Allowed::Below(format!(".{name}")) } else { Allowed::Host(name.to_owned()) })
    }
}

/// The dispatcher's webhook target policy; the default lets every target through.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetPolicy {
    allow: Vec<Allowed>,
    block_private: bool,
}

impl TargetPolicy {
    /// `allow` entries may also be comma-separated (as `HIGHWATER_WEBHOOK_ALLOW` gives them).
    pub fn new<S: AsRef<str>>(allow: &[S], block_private: bool) -> Result<Self> {
        let allow = allow
            .iter()
            .flat_map(|a| a.as_ref().split(','))
            .filter(|a| !a.trim().is_empty())
            .map(str::parse)
            .collect::<Result<_>>()?;
        Ok(TargetPolicy { allow, block_private })
    }

    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && !self.block_private
    }

    /// Whether a host-name entry names `host` (a name or address as written in the URL). Such a
    /// target may resolve anywhere: the operator who wrote the entry vouches for it.
    fn named(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.allow.iter().any(|a| match a {
            Allowed::Host(h) => *h == host,
            Allowed::Below(suffix) => host.ends_with(suffix.as_str()),
            Allowed::Net(_) => false,
        })
    }

    fn in_allowed_net(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|a| matches!(a, Allowed::Net(n) if n.contains(&ip)))
    }

    fn has_nets(&self) -> bool {
        self.allow.iter().any(|a| matches!(a, Allowed::Net(_)))
    }

    /// What can be decided from the URL alone: a literal address, or a name when the allow list
    /// has no networks (so no lookup could let it through).
    pub fn check_url_host(&self, host: &str) -> Result<(), String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check_addr(host, ip);
        }
        if !self.allow.is_empty() && !self.has_nets() && !self.named(host) {
            return Err(self.not_listed(host));
        }
        Ok(())
    }

    /// One address `host` resolved (or is) to.
    pub fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        if self.named(host) || self.in_allowed_net(ip) {
            return Ok(());
        }
        if !self.allow.is_empty() {
            return Err(self.not_listed(host));
        }
        if self.block_private && is_non_public(ip) {
            return Err(format!(
                "webhook target {host} ({ip}) is refused: it is a private, loopback or link-local address and this \
                 dispatcher runs with --webhook-block-private\n  fix: point sink.webhook.url at a public host, or \
                 allow it on the dispatcher with --webhook-allow {ip} (HIGHWATER_WEBHOOK_ALLOW)"
            ));
        }
        Ok(())
    }

    fn not_listed(&self, host: &str) -> String {
        format!(
            "webhook target {host} is refused: it is not in this dispatcher's --webhook-allow list\n  fix: point \
             sink.webhook.url at an allowed host, or add {host} to --webhook-allow (HIGHWATER_WEBHOOK_ALLOW)"
        )
    }
}

/// The resolver's refusal, told apart from lookup failures in the delivery error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The HTTP client's resolver under a policy: the system lookup, then every address checked.
pub struct GuardedResolver(pub Arc<TargetPolicy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for a in &addrs {
                policy.check_addr(&host, a.ip()).map_err(Refused)?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn non_public_ranges_are_recognised() {
        for a in ["127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "::1"] {
            assert!(is_non_public(ip(a)), "{a}");
        }
        for a in ["fd00::1", "fe80::1", "::ffff:10.0.0.1", "0.0.0.0", "224.0.0.1"] {
            assert!(is_non_public(ip(a)), "{a}");
        }
        for a in ["203.0.113.7", "8.8.8.8", "2001:4860:4860::8888", "172.32.0.1", "100.128.0.1"] {
            assert!(!is_non_public(ip(a)), "{a}");
        }
    }

    #[test]
    fn an_open_policy_lets_everything_through() {
        let p = TargetPolicy::default();
        assert!(p.is_open());
        assert!(p.check_url_host("127.0.0.1").is_ok());
        assert!(p.check_addr("localhost", ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn blocking_private_ranges_refuses_them_and_names_the_fix() {
        let p = TargetPolicy::new::<&str>(&[], true).unwrap();
        let e = p.check_url_host("127.0.0.1").unwrap_err();
        assert!(e.contains("--webhook-block-private") && e.contains("--webhook-allow 127.0.0.1"), "{e}");
        assert!(p.check_url_host("[::1]").is_err());
        assert!(p.check_addr("metadata.internal", ip("169.254.169.254")).is_err());
        assert!(p.check_url_host("hooks.example.com").is_ok(), "names are checked after lookup");
        assert!(p.check_addr("hooks.example.com", ip("203.0.113.7")).is_ok());
    }

    #[test]
    fn allowed_networks_reopen_private_ranges() {
        let p = TargetPolicy::new(&["127.0.0.0/8"], true).unwrap();
        assert!(p.check_url_host("127.0.0.1").is_ok());
        assert!(p.check_addr("localhost", ip("127.0.0.1")).is_ok());
        let e = p.check_addr("evil.example", ip("10.0.0.1")).unwrap_err();
        assert!(e.contains("not in this dispatcher's --webhook-allow list"), "{e}");
    }

    #[test]
    fn an_allow_list_admits_only_what_it_names() {
        let p = TargetPolicy::new(&["hooks.example.com, *.partner.example"], false).unwrap();
        assert!(p.check_url_host("hooks.example.com").is_ok());
        assert!(p.check_url_host("HOOKS.example.com.").is_ok());
        assert!(p.check_url_host("a.b.partner.example").is_ok());
        assert!(p.check_url_host("partner.example").is_err(), "a wildcard is below the domain only");
        assert!(p.check_url_host("hooks.example.com.evil.example").is_err());
        assert!(p.check_url_host("203.0.113.7").is_err());
        // A named host vouched for by the operator may resolve into the cluster.
        assert!(p.check_addr("hooks.example.com", ip("10.0.0.5")).is_ok());
    }

    #[test]
    fn bad_entries_are_refused_with_the_accepted_forms() {
        for bad in ["http://x", "a..b", "-x.example", "10.0.0.0/33", "*"] {
            let e = TargetPolicy::new(&[bad], false).unwrap_err().to_string();
            assert!(e.contains("--webhook-allow") && e.contains("fix:"), "{bad}: {e}");
        }
    }
}
