//! A host's routing table, read and written over rtnetlink (`NETLINK_ROUTE`,
//! the kernel interface `ip route` itself speaks), and the one rule the
//! agents keep: the routes marked with the plan's protocol number are
//! exactly the planned ones, and no other route is ever changed.
//!
//! `route-agent` (the binary of this crate) runs it on each host node from
//! the plan the platform serves; the `local` route mode runs it in the
//! platform's own process ([`converge`]).

use std::{
    collections::BTreeMap,
    fs::File,
    io,
    net::{IpAddr, Ipv4Addr},
};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkHeader,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    route::{
        RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
        RouteType,
    },
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use nix::sched::{CloneFlags, setns};
use serde::{Deserialize, Serialize};

/// A route of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// A pod network, `10.64.1.0/24`.
    pub destination: String,
    /// The user node's address it is reached through.
    pub via: String,
}

/// A route that could not be applied or removed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failed {
    pub destination: String,
    pub error: String,
}

/// What a pass did to the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Routes added, replaced or removed.
    pub changed: usize,
    /// The planned destinations the table now holds as planned.
    pub applied: Vec<String>,
    pub failed: Vec<Failed>,
}

/// An IPv4 network, `address/length`, with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Network {
    pub address: Ipv4Addr,
    pub length: u8,
}

impl Network {
    /// `10.64.1.0/24`; a bare address is a /32.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (address, length) = text.split_once('/').unwrap_or((text, "32"));
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| format!("{text:?} is not an IPv4 network"))?;
        let length: u8 = length
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("{text:?} has no prefix length of 0 to 32"))?;
        let mask = u32::MAX.checked_shl(32 - u32::from(length)).unwrap_or(0);
        if u32::from(address) & !mask != 0 {
            return Err(format!("{text:?} has host bits set"));
        }
        Ok(Self { address, length })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.length)
    }
}

/// The main routing table of one network namespace.
pub struct Table {
    socket: Socket,
    sequence: u32,
}

impl Table {
    /// The table of the process's own network namespace, or, with
    /// `netns`, of the namespace `ip netns add NAME` made
    /// (`/run/netns/NAME`). The socket is opened inside that namespace
    /// and keeps to it; the thread returns to its own namespace at once.
    pub fn open(netns: Option<&str>) -> io::Result<Self> {
        let Some(name) = netns else {
            return Self::connect();
        };
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a network namespace's name"),
            ));
        }
        let own = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(format!("/run/netns/{name}"))?;
        setns(&target, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
        let table = Self::connect();
        setns(&own, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
        table
    }

    fn connect() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            socket,
            sequence: 0,
        })
    }

    /// Sends `message` and reads the answer to it: the routes of a dump,
    /// or nothing once the kernel acknowledges a change.
    fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteMessage>> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buffer = vec![0; packet.buffer_len()];
        packet.serialize(&mut buffer);
        self.socket.send(&buffer, 0)?;
        let mut routes = Vec::new();
        loop {
            let (datagram, _) = self.socket.recv_from_full()?;
            let mut rest = &datagram[..];
            while !rest.is_empty() {
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let length = reply.header.length as usize;
                if length == 0 || length > rest.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a netlink message of an impossible length",
                    ));
                }
                rest = &rest[length.next_multiple_of(4).min(rest.len())..];
                if reply.header.sequence_number != self.sequence {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::Done(_) => return Ok(routes),
                    NetlinkPayload::Error(error) if error.code.is_none() => return Ok(routes),
                    NetlinkPayload::Error(error) => return Err(error.to_io()),
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
                        routes.push(route)
                    }
                    _ => {}
                }
            }
        }
    }

    /// The IPv4 routes of the main table marked with `protocol`:
    /// destination → next hop (unspecified where a route has none).
    pub fn marked(&mut self, protocol: u8) -> io::Result<BTreeMap<Network, Ipv4Addr>> {
        let mut query = RouteMessage::default();
        query.header.address_family = AddressFamily::Inet;
        let routes = self.request(
            RouteNetlinkMessage::GetRoute(query),
            NLM_F_REQUEST | NLM_F_DUMP,
        )?;
        Ok(routes
            .iter()
            .filter(|r| u8::from(r.header.protocol) == protocol && table_of(r) == MAIN)
            .map(|r| {
                let mut destination = Ipv4Addr::UNSPECIFIED;
                let mut via = Ipv4Addr::UNSPECIFIED;
                for attribute in &r.attributes {
                    match attribute {
                        RouteAttribute::Destination(RouteAddress::Inet(a)) => destination = *a,
                        RouteAttribute::Gateway(RouteAddress::Inet(a)) => via = *a,
                        _ => {}
                    }
                }
                let network = Network {
                    address: destination,
                    length: r.header.destination_prefix_length,
                };
                (network, via)
            })
            .collect())
    }

    /// `ip route add DESTINATION via VIA proto PROTOCOL`, or with
    /// `replace`, `ip route replace …`. Without `replace` the kernel
    /// refuses (`EEXIST`) where a route to the destination is already
    /// there, so a route that is not ours is never overwritten.
    pub fn add(
        &mut self,
        destination: Network,
        via: Ipv4Addr,
        protocol: u8,
        replace: bool,
    ) -> io::Result<()> {
        let mut route = message(destination, protocol);
        route.header.scope = RouteScope::Universe;
        route.header.kind = RouteType::Unicast;
        route
            .attributes
            .push(RouteAttribute::Gateway(IpAddr::V4(via).into()));
        let how = match replace {
            true => NLM_F_REPLACE,
            false => NLM_F_EXCL,
        };
        self.request(
            RouteNetlinkMessage::NewRoute(route),
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | how,
        )
        .map(drop)
    }

    /// `ip route del DESTINATION proto PROTOCOL`: the kernel removes it
    /// only when its protocol is `protocol`.
    pub fn delete(&mut self, destination: Network, protocol: u8) -> io::Result<()> {
        let mut route = message(destination, protocol);
        route.header.scope = RouteScope::NoWhere;
        self.request(
            RouteNetlinkMessage::DelRoute(route),
            NLM_F_REQUEST | NLM_F_ACK,
        )
        .map(drop)
    }
}

