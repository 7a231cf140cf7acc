//! Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, INFO, CONFIG GET, CLIENT,
//! COMMAND, QUIT, SHUTDOWN.

use super::{Args, CmdResult, Ctx, Flow, COMMANDS};
use crate::glob::glob_match;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// The Redis version whose client-visible behaviour the server follows (clients check it).
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";

pub fn ping(ctx: &mut Ctx, args: &Args) -> CmdResult {
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(args.get(1)),
        _ => return Err("ERR wrong number of arguments for 'ping' command".into()),
    }
    Ok(Flow::Continue)
}

pub fn echo(ctx: &mut Ctx, args: &Args) -> CmdResult {
    ctx.out.bulk(args.get(1));
    Ok(Flow::Continue)
}

pub fn select(ctx: &mut Ctx, args: &Args) -> CmdResult {
    match args.u64(1) {
        Ok(0) => {
            ctx.out.ok();
            Ok(Flow::Continue)
        }
        Ok(_) => Err("ERR DB index is out of range (hotstore has one database, 0)".into()),
        Err(_) => Err("ERR value is not an integer or out of range".into()),
    }
}

/// Checks a password; `user` must be `default` (there are no other users). Without a
/// configured password the default user needs none: `AUTH default <anything>` succeeds, as in
/// Redis, and `AUTH <password>` is an error.
fn check_password(ctx: &mut Ctx, user: Option<&[u8]>, pass: &[u8]) -> Result<(), String> {
    let user_ok = user.is_none_or(|u| u == b"default");
    let Some(expected) = &ctx.shared.config.requirepass else {
        return match user {
            None => Err(
                "ERR AUTH <password> called without any password configured for the \
                 default user. Are you sure your configuration is correct?"
                    .into(),
            ),
            Some(_) if user_ok => Ok(()),
            Some(_) => Err("WRONGPASS invalid username-password pair or user is disabled.".into()),
        };
    };
    if user_ok && constant_time_eq(pass, expected.as_bytes()) {
        ctx.conn.authenticated = true;
        Ok(())
    } else {
        Err("WRONGPASS invalid username-password pair or user is disabled.".into())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn auth(ctx: &mut Ctx, args: &Args) -> CmdResult {
    match args.len() {
        2 => check_password(ctx, None, args.get(1))?,
        3 => check_password(ctx, Some(args.get(1)), args.get(2))?,
        _ => return Err("ERR syntax error".into()),
    }
    ctx.out.ok();
    Ok(Flow::Continue)
}

/// HELLO [protover [AUTH user pass] [SETNAME name]].
pub fn hello(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let mut resp3 = ctx.conn.resp3;
    let mut i = 1;
    if args.len() > 1 {
        resp3 = match args.u64(1) {
            Ok(2) => false,
            Ok(3) => true,
            Ok(_) => return Err("NOPROTO unsupported protocol version".into()),
            Err(_) => return Err("ERR Protocol version is not an integer or out of range".into()),
        };
        i = 2;
    }
    let mut name = None;
    while i < args.len() {
        if args.is(i, "auth") && i + 2 < args.len() {
            check_password(ctx, Some(args.get(i + 1)), args.get(i + 2))?;
            i += 3;
        } else if args.is(i, "setname") && i + 1 < args.len() {
            name = Some(client_name(args.get(i + 1))?);
            i += 2;
        } else {
            return Err(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(args.get(i))
            ));
        }
    }
    if !ctx.conn.authenticated {
        return Err(
            "NOAUTH HELLO must be called with the client already authenticated, \
                    otherwise the HELLO <proto> AUTH <user> <pass> option can be used to \
                    authenticate the client and select the RESP protocol version at the same \
                    time"
                .into(),
        );
    }
    if let Some(n) = name {
        *ctx.conn.info.name.lock() = Some(n);
    }
    ctx.conn.resp3 = resp3;
    // The reply is in the new protocol.
    let r = &mut *ctx.out;
    r.set_resp3(resp3);
    r.map(7);
    r.bulk(b"server");
    r.bulk(b"redis");
    r.bulk(b"version");
    r.bulk(REDIS_COMPAT_VERSION.as_bytes());
    r.bulk(b"proto");
    r.int(if resp3 { 3 } else { 2 });
    r.bulk(b"id");
    r.int(ctx.conn.info.id as i64);
    r.bulk(b"mode");
    r.bulk(b"standalone");
    r.bulk(b"role");
    r.bulk(b"master");
    r.bulk(b"modules");
    r.array(0);
    Ok(Flow::Continue)
}

fn client_name(b: &[u8]) -> Result<String, String> {
    if b.iter().any(|&c| c <= b' ' || c > b'~') {
        return Err(
            "ERR Client names cannot contain spaces, newlines or special characters.".into(),
        );
    }
    Ok(String::from_utf8_lossy(b).into_owned())
}

pub fn quit(ctx: &mut Ctx, _args: &Args) -> CmdResult {
    ctx.out.ok();
    Ok(Flow::Close)
}

pub fn shutdown(_ctx: &mut Ctx, args: &Args) -> CmdResult {
    // Options (NOSAVE, SAVE, NOW, FORCE, ABORT) change nothing here: every acknowledged write
    // is already stored; SHUTDOWN always stops gracefully.
    if args.iter_from(1).any(|a| a.eq_ignore_ascii_case(b"abort")) {
        return Err("ERR SHUTDOWN ABORT is not supported (no shutdown is ever pending)".into());
    }
    Ok(Flow::Shutdown)
}

/// CONFIG GET: the read-only settings tools ask for (redis-benchmark asks for `save` and
/// `appendonly`); CONFIG SET and the rest are refused.
pub fn config(ctx: &mut Ctx, args: &Args) -> CmdResult {
    if !subcommands("config").iter().any(|s| args.is(1, s)) {
        return Err(subcommand_error("config", args));
    }
    if !args.is(1, "get") {
        return Err(format!(
            "ERR CONFIG {} is not supported: hotstore's settings are fixed while it runs \
             (restart it with new options)",
            String::from_utf8_lossy(args.get(1)).to_uppercase()
        ));
    }
    if args.len() < 3 {
        return Err("ERR wrong number of arguments for 'config|get' command".into());
    }
    let c = &ctx.shared.config;
    let durability = format!("{:?}", c.durability).to_lowercase();
    let params: Vec<(&str, String)> = vec![
        ("bind", c.bind.clone()),
        ("port", ctx.shared.tcp_port.to_string()),
        ("maxclients", c.max_clients.to_string()),
        ("timeout", c.timeout.to_string()),
        ("databases", "1".into()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        (
            "appendfsync",
            if durability == "persisted" {
                "always".into()
            } else {
                "no".into()
            },
        ),
        ("maxmemory", "0".into()),
        ("proto-max-bulk-len", c.max_bulk_len.to_string()),
        ("dir", c.dir.display().to_string()),
        ("hotstore-durability", durability),
        ("hotstore-threads", c.worker_threads().to_string()),
    ];
    let matched: Vec<&(&str, String)> = params
        .iter()
        .filter(|(name, _)| {
            args.iter_from(2)
                .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
        })
        .collect();
    ctx.out.map(matched.len());
    for (name, value) in matched {
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(value.as_bytes());
    }
    Ok(Flow::Continue)
}

/// Subcommands of the container commands, for CLIENT LIST's `cmd=client|list`.
pub fn subcommands(command: &str) -> &'static [&'static str] {
    match command {
        "client" => &["setname", "getname", "id", "info", "list", "setinfo"],
        "config" => &["get", "set", "resetstat", "rewrite"],
        "command" => &["count", "docs", "info", "list"],
        "cluster" => super::cluster::SUBCOMMANDS,
        _ => &[],
    }
}

/// One line of CLIENT LIST/INFO: Redis 7.0's fields in Redis's order, with the values that
/// mean something here (no pub/sub, no MULTI, no ACL users, no output lists: those are 0/-1).
fn client_line(ctx: &Ctx, c: &crate::shared::ClientInfo) -> String {
    let last = c.last_cmd.load(Ordering::Relaxed);
    let cmd = match COMMANDS.get(last) {
        None => "NULL".to_string(),
        Some(s) => match c.last_sub.load(Ordering::Relaxed) {
            0 => s.name.to_string(),
            i => format!("{}|{}", s.name, subcommands(s.name)[i - 1]),
        },
    };
    let age = c.created.elapsed();
    let idle_ms = (age.as_millis() as u64).saturating_sub(c.last_active_ms.load(Ordering::Relaxed));
    let (qbuf, qbuf_free, argv) = (
        c.mem.qbuf.load(Ordering::Relaxed),
        c.mem.qbuf_free.load(Ordering::Relaxed),
        c.mem.argv.load(Ordering::Relaxed),
    );
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db=0 sub=0 psub=0 ssub=0 \
         multi=-1 qbuf={qbuf} qbuf-free={qbuf_free} argv-mem={argv} multi-mem=0 rbs={} rbp={qbuf} \
         obl=0 oll=0 omem=0 tot-mem={} events={} cmd={cmd} user=default redir=-1 resp={}",
        c.id,
        c.addr,
        c.laddr,
        c.name.lock().as_deref().unwrap_or(""),
        age.as_secs(),
        idle_ms / 1000,
        qbuf + qbuf_free,
        qbuf + qbuf_free + argv,
        if c.mem.waiting.load(Ordering::Relaxed) {
            ""
        } else {
            "r"
        },
        if c.id == ctx.conn.info.id && ctx.conn.resp3 {
            3
        } else {
            2
        },
    )
}

