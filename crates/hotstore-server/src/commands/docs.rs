//! COMMAND DOCS: each command's summary, version, group and complexity in Redis 7's reply
//! format. Kept apart from the command table so that adding a command touches the table
//! only; a command without an entry here still gets docs (a generic summary).

use super::{Args, Ctx, COMMANDS};

/// `(name, summary, since, group, complexity)`. Redis's own texts for the Redis commands;
/// hotstore's commands are in group `module`, as Redis lists commands it does not define.
const DOCS: &[(&str, &str, &str, &str, &str)] = &[
    ("get", "Get the value of a key", "1.0.0", "string", "O(1)"),
    ("set", "Set the string value of a key", "1.0.0", "string", "O(1)"),
    ("mget", "Get the values of all the given keys", "1.0.0", "string", "O(N) where N is the number of keys to retrieve."),
    ("mset", "Set multiple keys to multiple values", "1.0.1", "string", "O(N) where N is the number of keys to set."),
    ("del", "Delete a key", "1.0.0", "generic", "O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, sorted set or hash. Removing a single key that holds a string value is O(1)."),
    ("exists", "Determine if a key exists", "1.0.0", "generic", "O(N) where N is the number of keys to check."),
    ("strlen", "Get the length of the value stored in a key", "2.2.0", "string", "O(1)"),
    ("type", "Determine the type stored at key", "1.0.0", "generic", "O(1)"),
    ("dbsize", "Return the number of keys in the selected database", "1.0.0", "server", "O(1)"),
    ("scan", "Incrementally iterate the keys space", "2.8.0", "generic", "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection."),
    ("ping", "Ping the server", "1.0.0", "connection", "O(1)"),
    ("echo", "Echo the given string", "1.0.0", "connection", "O(1)"),
    ("hello", "Handshake with Redis", "6.0.0", "connection", "O(1)"),
    ("auth", "Authenticate to the server", "1.0.0", "connection", "O(N) where N is the number of passwords defined for the user"),
    ("select", "Change the selected database for the current connection", "1.0.0", "connection", "O(1)"),
    ("info", "Get information and statistics about the server", "1.0.0", "server", "O(1)"),
    ("config", "A container for server configuration commands", "2.0.0", "server", "Depends on subcommand."),
    ("client", "A container for client connection commands", "2.4.0", "connection", "Depends on subcommand."),
    ("command", "Get array of Redis command details", "2.8.13", "server", "O(N) where N is the total number of Redis commands"),
    ("quit", "Close the connection", "1.0.0", "connection", "O(1)"),
    ("shutdown", "Synchronously save the dataset to disk and then shut down the server", "1.0.0", "server", "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)"),
    ("flushall", "Remove all keys from all databases", "1.0.0", "server", "O(N) where N is the total number of keys in all databases"),
    ("flushdb", "Remove all keys from the current database", "1.0.0", "server", "O(N) where N is the number of keys in the selected database"),
    ("cluster", "A container for Redis Cluster commands", "3.0.0", "cluster", "Depends on subcommand."),
    ("readonly", "Enables read-only queries for a connection to a Redis Cluster replica node", "3.0.0", "cluster", "O(1)"),
    ("readwrite", "Disables read-only queries for a connection to a Redis Cluster replica node", "3.0.0", "cluster", "O(1)"),
    ("asking", "Sent by cluster clients after an -ASK redirect", "3.0.0", "cluster", "O(1)"),
    ("frag.put", "Store one fragment of an event", "0.1.0", "module", "O(log N) where N is the number of keys"),
    ("frag.get", "Get one fragment of an event", "0.1.0", "module", "O(log N) where N is the number of keys"),
    ("event.get", "Get every fragment of an event", "0.1.0", "module", "O(F) where F is the number of the event's fragments"),
    ("event.seal", "Mark an event complete (READY) even if fragments are missing", "0.1.0", "module", "O(1)"),
    ("event.next", "Claim the next READY event, with a lease, optionally waiting for one", "0.1.0", "module", "O(F) where F is the number of the event's fragments"),
    ("event.ack", "Acknowledge a claimed event: remove or keep its fragments", "0.1.0", "module", "O(F) where F is the number of the event's fragments"),
    ("event.release", "Give a claimed event back (READY again, in its place)", "0.1.0", "module", "O(1)"),
    ("event.pending", "List the claims held now: holder, time held, lease left, deliveries", "0.1.0", "module", "O(C log C) where C is the number of claims"),
    ("event.claim", "Claim a poisoned event by its id", "0.1.0", "module", "O(F) where F is the number of the event's fragments"),
    ("event.group", "Create or destroy a consumer group", "0.1.0", "module", "O(E) where E is the number of READY events"),
    ("event.groups", "List the consumer groups with their claims, lag and counters", "0.1.0", "module", "O(G + E) where G is the number of groups and E of READY events"),
    ("event.consumers", "List the consumers of a group", "0.1.0", "module", "O(C) where C is the number of the group's consumers"),
    ("event.range", "List the events of a run in an event range, with their states", "0.1.0", "module", "O(E) where E is the number of events listed"),
    ("store.stats", "The store's counters", "0.1.0", "module", "O(1)"),
    ("record.trigger", "Start (or extend) a triggered recording of every recorder link", "0.1.0", "module", "O(L) where L is the number of links"),
    ("record.status", "The recorder's counters", "0.1.0", "module", "O(1)"),
];

fn write_doc(ctx: &mut Ctx, name: &str) {
    let (summary, since, group, complexity) = DOCS.iter().find(|d| d.0 == name).map_or(
        (
            "A hotstore command (see docs/protocol.md)",
            "0.1.0",
            "module",
            "",
        ),
        |d| (d.1, d.2, d.3, d.4),
    );
    let r = &mut *ctx.out;
    r.bulk(name.as_bytes());
    let module = group == "module";
    r.map(3 + usize::from(!complexity.is_empty()) + usize::from(module));
    for (k, v) in [("summary", summary), ("since", since), ("group", group)] {
        r.bulk(k.as_bytes());
        r.bulk(v.as_bytes());
    }
    if !complexity.is_empty() {
        r.bulk(b"complexity");
        r.bulk(complexity.as_bytes());
    }
    if module {
        r.bulk(b"module");
        r.bulk(b"hotstore");
    }
}

/// COMMAND DOCS [name ...]: a map from command name to its docs, for every command or for
/// those named (unknown names are left out, as Redis does).
pub fn command_docs(ctx: &mut Ctx, args: &Args) {
    let names: Vec<&'static str> = if args.len() == 2 {
        COMMANDS.iter().map(|s| s.name).collect()
    } else {
        args.iter_from(2)
            .filter_map(super::lookup)
            .map(|i| COMMANDS[i].name)
            .collect()
    };
    ctx.out.map(names.len());
    for n in names {
        write_doc(ctx, n);
    }
}
