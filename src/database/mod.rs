//! The services' PostgreSQL databases: reading connection strings, checking them with a
//! real connection, and whether the connection pools fit the engines.

pub mod bounded;
pub mod budget;
pub mod connstring;
pub mod networks;
pub mod probe;
pub mod tls;