pub fn client(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let sub = String::from_utf8_lossy(args.get(1)).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("setname", 3) => {
            let name = client_name(args.get(2))?;
            *ctx.conn.info.name.lock() = (!name.is_empty()).then_some(name);
            ctx.out.ok();
        }
        ("getname", 2) => match ctx.conn.info.name.lock().clone() {
            Some(n) => ctx.out.bulk(n.as_bytes()),
            None => ctx.out.null(),
        },
        ("id", 2) => ctx.out.int(ctx.conn.info.id as i64),
        ("setinfo", 4) => ctx.out.ok(),
        ("info", 2) => {
            let line = client_line(ctx, &ctx.conn.info.clone()) + "\n";
            ctx.out.verbatim(&line);
        }
        ("list", 2) => {
            let mut text = String::new();
            for c in ctx.shared.clients.list() {
                text.push_str(&client_line(ctx, &c));
                text.push('\n');
            }
            ctx.out.verbatim(&text);
        }
        _ => return Err(subcommand_error("client", args)),
    }
    Ok(Flow::Continue)
}

/// Redis's reply to a subcommand it does not know, or one given the wrong number of arguments.
fn subcommand_error(command: &str, args: &Args) -> String {
    let sub = String::from_utf8_lossy(args.get(1));
    if subcommands(command)
        .iter()
        .any(|s| s.eq_ignore_ascii_case(&sub))
    {
        format!(
            "ERR wrong number of arguments for '{command}|{}' command",
            sub.to_ascii_lowercase()
        )
    } else {
        format!(
            "ERR unknown subcommand '{sub}'. Try {} HELP.",
            command.to_ascii_uppercase()
        )
    }
}

