//! `hotstore cluster create|check`: make a cluster map for N nodes, and check that a running
//! cluster serves it (every node reachable, agreeing on the map, every slot covered).

use crate::util::{CliError, CliResult};
use clap::{Args, Subcommand};
use hotstore_server::cluster::map::{split_addr, ClusterMap};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Cluster maps: create one, check a running cluster.
///
/// A hotstore cluster is a fixed set of nodes, each `hotstore serve --cluster MAP` on its own
/// store, serving the hash slots the map gives it (Redis Cluster's 16384 slots, so Redis
/// Cluster clients route to them unmodified). See docs/cluster.md.
#[derive(Subcommand)]
pub enum ClusterCommand {
    Create(CreateArgs),
    Check(CheckArgs),
}

/// Write a cluster map for N nodes, slots split evenly (as `redis-cli --cluster create`).
///
/// Nodes get new random ids. Addresses: `--addr` once per node, or N consecutive ports from
/// `--port` on `--host`. Start each node with `hotstore serve --cluster MAP --bind HOST
/// --port PORT --dir ITS-OWN-STORE`.
#[derive(Args)]
pub struct CreateArgs {
    /// Number of nodes (ignored when --addr is given).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Host of every node (with --port).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port of the first node; the others follow.
    #[arg(long, default_value_t = 7001)]
    port: u16,
    /// A node's address `host:port`, once per node (instead of --nodes/--host/--port).
    #[arg(long = "addr", value_name = "HOST:PORT")]
    addrs: Vec<String>,
    /// Epoch of the map (raise it in every new version of a map).
    #[arg(long, default_value_t = 1)]
    epoch: u64,
    /// File to write (refused if it exists, unless --force).
    #[arg(long, short)]
    out: PathBuf,
    /// Overwrite --out.
    #[arg(long)]
    force: bool,
}

/// Check a running cluster: every node answers, every node serves the same map (ids, slots,
/// epoch), every slot is covered; prints each node with its slots and keys.
///
/// Give a map file (`--map`: the nodes it names are checked against it) or any node's
/// address (its CLUSTER NODES names the others). Exit status: 0 if healthy, 1 if not (a
/// node that does not answer included, also the one given); 2 on bad arguments or an
/// unreadable map file.
#[derive(Args)]
pub struct CheckArgs {
    /// A node's address `host:port` (the map is read from it).
    #[arg(required_unless_present = "map")]
    addr: Option<String>,
    /// The cluster map file the nodes were started with.
    #[arg(long, conflicts_with = "addr")]
    map: Option<PathBuf>,
    /// Password of the nodes (AUTH).
    #[arg(long)]
    password: Option<String>,
    /// Seconds to wait for each node.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
}

/// Runs `hotstore cluster ...`.
pub fn run(cmd: ClusterCommand) -> CliResult<ExitCode> {
    match cmd {
        ClusterCommand::Create(a) => create(a).map(|()| ExitCode::SUCCESS),
        ClusterCommand::Check(a) => check(a),
    }
}

fn create(a: CreateArgs) -> CliResult<()> {
    let addrs: Vec<(String, u16)> = if a.addrs.is_empty() {
        if a.nodes == 0 || a.nodes > 1000 {
            return Err(CliError::Msg("--nodes must be 1 to 1000".into()));
        }
        (0..a.nodes)
            .map(|i| {
                u16::try_from(a.port as usize + i)
                    .map(|p| (a.host.clone(), p))
                    .map_err(|_| CliError::Msg(format!("port {} + {i} is over 65535", a.port)))
            })
            .collect::<CliResult<_>>()?
    } else {
        a.addrs
            .iter()
            .map(|s| split_addr(s).map_err(CliError::Msg))
            .collect::<CliResult<_>>()?
    };
    let map = ClusterMap::even(a.epoch, &addrs).map_err(CliError::Msg)?;
    if a.out.exists() && !a.force {
        return Err(CliError::Msg(format!(
            "{} exists: a map names node ids that stores remember; pass --force to replace it",
            a.out.display()
        )));
    }
    std::fs::write(&a.out, map.to_toml())
        .map_err(|e| CliError::Msg(format!("cannot write {}: {e}", a.out.display())))?;
    println!(
        "wrote {} ({} nodes, epoch {}):",
        a.out.display(),
        map.nodes.len(),
        map.epoch
    );
    for n in &map.nodes {
        let r = &n.slots[0];
        println!("  {} {}  slots {}-{}", n.id, n.addr(), r.start(), r.end());
    }
    println!(
        "start each node with: hotstore serve --cluster {} --bind HOST --port PORT --dir STORE",
        a.out.display()
    );
    Ok(())
}

