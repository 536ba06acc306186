//! Which view the screen shows over the chat, and the state of its list
//! (what the app holds; `views.rs` draws it).

use tinycode_shared::proto::{SessionInfo, Ticket};

#[derive(Debug, Clone)]
pub enum View {
    Chat,
    /// `None` while loading.
    Sessions {
        list: Option<Vec<SessionInfo>>,
        selected: usize,
        /// `/agents`: the session whose workers these are (`None`: the
        /// session picker).
        workers_of: Option<String>,
        /// In a worker's session: the parent to go back to (the first row).
        back: Option<String>,
    },
    Tickets {
        list: Option<Vec<Ticket>>,
        selected: usize,
    },
    Ticket(Box<Ticket>),
    Inbox {
        selected: usize,
    },
}

impl View {
    pub fn loading_sessions() -> Self {
        View::Sessions {
            list: None,
            selected: 0,
            workers_of: None,
            back: None,
        }
    }

    /// `/agents`: the workers of `parent`, and a way back to it when the
    /// attached session is one of them.
    pub fn loading_workers(parent: String, back: bool) -> Self {
        View::Sessions {
            list: None,
            selected: 0,
            back: back.then(|| parent.clone()),
            workers_of: Some(parent),
        }
    }

    pub fn loading_tickets() -> Self {
        View::Tickets {
            list: None,
            selected: 0,
        }
    }

    pub fn set_sessions(&mut self, sessions: Vec<SessionInfo>) {
        if let View::Sessions { list, back, .. } = self {
            let back = back.as_ref().map(|parent| SessionInfo {
                id: parent.clone(),
                title: "← back to the parent session".into(),
                ..SessionInfo::default()
            });
            *list = Some(back.into_iter().chain(sessions).collect());
        }
    }

    pub fn set_tickets(&mut self, tickets: Vec<Ticket>) {
        if let View::Tickets { list, .. } = self {
            *list = Some(tickets);
        }
    }
}