fn command_info(ctx: &mut Ctx, s: &super::Spec) {
    let r = &mut *ctx.out;
    // Redis 7's ten fields; ACL categories, tips, key specs and subcommands are empty (no ACL;
    // the first/last/step fields locate the keys).
    r.array(10);
    r.bulk(s.name.as_bytes());
    r.int(s.arity);
    r.set(s.flags.len());
    for f in s.flags {
        r.simple(f);
    }
    r.int(s.first_key);
    r.int(s.last_key);
    r.int(s.step);
    r.set(0);
    r.set(0);
    r.array(0);
    r.array(0);
}

/// COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS [name...], COMMAND LIST.
pub fn command(ctx: &mut Ctx, args: &Args) -> CmdResult {
    if args.len() == 1 {
        ctx.out.array(COMMANDS.len());
        for s in COMMANDS {
            command_info(ctx, s);
        }
        return Ok(Flow::Continue);
    }
    if args.is(1, "count") {
        ctx.out.int(COMMANDS.len() as i64);
    } else if args.is(1, "docs") {
        super::docs::command_docs(ctx, args);
    } else if args.is(1, "info") {
        let names: Vec<&[u8]> = args.iter_from(2).collect();
        ctx.out.array(names.len());
        for n in names {
            match super::lookup(n) {
                Some(i) => command_info(ctx, &COMMANDS[i]),
                None => ctx.out.null(),
            }
        }
    } else if args.is(1, "list") {
        ctx.out.array(COMMANDS.len());
        for s in COMMANDS {
            ctx.out.bulk(s.name.as_bytes());
        }
    } else {
        return Err(subcommand_error("command", args));
    }
    Ok(Flow::Continue)
}