/// One node's view, from its CLUSTER NODES and CLUSTER INFO.
struct View {
    myid: String,
    epoch: u64,
    /// id -> (address, sorted slot ranges as text)
    nodes: BTreeMap<String, (String, Vec<String>)>,
    keys: i64,
}

fn connect(addr: &str, a: &CheckArgs) -> Result<redis::Connection, String> {
    let (host, port) = split_addr(addr)?;
    use redis::IntoConnectionInfo as _;
    let info = redis::ConnectionAddr::Tcp(host, port)
        .into_connection_info()
        .map_err(|e| e.to_string())?;
    let info = match &a.password {
        Some(p) => {
            info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(p.clone()))
        }
        None => info,
    };
    let timeout = Duration::from_secs_f64(a.timeout.max(0.01));
    let client = redis::Client::open(info).map_err(|e| e.to_string())?;
    let con = client
        .get_connection_with_timeout(timeout)
        .map_err(|e| format!("cannot connect: {e}"))?;
    con.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    Ok(con)
}

fn view(addr: &str, a: &CheckArgs) -> Result<View, String> {
    let mut con = connect(addr, a)?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut con)
        .map_err(|e| format!("CLUSTER NODES: {e}"))?;
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut con)
        .map_err(|e| format!("CLUSTER INFO: {e}"))?;
    let keys: i64 = redis::cmd("DBSIZE")
        .query(&mut con)
        .map_err(|e| format!("DBSIZE: {e}"))?;
    let epoch = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("cluster_current_epoch:"))
        .and_then(|v| v.parse().ok())
        .ok_or("CLUSTER INFO has no cluster_current_epoch")?;
    let mut v = View {
        myid: String::new(),
        epoch,
        nodes: BTreeMap::new(),
        keys,
    };
    for line in nodes.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            return Err(format!("bad CLUSTER NODES line `{line}`"));
        }
        if f[2].split(',').any(|x| x == "myself") {
            v.myid = f[0].to_string();
        }
        let address = f[1].split('@').next().unwrap_or(f[1]).to_string();
        let mut slots: Vec<String> = f[8..].iter().map(|s| s.to_string()).collect();
        slots.sort();
        v.nodes.insert(f[0].to_string(), (address, slots));
    }
    Ok(v)
}