/// `RT_TABLE_MAIN`.
const MAIN: u32 = RouteHeader::RT_TABLE_MAIN as u32;

/// A route's table: the attribute where the kernel gives one (tables
/// above 255), else the header's.
fn table_of(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

fn message(destination: Network, protocol: u8) -> RouteMessage {
    let mut route = RouteMessage::default();
    route.header.address_family = AddressFamily::Inet;
    route.header.destination_prefix_length = destination.length;
    route.header.table = RouteHeader::RT_TABLE_MAIN;
    route.header.protocol = RouteProtocol::from(protocol);
    route.attributes.push(RouteAttribute::Destination(
        IpAddr::V4(destination.address).into(),
    ));
    route
}

/// Makes the routes of `table` marked with `protocol` exactly `plan`:
/// what is missing is added, one of ours that goes elsewhere replaced,
/// what is no longer planned removed; a route already as planned is left
/// alone, so a second pass changes nothing. A destination another route
/// (not marked with `protocol`) already holds is not taken over: it is
/// reported failed, as is each route that cannot be applied; the others
/// still are.
pub fn converge(table: &mut Table, protocol: u8, plan: &[Route]) -> io::Result<Outcome> {
    let current = table.marked(protocol)?;
    let mut outcome = Outcome::default();
    let mut planned = Vec::new();
    for route in plan {
        let parsed = Network::parse(&route.destination).and_then(|d| {
            let via: Ipv4Addr = route
                .via
                .parse()
                .map_err(|_| format!("{:?} is not an IPv4 address", route.via))?;
            Ok((d, via))
        });
        let (destination, via) = match parsed {
            Ok(p) => p,
            Err(error) => {
                outcome.failed.push(Failed {
                    destination: route.destination.clone(),
                    error,
                });
                continue;
            }
        };
        planned.push(destination);
        let ours = current.get(&destination);
        if ours == Some(&via) {
            outcome.applied.push(destination.to_string());
            continue;
        }
        match table.add(destination, via, protocol, ours.is_some()) {
            Ok(()) => {
                outcome.changed += 1;
                outcome.applied.push(destination.to_string());
            }
            Err(error) => outcome.failed.push(Failed {
                destination: destination.to_string(),
                error: error.to_string(),
            }),
        }
    }
    for destination in current.keys().filter(|d| !planned.contains(d)) {
        match table.delete(*destination, protocol) {
            Ok(()) => outcome.changed += 1,
            Err(error) => outcome.failed.push(Failed {
                destination: destination.to_string(),
                error: error.to_string(),
            }),
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_are_read_strictly() {
        assert_eq!(
            Network::parse("10.64.1.0/24").unwrap().to_string(),
            "10.64.1.0/24"
        );
        assert_eq!(Network::parse("10.64.1.9").unwrap().length, 32);
        assert_eq!(Network::parse("0.0.0.0/0").unwrap().length, 0);
        for bad in [
            "10.64.1.1/24",
            "10.64.1.0/33",
            "10.64.1.0/",
            "fd00::/8",
            "x/8",
            "",
        ] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
    }
}
