//! The worker's sockets: its epoll and the connections' futures (`reactor`, `tasks`),
//! the listening sockets (`listeners`), the output batch and how it is written
//! (`output`: `writev`, `sendfile`), a connection's byte stream in cleartext or TLS
//! (`transport`, `tls`). Nothing here knows HTTP.

pub(crate) mod event_loop;
pub(crate) mod listeners;
pub(crate) mod output;
pub(crate) mod proxy;
pub(crate) mod reactor;
pub(crate) mod tasks;
pub(crate) mod tls;
pub(crate) mod transport;