fn check(a: CheckArgs) -> CliResult<ExitCode> {
    let expected = match &a.map {
        Some(p) => Some(ClusterMap::load(p).map_err(CliError::Msg)?),
        None => None,
    };
    let addrs: Vec<String> = match (&expected, &a.addr) {
        (Some(m), _) => m.nodes.iter().map(|n| n.addr()).collect(),
        (None, Some(addr)) => match view(addr, &a) {
            Ok(v) => v.nodes.values().map(|(addr, _)| addr.clone()).collect(),
            // Fix (found by a new-user review): an unreachable node exited 2 (an error),
            // where the help promises 1 for an unhealthy cluster.
            Err(e) => {
                println!("[ERR] {addr} does not answer: {e}");
                return Ok(ExitCode::from(1));
            }
        },
        (None, None) => unreachable!("clap requires an address or a map"),
    };
    let mut errors = Vec::new();
    let mut views = Vec::new();
    println!(">>> Checking {} nodes", addrs.len());
    for addr in &addrs {
        match view(addr, &a) {
            Ok(v) => {
                let (_, slots) = v.nodes.get(&v.myid).cloned().unwrap_or_default();
                println!(
                    "M: {} {addr}  slots: {}  keys: {}  epoch: {}",
                    v.myid,
                    slots.join(" "),
                    v.keys,
                    v.epoch
                );
                views.push((addr.clone(), v));
            }
            Err(e) => {
                println!("[ERR] {addr}: {e}");
                errors.push(format!("{addr} does not answer: {e}"));
            }
        }
    }
    // Every node must report the same map (ids, addresses, slots) and epoch.
    if let Some((first_addr, first)) = views.first() {
        for (addr, v) in &views[1..] {
            if v.nodes != first.nodes {
                errors.push(format!(
                    "{addr} and {first_addr} serve different maps (start every node with the \
                     same map file)"
                ));
            }
            if v.epoch != first.epoch {
                errors.push(format!(
                    "{addr} serves epoch {} but {first_addr} epoch {}",
                    v.epoch, first.epoch
                ));
            }
        }
        for (addr, v) in &views {
            if let Some((id, _)) = v.nodes.iter().find(|(_, (a, _))| a == addr) {
                if *id != v.myid {
                    errors.push(format!(
                        "{addr} says it is node {} but the map gives its address to node {id}",
                        v.myid
                    ));
                }
            }
        }
        if let Some(m) = &expected {
            for n in &m.nodes {
                match first.nodes.get(&n.id) {
                    None => errors.push(format!("node {} of the map file is not served", n.id)),
                    Some((addr, slots)) => {
                        let mut want: Vec<String> = n
                            .slots
                            .iter()
                            .map(|r| {
                                if r.start() == r.end() {
                                    r.start().to_string()
                                } else {
                                    format!("{}-{}", r.start(), r.end())
                                }
                            })
                            .collect();
                        want.sort();
                        if *addr != n.addr() || *slots != want {
                            errors.push(format!(
                                "node {} is served at {addr} with slots {} but the map file \
                                 says {} with slots {}",
                                n.id,
                                slots.join(" "),
                                n.addr(),
                                want.join(" ")
                            ));
                        }
                    }
                }
            }
            if first.epoch != m.epoch {
                errors.push(format!(
                    "the nodes serve epoch {} but the map file is epoch {}",
                    first.epoch, m.epoch
                ));
            }
        }
        let mut covered = vec![false; 16384];
        for (_, slots) in first.nodes.values() {
            for s in slots {
                let (lo, hi) = s.split_once('-').unwrap_or((s, s));
                if let (Ok(lo), Ok(hi)) = (lo.parse::<usize>(), hi.parse::<usize>()) {
                    for c in covered.iter_mut().take(hi.min(16383) + 1).skip(lo) {
                        *c = true;
                    }
                }
            }
        }
        let missing = covered.iter().filter(|c| !**c).count();
        if missing > 0 {
            errors.push(format!("{missing} of the 16384 slots have no node"));
        } else {
            println!("[OK] All 16384 slots covered.");
        }
        let keys: i64 = views.iter().map(|(_, v)| v.keys).sum();
        if views.len() == addrs.len() {
            println!("[OK] {} nodes answer, {keys} keys in all.", views.len());
        }
    }
    if views.is_empty() && errors.is_empty() {
        errors.push("no node to check: the map names none".into());
    }
    if let (true, Some((_, first))) = (errors.is_empty(), views.first()) {
        println!(
            "[OK] All nodes agree about the map (epoch {}).",
            first.epoch
        );
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &errors {
            println!("[ERR] {e}");
        }
        Ok(ExitCode::from(1))
    }
}
