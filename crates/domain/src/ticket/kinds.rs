//! The closed vocabularies of a ticket. The wire and the TinyCode file keep
//! them as strings; inside the daemon they are these enums, parsed where a
//! value comes in and spelled back with `as_str`.

/// An enum of named values, spelled as in the TinyCode file format.
macro_rules! spelled {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, in order.
            pub const NAMES: [&'static str; [$($text),+].len()] = [$($text),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            pub fn parse(value: &str) -> Option<Self> {
                match value {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

spelled!(
    /// Where a ticket is in its life.
    Status {
        Open = "open",
        Triaged = "triaged",
        Routed = "routed",
        Escalated = "escalated",
        Resolved = "resolved",
    }
);

spelled!(
    /// How urgent a ticket is.
    Priority {
        P0 = "P0",
        P1 = "P1",
        P2 = "P2",
        P3 = "P3",
    }
);

spelled!(
    /// How the customer reached the desk.
    Channel {
        Email = "email",
        Chat = "chat",
        Phone = "phone",
        Web = "web",
    }
);

impl Status {
    /// The status of a stored ticket (`None`: a value this version does not
    /// know, kept as it is).
    pub fn of(ticket: &tinycode_shared::proto::Ticket) -> Option<Self> {
        Self::parse(&ticket.status)
    }

    /// Set `ticket`'s status.
    pub fn set(self, ticket: &mut tinycode_shared::proto::Ticket) {
        ticket.status.clear();
        ticket.status.push_str(self.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_value() {
        for name in Status::NAMES {
            assert_eq!(Status::parse(name).map(Status::as_str), Some(name));
        }
        for name in Priority::NAMES {
            assert_eq!(Priority::parse(name).map(Priority::as_str), Some(name));
        }
        for name in Channel::NAMES {
            assert_eq!(Channel::parse(name).map(Channel::as_str), Some(name));
        }
        assert_eq!(Status::parse("Open"), None);
        assert_eq!(Priority::parse("p1"), None);
        assert_eq!(Channel::NAMES.len(), 4);
    }
}
