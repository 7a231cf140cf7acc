//! Fuzzes the RESP request parser: no panic, no read past the input, consumed lengths within
//! the input, and a request cut at any byte is never parsed as a (different) request.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hotstore_server::resp::fuzz_check(data);
});
