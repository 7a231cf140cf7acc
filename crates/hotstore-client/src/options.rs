//! Where and how to connect.

use crate::error::{Error, Result};
use redis::io::tcp::TcpSettings;
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
};
use std::path::PathBuf;
use std::time::Duration;

/// The server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// TCP host and port.
    Tcp {
        /// Host name or IP address.
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix socket (`hotstore serve --unixsocket PATH`).
    Unix(PathBuf),
}

/// How to connect: address, credentials, protocol and timeouts. Built from a URL
/// ([`ConnectOptions::from_url`]) or an address, then adjusted.
///
/// ```
/// use hotstore_client::ConnectOptions;
/// use std::time::Duration;
/// let opts = ConnectOptions::from_url("redis://:secret@127.0.0.1:6380")?
///     .client_name("consumer-3")
///     .response_timeout(Some(Duration::from_secs(10)));
/// assert_eq!(opts.get_password(), Some("secret"));
/// # Ok::<(), hotstore_client::Error>(())
/// ```
#[derive(Clone)]
pub struct ConnectOptions {
    pub(crate) address: Address,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) client_name: Option<String>,
    pub(crate) resp3: bool,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) nodelay: bool,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("client_name", &self.client_name)
            .field("resp3", &self.resp3)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("nodelay", &self.nodelay)
            .finish()
    }
}

impl ConnectOptions {
    /// Defaults for a server at `address`: RESP2, no password, TCP_NODELAY, connect timeout
    /// 5 s, no response timeout.
    pub fn new(address: Address) -> Self {
        ConnectOptions {
            address,
            username: None,
            password: None,
            client_name: None,
            resp3: false,
            connect_timeout: Some(Duration::from_secs(5)),
            response_timeout: None,
            nodelay: true,
        }
    }

    /// A server at TCP `host:port`.
    pub fn tcp(host: impl Into<String>, port: u16) -> Self {
        Self::new(Address::Tcp {
            host: host.into(),
            port,
        })
    }

    /// A server on the Unix socket `path`.
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        Self::new(Address::Unix(path.into()))
    }

    /// Options from a URL: `redis://[[user]:password@]host[:port][/0][?protocol=resp3]`, or
    /// `redis+unix:///path` / `unix:///path[?pass=password]`. The port defaults to 6379 as
    /// in every Redis URL (hotstore serves on 6380: give it).
    pub fn from_url(url: &str) -> Result<Self> {
        let info: ConnectionInfo = url
            .into_connection_info()
            .map_err(|e| Error::InvalidArgument(format!("`{url}`: {e}")))?;
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Address::Tcp {
                host: host.clone(),
                port: *port,
            },
            ConnectionAddr::Unix(path) => Address::Unix(path.clone()),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "`{url}`: TLS is not supported by this client"
                )))
            }
        };
        let r = info.redis_settings();
        if r.db() != 0 {
            return Err(Error::InvalidArgument(format!(
                "`{url}`: hotstore has only database 0"
            )));
        }
        let mut o = Self::new(address);
        o.username = r.username().map(str::to_string);
        o.password = r.password().map(str::to_string);
        o.resp3 = r.protocol() != ProtocolVersion::RESP2;
        Ok(o)
    }

    /// Authenticates with `password` after connecting.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Authenticates as `username` (`AUTH username password`).
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Names the connection (`CLIENT SETNAME`): the server's default `CONSUMER` name for
    /// `EVENT.NEXT`.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Speaks RESP3 (`HELLO 3`) instead of RESP2.
    pub fn resp3(mut self, on: bool) -> Self {
        self.resp3 = on;
        self
    }

    /// Gives up connecting after this long (`None`: the system's limit).
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Fails a request whose reply takes longer than this (`None`, the default: wait). A
    /// blocking `EVENT.NEXT` waits its `BLOCK` time on top. After a timeout the connection
    /// is unusable: reconnect.
    pub fn response_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets TCP_NODELAY (default on: pipelined small requests are not delayed).
    pub fn nodelay(mut self, on: bool) -> Self {
        self.nodelay = on;
        self
    }

    /// The address.
    pub fn get_address(&self) -> &Address {
        &self.address
    }

    /// The password, if any.
    pub fn get_password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The redis-rs connection info. In RESP2 the client authenticates itself after
    /// connecting (to report the server's error code), so the credentials are left out; in
    /// RESP3 they go into `HELLO 3 AUTH`.
    pub(crate) fn connection_info(&self) -> Result<ConnectionInfo> {
        let addr = match &self.address {
            Address::Tcp { host, port } => ConnectionAddr::Tcp(host.clone(), *port),
            Address::Unix(p) => ConnectionAddr::Unix(p.clone()),
        };
        let mut redis = RedisConnectionInfo::default().set_skip_set_lib_name();
        if self.resp3 {
            redis = redis.set_protocol(ProtocolVersion::RESP3);
            if let Some(p) = &self.password {
                redis = redis.set_password(p);
                if let Some(u) = &self.username {
                    redis = redis.set_username(u);
                }
            }
        }
        let info = addr
            .into_connection_info()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?
            .set_redis_settings(redis)
            .set_tcp_settings(TcpSettings::default().set_nodelay(self.nodelay));
        Ok(info)
    }

    /// The commands to send after connecting: `AUTH` (RESP2) and `CLIENT SETNAME`.
    pub(crate) fn setup_commands(&self) -> Vec<redis::Cmd> {
        let mut cmds = Vec::new();
        if !self.resp3 {
            if let Some(p) = &self.password {
                let mut c = redis::cmd("AUTH");
                if let Some(u) = &self.username {
                    c.arg(u);
                }
                c.arg(p);
                cmds.push(c);
            }
        }
        if let Some(name) = &self.client_name {
            let mut c = redis::cmd("CLIENT");
            c.arg("SETNAME").arg(name);
            cmds.push(c);
        }
        cmds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let o = ConnectOptions::from_url("redis://:pw@127.0.0.1:6380").unwrap();
        assert_eq!(
            o.address,
            Address::Tcp {
                host: "127.0.0.1".into(),
                port: 6380
            }
        );
        assert_eq!(o.password.as_deref(), Some("pw"));
        assert!(!o.resp3);
        let o = ConnectOptions::from_url("redis://localhost:7000/?protocol=resp3").unwrap();
        assert!(o.resp3);
        assert!(o.password.is_none());
        let o = ConnectOptions::from_url("redis+unix:///tmp/hs.sock").unwrap();
        assert_eq!(o.address, Address::Unix("/tmp/hs.sock".into()));
        assert!(ConnectOptions::from_url("redis://h:1/3").is_err());
        assert!(ConnectOptions::from_url("nonsense").is_err());
    }
}