/// INFO [section ...]: Redis's `# Section` / `name:value` text, plus a `hotstore` section.
pub fn info(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let all = [
        "server",
        "clients",
        "memory",
        "persistence",
        "stats",
        "replication",
        "cpu",
        "keyspace",
        "cluster",
        "hotstore",
    ];
    let wanted: Vec<String> = args
        .iter_from(1)
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let every = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| w == "all" || w == "everything" || w == "default");
    let mut text = String::new();
    for section in all {
        if every || wanted.iter().any(|w| w == section) {
            info_section(ctx, section, &mut text);
        }
    }
    ctx.out.verbatim(&text);
    Ok(Flow::Continue)
}

fn info_section(ctx: &Ctx, section: &str, t: &mut String) {
    let sh = ctx.shared;
    let st = sh.store.stats();
    let _ = writeln!(t, "# {}\r", capitalize(section));
    let mut kv = |k: &str, v: String| {
        let _ = write!(t, "{k}:{v}\r\n");
    };
    match section {
        "server" => {
            kv("redis_version", REDIS_COMPAT_VERSION.into());
            kv("hotstore_version", env!("CARGO_PKG_VERSION").into());
            let mode = if sh.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            };
            kv("redis_mode", mode.into());
            kv("os", std::env::consts::OS.into());
            kv("arch_bits", (usize::BITS).to_string());
            kv("process_id", std::process::id().to_string());
            kv("tcp_port", sh.tcp_port.to_string());
            kv(
                "uptime_in_seconds",
                sh.started.elapsed().as_secs().to_string(),
            );
            kv("io_threads_active", sh.config.worker_threads().to_string());
        }
        "cluster" => kv(
            "cluster_enabled",
            u8::from(sh.cluster.is_some()).to_string(),
        ),
        "clients" => {
            kv(
                "connected_clients",
                sh.clients.connected.load(Ordering::Relaxed).to_string(),
            );
            kv("maxclients", sh.config.max_clients.to_string());
            kv("blocked_clients", sh.event_waiters.waiting().to_string());
        }
        "memory" => {
            kv("used_memory", st.live_bytes.to_string());
            kv("used_memory_dataset", st.live_bytes.to_string());
            kv("maxmemory", st.capacity_bytes.to_string());
            kv("hotstore_file_bytes", st.file_bytes.to_string());
            kv("hotstore_dead_bytes", st.dead_bytes.to_string());
            let free_units = sh.buffer_budget.available_permits();
            kv(
                "hotstore_request_buffer_bytes",
                (sh.buffer_budget_units.saturating_sub(free_units) * crate::shared::BUDGET_UNIT)
                    .to_string(),
            );
            kv(
                "hotstore_request_buffer_budget",
                (sh.buffer_budget_units * crate::shared::BUDGET_UNIT).to_string(),
            );
            kv(
                "hotstore_clients_waiting_for_buffer",
                sh.buffer_waiters.lock().count.to_string(),
            );
            kv(
                "hotstore_reply_bytes_pending",
                sh.reply_memory.pending().to_string(),
            );
            kv(
                "hotstore_reply_budget",
                sh.config.max_reply_memory.to_string(),
            );
            kv(
                "hotstore_replies_refused",
                sh.reply_memory.refused().to_string(),
            );
        }
        "persistence" => {
            // Redis's fields where they mean the same: nothing loads after start, there are
            // no RDB snapshots or AOF (every acknowledged write is already in the store).
            kv("loading", "0".into());
            kv("async_loading", "0".into());
            kv("rdb_changes_since_last_save", "0".into());
            kv("rdb_bgsave_in_progress", "0".into());
            kv("rdb_saves", "0".into());
            kv("aof_enabled", "0".into());
            kv("aof_rewrite_in_progress", "0".into());
            kv(
                "hotstore_default_durability",
                format!("{:?}", sh.config.durability).to_lowercase(),
            );
            kv("hotstore_group_syncs", sh.metrics.syncs.get().to_string());
            kv(
                "hotstore_synced_requests",
                sh.metrics.synced_requests.get().to_string(),
            );
        }
        "stats" => {
            kv(
                "total_connections_received",
                sh.clients.total.load(Ordering::Relaxed).to_string(),
            );
            kv(
                "total_commands_processed",
                sh.metrics.commands_total().to_string(),
            );
            kv(
                "total_net_input_bytes",
                sh.metrics.bytes_in.get().to_string(),
            );
            kv(
                "total_net_output_bytes",
                sh.metrics.bytes_out.get().to_string(),
            );
            kv(
                "rejected_connections",
                sh.clients.rejected.load(Ordering::Relaxed).to_string(),
            );
            kv("expired_keys", "0".into());
            kv("evicted_keys", "0".into());
            kv("total_error_replies", sh.metrics.errors_total().to_string());
            kv("hotstore_puts", st.puts.to_string());
            kv("hotstore_removes", st.removes.to_string());
            kv("hotstore_full_errors", st.full_errors.to_string());
        }
        "replication" => {
            kv("role", "master".into());
            kv("connected_slaves", "0".into());
        }
        "cpu" => {
            let (sys, user) = cpu_times();
            kv("used_cpu_sys", format!("{sys:.6}"));
            kv("used_cpu_user", format!("{user:.6}"));
            kv("used_cpu_sys_children", "0.000000".into());
            kv("used_cpu_user_children", "0.000000".into());
        }
        "keyspace" => {
            if st.entries > 0 {
                kv("db0", format!("keys={},expires=0,avg_ttl=0", st.entries));
            }
        }
        _ => {
            let e = &st.events;
            kv("dir", sh.store.dir().display().to_string());
            kv("layout", st.layout.clone());
            kv("entries", st.entries.to_string());
            kv("live_bytes", st.live_bytes.to_string());
            kv("capacity_bytes", st.capacity_bytes.to_string());
            kv("full_errors", st.full_errors.to_string());
            for (kind, w) in [
                ("segment", st.waits.segment),
                ("full", st.waits.full),
                ("sync", st.waits.sync),
            ] {
                kv(&format!("{kind}_waits"), w.count.to_string());
                kv(&format!("{kind}_wait_ns"), w.total_ns.to_string());
            }
            for (i, tier) in st.tiers.iter().enumerate() {
                kv(
                    &format!("tier{i}"),
                    format!(
                        "path={},domain={:?},survives_power_cut={},files_created={},file_create_ns={},note={}",
                        tier.path.display(),
                        tier.domain,
                        tier.survives_power_cut,
                        tier.created.files,
                        tier.created.total_ns,
                        tier.power_safety().replace(',', ";")
                    ),
                );
            }
            kv("events_open", e.open.to_string());
            kv("events_ready", e.ready.to_string());
            kv("events_claimed", e.claimed.to_string());
            kv("events_kept", e.kept.to_string());
            kv("events_poisoned", e.poisoned.to_string());
            kv("events_removed_total", e.removed_total.to_string());
            kv("late_fragments_total", e.late_fragments_total.to_string());
            kv("poisoned", st.poisoned.clone().unwrap_or_default());
        }
    }
    t.push_str("\r\n");
}

/// CPU seconds (system, user) the server process has used, from `getrusage`.
fn cpu_times() -> (f64, f64) {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF needs nothing else.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_stime), secs(ru.ru_utime))
}

fn capitalize(s: &str) -> String {
    if s == "cpu" {
        return "CPU".into();
    }
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
