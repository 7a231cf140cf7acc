//! Replays the fuzzing corpus (`fuzz/corpus/resp_parser`) through the fuzz target's checks, so
//! every input the fuzzer kept is a regression test on a stable toolchain. See fuzz/README.md.

#[test]
fn fuzz_corpus_replays_clean() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/resp_parser");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        hotstore_server::resp::fuzz_check(&data);
        n += 1;
    }
    assert!(n >= 5, "the corpus in {} is missing", dir.display());
}
